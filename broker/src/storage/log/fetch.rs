//! Fetching the blocks readers wait for: [`fetch`] (the shard's fetcher) reads every wanted
//! block at once with direct I/O into the log's block cache; [`TopicLog::read_blocking`] does
//! the same with blocking I/O at start-up. A block whose reads keep failing becomes bad, and
//! readers pass it.
//!
//! Invariants: at most [`READ_FILES`] segments keep a file open for reading; a block is
//! trusted only up to its segment's written length when its read was issued.

use super::{DiskHint, Read, TopicLog};
use crate::storage::blocks::{self, BlockKey, BLOCK};
use crate::storage::file::SegFile;
use crate::storage::StorageError;
use bytes::Bytes;
use std::cell::RefCell;
use std::rc::Rc;
use tracing::warn;

/// Segment files a log keeps open for reading.
const READ_FILES: usize = 4;

/// Reads every block the log's readers asked for, all at once, with direct I/O; returns how
/// many arrived and how many failed. A block that cannot be read is given up (asked for again
/// by the next reader).
pub async fn fetch(log: &RefCell<TopicLog>) -> (usize, usize) {
    let (wanted, cuts) = {
        let l = log.borrow();
        let mut cache = l.blocks.borrow_mut();
        cache.begin_round();
        (cache.take_wanted(), l.cuts)
    };
    let mut reads = Vec::with_capacity(wanted.len());
    let mut failed = 0;
    for key in wanted {
        let file = match read_file(log, key.0).await {
            Ok(f) => f,
            Err(e) => {
                let l = log.borrow();
                warn!(topic = %l.name, segment_base = key.0, "cannot open for reading: {e}");
                l.blocks.borrow_mut().failed(key);
                failed += 1;
                continue;
            }
        };
        let Some((pos, size, valid)) = log.borrow().block_read(key, file.alignment()) else {
            log.borrow().blocks.borrow_mut().give_up(key);
            continue;
        };
        reads.push((
            key,
            valid,
            glommio::spawn_local(async move { file.read(pos, size).await }),
        ));
    }
    let mut arrived = 0;
    for (key, valid, read) in reads {
        let result = read.await;
        let l = log.borrow();
        let mut cache = l.blocks.borrow_mut();
        match result {
            // A block read before a truncation may hold records it cut: asked for again.
            Ok(data) if l.segment(key.0).is_some() && l.cuts == cuts => {
                cache.insert(key, data, valid);
                arrived += 1;
            }
            Ok(_) => cache.give_up(key),
            Err(e) => {
                warn!(topic = %l.name, segment_base = key.0, block = key.1, "segment read failed: {e}");
                cache.failed(key);
                failed += 1;
            }
        }
    }
    (arrived, failed)
}

/// The file to read segment `base` from: the newest segment's open file, else its own.
async fn read_file(log: &RefCell<TopicLog>, base: u64) -> Result<Rc<SegFile>, StorageError> {
    let path = {
        let l = log.borrow();
        let seg = l.live_segment(base)?;
        if let Some(f) = seg.file.as_ref().or(seg.rfile.borrow().as_ref()) {
            return Ok(f.clone());
        }
        seg.path.clone()
    };
    let file = Rc::new(SegFile::open(&path, false).await?);
    let l = log.borrow();
    if let Some(seg) = l.segment(base) {
        *seg.rfile.borrow_mut() = Some(file.clone());
        // A few stay open (readers move forward); a reader racing through a long backlog
        // must not hold a descriptor per segment.
        let mut open = l.read_files.borrow_mut();
        open.retain(|b| *b != base);
        open.push_back(base);
        while open.len() > READ_FILES {
            if let Some(old) = open.pop_front() {
                if let Some(s) = l.segment(old) {
                    *s.rfile.borrow_mut() = None;
                }
            }
        }
    }
    Ok(file)
}

impl TopicLog {
    /// How to read block `key`: its file offset, the read size (rounded up to `align`) and how
    /// many of the bytes read are valid. Bytes below the segment's written length were
    /// written before the read is issued, so the read sees them. `None`: the segment is gone,
    /// or nothing of that block is written.
    fn block_read(&self, key: BlockKey, align: u64) -> Option<(u64, usize, usize)> {
        let written = self.segment(key.0)?.written_len;
        let pos = key.1 * BLOCK;
        let len = BLOCK.min(written.checked_sub(pos).filter(|&n| n > 0)?);
        Some((pos, len.next_multiple_of(align) as usize, len as usize))
    }

    /// [`TopicLog::read`] that reads missing blocks at once, with blocking I/O: for start-up
    /// only, before the shard serves anything.
    pub fn read_blocking(&self, seq: u64) -> Read {
        for _ in 0..64 {
            match self.read(seq, DiskHint::default()) {
                Read::Wait => {}
                r => return r,
            }
            let wanted = {
                let mut cache = self.blocks.borrow_mut();
                cache.begin_round();
                cache.take_wanted()
            };
            for key in wanted {
                let (Some(seg), Some((pos, len, valid))) =
                    (self.segment(key.0), self.block_read(key, 1))
                else {
                    self.blocks.borrow_mut().give_up(key);
                    continue;
                };
                // Tried here up to BAD_AFTER times (a failed block is not asked for again
                // within RETRY_AFTER); then readers skip it.
                for _ in 0..blocks::BAD_AFTER {
                    let mut buf = vec![0u8; len];
                    let read = std::fs::File::open(&seg.path)
                        .and_then(|f| std::os::unix::fs::FileExt::read_exact_at(&f, &mut buf, pos));
                    match read {
                        Ok(()) => {
                            self.blocks
                                .borrow_mut()
                                .insert(key, Bytes::from(buf), valid);
                            break;
                        }
                        Err(e) => {
                            warn!(topic = %self.name, segment = %seg.path.display(), "cannot read: {e}");
                            self.blocks.borrow_mut().failed(key);
                        }
                    }
                }
            }
        }
        Read::End
    }
}
