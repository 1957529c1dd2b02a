//! One topic's output file, used from a blocking thread: opening the next revision, writing
//! batches of records, rotating, syncing, closing and moving the finished file (NSQ's
//! `file_logger.go`, re-expressed).
//!
//! Invariants:
//! - [`OutputFile::run`] returns only after every record of the batch is written *and* synced
//!   (fdatasync) to the file it went to: a caller may FIN the batch's messages once it returns
//!   `Ok`. [`OutputFile::write_batch`] is its first half: it writes (and seals the gzip member
//!   or zstd frame) and hands back a [`ToSync`], whose [`ToSync::sync`] (on any thread,
//!   concurrently with later writes) is the second; the batch's messages may be FINished once
//!   that returns `Ok` (or at once when there is nothing to sync: a close synced it already).
//! - With gzip every sync ends the gzip member (a new one starts after it), so the file on
//!   disk is a valid gzip stream (concatenated members) after each sync; a rotation or a
//!   close finishes the member before the file is moved. zstd (`--compress zstd`) the same
//!   with zstd frames (each with its content checksum): concatenated frames are one valid
//!   zstd stream.
//! - A file leaves the work dir only when complete, by `link` + `unlink` (never replacing an
//!   existing file); a name taken in the output dir moves it to the next free `<REV>`.

use crate::archive::options::Compression;
use crate::filename::{with_rev, FilenameFormat};
use crate::strftime::Tm;
use flate2::write::GzEncoder;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// What the file needs from nsq_to_file's options.
#[derive(Debug, Clone)]
pub struct FileSettings {
    pub topic: String,
    pub output_dir: PathBuf,
    pub work_dir: PathBuf,
    pub compression: Compression,
    pub rotate_size: u64,
    pub rotate_interval: Duration,
    pub skip_empty_files: bool,
}

/// A batch of records for [`OutputFile::run`].
#[derive(Debug, Default)]
pub struct Batch {
    /// The records, each ending with `\n`.
    pub data: Vec<u8>,
    /// The end offset of each record in `data`.
    pub ends: Vec<usize>,
    /// The sync interval came round: rotate if due even without records (NSQ's ticker).
    pub tick: bool,
    /// Close the file after the batch (SIGHUP, or the end).
    pub close: bool,
}

enum Writer {
    Plain(File),
    Gzip(GzEncoder<File>),
    Zstd(zstd::stream::write::Encoder<'static, File>),
}

impl Writer {
    /// A writer of `compression` starting at the file's current end.
    fn new(file: File, compression: Compression) -> io::Result<Writer> {
        Ok(match compression {
            Compression::None => Writer::Plain(file),
            Compression::Gzip(level) => {
                Writer::Gzip(GzEncoder::new(file, flate2::Compression::new(level)))
            }
            Compression::Zstd(level) => {
                let mut z = zstd::stream::write::Encoder::new(file, level)?;
                z.include_checksum(true)?;
                Writer::Zstd(z)
            }
        })
    }

    /// Ends the gzip member or zstd frame (if any) and gives the file back.
    fn finish(self) -> io::Result<File> {
        match self {
            Writer::Plain(f) => Ok(f),
            Writer::Gzip(g) => g.finish(),
            Writer::Zstd(z) => z.finish(),
        }
    }
}

/// What a written batch still needs to be durable: an fdatasync of its file (a second
/// descriptor of it, so that it can run while the next batch is written).
pub struct ToSync(File);

impl ToSync {
    pub fn sync(self) -> io::Result<()> {
        self.0.sync_data()
    }
}

/// The open file (if any) and what rotation needs to know.
pub struct OutputFile {
    settings: FileSettings,
    format: FilenameFormat,
    writer: Option<Writer>,
    /// Relative path of the open file, `<REV>` filled in.
    path: Option<PathBuf>,
    /// The name (with `<REV>`) the open file was made from.
    filename: String,
    rev: u32,
    open_time: Instant,
    /// Bytes written (uncompressed, as NSQ counts) plus the size the file had when opened.
    filesize: u64,
    /// Bytes written since the last sync.
    unsynced: bool,
}

impl OutputFile {
    pub fn new(settings: FileSettings, format: FilenameFormat) -> OutputFile {
        OutputFile {
            settings,
            format,
            writer: None,
            path: None,
            filename: String::new(),
            rev: 0,
            open_time: Instant::now(),
            filesize: 0,
            unsynced: false,
        }
    }

    /// Writes `batch` (rotating as NSQ does: before a record when the name, the interval or
    /// the size says so), then syncs; closes after it when asked.
    pub fn run(&mut self, batch: &Batch) -> io::Result<()> {
        match self.write_batch(batch)? {
            Some(to_sync) => to_sync.sync(),
            None => Ok(()),
        }
    }

    /// [`OutputFile::run`] without the final fdatasync: what is left to sync, if anything.
    pub fn write_batch(&mut self, batch: &Batch) -> io::Result<Option<ToSync>> {
        let now = Tm::now_local();
        let name = self.format.name_at(&now);
        if !batch.ends.is_empty() {
            if self.needs_rotation(&name) {
                self.update_file(&name)?;
            }
        } else if batch.tick && self.needs_rotation(&name) {
            if self.settings.skip_empty_files {
                self.close()?;
            } else {
                self.update_file(&name)?;
            }
        }
        // data[..written] is in a file; data[..counted] is in `filesize`.
        let (mut written, mut counted) = (0, 0);
        for &end in &batch.ends {
            if self.over_size() {
                self.write(&batch.data[written..counted])?;
                written = counted;
                self.update_file(&name)?;
            }
            self.filesize += (end - counted) as u64;
            counted = end;
        }
        if written < batch.data.len() {
            self.write(&batch.data[written..])?;
        }
        if batch.close {
            // close() syncs everything (fsync) before moving the file.
            self.close()?;
            return Ok(None);
        }
        self.seal()
    }

