//! nsq_to_nsq's JSON filters, as NSQ's: `--require-json-field` (with `--require-json-value`)
//! decides whether a message passes, `--whitelist-json-field` rewrites it to those fields only.
//!
//! Rules (NSQ's): a body that is not a JSON object is dropped (logged, FINished); without the
//! required field it is dropped, and when a value is required too it also counts as a failure
//! (REQ with backoff). A required value matches a string field equal to it, or, when the value
//! reads as a number, a number field equal to it; any other field type never matches. The
//! rewritten body has its fields in key order and whole numbers written as integers.

use bytes::Bytes;
use serde_json::{Map, Value};

/// What to do with one message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Publish this body.
    Pass(Bytes),
    /// FIN without publishing.
    Drop,
    /// REQ with backoff, without publishing.
    Backoff,
}

/// The filter settings.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    pub require_field: String,
    pub require_value: String,
    pub whitelist: Vec<String>,
}

impl Filter {
    /// True when messages are published as they come.
    pub fn is_noop(&self) -> bool {
        self.require_field.is_empty() && self.whitelist.is_empty()
    }

    /// The verdict on `body`.
    pub fn apply(&self, body: &Bytes) -> Verdict {
        if self.is_noop() {
            return Verdict::Pass(body.clone());
        }
        let Ok(Value::Object(js)) = serde_json::from_slice::<Value>(body) else {
            tracing::error!("Unable to decode json: {}", String::from_utf8_lossy(body));
            return Verdict::Drop;
        };
        if !self.require_field.is_empty() {
            match js.get(&self.require_field) {
                None if !self.require_value.is_empty() => {
                    tracing::error!("missing field to check required value");
                    return Verdict::Backoff;
                }
                None => return Verdict::Drop,
                Some(v) if !self.require_value.is_empty() && !self.value_matches(v) => {
                    return Verdict::Drop
                }
                Some(_) => {}
            }
        }
        if self.whitelist.is_empty() {
            return Verdict::Pass(body.clone());
        }
        let mut out = Map::new();
        for key in &self.whitelist {
            if let Some(v) = js.get(key) {
                out.insert(key.clone(), whole_as_integer(v));
            }
        }
        match serde_json::to_vec(&Value::Object(out)) {
            Ok(b) => Verdict::Pass(Bytes::from(b)),
            Err(_) => Verdict::Backoff,
        }
    }

    fn value_matches(&self, v: &Value) -> bool {
        match v {
            Value::String(s) => *s == self.require_value,
            Value::Number(n) => match (self.require_value.parse::<f64>(), n.as_f64()) {
                (Ok(want), Some(got)) => want == got,
                _ => false,
            },
            _ => false,
        }
    }
}

/// A number whose float value is whole, written as an integer (as NSQ's Go does).
fn whole_as_integer(v: &Value) -> Value {
    if let Value::Number(n) = v {
        if let Some(f) = n.as_f64() {
            if n.is_f64() && f.fract() == 0.0 && f.abs() < 9.2e18 {
                return Value::from(f as i64);
            }
        }
    }
    v.clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(field: &str, value: &str, white: &[&str]) -> Filter {
        Filter {
            require_field: field.into(),
            require_value: value.into(),
            whitelist: white.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn require_field_and_value_as_nsq() {
        let pass = |b: &str| Verdict::Pass(Bytes::copy_from_slice(b.as_bytes()));
        assert_eq!(
            f("", "", &[]).apply(&Bytes::from_static(b"not json")),
            pass("not json")
        );
        assert_eq!(
            f("a", "", &[]).apply(&Bytes::from_static(b"not json")),
            Verdict::Drop
        );
        assert_eq!(
            f("a", "", &[]).apply(&Bytes::from_static(br#"{"a":1}"#)),
            pass(r#"{"a":1}"#)
        );
        assert_eq!(
            f("a", "", &[]).apply(&Bytes::from_static(br#"{"b":1}"#)),
            Verdict::Drop
        );
        assert_eq!(
            f("a", "x", &[]).apply(&Bytes::from_static(br#"{"b":1}"#)),
            Verdict::Backoff
        );
        assert_eq!(
            f("a", "x", &[]).apply(&Bytes::from_static(br#"{"a":"x"}"#)),
            pass(r#"{"a":"x"}"#)
        );
        assert_eq!(
            f("a", "x", &[]).apply(&Bytes::from_static(br#"{"a":"y"}"#)),
            Verdict::Drop
        );
        assert_eq!(
            f("a", "2", &[]).apply(&Bytes::from_static(br#"{"a":2.0}"#)),
            pass(r#"{"a":2.0}"#)
        );
        assert_eq!(
            f("a", "2", &[]).apply(&Bytes::from_static(br#"{"a":"2"}"#)),
            pass(r#"{"a":"2"}"#)
        );
        assert_eq!(
            f("a", "x", &[]).apply(&Bytes::from_static(br#"{"a":true}"#)),
            Verdict::Drop
        );
    }

    #[test]
    fn whitelist_keeps_the_fields_in_key_order() {
        let v = f("", "", &["z", "a", "missing"])
            .apply(&Bytes::from_static(br#"{"a":2.0,"b":1,"z":[1.5]}"#));
        assert_eq!(
            v,
            Verdict::Pass(Bytes::from_static(br#"{"a":2,"z":[1.5]}"#))
        );
    }
}
