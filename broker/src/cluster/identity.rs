//! Who this broker is to the replication controller, kept in its data path (one file,
//! [`FILE`]): its `broker-id`, drawn at the first start; its `incarnation`, one more at every
//! start; the host's `boot-id` at the last start, whose change says the page cache (and with
//! it what was written but not fsynced) may be gone.
//!
//! Invariants:
//! - the id never changes while the file exists; a wiped data path draws a new one, so the
//!   controller never takes a broker with a forgotten log for the old one;
//! - every start is a new incarnation, written and fsynced (file and directory) before the
//!   broker serves: two runs never share one;
//! - the file is replaced whole (written aside, fsynced, renamed, directory fsynced), so a crash
//!   leaves the old one or the new one; a file that does not check out (its crc32, its lines)
//!   refuses the start instead of drawing a new id over it.

use std::io::Write;
use std::path::{Path, PathBuf};

/// The identity file in the data path.
pub const FILE: &str = "broker-identity";
/// Where the next version is written before it replaces [`FILE`].
const TEMP: &str = "broker-identity.tmp";
/// The file's first line.
const HEADER: &str = "nsq-shard broker identity v1";
/// The host's boot id (Linux).
const BOOT_ID: &str = "/proc/sys/kernel/random/boot_id";
/// Ids fit in 53 bits so that every JSON reader (a JavaScript number included) shows them
/// exactly; that is still far more than a cluster needs to never draw one twice.
const ID_MASK: u64 = (1 << 53) - 1;

/// This broker's identity for this run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub broker_id: u64,
    pub incarnation: u64,
    /// The host's boot id now.
    pub boot_id: String,
    /// The host rebooted since the last start (false at the first start; true when the boot id
    /// cannot be read, the safe side).
    pub boot_changed: bool,
    /// No identity file was found: a new broker.
    pub first_start: bool,
}

/// Why the identity cannot be loaded or written: a start error naming the file.
#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    #[error(
        "{} is damaged ({why}): it names this broker to the replication controller; restore \
         it from a backup, or remove it to join as a new broker (the controller then retires \
         the old id and its replicas are copied again)",
        path.display()
    )]
    Damaged { path: PathBuf, why: String },
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot write {}: {source}", path.display())]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot draw a broker id from /dev/urandom: {0}")]
    Random(std::io::Error),
    #[error("{}: the incarnation cannot grow past {}", path.display(), u64::MAX)]
    Exhausted { path: PathBuf },
}

/// What the file holds.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Stored {
    broker_id: u64,
    incarnation: u64,
    boot_id: String,
}

/// Loads the identity from `data_path` (drawing a new id when there is none), starts a new
/// incarnation and writes it durably. The caller holds the data path's lock.
pub fn start(data_path: &Path) -> Result<Identity, IdentityError> {
    let boot_id = std::fs::read_to_string(BOOT_ID)
        .map(|s| s.trim().to_owned())
        .ok()
        .filter(|s| !s.is_empty());
    if boot_id.is_none() {
        tracing::warn!("cannot read {BOOT_ID}: the host is taken to have rebooted");
    }
    start_with(data_path, boot_id, random_id)
}

/// [`start`] with the boot id and the id source given (tests).
fn start_with(
    data_path: &Path,
    boot_id: Option<String>,
    draw: impl FnOnce() -> Result<u64, IdentityError>,
) -> Result<Identity, IdentityError> {
    let path = data_path.join(FILE);
    let (stored, first_start) = match std::fs::read(&path) {
        Ok(bytes) => (
            parse(&bytes).map_err(|why| IdentityError::Damaged {
                path: path.clone(),
                why,
            })?,
            false,
        ),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => (
            Stored {
                broker_id: draw()?,
                incarnation: 0,
                boot_id: String::new(),
            },
            true,
        ),
        Err(source) => return Err(IdentityError::Read { path, source }),
    };
    let incarnation = stored
        .incarnation
        .checked_add(1)
        .ok_or_else(|| IdentityError::Exhausted { path: path.clone() })?;
    let now = boot_id.clone().unwrap_or_else(|| "unknown".to_owned());
    let boot_changed = !first_start && (boot_id.is_none() || stored.boot_id != now);
    let next = Stored {
        broker_id: stored.broker_id,
        incarnation,
        boot_id: now.clone(),
    };
    write(data_path, &next)?;
    Ok(Identity {
        broker_id: next.broker_id,
        incarnation,
        boot_id: now,
        boot_changed,
        first_start,
    })
}

