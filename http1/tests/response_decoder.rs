//! Property tests for reading an HTTP response ([`http1::decode_response`]): any bytes
//! give an answer and never a panic; a response that is written reads back the same, taking
//! exactly its bytes; any cut short of its end asks for more bytes, or is truncated once the
//! peer has closed.

use http1::{decode_response, Limits, ReceivedResponse, ResponseError};
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::Index;

/// Small limits, so that the edges are reached often.
const LIMITS: Limits = Limits {
    max_header_bytes: 512,
    max_headers: 8,
    max_body: 256,
};

type Decoded = Result<Option<(ReceivedResponse, usize)>, ResponseError>;

/// What holds for every answer, whatever the input.
fn check_invariants(buf: &[u8], eof: bool, got: &Decoded) -> Result<(), TestCaseError> {
    match got {
        Ok(Some((r, used))) => {
            prop_assert!(*used <= buf.len(), "used {} of {}", used, buf.len());
            prop_assert!(r.body.len() <= LIMITS.max_body);
            prop_assert!(r.body.len() <= *used);
        }
        Ok(None) => prop_assert!(!eof, "Ok(None) although the peer closed"),
        Err(_) => {}
    }
    Ok(())
}

/// How the generated response delimits its body.
#[derive(Debug, Clone)]
enum Framing {
    Length,
    /// Chunk boundaries, as cut points into the body.
    Chunked(Vec<Index>),
    Close,
}

#[derive(Debug, Clone)]
struct Generated {
    interim: bool,
    http10: bool,
    status: u16,
    headers: Vec<(String, String)>,
    framing: Framing,
    body: Vec<u8>,
}

impl Generated {
    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        if self.interim {
            out.extend_from_slice(b"HTTP/1.1 100 Continue\r\n\r\n");
        }
        let version = if self.http10 { "1.0" } else { "1.1" };
        out.extend(format!("HTTP/{version} {} Whatever\r\n", self.status).as_bytes());
        for (n, v) in &self.headers {
            out.extend(format!("{n}: {v}\r\n").as_bytes());
        }
        match &self.framing {
            Framing::Length => {
                out.extend(format!("Content-Length: {}\r\n\r\n", self.body.len()).as_bytes());
                out.extend_from_slice(&self.body);
            }
            Framing::Chunked(cuts) => {
                out.extend_from_slice(b"Transfer-Encoding: chunked\r\n\r\n");
                let mut cuts: Vec<usize> =
                    cuts.iter().map(|i| i.index(self.body.len() + 1)).collect();
                cuts.push(0);
                cuts.push(self.body.len());
                cuts.sort_unstable();
                cuts.dedup();
                for w in cuts.windows(2) {
                    let chunk = &self.body[w[0]..w[1]];
                    out.extend(format!("{:x}\r\n", chunk.len()).as_bytes());
                    out.extend_from_slice(chunk);
                    out.extend_from_slice(b"\r\n");
                }
                out.extend_from_slice(b"0\r\n\r\n");
            }
            Framing::Close => {
                out.extend_from_slice(b"\r\n");
                out.extend_from_slice(&self.body);
            }
        }
        out
    }
}

fn generated() -> impl Strategy<Value = Generated> {
    (
        any::<bool>(),
        any::<bool>(),
        prop_oneof![Just(200u16), Just(404), Just(500), 200u16..=599],
        vec(
            ("X-[a-z]{1,8}", "[ -~]{0,20}").prop_map(|(n, v)| (n, v.trim().to_owned())),
            0..4,
        ),
        prop_oneof![
            Just(Framing::Length),
            vec(any::<Index>(), 0..6).prop_map(Framing::Chunked),
            Just(Framing::Close),
        ],
        vec(any::<u8>(), 0..=LIMITS.max_body),
    )
        .prop_filter("204 and 304 carry no body", |g| !matches!(g.2, 204 | 304))
        .prop_map(
            |(interim, http10, status, headers, framing, body)| Generated {
                interim,
                http10,
                status,
                headers,
                framing,
                body,
            },
        )
}

