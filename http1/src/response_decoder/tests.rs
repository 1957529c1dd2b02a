//! Unit tests of the response reader.

use super::*;
use crate::*;

const RESPONSE_LIMITS: Limits = Limits {
    max_header_bytes: 1024,
    max_headers: 16,
    max_body: 64,
};

fn response(bytes: &[u8], eof: bool) -> Result<Option<(ReceivedResponse, usize)>, ResponseError> {
    decode_response(bytes, eof, &RESPONSE_LIMITS)
}

fn complete(bytes: &[u8], eof: bool) -> (ReceivedResponse, usize) {
    match response(bytes, eof) {
        Ok(Some(r)) => r,
        other => panic!("expected a response, got {other:?}"),
    }
}

#[test]
fn response_with_content_length() {
    let raw = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}";
    for eof in [false, true] {
        let (r, used) = complete(raw, eof);
        assert_eq!(r.version, Version::Http11);
        assert_eq!(r.status, 200);
        assert_eq!(r.header("content-type"), Some("application/json"));
        assert_eq!(&r.body[..], b"{}");
        assert_eq!(used, raw.len());
    }
    // what follows the body is not taken
    let mut two = raw.to_vec();
    two.extend_from_slice(b"HTTP/1.1 204 No Content\r\n\r\n");
    let (r, used) = complete(&two, false);
    assert_eq!(&r.body[..], b"{}");
    assert_eq!(used, raw.len());
    let (r, used) = complete(&two[used..], false);
    assert_eq!((r.status, used), (204, 27));
    // no reason phrase, HTTP/1.0, a 404 with its body
    let (r, _) = complete(b"HTTP/1.0 404\r\nContent-Length: 1\r\n\r\nx", false);
    assert_eq!(
        (r.version, r.status, &r.body[..]),
        (Version::Http10, 404, &b"x"[..])
    );
}

#[test]
fn partial_responses_need_more_bytes_or_are_truncated() {
    let full: &[&[u8]] = &[
        b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc",
    ];
    for full in full {
        for cut in 0..full.len() {
            assert_eq!(response(&full[..cut], false), Ok(None), "cut {cut}");
            assert_eq!(
                response(&full[..cut], true),
                Err(ResponseError::Truncated),
                "cut {cut}"
            );
        }
        let (r, used) = complete(full, false);
        assert_eq!((&r.body[..], used), (&b"abc"[..], full.len()));
    }
}

#[test]
fn chunked_responses() {
    let raw = b"HTTP/1.1 200 OK\r\ntransfer-encoding: Chunked\r\n\r\n3;ext=1\r\nabc\r\nA\r\n0123456789\r\n0\r\nTrailer: x\r\n\r\nrest";
    let (r, used) = complete(raw, false);
    assert_eq!(&r.body[..], b"abc0123456789");
    assert_eq!(used, raw.len() - 4);
    let (r, _) = complete(
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        false,
    );
    assert!(r.body.is_empty());
}

#[test]
fn a_body_without_length_runs_to_the_close() {
    let raw = b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nall of it";
    assert_eq!(response(raw, false), Ok(None));
    let (r, used) = complete(raw, true);
    assert_eq!((&r.body[..], used), (&b"all of it"[..], raw.len()));
    let (r, _) = complete(b"HTTP/1.1 200 OK\r\n\r\n", true);
    assert!(r.body.is_empty());
}

#[test]
fn bodiless_statuses_and_interim_responses() {
    for raw in [
        &b"HTTP/1.1 204 No Content\r\n\r\n"[..],
        b"HTTP/1.1 304 Not Modified\r\nContent-Length: 10\r\n\r\n",
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\n\r\n",
    ] {
        let (r, used) = complete(raw, false);
        assert!(r.body.is_empty());
        assert_eq!(used, raw.len());
    }
    let raw = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 102 Processing\r\n\r\nHTTP/1.1 500 Internal Server Error\r\nContent-Length: 2\r\n\r\nno";
    let (r, used) = complete(raw, false);
    assert_eq!((r.status, &r.body[..], used), (500, &b"no"[..], raw.len()));
}

#[test]
fn malformed_responses_are_refused() {
    let malformed = |raw: &[u8]| {
        for eof in [false, true] {
            assert!(
                matches!(response(raw, eof), Err(ResponseError::Malformed(_))),
                "{} -> {:?}",
                String::from_utf8_lossy(raw),
                response(raw, eof)
            );
        }
    };
    malformed(b"garbage");
    malformed(b"garbage\r\n\r\n");
    malformed(b"GET / HTTP/1.1\r\n\r\n");
    malformed(b"HTTP/2.0 200 OK\r\n\r\n");
    malformed(b"HTTP/1.1 abc OK\r\n\r\n");
    malformed(b"HTTP/1.1 \xff\xfe\r\n\r\n");
    malformed(b"HTTP/1.1 200 OK\r\nBad Header\r\n\r\n");
    malformed(b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n{}");
    malformed(b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n");
    malformed(b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab");
    malformed(b"HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999999\r\n\r\n");
    malformed(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n");
    malformed(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n");
    malformed(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabXX");
    assert_eq!(
        response(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
            false
        ),
        Err(ResponseError::UnsupportedTransferEncoding)
    );
    // the same Content-Length twice is fine
    let (r, _) = complete(
        b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx",
        false,
    );
    assert_eq!(&r.body[..], b"x");
}

#[test]
fn response_limits() {
    let too_large = |raw: &[u8], eof: bool| {
        assert_eq!(
            response(raw, eof),
            Err(ResponseError::BodyTooLarge),
            "{raw:?}"
        );
    };
    // refused from the head alone
    too_large(b"HTTP/1.1 200 OK\r\nContent-Length: 65\r\n\r\n", false);
    too_large(
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n41\r\n",
        false,
    );
    let mut close = b"HTTP/1.1 200 OK\r\n\r\n".to_vec();
    close.extend([b'a'; 64]);
    assert!(response(&close, true).is_ok());
    close.push(b'a');
    too_large(&close, false);
    too_large(&close, true);
    let mut long = b"HTTP/1.1 200 OK\r\nX: ".to_vec();
    long.extend(vec![b'a'; 2000]);
    assert_eq!(response(&long, false), Err(ResponseError::HeadersTooLarge));
    long.extend(b"\r\n\r\n");
    assert_eq!(response(&long, false), Err(ResponseError::HeadersTooLarge));
    let mut many = b"HTTP/1.1 200 OK\r\n".to_vec();
    for i in 0..20 {
        many.extend(format!("H{i}: v\r\n").as_bytes());
    }
    many.extend(b"\r\n");
    assert_eq!(response(&many, false), Err(ResponseError::HeadersTooLarge));
}

#[test]
fn response_error_texts() {
    assert_eq!(
        ResponseError::Malformed("bad chunk size").as_str(),
        "bad chunk size"
    );
    assert_eq!(
        ResponseError::Truncated.to_string(),
        "bad HTTP response: connection closed before the end of the response"
    );
}
