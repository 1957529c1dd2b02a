//! nsqd's disk queues (go-diskqueue 1.0 and 1.1, nsqd 1.0 to 1.3): `<name>.diskqueue.NNNNNN.dat`
//! files of records `size u32 | message`, a message being nsqd's `timestamp i64 | attempts u16 |
//! id [16] | body` (big endian), and `<name>.diskqueue.meta.dat` (`depth\nreadFile,readPos\n
//! writeFile,writePos\n`), which says where the queue's consumer stands.
//!
//! Invariants:
//! - Read only; a queue is read from its read position (files before it were consumed) to
//!   the end of every later file, so a queue nsqd stopped cleanly yields exactly what it still
//!   held, and one it crashed on yields at least that.
//! - The format has no checksums, so a record is believed when its size fits the file and
//!   its ID is 16 hex digits (nsqd makes no other). One that is not is damage: counted, and the
//!   reader searches on for the next record that holds up and is followed by another (or by
//!   the end of the file); a cut-short last record is damage too. Damage to a body cannot be
//!   told from a body.

use memmap2::Mmap;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// nsqd's message header on disk: timestamp, attempts, ID.
const MESSAGE_FIXED: usize = 8 + 2 + 16;
const SIZE_LEN: usize = 4;

/// One message as nsqd stored it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NsqdMessage<'a> {
    pub id: [u8; 16],
    pub timestamp: i64,
    pub attempts: u16,
    pub body: &'a [u8],
}

/// A queue's files, found in a directory listing.
#[derive(Debug, Default, Clone)]
pub struct QueueFiles {
    /// Data files by number.
    pub data: BTreeMap<u64, PathBuf>,
    pub meta: Option<PathBuf>,
}

/// Every disk queue in `dir`, by queue name (`topic` or `topic:channel`).
pub fn list(dir: &Path) -> std::io::Result<BTreeMap<String, QueueFiles>> {
    let mut queues: BTreeMap<String, QueueFiles> = BTreeMap::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let Some(stem) = name.strip_suffix(".dat") else {
            continue;
        };
        let Some((queue, what)) = stem.rsplit_once(".diskqueue.") else {
            continue;
        };
        let files = queues.entry(queue.to_string()).or_default();
        if what == "meta" {
            files.meta = Some(entry.path());
        } else if let Ok(n) = what.parse::<u64>() {
            if what.bytes().all(|b| b.is_ascii_digit()) {
                files.data.insert(n, entry.path());
            }
        }
    }
    queues.retain(|_, f| !f.data.is_empty() || f.meta.is_some());
    Ok(queues)
}

/// Where a queue's consumer stands, from its `.meta.dat`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadPosition {
    pub file: u64,
    pub pos: u64,
}

/// Parses a `.meta.dat`; `None` when it is not one.
pub fn parse_meta(text: &str) -> Option<ReadPosition> {
    let mut lines = text.lines();
    let _depth: i64 = lines.next()?.trim().parse().ok()?;
    let (file, pos) = lines.next()?.trim().split_once(',')?;
    let (wfile, wpos) = lines.next()?.trim().split_once(',')?;
    let (_, _): (u64, u64) = (wfile.parse().ok()?, wpos.parse().ok()?);
    Some(ReadPosition {
        file: file.parse().ok()?,
        pos: pos.parse().ok()?,
    })
}

/// What reading a queue found besides its messages.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Damage {
    /// Stretches of bytes that held no record that holds up.
    pub records: u64,
    pub bytes: u64,
}

/// How a queue was read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Start {
    /// From the position its `.meta.dat` gives.
    Meta(ReadPosition),
    /// Its `.meta.dat` is missing or not one: every file from the lowest, whole.
    Whole { why: String },
}

/// Where to start reading a queue.
pub fn start_of(files: &QueueFiles) -> Start {
    let Some(meta) = &files.meta else {
        return Start::Whole {
            why: "it has no .meta.dat".to_string(),
        };
    };
    match std::fs::read_to_string(meta) {
        Ok(text) => match parse_meta(&text) {
            Some(p) => Start::Meta(p),
            None => Start::Whole {
                why: format!("{} is not a disk queue's metadata", meta.display()),
            },
        },
        Err(e) => Start::Whole {
            why: format!("cannot read {}: {e}", meta.display()),
        },
    }
}

