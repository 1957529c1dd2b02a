//! Writing a topic's log: [`flush`] writes the pending chunks with direct I/O through the
//! shard's io_uring, [`sync`] fdatasyncs the files written since the last sync, and
//! [`trim_padding`] cuts the zero padding of the last write at a clean stop.
//!
//! Invariants: a write starts at its segment's written length, with the partial block before
//! it (`Segment::tail`) written again in front, and covers whole aligned blocks; a failed
//! write or fsync loses nothing (the unwritten chunks and the unsynced files stay for the next
//! try, and `TopicLog::failed` holds the error until one succeeds); a destroyed log writes
//! nothing.

use super::plan::MAX_WRITE;
use super::{Chunk, TopicLog};
use crate::storage::file::SegFile;
use crate::storage::segment;
use crate::storage::StorageError;
use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;
use std::time::Instant;

/// Writes every pending chunk of `log`. On failure the unwritten part stays pending (written
/// again on the next flush) and the error is returned, so a failure never loses a chunk.
///
/// Segments are written with direct I/O (`O_DIRECT` through the shard's io_uring): the bytes
/// go from the write's own buffer to the device, not through page cache. The buffer comes
/// from glommio's registered pool (64 KiB a shard) when it fits there, from the heap
/// otherwise, where glibc reuses the freed ones (`sys::malloc_tuning`). Each write covers
/// whole aligned blocks: the partial block at the end of the file (`Segment::tail`) is
/// written again, with the same bytes, in front of the new records, and the last block is
/// padded with zeros (recovery knows such a tail; a clean stop trims it).
pub async fn flush(log: &RefCell<TopicLog>) -> Result<(), StorageError> {
    let result = flush_pending(log).await;
    let mut l = log.borrow_mut();
    if l.destroyed {
        // Deleted meanwhile: nothing left to write to, and nothing to retry.
        l.pending.clear();
        l.writing = 0;
        l.failed = None;
        return Ok(());
    }
    result
}

async fn flush_pending(log: &RefCell<TopicLog>) -> Result<(), StorageError> {
    let chunks = {
        let mut l = log.borrow_mut();
        // What the shard did not plan with its channels' floor: nothing below the start is
        // wanted.
        let start = l.start;
        l.plan(start);
        let chunks = std::mem::take(&mut l.pending);
        l.writing = chunks.iter().map(|c| c.len).sum();
        chunks
    };
    let mut chunks = VecDeque::from(chunks);
    while let Some(mut chunk) = chunks.pop_front() {
        let file = match segment_file(log, chunk.base).await {
            Ok(f) => f,
            Err(e) => {
                chunks.push_front(chunk);
                return Err(restore(log, chunks, e));
            }
        };
        if log.borrow().destroyed {
            // Deleted while its file was being opened (by path: the open may have reached a
            // directory of the same name made since). Nothing of it may be written.
            return Ok(());
        }
        let len = chunk.len;
        let mut written = 0usize;
        while written < len {
            if !chunk.seqs.is_empty() && (written > 0 || len > MAX_WRITE) {
                // Written in pieces (one record over MAX_WRITE, or a short write): from bytes.
                if let Err(e) = encode_seqs(&log.borrow(), &mut chunk) {
                    chunks.push_front(chunk);
                    return Err(restore(log, chunks, e));
                }
            }
            match write_piece(log, &file, &chunk, written).await {
                Ok(n) => written += n,
                Err(e) => {
                    chunk.head.drain(..written);
                    chunk.len -= written;
                    chunk.offset += written as u64;
                    chunks.push_front(chunk);
                    return Err(restore(log, chunks, e));
                }
            }
        }
        let mut l = log.borrow_mut();
        l.writing = l.writing.saturating_sub(len);
        l.bytes_written += len as u64;
        l.written_end = l.written_end.max(chunk.end_seq);
        l.unsynced += 1;
        if !l.dirty.iter().any(|f| Rc::ptr_eq(f, &file)) {
            l.dirty.push(file);
        }
    }
    let mut l = log.borrow_mut();
    l.failed = None;
    l.evict();
    Ok(())
}

/// Encodes the records of `chunk.seqs` from the window onto `chunk.head`: the chunk is then
/// bytes only, and can be written in pieces.
fn encode_seqs(log: &TopicLog, chunk: &mut Chunk) -> Result<(), StorageError> {
    for r in std::mem::take(&mut chunk.seqs) {
        for seq in r {
            let s = log.in_window(seq).ok_or_else(|| gone(log, seq))?;
            segment::encode_record(&mut chunk.head, s);
        }
    }
    Ok(())
}

/// A planned record no longer in the window (a broken invariant: nothing evicts unwritten
/// records).
fn gone(log: &TopicLog, seq: u64) -> StorageError {
    StorageError::NotInMemory {
        topic: log.name.clone(),
        seq,
    }
}

