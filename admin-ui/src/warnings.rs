//! What did not answer, as admin-ui's JSON answers say it: nsqadmin's `message`
//! (`WARNING: ` and each warning joined) and admin-ui's `warnings` list.
//!
//! Invariant: a warning appears once, in the order first met.

use serde_json::Value;
use std::collections::BTreeSet;

/// nsqadmin's `message` for what did not answer: empty, or `WARNING: ` and each joined.
pub fn warn_message(warnings: &[String]) -> String {
    if warnings.is_empty() {
        String::new()
    } else {
        format!("WARNING: {}", warnings.join("; "))
    }
}

/// `answer` with nsqadmin's `message` (empty, or `WARNING: ` and what did not answer) and
/// admin-ui's `warnings` list (the same, one string each).
pub fn with_warnings(mut answer: Value, warnings: Vec<String>) -> Value {
    let warnings = dedup(warnings);
    if let Some(o) = answer.as_object_mut() {
        o.insert("message".into(), warn_message(&warnings).into());
        o.insert("warnings".into(), warnings.into());
    }
    answer
}

/// `v` without repeats, first occurrences kept in order.
pub fn dedup(mut v: Vec<String>) -> Vec<String> {
    let mut seen = BTreeSet::new();
    v.retain(|w| seen.insert(w.clone()));
    v
}