/// Reads a queue from `start`, calling `each` with every message in order; returns the damage
/// met. A file that cannot be opened is an error (nothing is half-read silently).
pub fn read(
    files: &QueueFiles,
    start: &Start,
    mut each: impl FnMut(NsqdMessage<'_>) -> std::io::Result<()>,
) -> std::io::Result<Damage> {
    let mut damage = Damage::default();
    let (first, first_pos) = match start {
        Start::Meta(p) => (p.file, p.pos),
        Start::Whole { .. } => (files.data.keys().next().copied().unwrap_or(0), 0),
    };
    for (&n, path) in files.data.range(first..) {
        let file = std::fs::File::open(path)?;
        let len = file.metadata()?.len();
        if len == 0 {
            continue;
        }
        // SAFETY: nsqd's files are read while nothing writes them (the data path is locked,
        // or the operator imports a copy); a change under the mapping could only make the
        // records read wrong, which the checks below treat as damage.
        let map = unsafe { Mmap::map(&file)? };
        let from = if n == first { first_pos } else { 0 };
        // A read position past the end (a damaged .meta.dat): read the file whole rather
        // than lose it.
        let from = if from > len { 0 } else { from as usize };
        read_file(&map, from, &mut damage, &mut each)?;
    }
    Ok(damage)
}

fn read_file(
    data: &[u8],
    mut pos: usize,
    damage: &mut Damage,
    each: &mut impl FnMut(NsqdMessage<'_>) -> std::io::Result<()>,
) -> std::io::Result<()> {
    while pos < data.len() {
        match record_at(data, pos) {
            Some((msg, next)) => {
                each(msg)?;
                pos = next;
            }
            None => {
                let found = resync(data, pos + 1);
                let end = found.unwrap_or(data.len());
                damage.records += 1;
                damage.bytes += (end - pos) as u64;
                pos = end;
            }
        }
    }
    Ok(())
}

/// The record at `pos` if it holds up, and where the next one starts.
fn record_at(data: &[u8], pos: usize) -> Option<(NsqdMessage<'_>, usize)> {
    let size_bytes: [u8; 4] = data.get(pos..pos + SIZE_LEN)?.try_into().ok()?;
    let size = u32::from_be_bytes(size_bytes) as usize;
    if size < MESSAGE_FIXED {
        return None;
    }
    let start = pos + SIZE_LEN;
    let record = data.get(start..start.checked_add(size)?)?;
    let id: [u8; 16] = record[10..26].try_into().ok()?;
    if !id
        .iter()
        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b))
    {
        return None;
    }
    let timestamp = i64::from_be_bytes(record[0..8].try_into().ok()?);
    if timestamp <= 0 {
        return None;
    }
    let attempts = u16::from_be_bytes([record[8], record[9]]);
    let msg = NsqdMessage {
        id,
        timestamp,
        attempts,
        body: &record[MESSAGE_FIXED..],
    };
    Some((msg, start + size))
}

