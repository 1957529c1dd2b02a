//! A topic's metadata file, `<data-path>/<topic>/meta.json`: which channels exist, which are
//! paused, where each channel is in the log, the topic's own retention settings, and (after a clean stop) the messages each channel
//! still owed its consumers.
//!
//! Written atomically (temporary file, fsync, rename, fsync of the directory). After a clean
//! stop `clean` is true and every channel lists its pending messages exactly; otherwise
//! `cursor` is a floor below which everything was finished, and a restart redelivers from it
//! (at-least-once).
//!
//! A write goes into the directory that [`open_dir`] opened, never by path (the path it was
//! opened at only names it in errors): a write running
//! off the shard's thread while its topic is deleted lands in the renamed directory (the
//! trash) and goes with it, instead of creating the topic's directory again (the topic would
//! come back at the next start) or writing into a topic of the same name created meanwhile.
//! A write never creates the directory.

use super::StorageError;
use serde::{Deserialize, Serialize};
use std::ffi::{CStr, OsStr};
use std::fs::File;
use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

pub const META_FILE: &str = "meta.json";
pub const META_VERSION: u32 = 1;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TopicMeta {
    pub version: u32,
    pub paused: bool,
    /// True when written by a clean stop: pending lists are complete.
    pub clean: bool,
    /// The log's first wanted seq: what emptying a topic without channels (or deleting its
    /// last channel) dropped stays dropped after a restart. 0 in files from before it existed.
    #[serde(default)]
    pub start: u64,
    /// The topic's own retention (`POST /topic/config`); absent: `--retention-time` and
    /// `--retention-bytes`. 0 is set, to none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retention_time_ns: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retention_bytes: Option<u64>,
    pub channels: Vec<ChannelMeta>,
    /// While paused: the end of what its channels see (what was published before the pause);
    /// what lies beyond waits for the unpause, across a restart too. Absent: everything.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub visible_end: Option<u64>,
    /// While paused: what an empty dropped of the held messages lies below this seq.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub emptied_until: Option<u64>,
    /// Where the messages this topic received as a dead-letter topic came from (the newest
    /// 10,000, `topic/dead_letters.rs`); absent for a topic that never received any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dead_letters: Vec<DeadLetterMeta>,
}

/// The origin of a message published to a dead-letter topic: where it was when it reached its
/// channel's max attempts, and where it is now (its ID and seq in the dead-letter topic).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DeadLetterMeta {
    /// Its ID in the dead-letter topic (what a consumer of that topic receives).
    pub id: String,
    /// Its seq in the dead-letter topic's log (what a redrive reads).
    pub seq: u64,
    pub origin_topic: String,
    pub origin_channel: String,
    /// Its ID in the origin topic.
    pub origin_id: String,
    /// Deliveries it had on the origin channel.
    pub attempts: u16,
    /// When it was first published (ns since the epoch).
    pub timestamp: i64,
    /// When it reached the limit (ns since the epoch).
    pub dead_lettered_at: i64,
    pub body_size: u64,
    /// The body's first bytes (lossy UTF-8).
    pub preview: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ChannelMeta {
    pub name: String,
    pub paused: bool,
    /// Next seq the channel takes from the log.
    pub cursor: u64,
    #[serde(default)]
    pub pending: Vec<PendingMeta>,
    /// The channel's own max attempts (`POST /channel/config`); absent: `--max-attempts`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_attempts: Option<u16>,
    /// Where messages over max attempts go; absent: they are dropped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dead_letter_topic: Option<String>,
    /// Stretches `[from, to)` of the log that are other channels' own messages (an nsqd
    /// import: a message of an nsqd channel's queue belongs to that channel only), in order;
    /// the channel passes over them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub foreign: Vec<[u64; 2]>,
}

/// A message a channel owed at a clean stop (requeued, in flight, or deferred).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PendingMeta {
    pub seq: u64,
    pub attempts: u16,
    /// Milliseconds of delay left, 0 for at once.
    #[serde(default)]
    pub delay_ms: u64,
}

pub fn read(dir: &Path) -> Result<Option<TopicMeta>, StorageError> {
    let path = dir.join(META_FILE);
    match std::fs::read(&path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|source| StorageError::Metadata { path, source }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(StorageError::Read { path, source }),
    }
}

/// A topic's directory opened for [`write`], and the path it was opened at.
pub struct MetaDir {
    file: File,
    path: PathBuf,
}

/// Opens a topic's directory for [`write`]. Quick (no I/O beyond the lookup), so it is done on
/// the shard's thread, where nothing can delete the topic between the check that it is alive
/// and the open.
pub fn open_dir(dir: &Path) -> Result<MetaDir, StorageError> {
    match File::open(dir) {
        Ok(file) => Ok(MetaDir {
            file,
            path: dir.to_path_buf(),
        }),
        Err(source) => Err(StorageError::Open {
            path: dir.to_path_buf(),
            source,
        }),
    }
}