/// Writes `chunk`'s bytes from `from` on (at most [`MAX_WRITE`] of them) at the segment's
/// written length; returns how many of them are now in the file. A chunk still listing seqs
/// is written whole (`from` 0, at most [`MAX_WRITE`] bytes), its records encoded from the
/// window straight into the write's buffer.
async fn write_piece(
    log: &RefCell<TopicLog>,
    file: &Rc<SegFile>,
    chunk: &Chunk,
    from: usize,
) -> Result<usize, StorageError> {
    let align = file.alignment();
    let at = chunk.offset + from as u64;
    let take = (chunk.len - from).min(MAX_WRITE);
    let (start, tail, size) = {
        let l = log.borrow();
        let seg = l.live_segment(chunk.base)?;
        let tail = match &seg.tail {
            Some(t) if seg.written_len == at => t,
            _ => {
                return Err(StorageError::WriteNotAtEnd {
                    path: seg.path.clone(),
                    at,
                    end: seg.written_len,
                })
            }
        };
        for r in &chunk.seqs {
            if l.in_window(r.start).is_none() {
                return Err(gone(&l, r.start));
            }
            if r.end > l.head {
                return Err(gone(&l, r.end - 1));
            }
        }
        let start = at - tail.len() as u64;
        let total = tail.len() + take;
        let size = total.div_ceil(align as usize) * align as usize;
        (start, tail.clone(), size)
    };
    let data_end = at + take as u64;
    // The new tail: the bytes of the last, partial block, taken from the filled buffer.
    let tail_from = align_down(data_end, align).max(start);
    let mut new_tail = Vec::new();
    let fill = |b: &mut [u8]| {
        b[..tail.len()].copy_from_slice(&tail);
        let mut pos = tail.len();
        if chunk.seqs.is_empty() {
            b[pos..pos + take].copy_from_slice(&chunk.head[from..from + take]);
            pos += take;
        } else {
            b[pos..pos + chunk.head.len()].copy_from_slice(&chunk.head);
            pos += chunk.head.len();
            let l = log.borrow();
            let mut sealer = segment::RecordSealer::new();
            for seq in chunk.seqs.iter().flat_map(|r| r.clone()) {
                // Checked above, and nothing evicts unwritten records meanwhile.
                if let Some(s) = l.in_window(seq) {
                    let start = pos;
                    pos += segment::encode_unsealed_at(&mut b[pos..], s);
                    sealer.encoded(b, start);
                }
            }
            sealer.finish(b);
        }
        b[pos..].fill(0);
        new_tail.extend_from_slice(&b[(tail_from - start) as usize..(data_end - start) as usize]);
    };
    let n = file.write_with(size, start, fill).await?;
    let reached = (start + n.min(size) as u64).min(data_end);
    if reached <= at {
        return Err(StorageError::NothingWritten {
            path: file.path().to_path_buf(),
        });
    }
    if reached < data_end {
        // A short write (rare): it ends on a block boundary, so no partial block is left.
        new_tail.clear();
        if !reached.is_multiple_of(align) {
            return Err(StorageError::ShortWrite {
                path: file.path().to_path_buf(),
                reached,
            });
        }
    }
    let mut l = log.borrow_mut();
    if let Some(seg) = l.segment_mut(chunk.base) {
        seg.written_len = reached;
        seg.tail = Some(new_tail);
    }
    Ok((reached - at) as usize)
}

/// Puts unwritten chunks back in front of anything appended meanwhile, and records the error.
fn restore(log: &RefCell<TopicLog>, chunks: VecDeque<Chunk>, e: StorageError) -> StorageError {
    let mut l = log.borrow_mut();
    // Counted as pending again.
    l.writing = 0;
    let newer = std::mem::take(&mut l.pending);
    l.pending = chunks.into_iter().chain(newer).collect();
    l.failed = Some(e.to_string());
    e
}

async fn segment_file(log: &RefCell<TopicLog>, base: u64) -> Result<Rc<SegFile>, StorageError> {
    let path = {
        let l = log.borrow();
        let seg = l.live_segment(base)?;
        if let Some(f) = &seg.file {
            return Ok(f.clone());
        }
        seg.path.clone()
    };
    let file = SegFile::open(&path, true).await?;
    let align = file.alignment();
    let file = Rc::new(file);
    let mut l = log.borrow_mut();
    // Only the newest segment keeps its file open; older ones are read through mappings.
    for seg in l.segments.iter_mut() {
        if seg.base != base {
            seg.file = None;
        }
    }
    if let Some(seg) = l.segment_mut(base) {
        if seg.tail.is_none() {
            // A segment from before a restart: its last partial block, read once (at most one
            // block, from the page cache recovery just filled).
            let from = align_down(seg.written_len, align);
            let mut tail = vec![0u8; (seg.written_len - from) as usize];
            std::fs::File::open(&seg.path)
                .and_then(|f| std::os::unix::fs::FileExt::read_exact_at(&f, &mut tail, from))
                .map_err(|source| StorageError::Read {
                    path: path.clone(),
                    source,
                })?;
            seg.tail = Some(tail);
        }
        seg.file = Some(file.clone());
    }
    Ok(file)
}

fn align_down(v: u64, align: u64) -> u64 {
    v - v % align
}

/// Cuts the zero padding of the last direct write off the newest segment (a clean stop), so
/// that the file ends with its last record.
pub async fn trim_padding(log: &RefCell<TopicLog>) -> Result<(), StorageError> {
    let (file, len) = {
        let l = log.borrow();
        let Some(seg) = l.segments.last() else {
            return Ok(());
        };
        let Some(file) = seg.file.clone() else {
            return Ok(());
        };
        (file, seg.written_len)
    };
    file.truncate(len).await
}

/// fsyncs every file written since the last sync; on success everything written is durable.
pub async fn sync(log: &RefCell<TopicLog>) -> Result<(), StorageError> {
    let (files, end) = {
        let mut l = log.borrow_mut();
        (std::mem::take(&mut l.dirty), l.written_end)
    };
    for f in &files {
        if let Err(e) = f.fdatasync().await {
            let mut l = log.borrow_mut();
            l.dirty.extend(files.iter().cloned());
            l.failed = Some(e.to_string());
            return Err(e);
        }
    }
    let mut l = log.borrow_mut();
    // A truncation during the fsync lowered `written_end`: what it cut is not synced.
    let end = end.min(l.written_end);
    l.synced_end = l.synced_end.max(end);
    if l.replicated {
        // Served: the replica asks again while its durable end is behind its end.
        l.sync_requested = false;
        l.synced_unreported = true;
    }
    l.unsynced = 0;
    l.last_sync = Instant::now();
    Ok(())
}
