//! The HTTP API's error answers: one [`ApiError`] variant per error code the API sends
//! (nsqd's, and ours for the endpoints nsqd lacks), each knowing its status and its text.
//! Handlers return `Err(ApiError::..)`; the router turns it into the response in one place
//! ([`ApiError::response`]).
//!
//! Invariants: the text is the code, or `CODE: detail` where the answer explains itself; the
//! body is nsqd's V1 error `{"message":"<text>"}` with `X-NSQ-Content-Type`, except
//! `TLS_REQUIRED`, which carries the HTTPS port as nsqd writes it.

use crate::admin_ops::Refusal;
use http1::Response;
use std::borrow::Cow;

/// An error answer of the HTTP API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApiError {
    /// The query string cannot be parsed.
    InvalidRequest,
    MissingArgTopic,
    /// A topic name `/pub`, `/mpub`, `/topic/create` and `/topic/empty` refuse.
    InvalidTopic,
    /// A topic name the channel and config endpoints refuse.
    InvalidArgTopic,
    MissingArgChannel,
    InvalidArgChannel,
    TopicNotFound,
    ChannelNotFound,
    MsgEmpty,
    MsgTooBig,
    BodyTooBig,
    /// A body over `--max-body-size` on an endpoint that publishes nothing.
    RequestTooLarge,
    /// A binary `/mpub` body whose message count is wrong.
    BadBody,
    /// A binary `/mpub` message whose size is wrong.
    BadMessage,
    InvalidDefer,
    /// `PUT /config/:opt` with a value that is not one.
    InvalidValue,
    /// `PUT /config/:opt` with an empty body or one over `--max-msg-size` (413, as nsqd).
    InvalidValueSize,
    InvalidOption,
    /// No route for the path.
    NotFound,
    /// A known path asked with a method it does not take; `allow`: the ones it takes.
    MethodNotAllowed {
        allow: &'static [&'static str],
    },
    /// A request on the plain listener while TLS is required; `https_port`: 0 when there is
    /// no HTTPS listener.
    TlsRequired {
        https_port: u16,
    },
    InternalError,
    /// The broker is stopping: nothing is done.
    Exiting,
    /// `/topic/config` without a setting.
    MissingArgRetention,
    InvalidRetentionTime(String),
    InvalidRetentionBytes(String),
    /// `/topic/config?replicas=` the cluster refused, or a value that is not a count (why).
    InvalidReplicas(String),
    /// `/channel/config` without a setting.
    MissingArgMaxAttempts,
    InvalidMaxAttempts(String),
    InvalidDeadLetterTopic(String),
    /// A redrive stopped part-way; the rest stays recorded.
    RedriveFailed(String),
    InvalidArgTimestamp(String),
    InvalidArgOffset(String),
    InvalidArgEarliest(String),
    /// A rewind without a position.
    MissingArgPosition,
    /// A rewind with more than one position (the ones given).
    InvalidArgPosition(String),
    InvalidArgFrom(String),
    InvalidArgDryRun(String),
    /// History asked of an #ephemeral topic (the detail says what was asked).
    EphemeralTopic(&'static str),
    /// Replay asked of an #ephemeral channel.
    EphemeralChannel,
    /// `/channel/create` with `from=` for a channel that exists.
    ChannelExists,
    /// A rewind position older than the log keeps.
    RewindBeforeHistory {
        oldest_offset: u64,
        oldest_timestamp: i64,
    },
    /// A rewind position past the log's end.
    RewindPastEnd {
        head: u64,
    },
}

impl ApiError {
    /// The HTTP status.
    pub fn status(&self) -> u16 {
        use ApiError::*;
        match self {
            TopicNotFound | ChannelNotFound | NotFound => 404,
            MsgTooBig | BodyTooBig | RequestTooLarge | BadBody | BadMessage | InvalidValueSize => {
                413
            }
            MethodNotAllowed { .. } => 405,
            TlsRequired { .. } => 403,
            InternalError | RedriveFailed(_) => 500,
            Exiting => 503,
            _ => 400,
        }
    }