/// Writes `meta` atomically into `dir` (from [`open_dir`]). Blocking, but small and rare (a
/// channel created or deleted, a checkpoint, a clean stop).
pub fn write(dir: &MetaDir, meta: &TopicMeta) -> Result<(), StorageError> {
    const TMP: &CStr = c"meta.json.tmp";
    const FINAL: &CStr = c"meta.json";
    // A file of the directory, by the path the directory was opened at (for errors).
    let at = |name: &CStr| dir.path.join(OsStr::from_bytes(name.to_bytes()));
    let bytes = serde_json::to_vec_pretty(meta).map_err(|source| StorageError::Metadata {
        path: at(FINAL),
        source,
    })?;
    {
        let mut f = create_in(&dir.file, TMP).map_err(|source| StorageError::Create {
            path: at(TMP),
            source,
        })?;
        f.write_all(&bytes).map_err(|source| StorageError::Write {
            path: at(TMP),
            source,
        })?;
        f.sync_data().map_err(|source| StorageError::Fsync {
            path: at(TMP),
            source,
        })?;
    }
    rename_in(&dir.file, TMP, FINAL).map_err(|source| StorageError::Rename {
        from: at(TMP),
        to: at(FINAL),
        source,
    })?;
    dir.file.sync_all().map_err(|source| StorageError::SyncDir {
        path: dir.path.clone(),
        source,
    })
}

/// Creates (or truncates) file `name` in `dir`, for writing.
fn create_in(dir: &File, name: &CStr) -> std::io::Result<File> {
    let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC | libc::O_CLOEXEC;
    // SAFETY: `dir` is an open descriptor for the whole call and `name` a NUL-terminated string.
    let fd = unsafe { libc::openat(dir.as_raw_fd(), name.as_ptr(), flags, 0o644 as libc::c_uint) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` was just opened by this call and belongs to nothing else.
    Ok(unsafe { File::from_raw_fd(fd) })
}

/// Renames `from` to `to`, both in `dir`.
fn rename_in(dir: &File, from: &CStr, to: &CStr) -> std::io::Result<()> {
    let fd = dir.as_raw_fd();
    // SAFETY: `dir` is an open descriptor for the whole call; both names are NUL-terminated.
    let r = unsafe { libc::renameat(fd, from.as_ptr(), fd, to.as_ptr()) };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let dir = std::env::temp_dir().join(format!("meta-test-{}", std::process::id()));
        let meta = TopicMeta {
            version: META_VERSION,
            paused: true,
            clean: true,
            start: 5,
            retention_time_ns: Some(2_000_000_000),
            retention_bytes: None,
            channels: vec![ChannelMeta {
                name: "c".into(),
                paused: false,
                cursor: 7,
                pending: vec![PendingMeta {
                    seq: 3,
                    attempts: 2,
                    delay_ms: 500,
                }],
                max_attempts: Some(3),
                dead_letter_topic: Some("c.dead".into()),
                foreign: vec![[10, 12]],
            }],
            visible_end: Some(8),
            emptied_until: Some(9),
            dead_letters: vec![DeadLetterMeta {
                id: "0000000000000001".into(),
                seq: 9,
                origin_topic: "o".into(),
                origin_channel: "c".into(),
                origin_id: "000000000000000a".into(),
                attempts: 3,
                timestamp: 1,
                dead_lettered_at: 2,
                body_size: 5,
                preview: "hello".into(),
            }],
        };
        std::fs::create_dir_all(&dir).unwrap();
        write(&open_dir(&dir).unwrap(), &meta).unwrap();
        assert_eq!(read(&dir).unwrap(), Some(meta));
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(read(&dir).unwrap(), None);
    }

    /// A write racing the topic's deletion: the directory is renamed away (and a new one of
    /// the same name made) between the open and the write. The metadata follows the renamed
    /// directory; the path is neither re-created nor written.
    #[test]
    fn a_write_follows_its_directory_when_it_is_renamed() {
        let base = std::env::temp_dir().join(format!("meta-rename-{}", std::process::id()));
        let dir = base.join("t");
        std::fs::create_dir_all(&dir).unwrap();
        let handle = open_dir(&dir).unwrap();
        let trash = base.join("t~deleted");
        std::fs::rename(&dir, &trash).unwrap();
        write(&handle, &TopicMeta::default()).unwrap();
        assert!(
            !dir.exists(),
            "the deleted topic's directory must not come back"
        );
        assert_eq!(read(&trash).unwrap(), Some(TopicMeta::default()));
        std::fs::create_dir_all(&dir).unwrap();
        write(&handle, &TopicMeta::default()).unwrap();
        assert_eq!(
            read(&dir).unwrap(),
            None,
            "a topic made again is not written"
        );
        std::fs::remove_dir_all(&base).unwrap();
    }
}
