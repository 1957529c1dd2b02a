//! Segment storage: each shard owns the logs of its topics under `--data-path`.
//!
//! - [`segment`]: the on-disk format, defined there: segment files, their header and records
//!   (lengths, checksums, versions), scanning and resynchronisation.
//! - [`blocks`]: the direct-I/O read cache channels read segments through.
//! - [`mod@file`]: a segment file on the io_uring (direct I/O, or buffered where unavailable).
//! - [`log`]: a topic's log: append, the in-memory window, write planning, flush and fsync,
//!   reads, fetching blocks, recovery at start-up, retention (one file each under `log/`).
//! - [`meta`]: a topic's metadata (channels, cursors, pending messages at a clean stop).
//! - [`StorageError`]: what storage's operations fail with (the operation, the path, the
//!   reason).
//! - [`flusher`]: the write path's task (coalescing, fsync policy, checkpoints, segment
//!   deletion, the hand-over at a clean stop), generic over the topic and its owner.
//! - [`fetcher`]: the read path's tasks (segment blocks for waiting readers, their ageing).
//!
//! Files are laid out by topic name, not by shard, so a restart with another `--shards` finds
//! everything: each shard loads the topics it owns under the new count.

pub mod blocks;
mod error;
pub mod fetcher;
pub mod file;
pub mod flusher;
pub mod log;
pub mod meta;
pub mod segment;

pub use error::StorageError;

use std::path::{Path, PathBuf};

/// The directory of a topic. Names are `[.a-zA-Z0-9_-]+`; the two that are special to the
/// file system (`.` and `..`) are written with their dots escaped.
pub fn topic_dir(data_path: &Path, topic: &str) -> PathBuf {
    if topic.bytes().all(|b| b == b'.') {
        data_path.join(topic.replace('.', "%2E"))
    } else {
        data_path.join(topic)
    }
}

/// The topic a directory holds, if it is one of ours.
pub fn topic_of_dir(name: &str) -> Option<String> {
    let topic = if name.starts_with("%2E") {
        name.replace("%2E", ".")
    } else {
        name.to_string()
    };
    (protocol::names::is_valid_topic_name(&topic) && !protocol::names::is_ephemeral(&topic))
        .then_some(topic)
}

/// Where a released segment or a deleted topic's directory waits for deletion: `~` is in no
/// topic name and no segment name, so nothing of the same name can be created meanwhile.
pub fn trash_name(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(TRASH_SUFFIX);
    PathBuf::from(name)
}

const TRASH_SUFFIX: &str = "~deleted";

/// fsyncs the directory `dir`, so that entries just made in it (a topic's directory, a new
/// segment file) survive a power loss: an fsync of the file alone does not cover its name.
pub fn sync_dir(dir: &Path) -> Result<(), StorageError> {
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|source| StorageError::SyncDir {
            path: dir.to_path_buf(),
            source,
        })
}

pub fn is_trash(path: &Path) -> bool {
    path.to_string_lossy().ends_with(TRASH_SUFFIX)
}

/// Deletes trash (see [`trash_name`]) on glommio's blocking threads: freeing a large file's
/// extents takes tens of milliseconds, which on a shard's thread would stall every connection
/// and channel it serves. Returns at once: nothing waits for the deletion (the flusher, which
/// releases segments, must not). What a stop interrupts is deleted at the next start.
pub fn delete_in_background(paths: Vec<PathBuf>) {
    if paths.is_empty() {
        return;
    }
    let deletion = glommio::executor().spawn_blocking(move || {
        for p in paths {
            let removed = if p.is_dir() {
                if let Ok(entries) = std::fs::read_dir(&p) {
                    for e in entries.flatten() {
                        let _ = shrink_then_remove(&e.path());
                    }
                }
                std::fs::remove_dir_all(&p)
            } else {
                shrink_then_remove(&p)
            };
            match removed {
                Ok(()) => tracing::debug!(path = %p.display(), "deleted"),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => tracing::warn!(path = %p.display(), "cannot delete: {e}"),
            }
        }
    });
    glommio::spawn_local(deletion).detach();
}

/// Freeing a whole segment's extents at once is one long journal transaction that the shards'
/// own segment writes then queue behind. Cutting the file down a step at a time keeps each
/// transaction, and so each wait, short (docs/design/storage.md#the-log-storage;
/// `tests/perf/unlink_stall.py` shows the effect).
const SHRINK_STEP: u64 = 4 << 20;

fn shrink_then_remove(path: &Path) -> std::io::Result<()> {
    if let Ok(f) = std::fs::OpenOptions::new().write(true).open(path) {
        let mut len = f.metadata().map(|m| m.len()).unwrap_or(0);
        while len > SHRINK_STEP {
            len -= SHRINK_STEP;
            if f.set_len(len).is_err() {
                break;
            }
            std::thread::yield_now();
        }
    }
    std::fs::remove_file(path)
}

/// Every topic stored under `data_path`. Deleted topics' directories that a stop left behind
/// are removed on the way.
pub fn stored_topics(data_path: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(data_path) else {
        return Vec::new();
    };
    let entries: Vec<std::fs::DirEntry> = entries
        .filter_map(|e| e.ok())
        .filter(|e| {
            let p = e.path();
            if !is_trash(&p) {
                return true;
            }
            match std::fs::remove_dir_all(&p) {
                // Every shard lists the data path at start; another may have been first.
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    tracing::warn!(path = %p.display(), "cannot delete a deleted topic's files: {e}");
                }
                _ => {}
            }
            false
        })
        .collect();
    let mut topics: Vec<String> = entries
        .into_iter()
        .filter(|e| e.file_type().map(|t| t.is_dir()).unwrap_or(false))
        .filter(|e| {
            let p = e.path();
            p.join(meta::META_FILE).exists()
                || std::fs::read_dir(&p)
                    .map(|mut d| {
                        d.any(|f| {
                            f.is_ok_and(|f| f.file_name().to_string_lossy().ends_with(".seg"))
                        })
                    })
                    .unwrap_or(false)
        })
        .filter_map(|e| topic_of_dir(&e.file_name().to_string_lossy()))
        .collect();
    topics.sort();
    topics
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dot_names_cannot_escape_the_data_path() {
        let base = Path::new("/data");
        assert_eq!(topic_dir(base, ".."), Path::new("/data/%2E%2E"));
        assert_eq!(topic_dir(base, "a.b"), Path::new("/data/a.b"));
        assert_eq!(topic_of_dir("%2E%2E").as_deref(), Some(".."));
        assert_eq!(topic_of_dir("a.b").as_deref(), Some("a.b"));
        assert_eq!(topic_of_dir("bad*name"), None);
    }
}