    /// The code the answer starts with.
    pub fn code(&self) -> &'static str {
        use ApiError::*;
        match self {
            InvalidRequest => "INVALID_REQUEST",
            MissingArgTopic => "MISSING_ARG_TOPIC",
            InvalidTopic => "INVALID_TOPIC",
            InvalidArgTopic => "INVALID_ARG_TOPIC",
            MissingArgChannel => "MISSING_ARG_CHANNEL",
            InvalidArgChannel => "INVALID_ARG_CHANNEL",
            TopicNotFound => "TOPIC_NOT_FOUND",
            ChannelNotFound => "CHANNEL_NOT_FOUND",
            MsgEmpty => "MSG_EMPTY",
            MsgTooBig => "MSG_TOO_BIG",
            BodyTooBig => "BODY_TOO_BIG",
            RequestTooLarge => "REQUEST_TOO_LARGE",
            BadBody => "BAD_BODY",
            BadMessage => "BAD_MESSAGE",
            InvalidDefer => "INVALID_DEFER",
            InvalidValue | InvalidValueSize => "INVALID_VALUE",
            InvalidOption => "INVALID_OPTION",
            NotFound => "NOT_FOUND",
            MethodNotAllowed { .. } => "METHOD_NOT_ALLOWED",
            TlsRequired { .. } => "TLS_REQUIRED",
            InternalError => "INTERNAL_ERROR",
            Exiting => "EXITING",
            MissingArgRetention => "MISSING_ARG_RETENTION",
            InvalidRetentionTime(_) => "INVALID_RETENTION_TIME",
            InvalidReplicas(_) => "INVALID_REPLICAS",
            InvalidRetentionBytes(_) => "INVALID_RETENTION_BYTES",
            MissingArgMaxAttempts => "MISSING_ARG_MAX_ATTEMPTS",
            InvalidMaxAttempts(_) => "INVALID_MAX_ATTEMPTS",
            InvalidDeadLetterTopic(_) => "INVALID_DEAD_LETTER_TOPIC",
            RedriveFailed(_) => "REDRIVE_FAILED",
            InvalidArgTimestamp(_) => "INVALID_ARG_TIMESTAMP",
            InvalidArgOffset(_) => "INVALID_ARG_OFFSET",
            InvalidArgEarliest(_) => "INVALID_ARG_EARLIEST",
            MissingArgPosition => "MISSING_ARG_POSITION",
            InvalidArgPosition(_) => "INVALID_ARG_POSITION",
            InvalidArgFrom(_) => "INVALID_ARG_FROM",
            InvalidArgDryRun(_) => "INVALID_ARG_DRY_RUN",
            EphemeralTopic(_) => "EPHEMERAL_TOPIC",
            EphemeralChannel => "EPHEMERAL_CHANNEL",
            ChannelExists => "CHANNEL_EXISTS",
            RewindBeforeHistory { .. } => "REWIND_BEFORE_HISTORY",
            RewindPastEnd { .. } => "REWIND_PAST_END",
        }
    }

    /// What follows the code, for the answers that explain themselves.
    fn detail(&self) -> Option<Cow<'_, str>> {
        use ApiError::*;
        let fixed = |s: &'static str| Some(Cow::Borrowed(s));
        match self {
            MissingArgRetention => {
                fixed("give retention_time, retention_bytes, replicas or several")
            }
            MissingArgMaxAttempts => fixed("give max_attempts, dead_letter_topic or both"),
            MissingArgPosition => fixed("give one of timestamp=, offset= or earliest"),
            InvalidArgPosition(given) => Some(Cow::Owned(format!(
                "give only one of timestamp=, offset= or earliest (got {given})"
            ))),
            EphemeralTopic(why) => fixed(why),
            EphemeralChannel => fixed("an #ephemeral channel keeps no history to replay"),
            ChannelExists => {
                fixed("from= starts a new channel; POST /channel/rewind moves an existing one")
            }
            RewindBeforeHistory {
                oldest_offset,
                oldest_timestamp,
            } => Some(Cow::Owned(format!(
                "oldest retained offset {oldest_offset} ({})",
                crate::civil_time::format(*oldest_timestamp)
            ))),
            RewindPastEnd { head } => Some(Cow::Owned(format!("the log ends at offset {head}"))),
            InvalidRetentionTime(d)
            | InvalidRetentionBytes(d)
            | InvalidReplicas(d)
            | InvalidMaxAttempts(d)
            | InvalidDeadLetterTopic(d)
            | RedriveFailed(d)
            | InvalidArgTimestamp(d)
            | InvalidArgOffset(d)
            | InvalidArgEarliest(d)
            | InvalidArgFrom(d)
            | InvalidArgDryRun(d) => Some(Cow::Borrowed(d)),
            _ => None,
        }
    }

    /// The answer's text: the code, or `CODE: detail`.
    pub fn text(&self) -> Cow<'static, str> {
        match self.detail() {
            None => Cow::Borrowed(self.code()),
            Some(detail) => Cow::Owned(format!("{}: {detail}", self.code())),
        }
    }

    /// The whole answer: status, body and headers.
    pub fn response(&self) -> Response {
        match self {
            ApiError::TlsRequired { https_port } => {
                let body = format!(r#"{{"message": "TLS_REQUIRED", "https_port": {https_port}}}"#);
                Response::json(self.status(), body).nsq_v1()
            }
            ApiError::MethodNotAllowed { allow: methods } => {
                Response::error(self.status(), &self.text()).with_header("Allow", allow(methods))
            }
            _ => Response::error(self.status(), &self.text()),
        }
    }
}

