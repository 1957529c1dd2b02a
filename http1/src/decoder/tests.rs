//! Unit tests of the request decoder and the query string.

use super::*;
use crate::test_util::*;
use crate::*;
use bytes::{BufMut, BytesMut};

#[test]
fn get_with_query_and_keep_alive() {
    let r = request(b"GET /lookup?topic=a%20b&x=1&x=2 HTTP/1.1\r\nHost: h\r\n\r\n");
    assert_eq!(r.head.method(), "GET");
    assert_eq!(r.head.path(), "/lookup");
    assert_eq!(r.head.version, Version::Http11);
    assert!(r.head.keep_alive);
    assert_eq!(r.head.header("host").as_deref(), Some("h"));
    let q = r.head.query().unwrap();
    assert_eq!(q.get("topic"), Some("a b"));
    assert_eq!(q.get_all("x").collect::<Vec<_>>(), ["1", "2"]);
    assert_eq!(q.get("nope"), None);
    assert!(r.body.is_empty());
}

/// A request with `n` headers `X-i: i`.
fn with_headers(n: usize) -> Vec<u8> {
    let mut r = b"GET / HTTP/1.1\r\n".to_vec();
    for i in 0..n {
        r.extend_from_slice(format!("X-{i}: {i}\r\n").as_bytes());
    }
    r.extend_from_slice(b"\r\n");
    r
}

#[test]
fn header_count_limit_on_stack_and_beyond() {
    for (max, n, fits) in [
        (16, 16, true),
        (16, 17, false),
        (300, 200, true),
        (300, 301, false),
    ] {
        let mut d = RequestDecoder::new(Limits {
            max_header_bytes: 1 << 20,
            max_headers: max,
            max_body: 64,
        });
        let got = d.decode(&mut BytesMut::from(&with_headers(n)[..]));
        match got {
            Ok(Decoded::Request(r)) if fits => {
                assert_eq!(r.head.headers().len(), n);
                assert_eq!(
                    r.head.header(&format!("x-{}", n - 1)).as_deref(),
                    Some(&*format!("{}", n - 1))
                );
            }
            Err(HttpError::HeadersTooLarge) if !fits => {}
            other => panic!("max {max}, {n} headers: {other:?}"),
        }
    }
}

