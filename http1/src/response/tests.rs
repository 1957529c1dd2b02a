//! Unit tests of the response writer.

use super::*;
use crate::test_util::*;
use crate::*;
use bytes::BytesMut;

#[test]
fn response_bytes() {
    let mut out = BytesMut::new();
    Response::text(200, "OK").write_to(&mut out, true, false);
    assert_eq!(
        &out[..],
        b"HTTP/1.1 200 OK\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: 2\r\n\r\nOK"
    );
    out.clear();
    Response::error(404, "TOPIC_NOT_FOUND").write_to(&mut out, false, false);
    assert_eq!(
        &out[..],
        &b"HTTP/1.1 404 Not Found\r\nContent-Type: application/json; charset=utf-8\r\nX-NSQ-Content-Type: nsq; version=1.0\r\nContent-Length: 29\r\nConnection: close\r\n\r\n{\"message\":\"TOPIC_NOT_FOUND\"}"[..]
    );
    out.clear();
    Response::empty(200)
        .nsq_v1()
        .write_to(&mut out, true, false);
    assert!(!out.windows(14).any(|w| w == b"\r\nContent-Type"));
    assert!(out.ends_with(b"Content-Length: 0\r\n\r\n"));
    out.clear();
    let head = request(b"HEAD / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n").head;
    Response::json(200, "{}").write_for(&head, &mut out);
    assert!(out.ends_with(b"Content-Length: 2\r\nConnection: keep-alive\r\n\r\n"));
    out.clear();
    let head = request(b"GET / HTTP/1.0\r\n\r\n").head;
    Response::json(200, "{}").write_for(&head, &mut out);
    assert!(out.ends_with(b"Content-Length: 2\r\nConnection: close\r\n\r\n{}"));
}

#[test]
fn error_responses() {
    let r = HttpError::Malformed("x").to_response();
    assert_eq!(r.status, 400);
    assert_eq!(&r.body[..], b"400 Bad Request: x");
    assert_eq!(HttpError::HeadersTooLarge.to_response().status, 431);
    assert_eq!(
        HttpError::UnsupportedTransferEncoding.to_response().status,
        501
    );
}
