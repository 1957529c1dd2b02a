//! `<data-path>/nsqd-import.json`: the nsqd imports a data path has taken (source, nsqd
//! version, counts, when) and a fingerprint of each source's files, so an import happens once.
//! Written atomically (temporary file, fsync, rename, fsync of the directory). The fingerprint
//! covers what nsqd changes when it runs: `nsqd.dat`, every `.meta.dat`, and each queue file's
//! name and size; nsqd's files are only read for it.

use super::diskqueue;
use super::nsqd_meta::NSQD_DAT;
use super::ImportError;
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::Path;

pub const MARKER_FILE: &str = "nsqd-import.json";

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Marker {
    pub imports: Vec<Entry>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    /// The nsqd data directory, as given (absolute when it could be made so).
    pub source: String,
    pub fingerprint: String,
    pub nsqd_version: String,
    /// When the import was staged, RFC 3339.
    pub imported_at: String,
    pub topics: u64,
    pub channels: u64,
    pub messages: u64,
    pub bytes: u64,
    pub damaged_records: u64,
}

impl Marker {
    /// The import of nsqd files with this fingerprint, wherever they were then (a data path
    /// moved or mounted elsewhere is still the same data).
    pub fn has(&self, fingerprint: &str) -> Option<&Entry> {
        self.imports.iter().find(|e| e.fingerprint == fingerprint)
    }
}

pub fn read(data_path: &Path) -> Result<Marker, ImportError> {
    read_file(&data_path.join(MARKER_FILE))
}

pub fn read_file(path: &Path) -> Result<Marker, ImportError> {
    match std::fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| ImportError::Marker {
            path: path.to_path_buf(),
            reason: format!("not an import record: {e}"),
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Marker::default()),
        Err(source) => Err(ImportError::Read {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// Writes `marker` to `path` atomically.
pub fn write_file(path: &Path, marker: &Marker) -> Result<(), ImportError> {
    let failed = |source| ImportError::Write {
        path: path.to_path_buf(),
        source,
    };
    let bytes = serde_json::to_vec_pretty(marker).map_err(|e| failed(e.into()))?;
    let tmp = path.with_extension("json.tmp");
    let mut f = std::fs::File::create(&tmp).map_err(failed)?;
    f.write_all(&bytes).map_err(failed)?;
    f.sync_all().map_err(failed)?;
    std::fs::rename(&tmp, path).map_err(failed)?;
    if let Some(dir) = path.parent() {
        crate::storage::sync_dir(dir)?;
    }
    Ok(())
}

/// A fingerprint of the nsqd files of `dir`.
pub fn fingerprint(dir: &Path) -> Result<String, ImportError> {
    let read = |path: &Path| {
        std::fs::read(path).map_err(|source| ImportError::Read {
            path: path.to_path_buf(),
            source,
        })
    };
    let mut h = crc32fast::Hasher::new();
    let mut total = 0u64;
    h.update(&read(&dir.join(NSQD_DAT))?);
    let queues = diskqueue::list(dir).map_err(|source| ImportError::Read {
        path: dir.to_path_buf(),
        source,
    })?;
    for (name, files) in &queues {
        h.update(name.as_bytes());
        if let Some(meta) = &files.meta {
            h.update(&read(meta)?);
        }
        for (n, path) in &files.data {
            let len = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
            h.update(&n.to_be_bytes());
            h.update(&len.to_be_bytes());
            total += len;
        }
    }
    Ok(format!("crc32:{:08x}:{total}", h.finalize()))
}