#[test]
fn connection_rules() {
    assert!(
        !request(b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n")
            .head
            .keep_alive
    );
    assert!(!request(b"GET / HTTP/1.0\r\n\r\n").head.keep_alive);
    assert!(
        request(b"GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n")
            .head
            .keep_alive
    );
    assert!(
        !request(b"GET / HTTP/1.1\r\nConnection: keep-alive, close\r\n\r\n")
            .head
            .keep_alive
    );
}

#[test]
fn content_length_body_and_pipelining() {
    let mut buf = BytesMut::from(
        &b"POST /pub?topic=t HTTP/1.1\r\nContent-Length: 5\r\n\r\nhelloGET /ping HTTP/1.1\r\n\r\n"
            [..],
    );
    let mut d = decoder();
    match d.decode(&mut buf) {
        Ok(Decoded::Request(r)) => assert_eq!(&r.body[..], b"hello"),
        other => panic!("{other:?}"),
    }
    match d.decode(&mut buf) {
        Ok(Decoded::Request(r)) => assert_eq!(r.head.path(), "/ping"),
        other => panic!("{other:?}"),
    }
    assert!(buf.is_empty());
    assert_eq!(d.decode(&mut buf), Ok(Decoded::Incomplete));
}

#[test]
fn partial_requests_consume_nothing() {
    let full = b"POST /x HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc";
    for cut in 0..full.len() {
        let mut buf = BytesMut::from(&full[..cut]);
        assert_eq!(
            decoder().decode(&mut buf),
            Ok(Decoded::Incomplete),
            "cut {cut}"
        );
        assert_eq!(buf.len(), cut);
    }
}

#[test]
fn chunked_bodies() {
    let r = request(
        b"POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3;ext=1\r\nabc\r\nA\r\n0123456789\r\n0\r\nTrailer: x\r\n\r\n",
    );
    assert_eq!(&r.body[..], b"abc0123456789");
    let full = b"POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nab\r\n0\r\n\r\n";
    for cut in 0..full.len() {
        assert_eq!(
            decode_one(&full[..cut]),
            Ok(Decoded::Incomplete),
            "cut {cut}"
        );
    }
    assert!(matches!(
        decode_one(b"POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"),
        Err(HttpError::Malformed(_))
    ));
    assert!(matches!(
        decode_one(b"POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabXX"),
        Err(HttpError::Malformed(_))
    ));
    assert!(matches!(
        decode_one(b"POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n41\r\n"),
        Err(HttpError::BodyTooLarge(_))
    ));
}

/// A body of many tiny chunks that arrives a byte at a time is read as it comes (each
/// read resumes where the last stopped) and gives the same body; the next request on
/// the connection starts afresh.
#[test]
fn chunked_bodies_read_a_byte_at_a_time() {
    let mut wire = b"POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
    let mut want = Vec::new();
    for i in 0..3000u32 {
        let b = b'a' + (i % 26) as u8;
        wire.extend_from_slice(b"1\r\n");
        wire.push(b);
        wire.extend_from_slice(b"\r\n");
        want.push(b);
    }
    wire.extend_from_slice(b"0\r\nX-Trailer: 1\r\n\r\n");
    wire.extend_from_slice(
        b"POST /y HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n",
    );
    let mut d = RequestDecoder::new(Limits {
        max_header_bytes: 1024,
        max_headers: 16,
        max_body: 3000,
    });
    let mut buf = BytesMut::new();
    let mut got = Vec::new();
    for &byte in &wire {
        buf.put_u8(byte);
        match d.decode(&mut buf) {
            Ok(Decoded::Request(r)) => {
                got.push(r);
                assert!(d.is_idle());
            }
            Ok(Decoded::Incomplete) => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(got.len(), 2);
    assert_eq!(&got[0].body[..], &want[..]);
    assert_eq!(got[1].head.path(), "/y");
    assert_eq!(&got[1].body[..], b"ok");
    assert!(buf.is_empty());
}

#[test]
fn malformed_requests_are_refused() {
    for bad in [
        &b"GARBAGE\r\n\r\n"[..],
        b"GET / HTTP/2.0\r\n\r\n",
        b"GET noslash HTTP/1.1\r\n\r\n",
        b"GET /a%zz HTTP/1.1\r\n\r\n",
        b"GET / HTTP/1.1\r\nBad Header\r\n\r\n",
        b"POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
        b"POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
        b"POST / HTTP/1.1\r\nContent-Length: 99999999999999999999999\r\n\r\n",
        b"POST / HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
    ] {
        let err = decode_one(bad).expect_err(&String::from_utf8_lossy(bad));
        assert_eq!(err.status(), 400, "{}", String::from_utf8_lossy(bad));
    }
    assert_eq!(
        decode_one(b"POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"),
        Err(HttpError::UnsupportedTransferEncoding)
    );
}

#[test]
fn limits_are_enforced_before_the_body_arrives() {
    match decode_one(b"POST /pub HTTP/1.1\r\nContent-Length: 65\r\n\r\n") {
        Err(HttpError::BodyTooLarge(head)) => assert_eq!(head.path(), "/pub"),
        other => panic!("{other:?}"),
    }
    let mut long = b"GET / HTTP/1.1\r\nX: ".to_vec();
    long.extend(vec![b'a'; 2000]);
    assert_eq!(decode_one(&long), Err(HttpError::HeadersTooLarge));
    let mut many = b"GET / HTTP/1.1\r\n".to_vec();
    for i in 0..20 {
        many.extend(format!("H{i}: v\r\n").as_bytes());
    }
    many.extend(b"\r\n");
    assert_eq!(decode_one(&many), Err(HttpError::HeadersTooLarge));
}

#[test]
fn a_header_value_is_written_as_one_line() {
    let mut out = BytesMut::new();
    Response::empty(301)
        .with_header("Location", "/a\r\nSet-Cookie: x\n")
        .write_to(&mut out, true, false);
    assert_eq!(
        &out[..],
        b"HTTP/1.1 301 Moved Permanently\r\nLocation: /aSet-Cookie: x\r\nContent-Length: 0\r\n\r\n"
    );
}

#[test]
fn expect_continue_is_signalled_once() {
    let mut d = decoder();
    let mut buf = BytesMut::from(
        &b"POST /x HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n"[..],
    );
    assert_eq!(d.decode(&mut buf), Ok(Decoded::SendContinue));
    assert_eq!(d.decode(&mut buf), Ok(Decoded::Incomplete));
    buf.extend_from_slice(b"ok");
    assert!(matches!(d.decode(&mut buf), Ok(Decoded::Request(_))));
    // HTTP/1.0 has no 100 Continue: the body is simply waited for.
    let mut buf = BytesMut::from(
        &b"POST /x HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n"[..],
    );
    assert_eq!(d.decode(&mut buf), Ok(Decoded::Incomplete));
    buf.extend_from_slice(b"ok");
    assert!(matches!(d.decode(&mut buf), Ok(Decoded::Request(_))));
}

#[test]
fn absolute_form_targets() {
    let r = request(b"GET http://h:1/ping?x=1 HTTP/1.1\r\n\r\n");
    assert_eq!(r.head.path(), "/ping");
    assert_eq!(r.head.raw_query(), "x=1");
}

/// Every form of request target, as the head's ranges and decoded path give it back.
#[test]
fn request_targets() {
    for (target, path, query) in [
        ("/pub?topic=t", "/pub", "topic=t"),
        ("/a%20b/%23c?x=%41", "/a b/#c", "x=%41"),
        ("/pub#frag", "/pub", ""),
        ("/pub?x=1#frag", "/pub", "x=1"),
        ("http://h:1", "/", ""),
        ("https://h:1/s?q", "/s", "q"),
        ("*", "*", ""),
    ] {
        let line = format!("OPTIONS {target} HTTP/1.1\r\nHost: h\r\n\r\n");
        let r = request(line.as_bytes());
        assert_eq!(r.head.method(), "OPTIONS", "{target}");
        assert_eq!(
            (r.head.path(), r.head.raw_query()),
            (path, query),
            "{target}"
        );
    }
    for bad in ["/a%zz", "relative"] {
        let line = format!("GET {bad} HTTP/1.1\r\n\r\n");
        let mut d = RequestDecoder::new(Limits::default());
        let got = d.decode(&mut BytesMut::from(line.as_bytes()));
        assert!(
            matches!(got, Err(HttpError::Malformed(_))),
            "{bad}: {got:?}"
        );
    }
}

#[test]
fn query_parsing_like_go() {
    let q = Query::parse("a=1&&b&c=x+y%2B&a=").unwrap();
    assert_eq!(
        q.pairs().collect::<Vec<_>>(),
        [("a", "1"), ("b", ""), ("c", "x y+"), ("a", "")]
    );
    assert_eq!(Query::parse("a=1;b=2"), Err(QueryError::Semicolon));
    assert!(matches!(
        Query::parse("a=%zz"),
        Err(QueryError::BadEscape(_))
    ));
    assert!(matches!(
        Query::parse("a=%2"),
        Err(QueryError::BadEscape(_))
    ));
    assert_eq!(Query::parse("").unwrap().pairs().count(), 0);
}
