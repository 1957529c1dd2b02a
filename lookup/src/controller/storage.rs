//! The controller's Raft state on disk: one append-only file, `controller-raft.log`, in
//! `--data-path`, holding the node's identity, its log entries and its hard state.
//!
//! Every write is one record: `[u32 length][u32 crc32][u8 kind][payload]` (big-endian; the
//! crc32 covers the length, the kind and the payload). The first record names the node and its
//! voters; each later one is a batch of what a `Persist` asked for: entries, which replace the
//! log from the first one's index, and the hard state. Loading replays the records in order.
//!
//! Invariants:
//! - a write that `must_sync` is fsynced before [`RaftLog::write`] returns; the file's creation
//!   is made durable (the file and its directory fsynced) before anything is written to it;
//! - a torn tail (a crash in the middle of a write: a short or checksum-failing last record
//!   with nothing valid after it) is cut at start-up; any other damage (a bad record followed
//!   by a valid one, an undecodable record, a hole in the log, another node's file) refuses the
//!   start with a message naming the file and the offset;
//! - the whole state lives in this one file and this module: compaction adds a snapshot file
//!   and rewrites this one from the snapshot's index, here.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use protobuf::Message as _;
use raft::eraftpb::{Entry as RaftEntry, HardState};
use replication::controller::{Durable, Persist};

/// The file's name in the data path.
pub const FILE_NAME: &str = "controller-raft.log";
/// Bytes before a record's payload: length, crc32, kind.
const HEADER: usize = 9;
/// A record longer than this is damage, not data (a batch of Raft entries is far smaller).
const MAX_RECORD: usize = 64 * 1024 * 1024;

const KIND_IDENTITY: u8 = 1;
const KIND_BATCH: u8 = 2;

/// Why the controller's state cannot be loaded or written.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{} is damaged at offset {offset}: {what}; restore it or remove the data path to rejoin the cluster as an empty node", path.display())]
    Damaged {
        path: PathBuf,
        offset: u64,
        what: String,
    },
    #[error("{} belongs to controller {found_id} with voters {found_voters:?}, not to controller {id} with voters {voters:?}", path.display())]
    Identity {
        path: PathBuf,
        found_id: u64,
        found_voters: Vec<u64>,
        id: u64,
        voters: Vec<u64>,
    },
}

/// Who the file belongs to: its first record.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Identity {
    node: u64,
    voters: Vec<u64>,
}

/// The open file, appended to.
#[derive(Debug)]
pub struct RaftLog {
    path: PathBuf,
    file: File,
    /// The hard state last written, so that a commit-only update writes the whole of it.
    hard_state: HardState,
}

impl RaftLog {
    /// Opens (or creates) the file in `dir` for node `id` of `voters` and loads what it holds.
    pub fn open(dir: &Path, id: u64, voters: &[u64]) -> Result<(RaftLog, Durable), StorageError> {
        let path = dir.join(FILE_NAME);
        let io = |source| StorageError::Io {
            path: path.clone(),
            source,
        };
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => Some(bytes),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(io(e)),
        };
        let loaded = match &bytes {
            Some(bytes) => Some(load(&path, bytes)?),
            None => None,
        };
        let (durable, valid_len) = match loaded {
            // Nothing intact, not even the identity: the creation itself was torn.
            Some(Loaded { identity: None, .. }) | None => {
                let file = create(&path, dir, id, voters)?;
                let log = RaftLog {
                    path,
                    file,
                    hard_state: HardState::default(),
                };
                return Ok((log, Durable::default()));
            }
            Some(Loaded {
                identity: Some(identity),
                durable,
                valid_len,
            }) => {
                let mut want = voters.to_vec();
                want.sort_unstable();
                let mut found = identity.voters.clone();
                found.sort_unstable();
                if identity.node != id || found != want {
                    return Err(StorageError::Identity {
                        path,
                        found_id: identity.node,
                        found_voters: found,
                        id,
                        voters: want,
                    });
                }
                (durable, valid_len)
            }
        };
        let file = OpenOptions::new().append(true).open(&path).map_err(io)?;
        let total = bytes.as_ref().map_or(0, Vec::len) as u64;
        if valid_len < total {
            tracing::warn!(
                "controller: {}: cutting a torn tail of {} bytes at offset {valid_len} (a crash in the middle of a write)",
                path.display(),
                total - valid_len
            );
            file.set_len(valid_len).map_err(io)?;
            file.sync_all().map_err(io)?;
        }
        let last = durable.entries.last().map_or(0, |e| e.index);
        if durable.hard_state.commit > last {
            return Err(StorageError::Damaged {
                path,
                offset: valid_len,
                what: format!(
                    "the commit index {} is past the last entry {last}",
                    durable.hard_state.commit
                ),
            });
        }
        let log = RaftLog {
            path,
            file,
            hard_state: durable.hard_state.clone(),
        };
        Ok((log, durable))
    }

    /// Writes what the node asked for; fsynced before returning when `must_sync`.
    pub fn write(&mut self, persist: &Persist) -> Result<(), StorageError> {
        if persist.entries.is_empty() && persist.hard_state.is_none() {
            return Ok(());
        }
        if let Some(hs) = &persist.hard_state {
            self.hard_state = hs.clone();
        }
        let payload = encode_batch(persist.hard_state.as_ref(), &persist.entries)?;
        self.append(KIND_BATCH, &payload, persist.must_sync)
    }

    /// Stores a newer commit index (no fsync needed: Raft finds the commit again).
    pub fn commit(&mut self, commit: u64) -> Result<(), StorageError> {
        if commit <= self.hard_state.commit {
            return Ok(());
        }
        self.hard_state.commit = commit;
        let payload = encode_batch(Some(&self.hard_state.clone()), &[])?;
        self.append(KIND_BATCH, &payload, false)
    }

    fn append(&mut self, kind: u8, payload: &[u8], sync: bool) -> Result<(), StorageError> {
        let record = record(kind, payload);
        let io = |source| StorageError::Io {
            path: self.path.clone(),
            source,
        };
        self.file.write_all(&record).map_err(io)?;
        if sync {
            self.file.sync_data().map_err(io)?;
        }
        Ok(())
    }
}