/// The first offset at or after `from` where a record holds up and is followed by another
/// that does, or ends the file: one plausible header inside a body is not believed alone.
fn resync(data: &[u8], from: usize) -> Option<usize> {
    (from..data.len()).find(|&p| match record_at(data, p) {
        Some((_, next)) => next == data.len() || record_at(data, next).is_some(),
        None => false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(out: &mut Vec<u8>, id: u64, attempts: u16, body: &[u8]) {
        out.extend_from_slice(&((MESSAGE_FIXED + body.len()) as u32).to_be_bytes());
        out.extend_from_slice(&1_700_000_000_000_000_000i64.to_be_bytes());
        out.extend_from_slice(&attempts.to_be_bytes());
        out.extend_from_slice(format!("{id:016x}").as_bytes());
        out.extend_from_slice(body);
    }

    fn bodies(data: &[u8], from: usize) -> (Vec<String>, Damage) {
        let mut got = Vec::new();
        let mut damage = Damage::default();
        read_file(data, from, &mut damage, &mut |m| {
            got.push(String::from_utf8_lossy(m.body).into_owned());
            Ok(())
        })
        .unwrap();
        (got, damage)
    }

    fn queue(n: u64) -> (Vec<u8>, Vec<usize>) {
        let mut out = Vec::new();
        let mut offsets = Vec::new();
        for i in 0..n {
            offsets.push(out.len());
            record(
                &mut out,
                0x1d00 + i,
                (i % 3) as u16,
                format!("body-{i}").as_bytes(),
            );
        }
        (out, offsets)
    }

    #[test]
    fn reads_every_record_from_the_read_position() {
        let (data, offsets) = queue(5);
        assert_eq!(
            bodies(&data, 0).0,
            ["body-0", "body-1", "body-2", "body-3", "body-4"]
        );
        assert_eq!(
            bodies(&data, offsets[3]),
            (vec!["body-3".into(), "body-4".into()], Damage::default())
        );
    }

    #[test]
    fn an_impossible_size_loses_only_its_record() {
        let (mut data, offsets) = queue(6);
        data[offsets[2]..offsets[2] + 4].copy_from_slice(&u32::MAX.to_be_bytes());
        let (got, damage) = bodies(&data, 0);
        assert_eq!(got, ["body-0", "body-1", "body-3", "body-4", "body-5"]);
        assert_eq!(damage.records, 1);
        assert_eq!(damage.bytes, (offsets[3] - offsets[2]) as u64);
    }

    #[test]
    fn a_damaged_id_or_a_cut_tail_is_counted() {
        let (mut data, offsets) = queue(4);
        data[offsets[1] + 4 + 12] = b'Z';
        let (got, damage) = bodies(&data, 0);
        assert_eq!(got, ["body-0", "body-2", "body-3"]);
        assert_eq!(damage.records, 1);
        let (data, offsets) = queue(4);
        let cut = &data[..offsets[3] + 10];
        let (got, damage) = bodies(cut, 0);
        assert_eq!(got, ["body-0", "body-1", "body-2"]);
        assert_eq!(
            damage,
            Damage {
                records: 1,
                bytes: 10
            }
        );
    }

    #[test]
    fn a_size_that_is_too_small_resyncs() {
        let (mut data, offsets) = queue(4);
        data[offsets[0]..offsets[0] + 4].copy_from_slice(&3u32.to_be_bytes());
        let (got, damage) = bodies(&data, 0);
        assert_eq!(got, ["body-1", "body-2", "body-3"]);
        assert_eq!(damage.records, 1);
    }

    #[test]
    fn meta_files_parse_as_go_diskqueue_writes_them() {
        assert_eq!(
            parse_meta("12\n3,456\n4,789\n"),
            Some(ReadPosition { file: 3, pos: 456 })
        );
        assert_eq!(parse_meta("12\n3,456\n"), None);
        assert_eq!(parse_meta("x\n3,456\n4,789\n"), None);
        assert_eq!(parse_meta(""), None);
    }

    #[test]
    fn lists_queues_by_name() {
        let dir = std::env::temp_dir().join(format!("dq-list-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for f in [
            "t.diskqueue.000000.dat",
            "t.diskqueue.000001.dat",
            "t.diskqueue.meta.dat",
            "t:c.diskqueue.000003.dat",
            "t:c.diskqueue.meta.dat",
            "t:c.diskqueue.000002.dat.bad",
            "nsqd.dat",
        ] {
            std::fs::write(dir.join(f), b"").unwrap();
        }
        let q = list(&dir).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(q.keys().collect::<Vec<_>>(), ["t", "t:c"]);
        assert_eq!(q["t"].data.keys().copied().collect::<Vec<_>>(), [0, 1]);
        assert_eq!(q["t:c"].data.keys().copied().collect::<Vec<_>>(), [3]);
        assert!(q["t:c"].meta.is_some());
    }
}
