//! Files an earlier run of the same topic left in the work dir (it was killed before closing
//! them), finished and moved to the output dir before the topic is consumed again.
//!
//! NSQ leaves such files where they are: with gzip or `--rotate-interval` it opens the next
//! `<REV>` beside them, otherwise it appends to them. Their records up to the last sync were
//! FINished, so a file left behind holds acknowledged messages that would never reach the
//! output dir. Here, when the work dir is separate, each leftover whose name this topic's
//! format gives ([`FilenameFormat::leftover_pattern`]) is cut back to what is complete (gzip:
//! the end of the last whole member; zstd: of the last whole frame whose checksum holds;
//! plain: the last `\n`), synced, and moved like a rotated
//! file. What is cut off was never synced, hence never FINished: the broker delivers it again.
//!
//! Invariant: nothing but whole gzip members, zstd frames (or whole lines) ever reaches the output dir; a
//! leftover whose name is taken in the output dir stays in the work dir (logged).

use crate::archive::file::exclusive_rename;
use crate::filename::FilenameFormat;
use std::fs::OpenOptions;
use std::io::{self, BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

/// Finishes and moves every leftover of `format` in `work_dir`; returns the files moved.
pub fn recover(
    topic: &str,
    work_dir: &Path,
    output_dir: &Path,
    format: &FilenameFormat,
) -> io::Result<Vec<PathBuf>> {
    let pattern = format.leftover_pattern();
    let mut found = Vec::new();
    walk(work_dir, Path::new(""), &mut found)?;
    let mut moved = Vec::new();
    for rel in found {
        let Some(name) = rel.to_str() else { continue };
        if !pattern.is_match(name) {
            continue;
        }
        let src = work_dir.join(&rel);
        let keep = complete_length(&src)?;
        let file = OpenOptions::new().write(true).open(&src)?;
        file.set_len(keep)?;
        file.sync_all()?;
        drop(file);
        if keep == 0 {
            tracing::info!(topic, file = %src.display(), "removing an empty leftover file");
            std::fs::remove_file(&src)?;
            continue;
        }
        let dst = output_dir.join(&rel);
        match exclusive_rename(&src, &dst) {
            Ok(()) => {
                tracing::info!(topic, src = %src.display(), dst = %dst.display(), bytes = keep, "moved a leftover file");
                moved.push(dst);
            }
            Err(e) => {
                tracing::error!(topic, src = %src.display(), dst = %dst.display(), error = %e, "cannot move a leftover file; left in the work dir");
            }
        }
    }
    Ok(moved)
}

/// Regular files under `dir`, as paths relative to the walk's start.
fn walk(dir: &Path, rel: &Path, out: &mut Vec<PathBuf>) -> io::Result<()> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let entry = entry?;
        let kind = entry.file_type()?;
        let rel = rel.join(entry.file_name());
        if kind.is_dir() {
            walk(&entry.path(), &rel, out)?;
        } else if kind.is_file() {
            out.push(rel);
        }
    }
    Ok(())
}

/// zstd's frame magic number, little-endian `0xFD2FB528`.
const ZSTD_MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];

/// How many leading bytes of the file are complete: whole gzip members for a gzip file
/// (magic `1f 8b`), whole zstd frames for a zstd file (its magic), else up to the last `\n`.
pub fn complete_length(path: &Path) -> io::Result<u64> {
    let mut f = std::fs::File::open(path)?;
    let mut magic = [0u8; 4];
    let mut n = 0;
    while n < magic.len() {
        match f.read(&mut magic[n..])? {
            0 => break,
            k => n += k,
        }
    }
    if n >= 2 && magic[..2] == [0x1f, 0x8b] {
        return gzip_complete_length(std::fs::File::open(path)?);
    }
    if n == 4 && magic == ZSTD_MAGIC {
        return zstd_complete_length(std::fs::File::open(path)?);
    }
    let mut reader = BufReader::new(std::fs::File::open(path)?);
    let (mut pos, mut last_newline) = (0u64, 0u64);
    loop {
        let buf = reader.fill_buf()?;
        if buf.is_empty() {
            return Ok(last_newline);
        }
        if let Some(i) = buf.iter().rposition(|&b| b == b'\n') {
            last_newline = pos + i as u64 + 1;
        }
        let len = buf.len();
        pos += len as u64;
        reader.consume(len);
    }
}

/// The end of the last whole gzip member in `file`.
fn gzip_complete_length(file: std::fs::File) -> io::Result<u64> {
    let mut reader = Counting {
        inner: BufReader::new(file),
        pos: 0,
    };
    let mut good = 0;
    loop {
        if reader.fill_buf()?.is_empty() {
            return Ok(good);
        }
        let mut member = flate2::bufread::GzDecoder::new(&mut reader);
        match io::copy(&mut member, &mut io::sink()) {
            Ok(_) => good = reader.pos,
            Err(_) => return Ok(good),
        }
    }
}

