//! Just enough HTTP/1.1 for NSQ's HTTP APIs: the server side of the broker's, the lookup's and
//! the admin UI's APIs, and the client side of the few requests they and the client library make
//! ([`decode_response`], [`client`]). No sockets and no runtime: the decoders work on buffers,
//! and the client runs over any `futures-lite` stream. Each server drives the server side from its own I/O loop:
//!
//! ```text
//! loop {
//!     read bytes into `buf`
//!     while let Decoded::Request(req) = decoder.decode(&mut buf)? {   // httparse underneath
//!         let resp = route(&req);                                     // the server's own
//!         resp.write_for(&req.head, &mut out);
//!         if !req.head.keep_alive { flush, close }
//!     }
//!     // Decoded::SendContinue: write CONTINUE_RESPONSE, keep reading
//!     // Err(e): e.to_response().write_to(&mut out, false, false), flush, close
//! }
//! ```
//!
//! What it covers, the way Go's net/http serves nsqd and nsqlookupd:
//! - request heads parsed by `httparse`, bounded in size and header count;
//! - bodies by `Content-Length` or `Transfer-Encoding: chunked`, bounded by `max_body`; both at
//!   once, or any other transfer coding, are refused;
//! - `Expect: 100-continue` answered when the decoder reaches the body;
//! - keep-alive: HTTP/1.1 keeps the connection unless `Connection: close`; HTTP/1.0 closes it
//!   unless `Connection: keep-alive`;
//! - the query string parsed like Go's `url.ParseQuery` (percent-decoding, `+` as space, several
//!   values per key, `;` refused), lazily, since nsqd's handlers that take no arguments never
//!   look at it;
//! - responses with nsqd's headers: `Content-Type` for text and JSON bodies (none for an empty
//!   one), `X-NSQ-Content-Type: nsq; version=1.0` on V1 API answers, `Content-Length`, and the
//!   standard error body `{"message":"CODE"}`.
//!
//! On the client side ([`decode_response`], for the client library's `/lookup` and the broker's
//! `/channels` queries to lookups): a whole response read from a buffer, head by `httparse`,
//! body by `Content-Length`, chunked encoding, or the connection's close; 1xx interim
//! responses skipped; "need more bytes" until it is all there.
//!
//! | module | what it owns |
//! | --- | --- |
//! | [`request`] | a decoded request: its head (method, path, query, headers) and body |
//! | [`decoder`] | cutting requests off a connection's read buffer ([`RequestDecoder`]) |
//! | `fields` | header fields: framing, keep-alive, header slots for `httparse` |
//! | `chunked` | reading a chunked body, resumably |
//! | [`response`] | writing a response ([`Response`]) |
//! | [`response_decoder`] | reading a response as a client ([`decode_response`]) |
//! | [`query`] | the query string, read as Go's `url.ParseQuery` |
//! | [`escape`] | percent-encoding and HTML escaping |
//! | [`client`] | one request over a fresh connection, and its answer |

mod chunked;
pub mod client;
pub mod decoder;
pub mod escape;
mod fields;
pub mod query;
pub mod request;
pub mod response;
pub mod response_decoder;
#[cfg(test)]
mod test_util;

pub use decoder::{Decoded, HttpError, RequestDecoder};
pub use escape::{escape_html, escape_path, percent_encode};
pub use query::{Query, QueryError};
pub use request::{header_in, Request, RequestHead};
pub use response::{reason_phrase, Response};
pub use response_decoder::{decode_response, ReceivedResponse, ResponseError};

/// `Content-Type` of a plain-text body.
pub const CONTENT_TYPE_TEXT: &str = "text/plain; charset=utf-8";
/// `Content-Type` of a JSON body.
pub const CONTENT_TYPE_JSON: &str = "application/json; charset=utf-8";
/// The name of nsqd's API version header.
pub const NSQ_CONTENT_TYPE_HEADER: &str = "X-NSQ-Content-Type";
/// The value of nsqd's API version header on every V1 answer.
pub const NSQ_CONTENT_TYPE_V1: &str = "nsq; version=1.0";
/// What to write when [`RequestDecoder::decode`] returns [`Decoded::SendContinue`].
pub const CONTINUE_RESPONSE: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n";

/// Bounds on what one request (or, for [`decode_response`], one response) may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Request or status line and headers together (Go's default is 1 MiB).
    pub max_header_bytes: usize,
    /// Number of header fields.
    pub max_headers: usize,
    /// Body bytes, after removing chunked framing.
    pub max_body: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_header_bytes: 1024 * 1024,
            max_headers: fields::STACK_HEADERS,
            max_body: 5 * 1024 * 1024,
        }
    }
}

/// The protocol version of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    Http10,
    Http11,
}