/// Creates the file with its identity record, durable with its directory entry.
fn create(path: &Path, dir: &Path, id: u64, voters: &[u64]) -> Result<File, StorageError> {
    let io = |source| StorageError::Io {
        path: path.to_path_buf(),
        source,
    };
    let identity = Identity {
        node: id,
        voters: voters.to_vec(),
    };
    let payload = serde_json::to_vec(&identity).map_err(|e| io(std::io::Error::other(e)))?;
    let mut file = OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .open(path)
        .map_err(io)?;
    file.write_all(&record(KIND_IDENTITY, &payload))
        .map_err(io)?;
    file.sync_all().map_err(io)?;
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|source| StorageError::Io {
            path: dir.to_path_buf(),
            source,
        })?;
    OpenOptions::new().append(true).open(path).map_err(io)
}

fn record(kind: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER + payload.len());
    let len = (payload.len() as u32).to_be_bytes();
    let mut crc = crc32fast::Hasher::new();
    crc.update(&len);
    crc.update(&[kind]);
    crc.update(payload);
    out.extend_from_slice(&len);
    out.extend_from_slice(&crc.finalize().to_be_bytes());
    out.push(kind);
    out.extend_from_slice(payload);
    out
}

/// `[u8 has hard state][u32 len][hard state]?[u32 count]([u32 len][entry])*`, protobuf inside.
fn encode_batch(hs: Option<&HardState>, entries: &[RaftEntry]) -> Result<Vec<u8>, StorageError> {
    let pb = |e: protobuf::ProtobufError| StorageError::Io {
        path: PathBuf::from(FILE_NAME),
        source: std::io::Error::other(e),
    };
    let mut out = Vec::new();
    match hs {
        Some(hs) => {
            let bytes = hs.write_to_bytes().map_err(pb)?;
            out.push(1);
            out.extend_from_slice(&(bytes.len() as u32).to_be_bytes());
            out.extend_from_slice(&bytes);
        }
        None => out.push(0),
    }
    out.extend_from_slice(&(entries.len() as u32).to_be_bytes());
    for e in entries {
        let bytes = e.write_to_bytes().map_err(pb)?;
        out.extend_from_slice(&(bytes.len() as u32).to_be_bytes());
        out.extend_from_slice(&bytes);
    }
    Ok(out)
}

/// A batch's contents.
struct Batch {
    hard_state: Option<HardState>,
    entries: Vec<RaftEntry>,
}

