//! IDENTIFY: the JSON a client sends about itself, the checks nsqd applies to it, and the JSON
//! the broker answers when the client asks for feature negotiation.

use crate::error::{ErrorCode, ProtocolError};
use serde::{Deserialize, Serialize};

/// What a client may send in IDENTIFY. Unknown fields are ignored; missing ones take the
/// broker's defaults (0 means "default" for the numeric settings, as in nsqd).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct IdentifyRequest {
    pub client_id: String,
    pub hostname: String,
    pub user_agent: String,
    pub feature_negotiation: bool,
    pub heartbeat_interval: i64,
    pub output_buffer_size: i64,
    pub output_buffer_timeout: i64,
    pub tls_v1: bool,
    pub snappy: bool,
    pub deflate: bool,
    pub deflate_level: i64,
    /// nsqd's `int32`: a value beyond it fails to decode.
    pub sample_rate: i32,
    pub msg_timeout: i64,
}

/// The broker's settings that bound what a client may ask for, all in milliseconds or bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdentifyLimits {
    pub default_heartbeat_ms: u64,
    pub max_heartbeat_ms: u64,
    pub default_output_buffer_size: u64,
    pub max_output_buffer_size: u64,
    pub default_output_buffer_timeout_ms: u64,
    pub min_output_buffer_timeout_ms: u64,
    pub max_output_buffer_timeout_ms: u64,
    pub default_msg_timeout_ms: u64,
    pub max_msg_timeout_ms: u64,
    pub max_deflate_level: u64,
    /// Whether the broker can switch on TLS, snappy and deflate on a connection.
    pub tls_available: bool,
    pub snappy_available: bool,
    pub deflate_available: bool,
    /// nsqd's --deflate and --snappy both on: a client asking for both is refused.
    pub both_compressions_offered: bool,
}

impl Default for IdentifyLimits {
    fn default() -> Self {
        IdentifyLimits {
            default_heartbeat_ms: 30_000,
            max_heartbeat_ms: 60_000,
            default_output_buffer_size: 16 * 1024,
            max_output_buffer_size: 64 * 1024,
            default_output_buffer_timeout_ms: 250,
            min_output_buffer_timeout_ms: 25,
            max_output_buffer_timeout_ms: 30_000,
            default_msg_timeout_ms: 60_000,
            max_msg_timeout_ms: 15 * 60 * 1000,
            max_deflate_level: 6,
            tls_available: false,
            snappy_available: false,
            deflate_available: false,
            both_compressions_offered: true,
        }
    }
}

/// The connection settings that result from an accepted IDENTIFY.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Negotiated {
    /// `None` when the client turned heartbeats off.
    pub heartbeat_ms: Option<u64>,
    pub output_buffer_size: u64,
    pub output_buffer_timeout_ms: u64,
    pub sample_rate: u8,
    pub msg_timeout_ms: u64,
    pub tls_v1: bool,
    pub snappy: bool,
    pub deflate: bool,
    pub deflate_level: u64,
}

/// The feature negotiation answer, fields in nsqd's order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdentifyResponse {
    pub max_rdy_count: u64,
    pub version: String,
    pub max_msg_timeout: u64,
    pub msg_timeout: u64,
    pub tls_v1: bool,
    pub deflate: bool,
    pub deflate_level: u64,
    pub max_deflate_level: u64,
    pub snappy: bool,
    pub sample_rate: u8,
    pub auth_required: bool,
    pub output_buffer_size: u64,
    pub output_buffer_timeout: u64,
}

impl IdentifyRequest {
    /// Parses the IDENTIFY body as Go's encoding/json fills nsqd's struct: keys match
    /// whatever their case, a repeated key keeps its last value, a `null` (field or whole
    /// body) leaves the defaults. Anything else that is not a JSON object fails as nsqd does,
    /// with a fatal `E_BAD_BODY`.
    pub fn parse(body: &[u8]) -> Result<IdentifyRequest, ProtocolError> {
        let bad =
            || ProtocolError::fatal(ErrorCode::BadBody, "IDENTIFY failed to decode JSON body");
        let fields = match serde_json::from_slice::<serde_json::Value>(body) {
            Ok(serde_json::Value::Object(fields)) => fields,
            Ok(serde_json::Value::Null) => return Ok(IdentifyRequest::default()),
            _ => return Err(bad()),
        };
        let fields: serde_json::Map<String, serde_json::Value> = fields
            .into_iter()
            .filter(|(_, v)| !v.is_null())
            .map(|(k, v)| (k.to_ascii_lowercase(), v))
            .collect();
        serde_json::from_value(serde_json::Value::Object(fields)).map_err(|_| bad())
    }

