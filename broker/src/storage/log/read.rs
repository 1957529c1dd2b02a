//! The read path of a topic's log: [`TopicLog::read`] finds a seq in the window, or on disk
//! through the log's block cache, from the reader's hint (sequential reads never search) or
//! the segment's sparse index. A block not cached makes the read ask for it and answer
//! [`Read::Wait`]. Damage met while serving (a corrupt record, an unreadable block) is passed
//! by resynchronising on the next valid record; the search is remembered per segment
//! (`Segment::skips`), so it is done, and logged, once.
//!
//! Invariants: a read does no I/O and never waits; a record that does not verify is never
//! returned; nothing past a segment's written length is read (in a segment still written to,
//! a record running past it is on its way, not damage).

use super::{DiskHint, Read, Segment, Skip, TopicLog};
use crate::storage::blocks::{self, BlockKey, Blocks, BLOCK};
use crate::storage::segment::{self, Format, Stored, Viewed};
use bytes::Bytes;
use tracing::warn;

/// A segment's bytes through the block cache, as [`segment::resync`] reads them. Bytes past
/// `limit`, or in an unreadable block, cannot be had; in a segment still `growing`, the first
/// offset whose record ran past the written end is remembered.
struct CachedBytes<'a> {
    cache: &'a Blocks,
    base: u64,
    limit: u64,
    growing: bool,
    first_past_end: std::cell::Cell<Option<u64>>,
}

impl segment::ByteSource for CachedBytes<'_> {
    type Missing = BlockKey;

    fn with<R>(
        &self,
        off: u64,
        len: usize,
        f: impl FnOnce(&[u8]) -> R,
    ) -> Result<Option<R>, BlockKey> {
        if off + len as u64 > self.limit {
            if self.growing && self.first_past_end.get().is_none() {
                self.first_past_end.set(Some(off));
            }
            return Ok(None);
        }
        match self.cache.with_bytes(self.base, off, len, f) {
            Ok(r) => Ok(Some(r)),
            Err(key) if self.cache.is_bad(key) => Ok(None),
            Err(key) => Err(key),
        }
    }
}

/// A read that needs blocks: the first one missing, and the range of blocks it needs (first
/// and last block numbers of the same segment).
struct Missing(BlockKey, u64, u64);

impl Missing {
    /// The same, needing the blocks from `block` on as well (where the reader started).
    fn from(self, block: u64) -> Missing {
        Missing(self.0, self.1.min(block), self.2)
    }
}

/// One record met while reading the disk.
enum Step {
    /// The record looked for (body copied out of the block), and its length.
    Found(Stored, usize),
    /// A record before it: its length and seq.
    Before(usize, u64),
    Corrupt,
}

impl TopicLog {
    /// Reads the message at `seq`, or the first one after it if `seq` is gone.
    pub fn read(&self, seq: u64, hint: DiskHint) -> Read {
        self.read_above(seq, hint, self.start)
    }

    /// [`TopicLog::read`], refusing only what lies below `start` (replay's seek reads the
    /// history below the log's start: what every channel passed and retention keeps).
    pub(super) fn read_above(&self, seq: u64, hint: DiskHint, start: u64) -> Read {
        if seq >= self.head {
            return Read::End;
        }
        if seq < start {
            return Read::Skip(start);
        }
        let ws = self.window_start();
        if seq >= ws {
            let s = &self.window[(seq - ws) as usize];
            return Read::Msg(s.clone(), DiskHint::default());
        }
        if self.dir.is_none() {
            return Read::Skip(ws);
        }
        self.read_disk(seq, hint).unwrap_or(Read::Skip(ws))
    }

