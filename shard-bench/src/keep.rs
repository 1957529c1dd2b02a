//! The sink's disk (`shard-bench sink --data-path DIR`): the ceiling of a program on this
//! runtime that keeps on disk what it is sent, as a broker keeps a topic without channels.
//!
//! Every published body is appended, after its length (4 bytes, big-endian), to a 1 MiB
//! buffer for direct I/O. A full buffer goes to the executor's writer task, which writes it
//! with `O_DIRECT` on the executor's io_uring (glommio `DmaFile`, as the broker's segment
//! files) and fdatasyncs the file after each write, as the broker does after each flush round
//! under nsqd's default `--sync-every`. When no full buffer has come for [`IDLE_WRITE`], the
//! one being filled is written as it is, padded to a block. Files are `sink-E-N.dat`
//! (executor E, the Nth file), a new one every [`FILE_BYTES`].
//!
//! It does less than any broker must: no record header, id, timestamp or crc, no index, no
//! window of unwritten messages to deliver from. So a broker's rate on a topic kept on disk is
//! at most this sink's, measured the same way.
//!
//! Invariants: a publish is answered once its bodies are in a buffer the writer will write.
//! Buffers are written in the order they were filled, so the files hold the bodies in the
//! order they were kept. At most [`QUEUED`] full buffers wait for the writer, and a publisher
//! that fills another waits for it (memory stays bounded: the buffer filling, those queued and
//! the one being written, and the buffers of one publish). If a write fails the writer stops,
//! says why on stderr, and every later publish is refused: the connection that sent it is
//! closed.

use bytes::Bytes;
use futures_lite::future;
use glommio::channels::local_channel::{self, LocalReceiver, LocalSender};
use glommio::io::{DmaBuffer, DmaFile};
use glommio::sync::Semaphore;
use std::cell::RefCell;
use std::io;
use std::path::{Path, PathBuf};
use std::rc::{Rc, Weak};
use std::time::Duration;

/// The size of a direct write: the broker's largest.
pub const WRITE: usize = 1 << 20;
/// Full buffers that may wait for the writer before a publisher waits.
pub const QUEUED: usize = 1;
/// A file's size before the next one starts (nsqd's default `--max-bytes-per-file`).
pub const FILE_BYTES: u64 = 100 << 20;
/// How long a buffer that is not full waits before it is written anyway.
pub const IDLE_WRITE: Duration = Duration::from_millis(10);
/// Writes start and end on this boundary.
const ALIGN: usize = 4096;

/// A buffer and how much of it is filled.
struct Filled {
    buf: DmaBuffer,
    len: usize,
}

/// One executor's disk: the buffer being filled and the way to its writer.
pub struct Keeper {
    filling: RefCell<Option<Filled>>,
    to_writer: LocalSender<Filled>,
    /// Held from a publish's first byte appended to its last buffer handed over, so buffers
    /// reach the writer in the order they were filled.
    in_order: Semaphore,
}

impl Keeper {
    /// Starts the writer task of this executor (`executor` names its files) in `dir`.
    pub fn start(dir: &Path, executor: usize) -> Rc<Keeper> {
        let (to_writer, from_keepers) = local_channel::new_bounded(QUEUED);
        let keeper = Rc::new(Keeper {
            filling: RefCell::new(None),
            to_writer,
            in_order: Semaphore::new(1),
        });
        let writer = Writer {
            dir: dir.to_path_buf(),
            executor,
            file: None,
            files: 0,
            pos: 0,
        };
        glommio::spawn_local(writer.run(from_keepers, Rc::downgrade(&keeper))).detach();
        keeper
    }

    /// Appends each body after its length; waits while the writer is behind.
    pub async fn keep(&self, bodies: &[Bytes]) -> io::Result<()> {
        let _turn = self
            .in_order
            .acquire_permit(1)
            .await
            .map_err(|e| io::Error::other(e.to_string()))?;
        let mut full = Vec::new();
        for body in bodies {
            let len = u32::try_from(body.len()).unwrap_or(u32::MAX).to_be_bytes();
            self.append(&len, &mut full);
            self.append(body, &mut full);
        }
        for buf in full {
            if self.to_writer.send(buf).await.is_err() {
                return Err(io::Error::other("the sink's writer has stopped"));
            }
        }
        Ok(())
    }

    /// Copies `bytes` into the buffer being filled; each buffer that fills goes to `full`.
    fn append(&self, mut bytes: &[u8], full: &mut Vec<Filled>) {
        let mut filling = self.filling.borrow_mut();
        while !bytes.is_empty() {
            let f = filling.get_or_insert_with(|| Filled {
                buf: glommio::allocate_dma_buffer(WRITE),
                len: 0,
            });
            let n = (WRITE - f.len).min(bytes.len());
            f.buf.as_bytes_mut()[f.len..f.len + n].copy_from_slice(&bytes[..n]);
            f.len += n;
            bytes = &bytes[n..];
            if f.len == WRITE {
                full.extend(filling.take());
            }
        }
    }

    /// The buffer being filled, if it holds anything and no publish is handing buffers over
    /// (its full ones go first).
    fn take_partial(&self) -> Option<Filled> {
        let _turn = self.in_order.try_acquire_permit(1).ok()?;
        let mut filling = self.filling.borrow_mut();
        match &*filling {
            Some(f) if f.len > 0 => filling.take(),
            _ => None,
        }
    }
}

/// The writer task's state: the file it appends to.
struct Writer {
    dir: PathBuf,
    executor: usize,
    file: Option<DmaFile>,
    files: u64,
    pos: u64,
}

impl Writer {
    async fn run(mut self, from_keepers: LocalReceiver<Filled>, keeper: Weak<Keeper>) {
        loop {
            let next = future::or(async { Some(from_keepers.recv().await) }, async {
                glommio::timer::sleep(IDLE_WRITE).await;
                None
            })
            .await;
            let buf = match next {
                Some(Some(full)) => full,
                Some(None) => return,
                None => match keeper.upgrade().and_then(|k| k.take_partial()) {
                    Some(partial) => partial,
                    None if keeper.strong_count() == 0 => return,
                    None => continue,
                },
            };
            if let Err(e) = self.write(buf).await {
                eprintln!(
                    "shard-bench: the sink stops keeping: {}: {e}",
                    self.dir.display()
                );
                return;
            }
        }
    }

    /// Writes `f` (padded with zeros to a block) at the end of the current file, then
    /// fdatasyncs it; starts a new file first when the current one is full.
    async fn write(&mut self, mut f: Filled) -> io::Result<()> {
        if self.pos >= FILE_BYTES {
            if let Some(old) = self.file.take() {
                old.close().await?;
            }
        }
        let file = match self.file.take() {
            Some(file) => file,
            None => {
                self.files += 1;
                self.pos = 0;
                let name = format!("sink-{}-{}.dat", self.executor, self.files);
                DmaFile::create(self.dir.join(name)).await?
            }
        };
        let file = self.file.insert(file);
        let size = f.len.div_ceil(ALIGN) * ALIGN;
        f.buf.as_bytes_mut()[f.len..size].fill(0);
        f.buf.trim_to_size(size);
        let written = file.write_at(f.buf, self.pos).await?;
        if written != size {
            return Err(io::Error::other(format!(
                "short write: {written} of {size} bytes"
            )));
        }
        self.pos += size as u64;
        file.fdatasync().await?;
        Ok(())
    }
}