/// A random non-zero id of at most 53 bits, from the OS.
fn random_id() -> Result<u64, IdentityError> {
    use std::io::Read;
    let mut f = std::fs::File::open("/dev/urandom").map_err(IdentityError::Random)?;
    // Bounded: a zero draw has odds of 2^-53.
    for _ in 0..16 {
        let mut b = [0u8; 8];
        f.read_exact(&mut b).map_err(IdentityError::Random)?;
        let id = u64::from_le_bytes(b) & ID_MASK;
        if id != 0 {
            return Ok(id);
        }
    }
    Err(IdentityError::Random(std::io::Error::other(
        "only zeros drawn",
    )))
}

/// The file's text: its lines, then the crc32 of everything before that line.
fn render(s: &Stored) -> String {
    let body = format!(
        "{HEADER}\nbroker-id {}\nincarnation {}\nboot-id {}\n",
        s.broker_id, s.incarnation, s.boot_id
    );
    let crc = crc32fast::hash(body.as_bytes());
    format!("{body}crc32 {crc:08x}\n")
}

fn parse(bytes: &[u8]) -> Result<Stored, String> {
    let text = std::str::from_utf8(bytes).map_err(|_| "not UTF-8 text".to_owned())?;
    let Some(crc_at) = text.rfind("crc32 ") else {
        return Err("no crc32 line".into());
    };
    let (body, crc_line) = text.split_at(crc_at);
    let want = crc_line
        .trim_end_matches('\n')
        .strip_prefix("crc32 ")
        .and_then(|h| u32::from_str_radix(h, 16).ok())
        .ok_or_else(|| format!("bad crc32 line {:?}", crc_line.trim_end()))?;
    let got = crc32fast::hash(body.as_bytes());
    if got != want {
        return Err(format!("crc32 {got:08x} where the file says {want:08x}"));
    }
    let mut lines = body.lines();
    if lines.next() != Some(HEADER) {
        return Err(format!("the first line is not {HEADER:?}"));
    }
    let mut field = |key: &str| -> Result<String, String> {
        lines
            .next()
            .and_then(|l| l.strip_prefix(key))
            .and_then(|v| v.strip_prefix(' '))
            .map(str::to_owned)
            .ok_or_else(|| format!("no {key} line where expected"))
    };
    let number = |key: &str, v: String| {
        v.parse::<u64>()
            .map_err(|_| format!("{key} {v:?} is not a number"))
    };
    let broker_id = number("broker-id", field("broker-id")?)?;
    let incarnation = number("incarnation", field("incarnation")?)?;
    let boot_id = field("boot-id")?;
    if broker_id == 0 || broker_id > ID_MASK {
        return Err(format!("broker-id {broker_id} is out of range"));
    }
    if lines.next().is_some() {
        return Err("lines after boot-id".into());
    }
    Ok(Stored {
        broker_id,
        incarnation,
        boot_id,
    })
}