    fn over_size(&self) -> bool {
        self.settings.rotate_size > 0 && self.filesize > self.settings.rotate_size
    }

    fn needs_rotation(&self, name: &str) -> bool {
        if self.writer.is_none() || name != self.filename {
            return true;
        }
        if !self.settings.rotate_interval.is_zero()
            && self.open_time.elapsed() > self.settings.rotate_interval
        {
            return true;
        }
        self.over_size()
    }

    /// Writes bytes whose size `run` counted.
    fn write(&mut self, data: &[u8]) -> io::Result<()> {
        self.unsynced = true;
        match &mut self.writer {
            Some(Writer::Plain(f)) => f.write_all(data),
            Some(Writer::Gzip(g)) => g.write_all(data),
            Some(Writer::Zstd(z)) => z.write_all(data),
            None => Err(io::Error::other("no open file")),
        }
    }

    /// Makes what was written durable: ends the gzip member or zstd frame (starting a new
    /// one), fdatasync.
    pub fn sync(&mut self) -> io::Result<()> {
        match self.seal()? {
            Some(to_sync) => to_sync.sync(),
            None => Ok(()),
        }
    }

    /// Ends the gzip member or zstd frame (starting a new one) so that the file is whole up to
    /// here; a handle to fdatasync it with, if anything was written since the last seal.
    fn seal(&mut self) -> io::Result<Option<ToSync>> {
        if !self.unsynced {
            return Ok(None);
        }
        let mut handle = None;
        if let Some(writer) = self.writer.take() {
            let f = writer.finish()?;
            handle = Some(ToSync(f.try_clone()?));
            self.writer = Some(Writer::new(f, self.settings.compression)?);
        }
        self.unsynced = false;
        Ok(handle)
    }

    /// Finishes the open file (gzip trailer or zstd frame end, fsync) and moves it to the
    /// output dir.
    pub fn close(&mut self) -> io::Result<()> {
        let Some(writer) = self.writer.take() else {
            return Ok(());
        };
        let file = writer.finish()?;
        file.sync_all()?;
        drop(file);
        self.unsynced = false;
        let Some(rel) = self.path.take() else {
            return Ok(());
        };
        if self.settings.work_dir == self.settings.output_dir {
            return Ok(());
        }
        let src = self.settings.work_dir.join(&rel);
        let dst = self.settings.output_dir.join(&rel);
        tracing::info!(topic = %self.settings.topic, src = %src.display(), dst = %dst.display(), "moving finished file");
        match exclusive_rename(&src, &dst) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
        for rev in self.rev + 1.. {
            let dst = self.settings.output_dir.join(with_rev(&self.filename, rev));
            tracing::warn!(topic = %self.settings.topic, dst = %dst.display(), "destination file already exists");
            match exclusive_rename(&src, &dst) {
                Ok(()) => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Closes the open file and opens the next one for `name` (NSQ's `updateFile`).
    fn update_file(&mut self, name: &str) -> io::Result<()> {
        self.close()?;
        if name != self.filename {
            self.rev = 0;
        } else {
            self.rev += 1;
        }
        self.filename = name.to_string();
        self.open_time = Instant::now();
        let s = &self.settings;
        let exclusive = s.compression != Compression::None || !s.rotate_interval.is_zero();
        loop {
            let rel = PathBuf::from(with_rev(name, self.rev));
            let abs = s.work_dir.join(&rel);
            make_parent(&abs)?;
            if s.work_dir != s.output_dir {
                let out = s.output_dir.join(&rel);
                make_parent(&out)?;
                if out.symlink_metadata().is_ok() {
                    tracing::warn!(topic = %s.topic, file = %out.display(), "output file already exists");
                    self.rev += 1;
                    continue;
                }
            }
            let mut open = OpenOptions::new();
            open.write(true).mode(0o666);
            if exclusive {
                open.create_new(true);
            } else {
                open.create(true).append(true);
            }
            let file = match open.open(&abs) {
                Ok(f) => f,
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                    tracing::warn!(topic = %s.topic, file = %abs.display(), "working file already exists");
                    self.rev += 1;
                    continue;
                }
                Err(e) => return Err(e),
            };
            tracing::info!(topic = %s.topic, file = %abs.display(), "opening");
            self.filesize = file.metadata()?.len();
            if s.rotate_size > 0 && self.filesize > s.rotate_size {
                self.rev += 1;
                continue;
            }
            self.writer = Some(Writer::new(file, s.compression)?);
            self.path = Some(rel);
            return Ok(());
        }
    }
}

fn make_parent(path: &Path) -> io::Result<()> {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => std::fs::create_dir_all(dir),
        _ => Ok(()),
    }
}

/// Moves `src` to `dst` unless `dst` exists (`link` then `unlink`, as NSQ).
pub fn exclusive_rename(src: &Path, dst: &Path) -> io::Result<()> {
    make_parent(dst)?;
    std::fs::hard_link(src, dst)?;
    std::fs::remove_file(src)
}
