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
//! With [`AckAt::Written`] (`--ack-after-write`) a publish is answered only once the write
//! holding its last body is done, as the broker answers under `--mem-queue-size 0`: the writer
//! takes the buffer being filled as soon as it is free (group commit: whatever publishes
//! arrived during the last write go in the next), and fdatasyncs once a buffer's worth has
//! been written since the last one (the broker syncs every `--sync-every` 2,500 messages).
//!
//! Invariants: a publish is answered once its bodies are in a buffer the writer will write
//! ([`AckAt::Kept`]), or once that buffer is written ([`AckAt::Written`]). Buffers are written
//! in the order they were handed to the writer, so the files hold the bodies in the order they
//! were kept, and the Nth buffer handed over is the Nth written. At most [`QUEUED`] full
//! buffers wait for the writer, and a publisher that fills another waits for it (memory stays
//! bounded: the buffer filling, those queued and the one being written, and the buffers of one
//! publish). If a write fails the writer stops, says why on stderr, and every later publish is
//! refused: the connection that sent it is closed.

use bytes::Bytes;
use futures_lite::future;
use glommio::channels::local_channel::{self, LocalReceiver, LocalSender};
use glommio::io::{DmaBuffer, DmaFile};
use glommio::sync::Semaphore;
use nsq_common::local_sync::Notify;
use std::cell::{Cell, RefCell};
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

/// Where and how a sink keeps what it is sent.
#[derive(Clone, Debug)]
pub struct KeepTo {
    /// The directory of its files (created if missing).
    pub dir: PathBuf,
    pub ack: AckAt,
}

/// When a publish is answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AckAt {
    /// Once its bodies are in a buffer the writer will write.
    Kept,
    /// Once the write holding its last body is done.
    Written,
}

/// What the writer has done, shared between the keeper and its writer task.
#[derive(Default)]
struct Progress {
    /// Buffers written so far.
    written: Cell<u64>,
    /// Notified at each buffer written.
    advanced: Notify,
    /// Notified when a publish left bodies in the buffer being filled ([`AckAt::Written`]).
    waiting: Notify,
    /// Set when the writer stopped on a failed write.
    stopped: Cell<bool>,
}

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
    ack: AckAt,
    /// Buffers handed to the writer so far (full ones sent, partial ones taken).
    handed: Cell<u64>,
    progress: Rc<Progress>,
}

impl Keeper {
    /// Starts the writer task of this executor (`executor` names its files) in `dir`.
    pub fn start(dir: &Path, executor: usize, ack: AckAt) -> Rc<Keeper> {
        let (to_writer, from_keepers) = local_channel::new_bounded(QUEUED);
        let progress = Rc::new(Progress::default());
        let keeper = Rc::new(Keeper {
            filling: RefCell::new(None),
            to_writer,
            in_order: Semaphore::new(1),
            ack,
            handed: Cell::new(0),
            progress: progress.clone(),
        });
        let writer = Writer {
            dir: dir.to_path_buf(),
            executor,
            file: None,
            files: 0,
            pos: 0,
            unsynced: 0,
            ack,
        };
        glommio::spawn_local(writer.run(from_keepers, Rc::downgrade(&keeper), progress)).detach();
        keeper
    }

    /// Appends each body after its length; waits while the writer is behind and, with
    /// [`AckAt::Written`], until the last body is written.
    pub async fn keep(&self, bodies: &[Bytes]) -> io::Result<()> {
        let last_buffer = {
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
                self.handed.set(self.handed.get() + 1);
            }
            if self.ack == AckAt::Kept {
                return Ok(());
            }
            let partial = matches!(&*self.filling.borrow(), Some(f) if f.len > 0);
            if partial {
                self.progress.waiting.notify();
            }
            self.handed.get() + u64::from(partial)
        };
        while self.progress.written.get() < last_buffer {
            if self.progress.stopped.get() {
                return Err(io::Error::other("the sink's writer has stopped"));
            }
            self.progress.advanced.changed().await;
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
            Some(f) if f.len > 0 => {
                self.handed.set(self.handed.get() + 1);
                filling.take()
            }
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
    /// Bytes written since the last fdatasync ([`AckAt::Written`]).
    unsynced: usize,
    ack: AckAt,
}

impl Writer {
    async fn run(
        mut self,
        from_keepers: LocalReceiver<Filled>,
        keeper: Weak<Keeper>,
        progress: Rc<Progress>,
    ) {
        loop {
            // A full buffer first; else the one being filled: at once when a publish waits
            // for its write (only `AckAt::Written` notifies `waiting`), else after IDLE_WRITE.
            let next = future::or(async { Some(from_keepers.recv().await) }, async {
                future::or(progress.waiting.notified(), async {
                    glommio::timer::sleep(IDLE_WRITE).await;
                })
                .await;
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
                progress.stopped.set(true);
                progress.advanced.notify();
                return;
            }
            progress.written.set(progress.written.get() + 1);
            progress.advanced.notify();
        }
    }

    /// Writes `f` (padded with zeros to a block) at the end of the current file, then
    /// fdatasyncs it (with [`AckAt::Written`], once [`WRITE`] bytes are unsynced); starts a new
    /// file first when the current one is full.
    async fn write(&mut self, mut f: Filled) -> io::Result<()> {
        if self.pos >= FILE_BYTES {
            if let Some(old) = self.file.take() {
                if self.unsynced > 0 {
                    old.fdatasync().await?;
                    self.unsynced = 0;
                }
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
        self.unsynced += size;
        if self.ack == AckAt::Kept || self.unsynced >= WRITE {
            file.fdatasync().await?;
            self.unsynced = 0;
        }
        Ok(())
    }
}
