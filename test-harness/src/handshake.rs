//! The server side of a V2 client's first words, for the tests' fake brokers: the magic
//! `"  V2"` and the IDENTIFY command ([`read_identify`]).
//!
//! Invariant: it reads exactly the magic and the IDENTIFY command, never past the body, so what
//! follows on the socket (TLS, a compression layer, the next command) is left to the caller;
//! a stream that does not start so is an error.

use std::io::{Error, ErrorKind, Read};

/// What a V2 client sends first.
pub const MAGIC_V2: &[u8; 4] = b"  V2";

const IDENTIFY_LINE: &[u8] = b"IDENTIFY\n";

/// The largest IDENTIFY body read: a fake refuses more rather than allocate what a broken
/// length asks for.
const MAX_BODY: usize = 1 << 20;

/// The magic and IDENTIFY as the client sent them.
pub struct Identify {
    /// Every byte read: the magic, the command line, the length and the body.
    pub raw: Vec<u8>,
    /// The IDENTIFY body (JSON).
    pub body: Vec<u8>,
}

/// Reads the magic and the IDENTIFY command from `r`, and nothing past them.
pub fn read_identify(r: &mut impl Read) -> std::io::Result<Identify> {
    let mut head = [0u8; 4 + IDENTIFY_LINE.len() + 4];
    r.read_exact(&mut head)?;
    if &head[..4] != MAGIC_V2 {
        return Err(Error::new(ErrorKind::InvalidData, "not the V2 magic"));
    }
    if &head[4..4 + IDENTIFY_LINE.len()] != IDENTIFY_LINE {
        return Err(Error::new(
            ErrorKind::InvalidData,
            "first command is not IDENTIFY",
        ));
    }
    let mut len = [0u8; 4];
    len.copy_from_slice(&head[head.len() - 4..]);
    let len = u32::from_be_bytes(len) as usize;
    if len > MAX_BODY {
        return Err(Error::new(
            ErrorKind::InvalidData,
            "IDENTIFY body too large",
        ));
    }
    let mut body = vec![0u8; len];
    r.read_exact(&mut body)?;
    let mut raw = head.to_vec();
    raw.extend_from_slice(&body);
    Ok(Identify { raw, body })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_magic_and_identify_and_nothing_more() {
        let mut wire = b"  V2IDENTIFY\n\0\0\0\x02{}PUB t\n".to_vec();
        let mut r = &wire[..];
        let hello = read_identify(&mut r).expect("identify");
        assert_eq!(hello.body, b"{}");
        assert_eq!(hello.raw, &wire[..19]);
        assert_eq!(r, b"PUB t\n");
        wire[2] = b'V';
        wire[3] = b'1';
        assert!(read_identify(&mut &wire[..]).is_err());
        assert!(read_identify(&mut &b"  V2PUB t\n\0\0\0\0"[..]).is_err());
    }
}