/// The end of the last whole zstd frame in `file` (decoded one frame at a time, which stops
/// exactly at the frame's end and checks its content checksum).
fn zstd_complete_length(file: std::fs::File) -> io::Result<u64> {
    let mut reader = Counting {
        inner: BufReader::new(file),
        pos: 0,
    };
    let mut good = 0;
    loop {
        if reader.fill_buf()?.is_empty() {
            return Ok(good);
        }
        let mut frame = match zstd::stream::read::Decoder::with_buffer(&mut reader) {
            Ok(d) => d.single_frame(),
            Err(_) => return Ok(good),
        };
        match io::copy(&mut frame, &mut io::sink()) {
            Ok(_) if reader.pos > good => good = reader.pos,
            _ => return Ok(good),
        }
    }
}

/// A `BufRead` that counts what was consumed: where a gzip member ended.
struct Counting<R> {
    inner: R,
    pos: u64,
}

impl<R: BufRead> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.pos += n as u64;
        Ok(n)
    }
}

impl<R: BufRead> BufRead for Counting<R> {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        self.inner.fill_buf()
    }
    fn consume(&mut self, amt: usize) {
        self.pos += amt as u64;
        self.inner.consume(amt);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::filename::FormatOptions;
    use flate2::write::GzEncoder;
    use std::io::Write;

    fn scratch(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("tools-leftover-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("scratch dir");
        dir
    }

    fn member(text: &str) -> Vec<u8> {
        let mut g = GzEncoder::new(Vec::new(), flate2::Compression::fast());
        g.write_all(text.as_bytes()).expect("gzip");
        g.finish().expect("gzip")
    }

    #[test]
    fn gzip_is_cut_after_the_last_whole_member_and_moved() {
        let dir = scratch("gz");
        let (work, out) = (dir.join("work"), dir.join("out"));
        std::fs::create_dir_all(&work).expect("work");
        let opts = FormatOptions {
            filename_format: "<TOPIC>.<HOST><REV>.<DATETIME>.log",
            host_identifier: "",
            datetime_format: "%Y",
            compressed_ext: ".gz",
            rotating: false,
            separate_work_dir: true,
        };
        let format = FilenameFormat::new(&opts, "t", "h", 1).expect("format");
        let (a, b, c) = (member("one\ntwo\n"), member("three\n"), member("four\n"));
        let mut bytes = [a.clone(), b.clone()].concat();
        bytes.extend_from_slice(&c[..c.len() - 5]); // a member cut short by a kill
        std::fs::write(work.join("t.h-000003.2026.log.gz"), &bytes).expect("write");
        std::fs::write(work.join("other.h-000000.2026.log.gz"), &a).expect("write");
        std::fs::write(work.join("t.h-000004.2026.log.gz"), &c[..3]).expect("write");

        let moved = recover("t", &work, &out, &format).expect("recover");
        assert_eq!(moved, [out.join("t.h-000003.2026.log.gz")]);
        let kept = std::fs::read(&moved[0]).expect("read");
        assert_eq!(kept, [a, b].concat());
        let mut text = String::new();
        flate2::read::MultiGzDecoder::new(&kept[..])
            .read_to_string(&mut text)
            .expect("valid gzip");
        assert_eq!(text, "one\ntwo\nthree\n");
        assert!(
            work.join("other.h-000000.2026.log.gz").exists(),
            "not this topic's"
        );
        assert!(
            !work.join("t.h-000004.2026.log.gz").exists(),
            "nothing whole: removed"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    fn frame(text: &str) -> Vec<u8> {
        let mut z = zstd::stream::write::Encoder::new(Vec::new(), 3).expect("zstd");
        z.include_checksum(true).expect("checksum");
        z.write_all(text.as_bytes()).expect("zstd");
        z.finish().expect("zstd")
    }

    #[test]
    fn zstd_is_cut_after_the_last_whole_frame() {
        let dir = scratch("zst");
        let f = dir.join("f.zst");
        let (a, b, c) = (
            frame("one\ntwo\n"),
            frame(""),
            frame(&"three\n".repeat(100)),
        );
        let whole = [a.clone(), b.clone(), c.clone()].concat();
        std::fs::write(&f, &whole).expect("write");
        assert_eq!(complete_length(&f).expect("len"), whole.len() as u64);
        for cut in [1, 4, c.len() / 2, c.len() - 1] {
            let mut bytes = [a.clone(), b.clone()].concat();
            bytes.extend_from_slice(&c[..c.len() - cut]);
            std::fs::write(&f, &bytes).expect("write");
            let keep = complete_length(&f).expect("len");
            assert_eq!(keep, (a.len() + b.len()) as u64, "cut {cut}");
            let text = zstd::stream::decode_all(&bytes[..keep as usize]).expect("valid zstd");
            assert_eq!(text, b"one\ntwo\n");
        }
        std::fs::write(&f, &a[..a.len() - 2]).expect("write");
        assert_eq!(complete_length(&f).expect("len"), 0, "nothing whole");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn plain_is_cut_after_the_last_line() {
        let dir = scratch("plain");
        let f = dir.join("f");
        std::fs::write(&f, b"a\nbb\nccc").expect("write");
        assert_eq!(complete_length(&f).expect("len"), 5);
        std::fs::write(&f, b"").expect("write");
        assert_eq!(complete_length(&f).expect("len"), 0);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
