//! A segment file on the shard's io_uring: direct I/O (`O_DIRECT`, glommio `DmaFile`) where the
//! file system has it, buffered I/O (glommio `BufferedFile`) where it does not.
//!
//! Each shard probes its data path once at start ([`probe`]); a file system that refuses
//! `O_DIRECT` (some FUSE or network file systems) gets buffered segment files, with a warning,
//! instead of a broker that cannot write. Callers see one interface: whole-block writes filled
//! in place, block reads returned as `Bytes`, fdatasync and truncate, each failing with a
//! [`StorageError`] that names the file.

use super::StorageError;
use bytes::Bytes;
use glommio::io::{BufferedFile, DmaFile, OpenOptions};
use std::cell::Cell;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use tracing::warn;

thread_local! {
    /// Whether this shard's segment files use direct I/O (decided by [`probe`]).
    static DIRECT: Cell<bool> = const { Cell::new(true) };
}

/// Direct I/O writes start and end on this boundary at least: a multiple of every logical
/// block size met in practice (a device with a larger one raises it), and the page size, so a
/// rewritten tail never straddles a 4 KiB physical sector.
const DIRECT_ALIGN: u64 = 4096;

/// An open segment file, and its path (for errors).
pub struct SegFile {
    io: Io,
    path: PathBuf,
}

enum Io {
    Direct(DmaFile),
    Buffered(BufferedFile),
}

impl SegFile {
    /// Opens `path` for reading, and for writing (created if missing) when `write`.
    pub async fn open(path: &Path, write: bool) -> Result<SegFile, StorageError> {
        let created = write && !path.exists();
        let io = SegFile::open_file(path, write)
            .await
            .map_err(|source| StorageError::Open {
                path: path.to_path_buf(),
                source,
            })?;
        if created {
            // The new segment's name: an fsync of the file alone does not cover it, and a
            // power loss would lose the whole segment however often its data was fsynced.
            if let Some(dir) = path.parent().map(Path::to_path_buf) {
                glommio::executor()
                    .spawn_blocking(move || super::sync_dir(&dir))
                    .await?;
            }
        }
        Ok(SegFile {
            io,
            path: path.to_path_buf(),
        })
    }

    async fn open_file(path: &Path, write: bool) -> std::io::Result<Io> {
        if !DIRECT.with(Cell::get) {
            let mut opts = OpenOptions::new();
            opts.read(true).write(write).create(write);
            return Ok(Io::Buffered(opts.buffered_open(path).await?));
        }
        // glommio's direct open calls statfs on the path after its openat and panics if that
        // fails: a topic deleted in between (its directory removed) would take the shard
        // down. So the file is opened here first and glommio opens it again through
        // /proc/self/fd, which stays valid while `held` is open, unlinked or not.
        let held = std::fs::OpenOptions::new()
            .read(true)
            .write(write)
            .create(write)
            .truncate(false)
            .open(path)?;
        let via = PathBuf::from(format!("/proc/self/fd/{}", held.as_raw_fd()));
        let target = if via.exists() {
            via
        } else {
            path.to_path_buf()
        };
        let file = OpenOptions::new()
            .read(true)
            .write(write)
            .dma_open(&target)
            .await?;
        drop(held);
        Ok(Io::Direct(file))
    }

    /// The path the file was opened at.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The boundary writes and reads keep to: whole blocks for direct I/O (the tail of the
    /// file is written again and padded, see `storage::log::flush`), none for buffered files,
    /// which are written exactly and never padded.
    pub fn alignment(&self) -> u64 {
        match &self.io {
            Io::Direct(f) => f.alignment().max(DIRECT_ALIGN),
            Io::Buffered(_) => 1,
        }
    }

