//! This machine's host name: what the broker announces to lookups and in `/info`, what the
//! lookup and the admin UI report. Never empty: `localhost` when the kernel gives none.

/// The machine's host name, as Go's `os.Hostname` gives it (`localhost` if it cannot be read).
pub fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the pointer and length describe `buf`, which outlives the call; gethostname
    // writes at most `buf.len()` bytes.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return "localhost".to_owned();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    let name = String::from_utf8_lossy(&buf[..end]).trim().to_owned();
    if name.is_empty() {
        "localhost".to_owned()
    } else {
        name
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn hostname_is_the_kernels() {
        let kernel = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_owned())
            .unwrap_or_default();
        let name = super::hostname();
        assert!(!name.is_empty());
        if !kernel.is_empty() {
            assert_eq!(name, kernel);
        }
    }
}