/// `Allow` for a route taking `methods`: httprouter lists OPTIONS too, which it answers.
pub fn allow(methods: &[&str]) -> String {
    let mut allow = methods.join(", ");
    allow.push_str(", OPTIONS");
    allow
}

impl From<Refusal> for ApiError {
    fn from(refusal: Refusal) -> ApiError {
        match refusal {
            Refusal::EphemeralTopicRetention => {
                ApiError::EphemeralTopic("an #ephemeral topic keeps no history")
            }
            Refusal::EphemeralTopicReplay => {
                ApiError::EphemeralTopic("an #ephemeral topic keeps no history to replay")
            }
            Refusal::EphemeralChannelReplay => ApiError::EphemeralChannel,
            Refusal::ChannelExists => ApiError::ChannelExists,
            Refusal::BeforeHistory {
                oldest_offset,
                oldest_timestamp,
            } => ApiError::RewindBeforeHistory {
                oldest_offset,
                oldest_timestamp,
            },
            Refusal::PastEnd { head } => ApiError::RewindPastEnd { head },
            Refusal::Replicas(why) => ApiError::InvalidReplicas(why),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn texts_and_statuses() {
        assert_eq!(ApiError::TopicNotFound.status(), 404);
        assert_eq!(ApiError::TopicNotFound.text(), "TOPIC_NOT_FOUND");
        assert_eq!(ApiError::InvalidValueSize.status(), 413);
        assert_eq!(ApiError::InvalidValue.text(), "INVALID_VALUE");
        assert_eq!(
            ApiError::InvalidMaxAttempts("x".into()).text(),
            "INVALID_MAX_ATTEMPTS: x"
        );
        assert_eq!(
            ApiError::MissingArgRetention.text(),
            "MISSING_ARG_RETENTION: give retention_time, retention_bytes, replicas or several"
        );
        assert_eq!(
            ApiError::from(Refusal::PastEnd { head: 7 }).text(),
            "REWIND_PAST_END: the log ends at offset 7"
        );
        let r = ApiError::Exiting.response();
        assert_eq!(
            (r.status, &r.body[..]),
            (503, &br#"{"message":"EXITING"}"#[..])
        );
        let r = ApiError::MethodNotAllowed { allow: &["GET"] }.response();
        assert_eq!(r.headers.last(), Some(&("Allow", "GET, OPTIONS".into())));
        let r = ApiError::TlsRequired { https_port: 7 }.response();
        assert_eq!(
            (r.status, &r.body[..]),
            (403, &br#"{"message": "TLS_REQUIRED", "https_port": 7}"#[..])
        );
    }
}