/// Replaces the file with `s`: written aside, fsynced, renamed over, directory fsynced.
fn write(data_path: &Path, s: &Stored) -> Result<(), IdentityError> {
    let temp = data_path.join(TEMP);
    let path = data_path.join(FILE);
    let fail = |p: &Path| {
        let p = p.to_path_buf();
        move |source| IdentityError::Write { path: p, source }
    };
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&temp)
        .map_err(fail(&temp))?;
    f.write_all(render(s).as_bytes()).map_err(fail(&temp))?;
    f.sync_all().map_err(fail(&temp))?;
    drop(f);
    std::fs::rename(&temp, &path).map_err(fail(&path))?;
    std::fs::File::open(data_path)
        .and_then(|d| d.sync_all())
        .map_err(fail(data_path))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir() -> PathBuf {
        test_harness::scratch_dir("identity")
    }

    fn boot(s: &str) -> Option<String> {
        Some(s.to_owned())
    }

    #[test]
    fn first_start_draws_an_id_and_each_start_is_a_new_incarnation() {
        let d = dir();
        let first = start_with(&d, boot("b1"), || Ok(77)).expect("first start");
        assert_eq!(
            first,
            Identity {
                broker_id: 77,
                incarnation: 1,
                boot_id: "b1".into(),
                boot_changed: false,
                first_start: true,
            }
        );
        let second = start_with(&d, boot("b1"), || panic!("no new id")).expect("restart");
        assert_eq!((second.broker_id, second.incarnation), (77, 2));
        assert!(!second.boot_changed && !second.first_start);
        let rebooted = start_with(&d, boot("b2"), || panic!("no new id")).expect("reboot");
        assert_eq!((rebooted.broker_id, rebooted.incarnation), (77, 3));
        assert!(rebooted.boot_changed);
        let unknown = start_with(&d, None, || panic!("no new id")).expect("no boot id");
        assert!(
            unknown.boot_changed,
            "an unreadable boot id counts as a reboot"
        );
        assert!(!d.join(TEMP).exists());
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_wiped_data_path_is_a_new_broker() {
        let d = dir();
        start_with(&d, boot("b"), || Ok(5)).expect("first");
        std::fs::remove_file(d.join(FILE)).expect("wipe");
        let again = start_with(&d, boot("b"), || Ok(6)).expect("after the wipe");
        assert_eq!((again.broker_id, again.incarnation), (6, 1));
        assert!(again.first_start);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_damaged_file_refuses_the_start_and_is_left_alone() {
        let d = dir();
        start_with(&d, boot("b"), || Ok(9)).expect("first");
        let good = std::fs::read_to_string(d.join(FILE)).expect("read");
        let flipped = good.replace("broker-id 9", "broker-id 8");
        let no_crc = good.lines().take(4).collect::<Vec<_>>().join("\n");
        for (bad, what) in [
            (flipped.as_str(), "crc32"),
            (no_crc.as_str(), "no crc32 line"),
            ("", "no crc32 line"),
            (&good[..good.len() / 2], "crc32"),
        ] {
            std::fs::write(d.join(FILE), bad).expect("damage");
            let e = start_with(&d, boot("b"), || panic!("no new id over a damaged file"))
                .expect_err("refused");
            let text = e.to_string();
            assert!(text.contains(what), "{what}: {text}");
            assert!(text.contains("broker-identity is damaged"), "{text}");
            assert_eq!(std::fs::read_to_string(d.join(FILE)).expect("kept"), bad);
        }
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn parse_refuses_what_render_never_writes() {
        let ok = Stored {
            broker_id: 3,
            incarnation: 4,
            boot_id: "x".into(),
        };
        assert_eq!(parse(render(&ok).as_bytes()), Ok(ok));
        for bad in [
            Stored {
                broker_id: 0,
                incarnation: 1,
                boot_id: "x".into(),
            },
            Stored {
                broker_id: ID_MASK + 1,
                incarnation: 1,
                boot_id: "x".into(),
            },
        ] {
            assert!(parse(render(&bad).as_bytes()).is_err(), "{bad:?}");
        }
        let body = "nsq-shard broker identity v1\nbroker-id 1\nincarnation 1\n";
        let crc = crc32fast::hash(body.as_bytes());
        assert!(parse(format!("{body}crc32 {crc:08x}\n").as_bytes())
            .unwrap_err()
            .contains("boot-id"));
    }

    #[test]
    fn random_ids_are_non_zero_and_fit_in_53_bits() {
        for _ in 0..100 {
            let id = random_id().expect("urandom");
            assert!(id != 0 && id <= ID_MASK);
        }
    }
}