fn decode_batch(mut p: &[u8]) -> Result<Batch, String> {
    fn take<'a>(p: &mut &'a [u8], n: usize) -> Result<&'a [u8], String> {
        if p.len() < n {
            return Err(format!("a batch ends {} bytes early", n - p.len()));
        }
        let (head, rest) = p.split_at(n);
        *p = rest;
        Ok(head)
    }
    fn take_u32(p: &mut &[u8]) -> Result<usize, String> {
        let b = take(p, 4)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize)
    }
    let hard_state = match take(&mut p, 1)?[0] {
        0 => None,
        1 => {
            let n = take_u32(&mut p)?;
            let hs = HardState::parse_from_bytes(take(&mut p, n)?)
                .map_err(|e| format!("a hard state does not decode: {e}"))?;
            Some(hs)
        }
        other => return Err(format!("a batch's hard state flag is {other}")),
    };
    let count = take_u32(&mut p)?;
    // Each entry takes at least its 4 length bytes: a count beyond that is damage.
    if count > p.len() / 4 {
        return Err(format!(
            "a batch claims {count} entries in {} bytes",
            p.len()
        ));
    }
    let mut entries = Vec::with_capacity(count);
    for _ in 0..count {
        let n = take_u32(&mut p)?;
        let e = RaftEntry::parse_from_bytes(take(&mut p, n)?)
            .map_err(|e| format!("an entry does not decode: {e}"))?;
        entries.push(e);
    }
    if !p.is_empty() {
        return Err(format!("{} bytes after a batch", p.len()));
    }
    Ok(Batch {
        hard_state,
        entries,
    })
}

/// What a file held.
struct Loaded {
    identity: Option<Identity>,
    durable: Durable,
    /// Where the intact records end (the rest is a torn tail).
    valid_len: u64,
}

/// One record at `at`: `Some((kind, payload, end))` if complete with a good checksum.
fn record_at(bytes: &[u8], at: usize) -> Option<(u8, &[u8], usize)> {
    let head = bytes.get(at..at + HEADER)?;
    let len = u32::from_be_bytes([head[0], head[1], head[2], head[3]]) as usize;
    if len > MAX_RECORD {
        return None;
    }
    let crc = u32::from_be_bytes([head[4], head[5], head[6], head[7]]);
    let kind = head[8];
    let payload = bytes.get(at + HEADER..at + HEADER + len)?;
    let mut h = crc32fast::Hasher::new();
    h.update(&head[..4]);
    h.update(&[kind]);
    h.update(payload);
    (h.finalize() == crc).then_some((kind, payload, at + HEADER + len))
}

/// Whether a valid record starts anywhere after `from`: then a bad record before it is damage,
/// not a torn tail.
fn valid_record_after(bytes: &[u8], from: usize) -> Option<usize> {
    (from + 1..bytes.len().saturating_sub(HEADER - 1)).find(|&at| record_at(bytes, at).is_some())
}

