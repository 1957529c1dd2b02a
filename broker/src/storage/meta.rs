//! A topic's metadata file, `<data-path>/<topic>/meta.json`: which channels exist, which are
//! paused, where each channel is in the log, and (after a clean stop) the messages each channel
//! still owed its consumers.
//!
//! Written atomically (temporary file, fsync, rename). After a clean stop `clean` is true and
//! every channel lists its pending messages exactly; otherwise `cursor` is a floor below which
//! everything was finished, and a restart redelivers from it (at-least-once).

use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::Path;

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
    pub channels: Vec<ChannelMeta>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ChannelMeta {
    pub name: String,
    pub paused: bool,
    /// Next seq the channel takes from the log.
    pub cursor: u64,
    #[serde(default)]
    pub pending: Vec<PendingMeta>,
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

pub fn read(dir: &Path) -> Result<Option<TopicMeta>, String> {
    let path = dir.join(META_FILE);
    match std::fs::read(&path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| format!("{}: {e}", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

/// Writes `meta` atomically. Blocking, but small and rare (a channel created or deleted, a
/// checkpoint, a clean stop).
pub fn write(dir: &Path, meta: &TopicMeta) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let tmp = dir.join(format!("{META_FILE}.tmp"));
    let bytes = serde_json::to_vec_pretty(meta).map_err(std::io::Error::other)?;
    {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(&bytes)?;
        f.sync_data()?;
    }
    std::fs::rename(&tmp, dir.join(META_FILE))?;
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
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
            channels: vec![ChannelMeta {
                name: "c".into(),
                paused: false,
                cursor: 7,
                pending: vec![PendingMeta {
                    seq: 3,
                    attempts: 2,
                    delay_ms: 500,
                }],
            }],
        };
        write(&dir, &meta).unwrap();
        assert_eq!(read(&dir).unwrap(), Some(meta));
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(read(&dir).unwrap(), None);
    }
}
