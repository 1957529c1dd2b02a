//! What storage's operations fail with: [`StorageError`], one variant per kind of failure.
//!
//! An I/O failure names the operation, the file or directory it was done on, and the system's
//! error; the other variants are the checks storage makes itself (a segment gone under a
//! write, a write that did not land where it had to, a metadata file that does not parse).
//! Callers log these errors and put them into answers (`E_PUB_FAILED`, `/ping`'s reason) with
//! `{e}`, so `Display` is a whole sentence fragment of its own: the operation, the path, the
//! reason.

use std::io;
use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    #[error("open {}: {source}", .path.display())]
    Open { path: PathBuf, source: io::Error },

    #[error("create {}: {source}", .path.display())]
    Create { path: PathBuf, source: io::Error },

    #[error("read {}: {source}", .path.display())]
    Read { path: PathBuf, source: io::Error },

    #[error("write {}: {source}", .path.display())]
    Write { path: PathBuf, source: io::Error },

    #[error("fsync {}: {source}", .path.display())]
    Fsync { path: PathBuf, source: io::Error },

    #[error("truncate {}: {source}", .path.display())]
    Truncate { path: PathBuf, source: io::Error },

    #[error("rename {} to {}: {source}", .from.display(), .to.display())]
    Rename {
        from: PathBuf,
        to: PathBuf,
        source: io::Error,
    },

    #[error("remove {}: {source}", .path.display())]
    Remove { path: PathBuf, source: io::Error },

    /// The fsync of a directory, which makes the entries just made in it durable.
    #[error("fsync the directory {}: {source}", .path.display())]
    SyncDir { path: PathBuf, source: io::Error },

    /// A topic's `meta.json` that does not parse (or metadata that does not serialise).
    #[error("{}: {source}", .path.display())]
    Metadata {
        path: PathBuf,
        source: serde_json::Error,
    },

    /// A write or read of a segment the log no longer has (released, or the topic destroyed).
    #[error("segment {base} of topic {topic} vanished")]
    SegmentVanished { topic: String, base: u64 },

    /// A planned record gone from memory before it was written: refused, never expected.
    #[error("record {seq} of topic {topic} left memory before it was written")]
    NotInMemory { topic: String, seq: u64 },

    /// A write that would not start at the segment's written end: refused, never expected.
    #[error("write at {at} of {} does not follow its end {end}", .path.display())]
    WriteNotAtEnd { path: PathBuf, at: u64, end: u64 },

    /// A write that completed without writing anything: a full disk, usually.
    #[error("write {}: wrote nothing (disk full?)", .path.display())]
    NothingWritten { path: PathBuf },

    /// A short write that ended inside a block: what follows cannot be written after it.
    #[error("write {}: short write ending off a block boundary at {reached}", .path.display())]
    ShortWrite { path: PathBuf, reached: u64 },
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a log line or a `/ping` reason shows: the operation, the path, the reason.
    #[test]
    fn display_names_the_operation_the_path_and_the_reason() {
        let full = StorageError::Write {
            path: PathBuf::from("/data/t/00000000000000000000.seg"),
            source: io::Error::from_raw_os_error(libc::ENOSPC),
        };
        let text = full.to_string();
        assert!(
            text.starts_with("write /data/t/00000000000000000000.seg: No space left on device"),
            "{text}"
        );
        let renamed = StorageError::Rename {
            from: PathBuf::from("/data/t"),
            to: PathBuf::from("/data/t~deleted"),
            source: io::Error::from(io::ErrorKind::PermissionDenied),
        };
        assert_eq!(
            renamed.to_string(),
            "rename /data/t to /data/t~deleted: permission denied"
        );
        let gone = StorageError::SegmentVanished {
            topic: "t".into(),
            base: 7,
        };
        assert_eq!(gone.to_string(), "segment 7 of topic t vanished");
    }
}