fn load(path: &Path, bytes: &[u8]) -> Result<Loaded, StorageError> {
    let damaged = |offset: usize, what: String| StorageError::Damaged {
        path: path.to_path_buf(),
        offset: offset as u64,
        what,
    };
    let mut identity: Option<Identity> = None;
    let mut durable = Durable::default();
    let mut at = 0;
    while at < bytes.len() {
        let Some((kind, payload, end)) = record_at(bytes, at) else {
            if let Some(next) = valid_record_after(bytes, at) {
                return Err(damaged(
                    at,
                    format!(
                        "a record fails its checksum, and an intact one follows at offset {next}"
                    ),
                ));
            }
            break;
        };
        match (kind, identity.is_some()) {
            (KIND_IDENTITY, false) => {
                identity = Some(serde_json::from_slice(payload).map_err(|e| {
                    damaged(at, format!("the identity record does not decode: {e}"))
                })?);
            }
            (KIND_BATCH, true) => {
                let batch = decode_batch(payload).map_err(|e| damaged(at, e))?;
                if let Some(first) = batch.entries.first() {
                    let last = durable.entries.last().map_or(0, |e| e.index);
                    if first.index == 0 || first.index > last + 1 {
                        return Err(damaged(
                            at,
                            format!(
                                "entries from index {} follow the last entry {last}",
                                first.index
                            ),
                        ));
                    }
                    if batch
                        .entries
                        .windows(2)
                        .any(|w| w[1].index != w[0].index + 1)
                    {
                        return Err(damaged(at, "a batch's entries are not consecutive".into()));
                    }
                }
                durable.write(&Persist {
                    entries: batch.entries,
                    hard_state: batch.hard_state,
                    must_sync: false,
                });
            }
            (kind, _) => {
                return Err(damaged(at, format!("a record of kind {kind} out of place")));
            }
        }
        at = end;
    }
    Ok(Loaded {
        identity,
        durable,
        valid_len: at as u64,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(index: u64, term: u64) -> RaftEntry {
        RaftEntry {
            index,
            term,
            data: format!("e{index}").into_bytes().into(),
            ..RaftEntry::default()
        }
    }

    fn hs(term: u64, vote: u64, commit: u64) -> HardState {
        HardState {
            term,
            vote,
            commit,
            ..HardState::default()
        }
    }

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("lookup-raftlog-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn write(log: &mut RaftLog, entries: Vec<RaftEntry>, hard: Option<HardState>) {
        log.write(&Persist {
            entries,
            hard_state: hard,
            must_sync: true,
        })
        .unwrap();
    }

    #[test]
    fn what_is_written_loads_back_with_replaced_suffixes() {
        let d = dir("roundtrip");
        let (mut log, durable) = RaftLog::open(&d, 1, &[1, 2, 3]).unwrap();
        assert!(durable.entries.is_empty());
        write(
            &mut log,
            vec![entry(1, 1), entry(2, 1), entry(3, 1)],
            Some(hs(1, 1, 0)),
        );
        // A new leader's entries replace the old ones from index 2.
        write(&mut log, vec![entry(2, 2)], Some(hs(2, 2, 1)));
        log.commit(2).unwrap();
        drop(log);
        let (_, durable) = RaftLog::open(&d, 1, &[3, 2, 1]).unwrap();
        let got: Vec<(u64, u64)> = durable.entries.iter().map(|e| (e.index, e.term)).collect();
        assert_eq!(got, [(1, 1), (2, 2)]);
        assert_eq!(durable.hard_state, hs(2, 2, 2));
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_torn_tail_is_cut_and_the_log_goes_on() {
        let d = dir("torn");
        let (mut log, _) = RaftLog::open(&d, 1, &[1]).unwrap();
        write(&mut log, vec![entry(1, 1)], Some(hs(1, 1, 1)));
        write(&mut log, vec![entry(2, 1)], Some(hs(1, 1, 1)));
        drop(log);
        let path = d.join(FILE_NAME);
        let full = std::fs::read(&path).unwrap();
        let identity_end = record_at(&full, 0).unwrap().2;
        let last_start = record_at(&full, identity_end).unwrap().2;
        // Every cut inside the last record, and zeros where its end should be.
        for cut in 1..=full.len() - last_start {
            let mut torn = full[..full.len() - cut].to_vec();
            std::fs::write(&path, &torn).unwrap();
            let (_, durable) = RaftLog::open(&d, 1, &[1]).unwrap();
            assert_eq!(durable.entries.len(), 1, "cut {cut}");
            torn.resize(full.len(), 0);
            std::fs::write(&path, &torn).unwrap();
            let (mut log, durable) = RaftLog::open(&d, 1, &[1]).unwrap();
            assert_eq!(durable.entries.len(), 1, "zeroed {cut}");
            // Cut at start: what follows is appended after the intact records.
            write(&mut log, vec![entry(2, 3)], None);
            drop(log);
            let (_, durable) = RaftLog::open(&d, 1, &[1]).unwrap();
            assert_eq!(durable.entries.last().map(|e| e.term), Some(3), "cut {cut}");
            std::fs::write(&path, &full).unwrap();
        }
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn damage_before_intact_records_refuses_the_start() {
        let d = dir("damaged");
        let (mut log, _) = RaftLog::open(&d, 1, &[1]).unwrap();
        write(&mut log, vec![entry(1, 1)], Some(hs(1, 1, 1)));
        write(&mut log, vec![entry(2, 1)], Some(hs(1, 1, 2)));
        drop(log);
        let path = d.join(FILE_NAME);
        let mut bytes = std::fs::read(&path).unwrap();
        // A bit flipped in the first batch (right after the identity record).
        let first = record_at(&bytes, 0).unwrap().2;
        bytes[first + HEADER + 3] ^= 0x10;
        std::fs::write(&path, &bytes).unwrap();
        let e = RaftLog::open(&d, 1, &[1]).unwrap_err();
        assert!(e.to_string().contains("intact one follows"), "{e}");
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn another_nodes_file_refuses_the_start() {
        let d = dir("identity");
        drop(RaftLog::open(&d, 1, &[1, 2, 3]).unwrap());
        let e = RaftLog::open(&d, 2, &[1, 2, 3]).unwrap_err();
        assert!(e.to_string().contains("belongs to controller 1"), "{e}");
        let e = RaftLog::open(&d, 1, &[1, 2]).unwrap_err();
        assert!(e.to_string().contains("voters [1, 2, 3]"), "{e}");
        let _ = std::fs::remove_dir_all(&d);
    }
}
