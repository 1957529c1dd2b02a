//! The controller's Raft state on disk, in `--data-path`: `controller-raft.log`, holding the
//! node's identity, its log entries and its hard state, and `controller-snapshot`, the latest
//! snapshot of the metadata.
//!
//! Every write is one record: `[u32 length][u32 crc32][u8 kind][payload]` (big-endian; the
//! crc32 covers the length, the kind and the payload). The log's first record names the node and
//! its voters; each later one is a batch of what a `Persist` asked for: entries, which replace
//! the log from the first one's index, and the hard state. Loading replays the records in
//! order. The snapshot file is one record holding the raft-rs snapshot (its index, term, voters
//! and the metadata's checksummed data).
//!
//! A `Persist` is written in the order its docs give (`replication::controller::Persist`), so a
//! crash between any two writes leaves files that load into a state the node restarts from:
//! 1. the snapshot, when newer than the stored one: a temp file written and fsynced, renamed
//!    over the old one, the directory fsynced;
//! 2. when that or `compact_below` drops entries: the log rewritten (identity, then one batch of
//!    the hard state and the entries kept) to a temp file, fsynced, renamed over the old log,
//!    the directory fsynced: the old or the new log is always whole;
//! 3. and 4. the entries and the hard state, appended as one batch.
//!
//! Invariants:
//! - a write that `must_sync` is fsynced before [`RaftLog::write`] returns; the log's creation
//!   is made durable (the file and its directory fsynced) before anything is written to it;
//! - a temp file found at start-up is a write that never took effect (its rename did not
//!   happen): it is removed, and the complete file it was to replace stands;
//! - a torn tail of the log (a crash in the middle of an append: a short or checksum-failing
//!   last record with nothing valid after it) is cut at start-up; any other damage (a bad record
//!   followed by a valid one, an undecodable record, a hole in the log, another node's file, a
//!   snapshot file that is not one whole record) refuses the start with a message naming the
//!   file and the offset;
//! - [`RaftLog`] mirrors what the files hold as a `Durable` ([`Durable::write`] is the
//!   reference), which is what a compaction rewrites.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use protobuf::Message as _;
use raft::eraftpb::{Entry as RaftEntry, HardState, Snapshot};
use replication::controller::{Durable, Persist};

/// The log's name in the data path.
pub const FILE_NAME: &str = "controller-raft.log";
/// The snapshot's name in the data path.
pub const SNAPSHOT_FILE: &str = "controller-snapshot";
/// Appended to a file's name while its replacement is written.
const TMP_SUFFIX: &str = ".tmp";
/// Bytes before a record's payload: length, crc32, kind.
const HEADER: usize = 9;
/// A record longer than this is damage, not data (a batch of Raft entries, or a snapshot of the
/// metadata, is far smaller).
const MAX_RECORD: usize = 256 * 1024 * 1024;

const KIND_IDENTITY: u8 = 1;
const KIND_BATCH: u8 = 2;
const KIND_SNAPSHOT: u8 = 3;

/// What an operator may safely do about a damaged file. Starting this node with an emptied data
/// path is not safe: a voter that forgets its vote or its log can let two leaders be elected in
/// one term, or a committed entry be lost.
const REMEDY: &str = "restore it from a backup, or replace this node (remove it from the \
controller's voters and add a fresh node with a new id); never restart this id with an emptied \
data path";

/// Why the controller's state cannot be loaded or written.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{} is damaged at offset {offset}: {what}; {REMEDY}", path.display())]
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

/// The open log, appended to, and the snapshot beside it.
#[derive(Debug)]
pub struct RaftLog {
    dir: PathBuf,
    path: PathBuf,
    file: File,
    id: u64,
    voters: Vec<u64>,
    /// What the files hold: the entries a compaction keeps, and the hard state last written (so
    /// that a commit-only update writes the whole of it).
    mirror: Durable,
}

