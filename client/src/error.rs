//! The crate's one error type.
//!
//! Every fallible call returns [`Error`]. Its variants say what the caller can do about it:
//! a [`Error::Broker`] carries the broker's code (match on [`protocol::ErrorCode`]) and text;
//! [`Error::Io`], [`Error::Closed`] and [`Error::Timeout`] mean the connection is gone or stuck
//! and the next call reconnects; the rest are mistakes in the caller's input or a peer that does
//! not speak the protocol.
//!
//! The error is `Clone` because one connection failure is reported to every command that was
//! waiting on that connection.

use bytes::Bytes;
use protocol::frame::FrameError;
use protocol::ErrorCode;
use std::fmt;
use std::io;
use std::sync::Arc;

/// Shorthand for `Result<T, client::Error>`.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in the client.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Error {
    /// The broker answered with an error frame. `code` is `None` for a code this crate does
    /// not know; `text` is the whole frame, e.g. `"E_BAD_TOPIC PUB topic name "x!" is not valid"`.
    Broker {
        code: Option<ErrorCode>,
        text: String,
    },
    /// The socket failed.
    Io(Arc<io::Error>),
    /// No answer within the configured time. The connection is closed, since a late answer
    /// could no longer be matched to its command.
    Timeout,
    /// The connection (or the producer or consumer) is closed.
    Closed,
    /// The peer sent a frame that cannot be read; the connection was dropped.
    BadFrame(FrameError),
    /// The peer answered something other than what the command expects.
    UnexpectedResponse(Bytes),
    /// A topic or channel name that the broker would refuse.
    InvalidName { what: &'static str, name: String },
    /// A configuration value out of range; the text names the setting.
    InvalidConfig(&'static str),
    /// The broker requires AUTH and no `auth_secret` is set. (A refused secret is
    /// [`Error::Broker`] with `E_AUTH_FAILED` or `E_UNAUTHORIZED`.)
    AuthRequired,
    /// `tls_v1` was asked for and the broker did not turn TLS on: the connection is dropped
    /// rather than used in the clear.
    TlsRefused,
    /// TLS could not be set up: a certificate or key file, or the handshake (the text says
    /// which, e.g. an unknown issuer or a name mismatch).
    Tls(String),
    /// A lookup answered with an HTTP status other than 200 (404 is "topic unknown" and is
    /// not reported as an error).
    Http { status: u16 },
    /// A broker refused an HTTP API call (`client::admin`): its status and message.
    Refused { status: u16, message: String },
    /// A lookup's HTTP answer could not be read.
    BadHttpResponse(&'static str),
    /// A JSON body (IDENTIFY or lookup answer) could not be parsed.
    Json(Arc<serde_json::Error>),
}

impl Error {
    /// Builds [`Error::Broker`] from the data of an error frame.
    pub(crate) fn from_error_frame(data: &[u8]) -> Error {
        let text = String::from_utf8_lossy(data).into_owned();
        let code = text.split(' ').next().and_then(ErrorCode::parse);
        Error::Broker { code, text }
    }

    /// The broker's error code, for [`Error::Broker`].
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            Error::Broker { code, .. } => *code,
            _ => None,
        }
    }

    /// True when the error means the connection is gone (the next call reconnects).
    pub fn is_connection_error(&self) -> bool {
        matches!(
            self,
            Error::Io(_) | Error::Closed | Error::Timeout | Error::BadFrame(_)
        )
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Broker { text, .. } => write!(f, "broker error: {text}"),
            Error::Io(e) => write!(f, "i/o error: {e}"),
            Error::Timeout => f.write_str("timed out"),
            Error::Closed => f.write_str("connection closed"),
            Error::BadFrame(e) => write!(f, "bad frame from broker: {e}"),
            Error::UnexpectedResponse(b) => {
                write!(f, "unexpected response {:?}", String::from_utf8_lossy(b))
            }
            Error::InvalidName { what, name } => write!(f, "invalid {what} name {name:?}"),
            Error::InvalidConfig(what) => write!(f, "invalid configuration: {what}"),
            Error::AuthRequired => f.write_str("broker requires AUTH and no auth_secret is set"),
            Error::TlsRefused => f.write_str("TLS was asked for and the broker did not enable it"),
            Error::Tls(what) => write!(f, "TLS: {what}"),
            Error::Http { status } => write!(f, "lookup answered HTTP {status}"),
            Error::Refused { status, message } => {
                write!(f, "broker refused (HTTP {status}): {message}")
            }
            Error::BadHttpResponse(what) => write!(f, "bad HTTP response from lookup: {what}"),
            Error::Json(e) => write!(f, "bad JSON: {e}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io(e) => Some(e.as_ref()),
            Error::BadFrame(e) => Some(e),
            Error::Json(e) => Some(e.as_ref()),
            _ => None,
        }
    }
}

impl From<io::Error> for Error {
    fn from(e: io::Error) -> Self {
        Error::Io(Arc::new(e))
    }
}

impl From<FrameError> for Error {
    fn from(e: FrameError) -> Self {
        Error::BadFrame(e)
    }
}

impl From<serde_json::Error> for Error {
    fn from(e: serde_json::Error) -> Self {
        Error::Json(Arc::new(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_frame_keeps_code_and_text() {
        let e = Error::from_error_frame(b"E_BAD_TOPIC PUB topic name \"x!\" is not valid");
        assert_eq!(e.code(), Some(ErrorCode::BadTopic));
        assert!(e.to_string().contains("E_BAD_TOPIC PUB topic name"));
        let unknown = Error::from_error_frame(b"E_SOMETHING_NEW text");
        assert_eq!(unknown.code(), None);
        assert!(!unknown.is_connection_error());
        assert!(Error::Closed.is_connection_error());
    }
}
