//! Topic and channel names: `^[.a-zA-Z0-9_-]+(#ephemeral)?$`, 1 to 64 characters in all.

/// The suffix that makes a topic or channel ephemeral (memory only, gone with its consumers).
pub const EPHEMERAL_SUFFIX: &str = "#ephemeral";
/// The longest valid name, suffix included.
pub const MAX_NAME_LENGTH: usize = 64;

/// True when `name` is a valid topic name.
pub fn is_valid_topic_name(name: &str) -> bool {
    is_valid_name(name)
}

/// True when `name` is a valid channel name.
pub fn is_valid_channel_name(name: &str) -> bool {
    is_valid_name(name)
}

/// True when a (valid) name ends in `#ephemeral`.
pub fn is_ephemeral(name: &str) -> bool {
    name.ends_with(EPHEMERAL_SUFFIX)
}

fn is_valid_name(name: &str) -> bool {
    if name.is_empty() || name.len() > MAX_NAME_LENGTH {
        return false;
    }
    let stem = name.strip_suffix(EPHEMERAL_SUFFIX).unwrap_or(name);
    !stem.is_empty()
        && stem
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_nsq_names() {
        for n in ["a", "test_topic", "a.b-c_d", "x#ephemeral", &"a".repeat(64)] {
            assert!(is_valid_topic_name(n), "{n}");
        }
        let long_eph = format!("{}#ephemeral", "a".repeat(54));
        assert!(is_valid_channel_name(&long_eph));
    }

    #[test]
    fn rejects_bad_names() {
        let too_long = "a".repeat(65);
        let too_long_eph = format!("{}#ephemeral", "a".repeat(55));
        for n in [
            "",
            "bad*topic",
            "bad!chan",
            "#ephemeral",
            "a#ephemeral#ephemeral",
            "a b",
            "a#eph",
            "ü",
            too_long.as_str(),
            too_long_eph.as_str(),
        ] {
            assert!(!is_valid_topic_name(n), "{n}");
        }
    }

    #[test]
    fn ephemeral_suffix() {
        assert!(is_ephemeral("c#ephemeral"));
        assert!(!is_ephemeral("c"));
    }
}