impl RaftLog {
    /// Opens (or creates) the files in `dir` for node `id` of `voters` and loads what they hold.
    pub fn open(dir: &Path, id: u64, voters: &[u64]) -> Result<(RaftLog, Durable), StorageError> {
        let path = dir.join(FILE_NAME);
        let snapshot_path = dir.join(SNAPSHOT_FILE);
        let io = |source| StorageError::Io {
            path: path.clone(),
            source,
        };
        for name in [FILE_NAME, SNAPSHOT_FILE] {
            remove_unrenamed(&dir.join(format!("{name}{TMP_SUFFIX}")))?;
        }
        let snapshot = load_snapshot(&snapshot_path)?;
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => Some(bytes),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(io(e)),
        };
        let loaded = match &bytes {
            Some(bytes) => Some(load(&path, bytes)?),
            None => None,
        };
        let (mut durable, valid_len) = match loaded {
            // Nothing intact, not even the identity: the creation itself was torn (a snapshot
            // is only ever written after that creation was durable).
            Some(Loaded { identity: None, .. }) | None => {
                if snapshot.is_some() {
                    return Err(StorageError::Damaged {
                        path,
                        offset: 0,
                        what: format!("it is missing or has no identity, beside {SNAPSHOT_FILE}"),
                    });
                }
                let file = create(&path, dir, id, voters)?;
                let log = RaftLog {
                    dir: dir.to_path_buf(),
                    path,
                    file,
                    id,
                    voters: voters.to_vec(),
                    mirror: Durable::default(),
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
        let snapshot_index = snapshot.as_ref().map_or(0, |s| s.get_metadata().index);
        let last = durable
            .entries
            .last()
            .map_or(0, |e| e.index)
            .max(snapshot_index);
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
        durable.snapshot = snapshot;
        let log = RaftLog {
            dir: dir.to_path_buf(),
            path,
            file,
            id,
            voters: voters.to_vec(),
            mirror: durable.clone(),
        };
        Ok((log, durable))
    }

    /// Writes what the node asked for, in [`Persist`]'s order; fsynced before returning when
    /// `must_sync` (a snapshot and a compaction always are).
    pub fn write(&mut self, persist: &Persist) -> Result<(), StorageError> {
        if persist.snapshot.is_some() || persist.compact_below.is_some() {
            let newer = persist.snapshot.as_ref().filter(|snap| {
                self.mirror
                    .snapshot
                    .as_ref()
                    .is_none_or(|s| s.get_metadata().index < snap.get_metadata().index)
            });
            if let Some(snap) = newer {
                self.write_snapshot(snap)?;
            }
            let before = self.mirror.entries.len();
            self.mirror.write(&Persist {
                snapshot: persist.snapshot.clone(),
                compact_below: persist.compact_below,
                ..Persist::default()
            });
            // Entries are only ever dropped here (appends replace or add), so a change of
            // length is a change of the log's start.
            if self.mirror.entries.len() != before {
                self.rewrite()?;
            }
        }
        if persist.entries.is_empty() && persist.hard_state.is_none() {
            return Ok(());
        }
        self.mirror.write(&Persist {
            entries: persist.entries.clone(),
            hard_state: persist.hard_state.clone(),
            ..Persist::default()
        });
        let payload = encode_batch(persist.hard_state.as_ref(), &persist.entries)?;
        self.append(KIND_BATCH, &payload, persist.must_sync)
    }

    /// Stores a newer commit index (no fsync needed: Raft finds the commit again).
    pub fn commit(&mut self, commit: u64) -> Result<(), StorageError> {
        if commit <= self.mirror.hard_state.commit {
            return Ok(());
        }
        self.mirror.hard_state.commit = commit;
        let payload = encode_batch(Some(&self.mirror.hard_state.clone()), &[])?;
        self.append(KIND_BATCH, &payload, false)
    }

    /// The log entries the files hold (after compactions, a bounded number).
    pub fn entries(&self) -> usize {
        self.mirror.entries.len()
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

    /// Step 1: the snapshot file replaced atomically and durably.
    fn write_snapshot(&self, snap: &Snapshot) -> Result<(), StorageError> {
        let path = self.dir.join(SNAPSHOT_FILE);
        let payload = snap.write_to_bytes().map_err(|e| StorageError::Io {
            path: path.clone(),
            source: std::io::Error::other(e),
        })?;
        replace(&self.dir, &path, &record(KIND_SNAPSHOT, &payload))?;
        tracing::debug!(
            index = snap.get_metadata().index,
            "controller: snapshot stored in {}",
            path.display()
        );
        Ok(())
    }

    /// Step 2: the log rewritten from what the mirror keeps, atomically and durably.
    fn rewrite(&mut self) -> Result<(), StorageError> {
        let identity = Identity {
            node: self.id,
            voters: self.voters.clone(),
        };
        let id_payload = serde_json::to_vec(&identity).map_err(|e| StorageError::Io {
            path: self.path.clone(),
            source: std::io::Error::other(e),
        })?;
        let mut bytes = record(KIND_IDENTITY, &id_payload);
        let batch = encode_batch(Some(&self.mirror.hard_state), &self.mirror.entries)?;
        bytes.extend_from_slice(&record(KIND_BATCH, &batch));
        replace(&self.dir, &self.path, &bytes)?;
        self.file = OpenOptions::new()
            .append(true)
            .open(&self.path)
            .map_err(|source| StorageError::Io {
                path: self.path.clone(),
                source,
            })?;
        tracing::debug!(
            entries = self.mirror.entries.len(),
            from = self.mirror.entries.first().map_or(0, |e| e.index),
            "controller: log compacted"
        );
        Ok(())
    }
}

/// Replaces `path` with `bytes`: a temp file written and fsynced, renamed over it, the directory
/// fsynced. A crash leaves the old file or the new one, whole.
fn replace(dir: &Path, path: &Path, bytes: &[u8]) -> Result<(), StorageError> {
    let mut tmp_name = path.as_os_str().to_owned();
    tmp_name.push(TMP_SUFFIX);
    let tmp = PathBuf::from(tmp_name);
    let io = |p: &Path| {
        let p = p.to_path_buf();
        move |source| StorageError::Io { path: p, source }
    };
    let mut f = OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .open(&tmp)
        .map_err(io(&tmp))?;
    f.write_all(bytes).map_err(io(&tmp))?;
    f.sync_all().map_err(io(&tmp))?;
    drop(f);
    std::fs::rename(&tmp, path).map_err(io(path))?;
    File::open(dir).and_then(|d| d.sync_all()).map_err(io(dir))
}

/// Removes a temp file whose rename never happened.
fn remove_unrenamed(tmp: &Path) -> Result<(), StorageError> {
    match std::fs::remove_file(tmp) {
        Ok(()) => {
            tracing::warn!(
                "controller: removed {}, a write cut short before it took effect",
                tmp.display()
            );
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(StorageError::Io {
            path: tmp.to_path_buf(),
            source,
        }),
    }
}

/// The snapshot file, if any: exactly one intact snapshot record.
fn load_snapshot(path: &Path) -> Result<Option<Snapshot>, StorageError> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(StorageError::Io {
                path: path.to_path_buf(),
                source,
            })
        }
    };
    let damaged = |what: String| StorageError::Damaged {
        path: path.to_path_buf(),
        offset: 0,
        what,
    };
    let Some((kind, payload, end)) = record_at(&bytes, 0) else {
        return Err(damaged("its record is short or fails its checksum".into()));
    };
    if kind != KIND_SNAPSHOT || end != bytes.len() {
        return Err(damaged(format!(
            "it holds a record of kind {kind} and {} bytes after it",
            bytes.len() - end
        )));
    }
    let snap = Snapshot::parse_from_bytes(payload)
        .map_err(|e| damaged(format!("the snapshot does not decode: {e}")))?;
    Ok(Some(snap))
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
                    // A compacted log starts at any index (the node checks it against the
                    // snapshot); after that, entries must follow on.
                    let last = durable.entries.last().map_or(0, |e| e.index);
                    let start = durable.entries.is_empty();
                    if first.index == 0 || (!start && first.index > last + 1) {
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
                    ..Persist::default()
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
        static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let d =
            std::env::temp_dir().join(format!("lookup-raftlog-{name}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn write(log: &mut RaftLog, entries: Vec<RaftEntry>, hard: Option<HardState>) {
        log.write(&Persist {
            entries,
            hard_state: hard,
            must_sync: true,
            ..Persist::default()
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

    mod crash {
        //! A crash between any two writes of a snapshot's `Persist`, made by writing the files
        //! of each intermediate state: the node restarts from them, keeps what it had applied,
        //! and goes on.
        use super::*;
        use replication::controller::{Entry, NodeConfig, RaftNode};
        use replication::ids::BrokerId;

        fn cfg() -> NodeConfig {
            NodeConfig {
                id: 1,
                voters: vec![1],
                election_tick: 10,
                heartbeat_tick: 2,
                snapshot_every: 5,
                snapshot_margin: 2,
            }
        }

        /// Carries out what the node asks until it asks nothing; stops before writing a
        /// snapshot at `stop_at` or later (the node keeps that output pending) and returns it.
        fn settle(node: &mut RaftNode, log: &mut RaftLog, stop_at: u64) -> Option<Persist> {
            for _ in 0..1000 {
                let out = node.ready()?;
                if out
                    .persist
                    .snapshot
                    .as_ref()
                    .is_some_and(|s| s.get_metadata().index >= stop_at)
                {
                    return Some(out.persist.clone());
                }
                log.write(&out.persist).unwrap();
                let after = out.persisted();
                if let Some(c) = after.commit {
                    log.commit(c).unwrap();
                }
            }
            panic!("the node never settled");
        }

        fn elect(node: &mut RaftNode, log: &mut RaftLog) {
            for _ in 0..50 {
                node.tick();
                settle(node, log, u64::MAX);
                if node.is_leader() {
                    return;
                }
            }
            panic!("no election");
        }

        fn register(node: &mut RaftNode, id: u64) {
            node.propose(&Entry::RegisterBroker {
                id: BrokerId(id),
                incarnation: 1,
                addresses: vec![],
                damaged: vec![],
            })
            .unwrap();
        }

        fn live(node: &RaftNode) -> Vec<u64> {
            let md = node.metadata();
            md.brokers
                .keys()
                .filter(|b| md.is_live(**b))
                .map(|b| b.0)
                .collect()
        }

        /// A data path's files: name and contents.
        type Files = Vec<(String, Vec<u8>)>;

        /// The log's records up to the end of the `n`th.
        fn records(bytes: &[u8], n: usize) -> Vec<u8> {
            let mut at = 0;
            for _ in 0..n {
                at = record_at(bytes, at).unwrap().2;
            }
            bytes[..at].to_vec()
        }

        #[test]
        fn a_crash_between_any_two_writes_restarts_consistently() {
            let d = dir("crash-run");
            let (mut log, durable) = RaftLog::open(&d, 1, &[1]).unwrap();
            let mut node = RaftNode::new(&cfg(), durable).unwrap();
            elect(&mut node, &mut log);
            // Registrations until the second snapshot is due (the first one is then the old
            // snapshot the new one replaces).
            let mut next = 1;
            let persist = loop {
                register(&mut node, next);
                next += 1;
                if let Some(p) = settle(&mut node, &mut log, 10) {
                    break p;
                }
                assert!(next < 100, "no second snapshot");
            };
            let applied = live(&node);
            assert!(!applied.is_empty());
            let (log0, snap0) = (
                std::fs::read(d.join(FILE_NAME)).unwrap(),
                std::fs::read(d.join(SNAPSHOT_FILE)).unwrap(),
            );
            log.write(&persist).unwrap();
            let (log2, snap1) = (
                std::fs::read(d.join(FILE_NAME)).unwrap(),
                std::fs::read(d.join(SNAPSHOT_FILE)).unwrap(),
            );
            assert_ne!(snap0, snap1);
            // Identity, then the rewritten batch: the compacted log before the append.
            let log1 = records(&log2, 2);
            assert_ne!(log1, records(&log0, 2), "the log was not rewritten");
            drop(log);
            let tmp = |name: &str| format!("{name}{TMP_SUFFIX}");
            let half = |b: &[u8]| b[..b.len() / 2].to_vec();
            let states: Vec<(&str, Files)> = vec![
                (
                    "the new snapshot half written to its temp file",
                    vec![
                        (FILE_NAME.into(), log0.clone()),
                        (SNAPSHOT_FILE.into(), snap0.clone()),
                        (tmp(SNAPSHOT_FILE), half(&snap1)),
                    ],
                ),
                (
                    "the new snapshot fsynced, not renamed",
                    vec![
                        (FILE_NAME.into(), log0.clone()),
                        (SNAPSHOT_FILE.into(), snap0.clone()),
                        (tmp(SNAPSHOT_FILE), snap1.clone()),
                    ],
                ),
                (
                    "the new snapshot renamed, the log not yet compacted",
                    vec![
                        (FILE_NAME.into(), log0.clone()),
                        (SNAPSHOT_FILE.into(), snap1.clone()),
                    ],
                ),
                (
                    "the compacted log half written to its temp file",
                    vec![
                        (FILE_NAME.into(), log0.clone()),
                        (SNAPSHOT_FILE.into(), snap1.clone()),
                        (tmp(FILE_NAME), half(&log1)),
                    ],
                ),
                (
                    "the compacted log fsynced, not renamed",
                    vec![
                        (FILE_NAME.into(), log0.clone()),
                        (SNAPSHOT_FILE.into(), snap1.clone()),
                        (tmp(FILE_NAME), log1.clone()),
                    ],
                ),
                (
                    "the compacted log renamed, the entries not appended",
                    vec![
                        (FILE_NAME.into(), log1.clone()),
                        (SNAPSHOT_FILE.into(), snap1.clone()),
                    ],
                ),
                (
                    "the entries half appended",
                    vec![
                        (
                            FILE_NAME.into(),
                            log2[..log1.len() + (log2.len() - log1.len()) / 2].to_vec(),
                        ),
                        (SNAPSHOT_FILE.into(), snap1.clone()),
                    ],
                ),
                (
                    "every write done",
                    vec![
                        (FILE_NAME.into(), log2.clone()),
                        (SNAPSHOT_FILE.into(), snap1.clone()),
                    ],
                ),
            ];
            for (what, files) in states {
                let d = dir("crash-state");
                for (name, bytes) in &files {
                    std::fs::write(d.join(name), bytes).unwrap();
                }
                let (mut log, durable) =
                    RaftLog::open(&d, 1, &[1]).unwrap_or_else(|e| panic!("{what}: {e}"));
                assert!(
                    !d.join(tmp(FILE_NAME)).exists() && !d.join(tmp(SNAPSHOT_FILE)).exists(),
                    "{what}: a temp file is left"
                );
                let mut node =
                    RaftNode::new(&cfg(), durable).unwrap_or_else(|e| panic!("{what}: {e}"));
                elect(&mut node, &mut log);
                let got = live(&node);
                assert!(
                    applied.iter().all(|b| got.contains(b)),
                    "{what}: applied {applied:?}, restarted with {got:?}"
                );
                // It goes on: more entries, more snapshots, and a restart finds them all.
                for id in 100..112 {
                    register(&mut node, id);
                    settle(&mut node, &mut log, u64::MAX);
                }
                let before = live(&node);
                assert!(before.contains(&111), "{what}: {before:?}");
                drop(log);
                let (mut log, durable) =
                    RaftLog::open(&d, 1, &[1]).unwrap_or_else(|e| panic!("{what}: {e}"));
                let mut node =
                    RaftNode::new(&cfg(), durable).unwrap_or_else(|e| panic!("{what}: {e}"));
                elect(&mut node, &mut log);
                assert_eq!(live(&node), before, "{what}");
                let _ = std::fs::remove_dir_all(&d);
            }
            let _ = std::fs::remove_dir_all(&d);
        }

        #[test]
        fn the_log_stays_bounded_and_a_damaged_snapshot_refuses_the_start() {
            let d = dir("bounded");
            let (mut log, durable) = RaftLog::open(&d, 1, &[1]).unwrap();
            let mut node = RaftNode::new(&cfg(), durable).unwrap();
            elect(&mut node, &mut log);
            let mut largest = 0;
            for id in 1..200 {
                register(&mut node, id);
                settle(&mut node, &mut log, u64::MAX);
                largest = largest.max(log.entries());
            }
            // At most the margin, the entries between two snapshots and the one in flight.
            assert!(largest <= 2 + 5 + 2, "{largest} entries held");
            drop(log);
            let snap = d.join(SNAPSHOT_FILE);
            let mut bytes = std::fs::read(&snap).unwrap();
            let mid = bytes.len() / 2;
            bytes[mid] ^= 0x20;
            std::fs::write(&snap, &bytes).unwrap();
            let e = RaftLog::open(&d, 1, &[1]).unwrap_err().to_string();
            assert!(e.contains("controller-snapshot is damaged"), "{e}");
            assert!(e.contains("restore it from a backup"), "{e}");
            // A snapshot without its log is refused too, not taken for a fresh node.
            std::fs::remove_file(d.join(FILE_NAME)).unwrap();
            std::fs::write(&snap, record(KIND_SNAPSHOT, b"")).unwrap();
            let e = RaftLog::open(&d, 1, &[1]).unwrap_err().to_string();
            assert!(e.contains("missing or has no identity"), "{e}");
            let _ = std::fs::remove_dir_all(&d);
        }
    }
}
