//! NSQ error codes and the protocol error that carries one.
//!
//! On the wire an error frame reads `"<CODE> <description>"`. Whether the connection is closed
//! afterwards depends on the error (nsqd's `FatalClientErr` versus `ClientErr`); the flag travels
//! with the error so the connection code never has to guess.

use std::fmt;

/// Every error code nsqd's V2 protocol can send. The text is stable: clients match on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorCode {
    Invalid,
    BadBody,
    BadTopic,
    BadChannel,
    BadMessage,
    BadProtocol,
    PubFailed,
    MpubFailed,
    DpubFailed,
    FinFailed,
    ReqFailed,
    TouchFailed,
    SubFailed,
    IdentifyFailed,
    AuthDisabled,
    AuthFailed,
    AuthFirst,
    AuthError,
    Unauthorized,
}

impl ErrorCode {
    /// The code exactly as nsqd writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::Invalid => "E_INVALID",
            ErrorCode::BadBody => "E_BAD_BODY",
            ErrorCode::BadTopic => "E_BAD_TOPIC",
            ErrorCode::BadChannel => "E_BAD_CHANNEL",
            ErrorCode::BadMessage => "E_BAD_MESSAGE",
            ErrorCode::BadProtocol => "E_BAD_PROTOCOL",
            ErrorCode::PubFailed => "E_PUB_FAILED",
            ErrorCode::MpubFailed => "E_MPUB_FAILED",
            ErrorCode::DpubFailed => "E_DPUB_FAILED",
            ErrorCode::FinFailed => "E_FIN_FAILED",
            ErrorCode::ReqFailed => "E_REQ_FAILED",
            ErrorCode::TouchFailed => "E_TOUCH_FAILED",
            ErrorCode::SubFailed => "E_SUB_FAILED",
            ErrorCode::IdentifyFailed => "E_IDENTIFY_FAILED",
            ErrorCode::AuthDisabled => "E_AUTH_DISABLED",
            ErrorCode::AuthFailed => "E_AUTH_FAILED",
            ErrorCode::AuthFirst => "E_AUTH_FIRST",
            ErrorCode::AuthError => "E_AUTH_ERROR",
            ErrorCode::Unauthorized => "E_UNAUTHORIZED",
        }
    }

    /// Parses a code as found at the start of an error frame.
    pub fn parse(s: &str) -> Option<ErrorCode> {
        ALL_CODES.iter().copied().find(|c| c.as_str() == s)
    }
}

const ALL_CODES: [ErrorCode; 19] = [
    ErrorCode::Invalid,
    ErrorCode::BadBody,
    ErrorCode::BadTopic,
    ErrorCode::BadChannel,
    ErrorCode::BadMessage,
    ErrorCode::BadProtocol,
    ErrorCode::PubFailed,
    ErrorCode::MpubFailed,
    ErrorCode::DpubFailed,
    ErrorCode::FinFailed,
    ErrorCode::ReqFailed,
    ErrorCode::TouchFailed,
    ErrorCode::SubFailed,
    ErrorCode::IdentifyFailed,
    ErrorCode::AuthDisabled,
    ErrorCode::AuthFailed,
    ErrorCode::AuthFirst,
    ErrorCode::AuthError,
    ErrorCode::Unauthorized,
];

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An error to report to a client: its code, its description and whether the connection must
/// be closed after the error frame is sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProtocolError {
    pub code: ErrorCode,
    pub description: String,
    pub fatal: bool,
}

impl ProtocolError {
    /// An error after which nsqd closes the connection.
    pub fn fatal(code: ErrorCode, description: impl Into<String>) -> Self {
        ProtocolError {
            code,
            description: description.into(),
            fatal: true,
        }
    }

    /// An error after which the connection goes on.
    pub fn non_fatal(code: ErrorCode, description: impl Into<String>) -> Self {
        ProtocolError {
            code,
            description: description.into(),
            fatal: false,
        }
    }

    /// The payload of the error frame: `"<CODE> <description>"`.
    pub fn frame_text(&self) -> String {
        format!("{} {}", self.code.as_str(), self.description)
    }
}

impl fmt::Display for ProtocolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.code.as_str(), self.description)
    }
}

impl std::error::Error for ProtocolError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_parses_back() {
        for code in ALL_CODES {
            assert_eq!(ErrorCode::parse(code.as_str()), Some(code));
        }
        assert_eq!(ErrorCode::parse("E_NOPE"), None);
    }

    #[test]
    fn frame_text_is_code_space_description() {
        let e = ProtocolError::fatal(ErrorCode::Invalid, "invalid command FOO");
        assert_eq!(e.frame_text(), "E_INVALID invalid command FOO");
        assert!(e.fatal);
        assert!(!ProtocolError::non_fatal(ErrorCode::FinFailed, "x").fatal);
    }
}