    fn read_disk(&self, seq: u64, hint: DiskHint) -> Option<Read> {
        // The segment holding `seq`, or the first one when `seq` lies before it: records every
        // channel had finished are never written, so a wanted seq (a cursor restored after a
        // crash, say) may fall in a gap before the first segment left, and reading goes on
        // from there.
        let mut idx = self
            .segments
            .partition_point(|s| s.base <= seq)
            .saturating_sub(1);
        let hinted = hint.valid
            && hint.seq == seq
            && self.segments.get(idx).is_some_and(|s| s.base == hint.base);
        let mut offset = hinted.then_some(hint.offset as u64);
        let cache = self.blocks.borrow();
        loop {
            let seg = self.segments.get(idx)?;
            let mut off = match offset.take() {
                Some(o) => o,
                None => {
                    let i = seg.index.partition_point(|(s, _)| *s <= seq);
                    i.checked_sub(1)
                        .map(|i| seg.index[i].1 as u64)
                        .unwrap_or(seg.format.header_len() as u64)
                }
            };
            // This attempt reads the segment from here on: the blocks from here to the end of
            // the record it looks for are what it needs, all at once (see `wait_for`).
            let first_block = off / BLOCK;
            let limit = seg.written_len;
            let mut last_seq = None;
            while off + seg.format.probe_len() as u64 <= limit {
                // Damage: where the search for the next valid record starts, and what to log.
                let (from, what) = match self.step_at(&cache, seg, off, seq) {
                    Ok(None) => break,
                    // Unreadable (I/O errors): what lies in the block is lost.
                    Err(Missing(key, ..)) if cache.is_bad(key) => {
                        ((key.1 + 1) * BLOCK, "unreadable block; its records skipped")
                    }
                    Err(missing) => {
                        drop(cache);
                        return Some(self.wait_for(missing.from(first_block), limit));
                    }
                    Ok(Some(Step::Found(s, n))) => {
                        let next = off + n as u64;
                        let hint = DiskHint {
                            seq: s.seq + 1,
                            base: seg.base,
                            offset: next as usize,
                            valid: true,
                        };
                        if !hinted || off / BLOCK != next / BLOCK {
                            drop(cache);
                            self.read_ahead(seg.base, next / BLOCK, limit);
                        }
                        return Some(Read::Msg(s, hint));
                    }
                    Ok(Some(Step::Before(n, s))) => {
                        last_seq = Some(s);
                        off += n as u64;
                        continue;
                    }
                    Ok(Some(Step::Corrupt)) => (off + 1, "corrupt record while reading; skipped"),
                };
                match self.past_damage(&cache, seg, off, from, last_seq, what) {
                    Ok(Some(n)) => off = n,
                    Ok(None) => break,
                    Err(key) => {
                        drop(cache);
                        let missing = Missing(key, key.1, key.1).from(first_block);
                        return Some(self.wait_for(missing, limit));
                    }
                }
            }
            // Nothing at or after `seq` in this segment: the next one, from its start.
            idx += 1;
            if idx >= self.segments.len() {
                return Some(Read::Skip(self.window_start()));
            }
        }
    }

    /// Whether `seg` may still be written to: records past its written end may be on their
    /// way, not damage.
    fn is_growing(&self, seg: &Segment) -> bool {
        seg.written_len < seg.planned_len
            || seg.format == Format::CURRENT
                && self.segments.last().is_some_and(|l| l.base == seg.base)
    }

    /// The record at `off` of `seg` (read up to its written end) from the cache: `None` when
    /// it is not all written yet, `Err` names a missing block.
    fn step_at(
        &self,
        cache: &Blocks,
        seg: &Segment,
        off: u64,
        seq: u64,
    ) -> Result<Option<Step>, Missing> {
        let (base, format, limit) = (seg.base, seg.format, seg.written_len);
        let one = |k: BlockKey| Missing(k, k.1, k.1);
        // A record inside one block (most): its body is a slice of the block.
        let (block, at, valid) = cache.tail_from(base, off).map_err(one)?;
        let here = &block[at..valid];
        let probe = format.probe_len();
        let frame = if here.len() >= probe {
            format.frame(here)
        } else {
            // The frame itself straddles two blocks.
            cache
                .with_bytes(base, off, probe, |b| format.frame(b))
                .map_err(one)?
        };
        let Some(frame) = frame else {
            return Ok(Some(Step::Corrupt));
        };
        let rec = frame.len;
        if off + rec as u64 > limit {
            // Not written yet, or (in a segment nothing more is written to) damage.
            return Ok((!self.is_growing(seg)).then_some(Step::Corrupt));
        }
        if format.frame_checks_itself() {
            if frame.seq < seq {
                // Its frame is intact: the next record starts right after it.
                return Ok(Some(Step::Before(rec, frame.seq)));
            }
        } else if seg
            .index
            .get(seg.index.partition_point(|&(_, o)| o as u64 <= off))
            .is_some_and(|&(_, next)| off + rec as u64 > next as u64)
        {
            // A version-1 length is not checked by itself; a record never runs past the next
            // index point (a record that scanning found valid), so this one is damaged, and
            // reading its blocks would be wasted.
            return Ok(Some(Step::Corrupt));
        }
        let body_at = format.body_at();
        let judge = |b: &[u8], body: &dyn Fn(&segment::View) -> Bytes| match format.view(b) {
            Viewed::Record(v, n) if v.seq >= seq => Step::Found(v.stored(body(&v)), n),
            Viewed::Record(v, n) => Step::Before(n, v.seq),
            _ => Step::Corrupt,
        };
        if rec <= here.len() {
            // A slice of the block; but a deferred message may wait for hours, so its body is
            // copied out rather than keep the block alive (once here, not by every channel).
            // So is a body from the growing end of the newest segment: that block is read
            // again, whole, each time a reader passes its valid part, and slices would keep
            // every one of those copies alive while their messages are in flight (several MiB
            // for a consumer with 5,000 in flight keeping up with `--mem-queue-size 0`).
            let tail = valid < BLOCK as usize && self.is_growing(seg);
            let body = |v: &segment::View| {
                if v.defer_until != 0 || tail {
                    Bytes::copy_from_slice(v.body)
                } else {
                    block.slice(at + body_at..at + rec)
                }
            };
            return Ok(Some(judge(&here[..rec], &body)));
        }
        // Straddling blocks: copied out once, joined, and the body is a slice of that. Every
        // missing block of the record is asked for at once (a record may be larger than the
        // whole cache).
        let (first, last) = (off / BLOCK, (off + rec as u64 - 1) / BLOCK);
        let joined = cache
            .joined(base, off, rec)
            .map_err(|k| Missing(k, first, last))?;
        let body = |_: &segment::View| joined.slice(body_at..);
        Ok(Some(judge(&joined, &body)))
    }

