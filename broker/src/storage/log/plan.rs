//! Write planning: [`TopicLog::plan`] places the records appended since the flusher's last
//! round in pending chunks (what it writes next), leaving out those below the floor
//! every channel has passed, except the newest (and except when the topic has a retention); a new segment starts at
//! `--max-bytes-per-file`, or when the newest segment has an older format.
//!
//! Records are not encoded here: a chunk lists their seqs, and the write encodes them from the
//! window into its buffer (`write.rs`); planning fixes where each record goes (offsets, index
//! points, segments).
//!
//! Invariants: a chunk holds consecutive bytes of one segment and chunks are in file order; a
//! chunk stops growing at [`MAX_WRITE`] bytes (a larger record makes a chunk of its own); a
//! segment's sparse index gets its points as its records are planned; every seq a chunk lists
//! stays in the window until it is written.

use super::{Chunk, Planned, Segment, TopicLog};
use crate::storage::segment::{self, Format, Stored, HEADER_LEN};
use std::cell::RefCell;

/// A record's length in a segment.
pub(super) fn record_len(s: &Stored) -> u64 {
    segment::record_len(s.msg.body.len()) as u64
}

/// The largest single write: a pending chunk bigger than this goes out in pieces.
pub const MAX_WRITE: usize = 1 << 20;

impl TopicLog {
    /// Plans the records appended since the last plan into the pending chunks, except
    /// those below `floor` (every channel has finished them: nobody will read them again, so
    /// they need not be written). The newest record is always planned, so the files end with
    /// the log's head (and its highest ID), which recovery starts from. Called by the flusher
    /// just before it writes, when consumers have had the most time to finish what it holds.
    ///
    /// Returns how many records it encoded and how many it skipped.
    pub fn plan(&mut self, floor: u64) -> Planned {
        let mut planned = Planned::default();
        if self.dir.is_none() || self.planned_end >= self.head {
            return planned;
        }
        // History kept by retention is written even when every channel has finished it, and
        // so is a replicated log's: followers and a future leader need every record.
        let floor = if self.retention.is_set() || self.replicated {
            0
        } else {
            floor
        };
        let window = std::mem::take(&mut self.window);
        let ws = self.head - window.len() as u64;
        let last = self.head - 1;
        for seq in self.planned_end.max(ws)..self.head {
            if seq < floor && seq != last {
                planned.skipped += 1;
                continue;
            }
            planned.kept += 1;
            self.place(&window[(seq - ws) as usize]);
        }
        self.window = window;
        self.planned_end = self.head;
        self.unplanned_bytes = 0;
        planned
    }

    /// Gives the record of `s` its place: its segment (rolling a new one when due), offset,
    /// index point and pending chunk.
    fn place(&mut self, s: &Stored) {
        let rec_len = record_len(s);
        let needs_new = match self.segments.last() {
            None => true,
            // A segment of an older format (recovered) is read, never appended to.
            Some(seg) => {
                seg.format != Format::CURRENT
                    || seg.records > 0 && seg.planned_len + rec_len > self.max_bytes_per_file
            }
        };
        if needs_new {
            self.roll(s.seq, s.msg.timestamp);
        }
        let Some(seg) = self.segments.last_mut() else {
            return;
        };
        let offset = seg.planned_len;
        // A chunk stops growing at MAX_WRITE (the next starts where it ends): each chunk is one
        // direct-I/O write, and its buffer is allocated whole when it is written.
        let same_chunk = matches!(self.pending.last(),
            Some(c) if c.base == seg.base && c.len + rec_len as usize <= MAX_WRITE);
        if !same_chunk {
            self.pending.push(Chunk {
                base: seg.base,
                offset,
                head: Vec::new(),
                seqs: Vec::new(),
                len: 0,
                end_seq: s.seq,
            });
        }
        let last_point = seg.index.last().map(|&(_, o)| o as u64);
        if segment::is_index_point(seg.records, offset, last_point) {
            seg.index.push((s.seq, offset as usize));
        }
        seg.records += 1;
        seg.end = s.seq + 1;
        if let Some(chunk) = self.pending.last_mut() {
            match chunk.seqs.last_mut() {
                Some(r) if r.end == s.seq => r.end += 1,
                _ => chunk.seqs.push(s.seq..s.seq + 1),
            }
            chunk.len += rec_len as usize;
            chunk.end_seq = s.seq + 1;
        }
        seg.planned_len += rec_len;
    }

    fn roll(&mut self, base: u64, first_ts: i64) {
        let Some(dir) = &self.dir else { return };
        let path = dir.join(format!("{base:020}.seg"));
        let mut header = Vec::new();
        segment::encode_header(&mut header, base, crate::ids::now_nanos());
        self.segments.push(Segment {
            base,
            format: Format::CURRENT,
            end: base,
            path,
            planned_len: HEADER_LEN as u64,
            written_len: 0,
            file: None,
            tail: Some(Vec::new()),
            rfile: RefCell::new(None),
            index: Vec::new(),
            records: 0,
            first_ts,
            skips: RefCell::default(),
        });
        self.pending.push(Chunk {
            base,
            offset: 0,
            len: header.len(),
            head: header,
            seqs: Vec::new(),
            end_seq: base,
        });
    }
}
