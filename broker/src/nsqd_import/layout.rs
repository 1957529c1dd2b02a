//! One nsqd topic written as the broker's own: segments and `meta.json` in a directory of the
//! staging area.
//!
//! The log is laid out so that every message reaches the channels nsqd would have given it to,
//! with nothing in the channel code but a cursor, a pending list and `foreign` stretches:
//!
//! ```text
//! seq 0 ─► [owed]  [channel 1's own] [channel 2's own] ... [topic queue] ◄─ head
//!            │        ▲ cursor 1        ▲ cursor 2           every channel reads it
//!            │        channel 1: foreign = channel 2's, 3's, ... stretches
//!            └ messages nsqd had delivered already (attempts > 0): in their channel's
//!              pending list with their attempts, before every cursor
//! ```
//!
//! A paused topic's channels see up to the topic queue's start (`visible_end`): the topic
//! queue waits for the unpause, as in nsqd, where a paused topic's pump stops. Writes go
//! through a buffered file and are synced (files, then directory) before the caller moves the
//! directory into the data path.

use super::diskqueue::NsqdMessage;
use super::ImportError;
use crate::storage::meta::{self, ChannelMeta, PendingMeta, TopicMeta, META_VERSION};
use crate::storage::segment::{self, Stored, HEADER_LEN};
use bytes::Bytes;
use protocol::{Message, MessageId};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

/// Writes a topic's segments, rolling at `max_bytes` as the broker's flusher does.
pub struct SegmentWriter {
    dir: PathBuf,
    max_bytes: u64,
    file: Option<(BufWriter<std::fs::File>, PathBuf, u64)>,
    next_seq: u64,
    created_ns: i64,
    buf: Vec<u8>,
}

impl SegmentWriter {
    pub fn new(dir: &Path, max_bytes: u64) -> Result<SegmentWriter, ImportError> {
        std::fs::create_dir_all(dir).map_err(|source| ImportError::Write {
            path: dir.to_path_buf(),
            source,
        })?;
        Ok(SegmentWriter {
            dir: dir.to_path_buf(),
            max_bytes: max_bytes.max(HEADER_LEN as u64 + 1),
            file: None,
            next_seq: 0,
            created_ns: crate::ids::now_nanos(),
            buf: Vec::new(),
        })
    }

    /// The seq the next record gets.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// Appends one of nsqd's messages; returns its seq.
    pub fn append(&mut self, m: &NsqdMessage<'_>) -> Result<u64, ImportError> {
        let seq = self.next_seq;
        let stored = Stored {
            seq,
            msg: Message {
                id: MessageId(m.id),
                timestamp: m.timestamp,
                attempts: 0,
                body: Bytes::copy_from_slice(m.body),
            },
            defer_until: 0,
        };
        self.buf.clear();
        let len = segment::encode_record(&mut self.buf, &stored) as u64;
        let full = matches!(&self.file, Some((_, _, written))
            if *written > HEADER_LEN as u64 && written + len > self.max_bytes);
        if full {
            self.close()?;
        }
        if self.file.is_none() {
            let path = self.dir.join(format!("{seq:020}.seg"));
            let f = std::fs::File::create(&path).map_err(|source| ImportError::Write {
                path: path.clone(),
                source,
            })?;
            let mut header = Vec::with_capacity(HEADER_LEN);
            segment::encode_header(&mut header, seq, self.created_ns);
            let mut w = BufWriter::with_capacity(1 << 20, f);
            w.write_all(&header).map_err(|source| ImportError::Write {
                path: path.clone(),
                source,
            })?;
            self.file = Some((w, path, HEADER_LEN as u64));
        }
        if let Some((w, path, written)) = &mut self.file {
            w.write_all(&self.buf)
                .map_err(|source| ImportError::Write {
                    path: path.clone(),
                    source,
                })?;
            *written += len;
        }
        self.next_seq += 1;
        Ok(seq)
    }

    fn close(&mut self) -> Result<(), ImportError> {
        if let Some((w, path, _)) = self.file.take() {
            let f = w.into_inner().map_err(|e| ImportError::Write {
                path: path.clone(),
                source: e.into_error(),
            })?;
            f.sync_all()
                .map_err(|source| ImportError::Write { path, source })?;
        }
        Ok(())
    }

    /// Syncs the last segment and writes `meta.json`, then syncs the directory.
    pub fn finish(mut self, meta: &TopicMeta) -> Result<(), ImportError> {
        self.close()?;
        let dir = meta::open_dir(&self.dir)?;
        meta::write(&dir, meta)?;
        crate::storage::sync_dir(&self.dir)?;
        Ok(())
    }
}

/// What one channel of an imported topic gets.
#[derive(Debug, Default, Clone)]
pub struct ChannelPlan {
    pub name: String,
    pub paused: bool,
    /// (seq, attempts) of its messages nsqd had delivered before.
    pub owed: Vec<(u64, u16)>,
    /// Its own stretch `[from, to)`: messages of its queue nsqd had not delivered yet.
    pub own: (u64, u64),
}

/// The topic's `meta.json` for the layout above: `topic_from` is where the topic queue's
/// messages start.
pub fn topic_meta(paused: bool, channels: &[ChannelPlan], topic_from: u64) -> TopicMeta {
    let metas = channels
        .iter()
        .enumerate()
        .map(|(i, c)| ChannelMeta {
            name: c.name.clone(),
            paused: c.paused,
            cursor: c.own.0,
            pending: c
                .owed
                .iter()
                .map(|&(seq, attempts)| PendingMeta {
                    seq,
                    attempts,
                    delay_ms: 0,
                })
                .collect(),
            max_attempts: None,
            dead_letter_topic: None,
            foreign: channels[i + 1..]
                .iter()
                .filter(|o| o.own.0 < o.own.1)
                .map(|o| [o.own.0, o.own.1])
                .collect(),
        })
        .collect();
    TopicMeta {
        version: META_VERSION,
        paused,
        clean: true,
        start: 0,
        retention_time_ns: None,
        retention_bytes: None,
        channels: metas,
        visible_end: paused.then_some(topic_from),
        emptied_until: paused.then_some(topic_from),
        dead_letters: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_channel_passes_over_the_stretches_of_those_after_it() {
        let chans = vec![
            ChannelPlan {
                name: "a".into(),
                owed: vec![(0, 1)],
                own: (2, 5),
                ..Default::default()
            },
            ChannelPlan {
                name: "b".into(),
                owed: vec![(1, 2)],
                own: (5, 5),
                ..Default::default()
            },
            ChannelPlan {
                name: "c".into(),
                paused: true,
                own: (5, 9),
                ..Default::default()
            },
        ];
        let m = topic_meta(true, &chans, 9);
        assert_eq!(m.channels[0].cursor, 2);
        assert_eq!(m.channels[0].foreign, vec![[5, 9]]);
        assert_eq!(m.channels[0].pending[0].attempts, 1);
        assert_eq!(m.channels[1].cursor, 5);
        assert_eq!(m.channels[1].foreign, vec![[5, 9]]);
        assert_eq!(m.channels[2].foreign, Vec::<[u64; 2]>::new());
        assert!(m.channels[2].paused);
        assert_eq!(m.visible_end, Some(9));
        assert!(m.clean);
    }
}