    /// Applies nsqd's checks, in nsqd's order, and works out the connection's settings.
    pub fn negotiate(&self, limits: &IdentifyLimits) -> Result<Negotiated, ProtocolError> {
        let bad = |what: &str, v: i64| {
            ProtocolError::fatal(
                ErrorCode::BadBody,
                format!("IDENTIFY {what} ({v}) is invalid"),
            )
        };
        let heartbeat_ms = match self.heartbeat_interval {
            -1 => None,
            0 => Some(limits.default_heartbeat_ms),
            v if v >= 1000 && v as u64 <= limits.max_heartbeat_ms => Some(v as u64),
            v => return Err(bad("heartbeat interval", v)),
        };
        let mut output_buffer_timeout_ms = match self.output_buffer_timeout {
            -1 => 0,
            0 => limits.default_output_buffer_timeout_ms,
            v if v >= limits.min_output_buffer_timeout_ms as i64
                && v as u64 <= limits.max_output_buffer_timeout_ms =>
            {
                v as u64
            }
            v => return Err(bad("output buffer timeout", v)),
        };
        let output_buffer_size = match self.output_buffer_size {
            -1 => {
                output_buffer_timeout_ms = 0;
                1
            }
            0 => limits.default_output_buffer_size,
            v if v >= 64 && v as u64 <= limits.max_output_buffer_size => v as u64,
            v => return Err(bad("output buffer size", v)),
        };
        if !(0..=99).contains(&self.sample_rate) {
            return Err(bad("sample rate", self.sample_rate.into()));
        }
        let msg_timeout_ms = match self.msg_timeout {
            0 => limits.default_msg_timeout_ms,
            v if v >= 1000 && v as u64 <= limits.max_msg_timeout_ms => v as u64,
            v => return Err(bad("msg timeout", v)),
        };
        // Features are switched on only through negotiation: without it nsqd answers OK and
        // enables none of them.
        let negotiating = self.feature_negotiation;
        let tls_v1 = negotiating && limits.tls_available && self.tls_v1;
        let deflate = negotiating && limits.deflate_available && self.deflate;
        let snappy = negotiating && limits.snappy_available && self.snappy;
        // nsqd refuses the pair when a client negotiating features asks for both and both
        // are offered (its --deflate and --snappy, on by default), whatever it then enables.
        if self.feature_negotiation
            && self.deflate
            && self.snappy
            && limits.both_compressions_offered
        {
            return Err(ProtocolError::fatal(
                ErrorCode::IdentifyFailed,
                "cannot enable both deflate and snappy compression",
            ));
        }
        let mut deflate_level = 6;
        if deflate && self.deflate_level > 0 {
            deflate_level = self.deflate_level as u64;
        }
        deflate_level = deflate_level.min(limits.max_deflate_level);
        Ok(Negotiated {
            heartbeat_ms,
            output_buffer_size,
            output_buffer_timeout_ms,
            sample_rate: self.sample_rate as u8,
            msg_timeout_ms,
            tls_v1,
            snappy,
            deflate,
            deflate_level,
        })
    }
}

impl IdentifyResponse {
    /// The answer for `n`, given the broker's `max_rdy_count` and whether AUTH is required.
    pub fn new(
        n: &Negotiated,
        limits: &IdentifyLimits,
        max_rdy_count: u64,
        auth_required: bool,
    ) -> IdentifyResponse {
        IdentifyResponse {
            max_rdy_count,
            version: crate::NSQD_COMPAT_VERSION.to_string(),
            max_msg_timeout: limits.max_msg_timeout_ms,
            msg_timeout: n.msg_timeout_ms,
            tls_v1: n.tls_v1,
            deflate: n.deflate,
            deflate_level: n.deflate_level,
            max_deflate_level: limits.max_deflate_level,
            snappy: n.snappy,
            sample_rate: n.sample_rate,
            auth_required,
            output_buffer_size: n.output_buffer_size,
            output_buffer_timeout: n.output_buffer_timeout_ms,
        }
    }