/// Bytes shaped like a response head, then anything: reaches the framing and chunk paths far
/// more often than uniform bytes do.
fn response_like() -> impl Strategy<Value = Vec<u8>> {
    let header = prop_oneof![
        Just(b"Content-Length: 5\r\n".to_vec()),
        Just(b"Content-Length: 0\r\n".to_vec()),
        Just(b"Content-Length: 999\r\n".to_vec()),
        Just(b"Content-Length: x\r\n".to_vec()),
        Just(b"Transfer-Encoding: chunked\r\n".to_vec()),
        Just(b"Transfer-Encoding: gzip\r\n".to_vec()),
        Just(b"Connection: close\r\n".to_vec()),
        vec(any::<u8>(), 0..24),
    ];
    let status = prop_oneof![
        Just(b"HTTP/1.1 200 OK\r\n".to_vec()),
        Just(b"HTTP/1.0 204 No Content\r\n".to_vec()),
        Just(b"HTTP/1.1 100 Continue\r\n\r\n".to_vec()),
        Just(b"HTTP/1.1 404\r\n".to_vec()),
    ];
    let tail = prop_oneof![
        vec(any::<u8>(), 0..64),
        vec(
            prop_oneof![
                Just(b"\r\n".to_vec()),
                Just(b"0\r\n".to_vec()),
                Just(b"5\r\nhello\r\n".to_vec()),
                Just(b"ff;x=y\r\n".to_vec()),
                vec(any::<u8>(), 0..8),
            ],
            0..8,
        )
        .prop_map(|v| v.concat()),
    ];
    (status, vec(header, 0..5), any::<bool>(), tail).prop_map(|(s, hs, blank, tail)| {
        let mut out = s;
        for h in hs {
            out.extend(h);
        }
        if blank {
            out.extend_from_slice(b"\r\n");
        }
        out.extend(tail);
        out
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    /// Any bytes: an answer, no panic; with the peer closed, never "need more".
    #[test]
    fn arbitrary_bytes_never_panic(buf in vec(any::<u8>(), 0..1024), eof in any::<bool>()) {
        let got = decode_response(&buf, eof, &LIMITS);
        check_invariants(&buf, eof, &got)?;
    }

    #[test]
    fn response_shaped_bytes_never_panic(buf in response_like(), eof in any::<bool>()) {
        let got = decode_response(&buf, eof, &LIMITS);
        check_invariants(&buf, eof, &got)?;
    }

    /// A written response with a byte or two replaced: an answer, no panic.
    #[test]
    fn mutated_responses_never_panic(
        g in generated(),
        flips in vec((any::<Index>(), any::<u8>()), 1..3),
        eof in any::<bool>(),
    ) {
        let mut buf = g.encode();
        for (at, byte) in flips {
            let i = at.index(buf.len());
            buf[i] = byte;
        }
        let got = decode_response(&buf, eof, &LIMITS);
        check_invariants(&buf, eof, &got)?;
    }

    /// A written response reads back the same, taking exactly its bytes, with or without what
    /// follows it; every cut short of its end needs more bytes (or, closed, is truncated).
    #[test]
    fn responses_round_trip(g in generated(), after in vec(any::<u8>(), 0..16), cut in any::<Index>()) {
        let raw = g.encode();
        let closes = matches!(g.framing, Framing::Close);
        let (r, used) = decode_response(&raw, closes, &LIMITS)
            .map_err(|e| TestCaseError::fail(format!("{e}")))?
            .ok_or_else(|| TestCaseError::fail("incomplete"))?;
        prop_assert_eq!(r.status, g.status);
        prop_assert_eq!(&r.body[..], &g.body[..]);
        prop_assert_eq!(used, raw.len());
        for (n, v) in &g.headers {
            prop_assert!(r.headers.iter().any(|(hn, hv)| hn == n && hv == v));
        }
        if !closes {
            let mut more = raw.clone();
            more.extend_from_slice(&after);
            let again = decode_response(&more, false, &LIMITS);
            prop_assert_eq!(again.map(|o| o.map(|(_, used)| used)), Ok(Some(raw.len())));
        }
        let cut = cut.index(raw.len());
        let short = &raw[..cut];
        if closes {
            // a close-delimited body is whatever came before the close, once the head is in
            prop_assert_eq!(decode_response(short, false, &LIMITS), Ok(None));
        } else {
            prop_assert_eq!(decode_response(short, false, &LIMITS), Ok(None));
            prop_assert_eq!(decode_response(short, true, &LIMITS), Err(ResponseError::Truncated));
        }
    }
}
