//! Why an nsqd import is refused or failed. Each text names the file or topic and, where
//! there is one, what the operator can do.

use crate::storage::StorageError;
use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    #[error(
        "unknown nsqd version \"{version}\" in {}: this broker imports data written by nsqd \
         1.0 to 1.3; nothing was imported (data from before nsqd 1.0: run nsqd 1.0 or 1.1 on it once \
         first, which converts it)",
        path.display()
    )]
    UnknownVersion { path: PathBuf, version: String },
    #[error("{} is not nsqd's metadata ({reason}); nothing was imported", path.display())]
    NotNsqdMeta { path: PathBuf, reason: String },
    #[error(
        "{} holds {file}, the metadata of nsqd before 1.0: this broker imports data written by \
         nsqd 1.0 to 1.3; nothing was imported (run nsqd 1.0 or 1.1 on it once first, which \
         converts it; 1.2 and later no longer read it)",
        dir.display()
    )]
    PreV1 { dir: PathBuf, file: String },
    #[error("{} is not an nsqd data directory (it has no nsqd.dat)", dir.display())]
    NotNsqdDir { dir: PathBuf },
    #[error(
        "cannot import nsqd topic {topic:?}: the broker's data path already holds a topic of \
         that name ({}); nothing was imported. If nsqd ran on its files again since an earlier \
         import, move the broker's topic directories and nsqd-import.json aside first \
         (docs/migrating-from-nsqd.md, rolling back)",
        dir.display()
    )]
    TopicExists { topic: String, dir: PathBuf },
    #[error(
        "not enough free space in {} to import nsqd's data: {needed} bytes needed, {free} free; \
         nothing was imported",
        dir.display()
    )]
    NoSpace {
        dir: PathBuf,
        needed: u64,
        free: u64,
    },
    #[error(
        "an nsqd import is already staged in {}; the broker applies it at its next start",
        dir.display()
    )]
    AlreadyStaged { dir: PathBuf },
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
    #[error("{}: {reason}", path.display())]
    Marker { path: PathBuf, reason: String },
    #[error(transparent)]
    Storage(#[from] StorageError),
}