    /// Where reading goes on after damage at `off` of `seg` (a corrupt record, or a record in
    /// an unreadable block): the first valid record from `from` on, with a seq above
    /// `last_seq`. The search tries every offset up to the next index point (a record recovery
    /// found valid; no record runs past it), so only the damaged bytes are lost; it is
    /// remembered, so the next reader jumps straight there and the damage is logged once.
    /// `Ok(None)`: nothing valid up to the written end of a segment still written to (yet).
    /// `Err`: the search needs a block that is not cached.
    fn past_damage(
        &self,
        cache: &Blocks,
        seg: &Segment,
        off: u64,
        from: u64,
        last_seq: Option<u64>,
        what: &str,
    ) -> Result<Option<u64>, BlockKey> {
        let start = match seg.skips.borrow().get(&off) {
            Some(Skip::To(n)) => return Ok(Some(*n)),
            Some(Skip::Searching(at)) => (*at).max(from),
            None => from,
        };
        let limit = seg.written_len;
        let stop = seg
            .index
            .iter()
            .map(|(_, o)| *o as u64)
            .find(|&o| o >= from)
            .unwrap_or(limit)
            .min(limit);
        let growing = self.is_growing(seg);
        let bytes = CachedBytes {
            cache,
            base: seg.base,
            limit: stop,
            growing,
            first_past_end: Default::default(),
        };
        let (skip, found) = match segment::resync(&bytes, seg.format, start, stop, last_seq) {
            Ok(Some(n)) => (Skip::To(n), Some(n)),
            Ok(None) if stop < limit || !growing => (Skip::To(stop), Some(stop)),
            Ok(None) => (
                Skip::Searching(bytes.first_past_end.get().unwrap_or(stop)),
                None,
            ),
            Err((at, key)) => {
                seg.skips.borrow_mut().insert(off, Skip::Searching(at));
                return Err(key);
            }
        };
        let first_time = seg
            .skips
            .borrow_mut()
            .insert(off, skip)
            .is_none_or(|s| s != skip);
        if first_time {
            if let Skip::To(n) = skip {
                warn!(topic = %self.name, segment = %seg.path.display(), offset = off, resumed_at = n, lost_bytes = n - off, "{what}");
            }
        }
        Ok(found)
    }

    /// Asks for a missing block and the ones after it; the reader waits.
    fn wait_for(&self, Missing(key, from, to): Missing, limit: u64) -> Read {
        {
            let mut cache = self.blocks.borrow_mut();
            cache.want_awaited(key);
            // A reader needing more than two blocks (a large record, and the records before
            // it from where the reader started) asks for all of them in one round, cached ones
            // too, so that the round which brings the last cannot evict the first (a record
            // may be larger than the whole cache). Asking only for the missing ones let two
            // rounds evict each other's blocks forever.
            for n in from..=to {
                if to - from > 1 || !cache.has(key.0, n, limit) {
                    cache.want_awaited((key.0, n));
                }
            }
        }
        self.read_ahead(key.0, to, limit);
        Read::Wait
    }

    /// Asks for the blocks after block `n` of segment `base` that are not cached.
    fn read_ahead(&self, base: u64, n: u64, limit: u64) {
        let mut cache = self.blocks.borrow_mut();
        for k in n + 1..=n + blocks::READ_AHEAD {
            if k * BLOCK >= limit {
                break;
            }
            if !cache.has(base, k, limit) {
                cache.want((base, k));
            }
        }
    }
}