    /// Writes `size` bytes at `pos`, filled by `fill` straight into the buffer the kernel
    /// reads from (for direct I/O an aligned one, from glommio's registered pool when it fits);
    /// returns the bytes written.
    pub async fn write_with(
        &self,
        size: usize,
        pos: u64,
        fill: impl FnOnce(&mut [u8]),
    ) -> Result<usize, StorageError> {
        let written = match &self.io {
            Io::Direct(f) => {
                let mut buf = f.alloc_dma_buffer(size);
                fill(buf.as_bytes_mut());
                f.write_rc_at(Rc::new(buf), pos).await
            }
            Io::Buffered(f) => {
                let mut buf = vec![0u8; size];
                fill(&mut buf);
                f.write_at(buf, pos).await
            }
        };
        written.map_err(|e| StorageError::Write {
            path: self.path.clone(),
            source: e.into(),
        })
    }

    /// Reads `size` bytes at `pos` (aligned for direct I/O), fewer at the end of the file.
    /// The result is a copy, so the I/O buffer returns to its pool at once.
    pub async fn read(&self, pos: u64, size: usize) -> Result<Bytes, StorageError> {
        let failed = |e: glommio::GlommioError<()>| StorageError::Read {
            path: self.path.clone(),
            source: e.into(),
        };
        let data = match &self.io {
            Io::Direct(f) => f.read_at_aligned(pos, size).await.map_err(failed)?,
            Io::Buffered(f) => f.read_at(pos, size).await.map_err(failed)?,
        };
        Ok(Bytes::copy_from_slice(&data))
    }

    pub async fn fdatasync(&self) -> Result<(), StorageError> {
        let synced = match &self.io {
            Io::Direct(f) => f.fdatasync().await,
            Io::Buffered(f) => f.fdatasync().await,
        };
        synced.map_err(|e| StorageError::Fsync {
            path: self.path.clone(),
            source: e.into(),
        })
    }

    pub async fn truncate(&self, len: u64) -> Result<(), StorageError> {
        let truncated = match &self.io {
            Io::Direct(f) => f.truncate(len).await,
            Io::Buffered(f) => f.truncate(len).await,
        };
        truncated.map_err(|e| StorageError::Truncate {
            path: self.path.clone(),
            source: e.into(),
        })
    }
}

/// Opens the probe file for direct I/O, writes a block and reads it back: some file systems
/// accept `O_DIRECT` at open and fail the I/O.
async fn direct_round_trip(path: &Path) -> std::io::Result<()> {
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .dma_open(path)
        .await?;
    let mut buf = f.alloc_dma_buffer(4096);
    buf.as_bytes_mut().fill(0x5a);
    f.write_rc_at(Rc::new(buf), 0).await?;
    let back = f.read_at_aligned(0, 4096).await?;
    let _ = f.close().await;
    if back.len() == 4096 && back.iter().all(|&b| b == 0x5a) {
        Ok(())
    } else {
        Err(std::io::Error::other("direct write did not read back"))
    }
}

/// Makes this thread's segment files buffered (tests of the fallback).
#[cfg(test)]
pub fn force_buffered() {
    DIRECT.with(|d| d.set(false));
}

/// Decides, once per shard, whether the data path takes direct I/O, and lets glommio probe the
/// device for polled I/O with a file that has data.
///
/// glommio probes a device once per thread with a read of the first file it opens for direct
/// I/O; a new, empty segment answers that read "successfully" on any device, so every later
/// direct I/O on that thread went to the polled ring, where reads fail with EOPNOTSUPP on a
/// device without poll queues (found on virtio-blk). A one-block file of our own makes the
/// probe real.
pub async fn probe(data_path: &Path, shard: usize) {
    let path = data_path.join(format!(".direct-io-probe-{shard}"));
    if let Err(e) = std::fs::write(&path, [0u8; 4096]) {
        warn!(path = %path.display(), "cannot write the direct I/O probe: {e}");
        return;
    }
    if let Err(e) = direct_round_trip(&path).await {
        warn!(data_path = %data_path.display(), "direct I/O unavailable ({e}); segment files use buffered I/O");
        DIRECT.with(|d| d.set(false));
    }
    let _ = std::fs::remove_file(&path);
}