    /// The JSON bytes sent in the response frame.
    pub fn to_json(&self) -> Vec<u8> {
        // Serialising plain fields cannot fail.
        serde_json::to_vec(self).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_negotiation_matches_nsqd_fixture() {
        let req = IdentifyRequest::parse(br#"{"feature_negotiation":true}"#).unwrap();
        let limits = IdentifyLimits::default();
        let n = req.negotiate(&limits).unwrap();
        let resp = IdentifyResponse::new(&n, &limits, 50, false);
        assert_eq!(
            String::from_utf8(resp.to_json()).unwrap(),
            r#"{"max_rdy_count":50,"version":"1.3.0","max_msg_timeout":900000,"msg_timeout":60000,"tls_v1":false,"deflate":false,"deflate_level":6,"max_deflate_level":6,"snappy":false,"sample_rate":0,"auth_required":false,"output_buffer_size":16384,"output_buffer_timeout":250}"#
        );
    }

    /// Read as Go's encoding/json reads into nsqd's struct.
    #[test]
    fn bodies_nsqd_accepts() {
        let limits = IdentifyLimits::default();
        let ok = |json: &str| {
            IdentifyRequest::parse(json.as_bytes())
                .and_then(|r| r.negotiate(&limits).map(|_| r))
                .unwrap_or_else(|e| panic!("{json}: {}", e.frame_text()))
        };
        // Without feature negotiation nsqd answers OK before it looks at compression, and
        // switches nothing on, even what it offers.
        assert!(ok(r#"{"snappy":true,"deflate":true}"#).snappy);
        let all = IdentifyLimits {
            tls_available: true,
            snappy_available: true,
            deflate_available: true,
            ..limits
        };
        let n = IdentifyRequest::parse(br#"{"snappy":true,"deflate":true,"tls_v1":true}"#)
            .and_then(|r| r.negotiate(&all))
            .unwrap();
        assert!(!n.snappy && !n.deflate && !n.tls_v1);
        // null leaves the default, the whole body or a field.
        assert_eq!(ok("null"), IdentifyRequest::default());
        let r = ok(r#"{"client_id":null,"msg_timeout":null,"hostname":"h"}"#);
        assert_eq!(
            (r.client_id.as_str(), r.msg_timeout, r.hostname.as_str()),
            ("", 0, "h")
        );
        // Keys match whatever their case; a repeated key keeps its last value.
        assert!(ok(r#"{"Feature_Negotiation":true}"#).feature_negotiation);
        assert_eq!(ok(r#"{"client_id":"a","client_id":"b"}"#).client_id, "b");
        // Both offered only when nsqd's --deflate and --snappy are both on.
        let one_off = IdentifyLimits {
            both_compressions_offered: false,
            ..limits
        };
        let r =
            IdentifyRequest::parse(br#"{"feature_negotiation":true,"snappy":true,"deflate":true}"#)
                .unwrap();
        assert!(r.negotiate(&one_off).is_ok());
    }

    #[test]
    fn nsqd_rejections() {
        let limits = IdentifyLimits::default();
        let check = |json: &str| {
            IdentifyRequest::parse(json.as_bytes())
                .and_then(|r| r.negotiate(&limits))
                .unwrap_err()
                .frame_text()
        };
        assert_eq!(
            check(r#"{"heartbeat_interval":500}"#),
            "E_BAD_BODY IDENTIFY heartbeat interval (500) is invalid"
        );
        assert_eq!(
            check("{nope"),
            "E_BAD_BODY IDENTIFY failed to decode JSON body"
        );
        assert_eq!(
            check(r#"{"feature_negotiation":true,"snappy":true,"deflate":true}"#),
            "E_IDENTIFY_FAILED cannot enable both deflate and snappy compression"
        );
        assert_eq!(
            check(r#"[]"#),
            "E_BAD_BODY IDENTIFY failed to decode JSON body"
        );
        assert_eq!(
            check(r#"{"sample_rate":5000000000}"#),
            "E_BAD_BODY IDENTIFY failed to decode JSON body"
        );
        assert_eq!(
            check(r#"{"msg_timeout":999}"#),
            "E_BAD_BODY IDENTIFY msg timeout (999) is invalid"
        );
        assert_eq!(
            check(r#"{"sample_rate":100}"#),
            "E_BAD_BODY IDENTIFY sample rate (100) is invalid"
        );
        assert_eq!(
            check(r#"{"output_buffer_size":63}"#),
            "E_BAD_BODY IDENTIFY output buffer size (63) is invalid"
        );
        assert_eq!(
            check(r#"{"output_buffer_timeout":10}"#),
            "E_BAD_BODY IDENTIFY output buffer timeout (10) is invalid"
        );
    }

    #[test]
    fn settings_from_request() {
        let req = IdentifyRequest::parse(
            br#"{"heartbeat_interval":-1,"output_buffer_size":-1,"msg_timeout":12345,"sample_rate":10,"long_id":"x"}"#,
        )
        .unwrap();
        let n = req.negotiate(&IdentifyLimits::default()).unwrap();
        assert_eq!(n.heartbeat_ms, None);
        assert_eq!(n.output_buffer_size, 1);
        assert_eq!(n.output_buffer_timeout_ms, 0);
        assert_eq!(n.msg_timeout_ms, 12345);
        assert_eq!(n.sample_rate, 10);
    }
}
