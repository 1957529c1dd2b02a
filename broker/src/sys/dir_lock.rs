//! An exclusive `flock` on a directory, as nsqd takes on its data path: the broker holds one
//! on `--data-path` for its whole run, and the nsqd import takes one on the nsqd directory it
//! reads (a running nsqd holds it) and on the data path it writes. The kernel drops the lock
//! when the descriptor is closed or the process ends, however it ends.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::Path;

/// Why a directory could not be locked.
#[derive(Debug)]
pub enum LockError {
    /// Another process holds the lock.
    Held,
    Io(std::io::Error),
}

/// Opens `dir` and takes the lock without waiting; the lock lasts as long as the file.
pub fn lock(dir: &Path) -> Result<File, LockError> {
    let f = File::open(dir).map_err(LockError::Io)?;
    // SAFETY: flock on a descriptor this function owns; no memory is passed.
    let rc = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc != 0 {
        let e = std::io::Error::last_os_error();
        return Err(if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
            LockError::Held
        } else {
            LockError::Io(e)
        });
    }
    Ok(f)
}
