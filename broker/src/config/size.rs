//! Byte sizes as `--retention-bytes` and `POST /topic/config` take them: a whole number of
//! bytes, optionally followed by a unit, binary (`KiB`, `MiB`, `GiB`, `TiB`: powers of 1024)
//! or decimal (`KB`, `MB`, `GB`, `TB`: powers of 1000), or `B`. Units are matched without
//! regard to case; no space, fraction or sign is taken, and a size past 2^64 is refused.

/// Parses a byte size (see the module doc).
pub fn parse_byte_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let digits = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    if digits == 0 {
        return Err(format!(
            "{s:?} is not a byte size; write it like 1048576, 512MiB, 10GiB or 1GB"
        ));
    }
    let n: u64 = t[..digits]
        .parse()
        .map_err(|_| format!("{s:?} is too large a byte size"))?;
    let unit: u64 = match t[digits..].to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kib" => 1 << 10,
        "mib" => 1 << 20,
        "gib" => 1 << 30,
        "tib" => 1 << 40,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "tb" => 1_000_000_000_000,
        other => {
            return Err(format!(
                "{s:?}: unknown unit {other:?} (B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)"
            ))
        }
    };
    n.checked_mul(unit)
        .ok_or_else(|| format!("{s:?} is too large a byte size"))
}

#[cfg(test)]
mod tests {
    use super::parse_byte_size;

    #[test]
    fn sizes_and_units() {
        assert_eq!(parse_byte_size("0"), Ok(0));
        assert_eq!(parse_byte_size("1024"), Ok(1024));
        assert_eq!(parse_byte_size("512MiB"), Ok(512 << 20));
        assert_eq!(parse_byte_size("10GiB"), Ok(10 << 30));
        assert_eq!(parse_byte_size("10gib"), Ok(10 << 30));
        assert_eq!(parse_byte_size("1GB"), Ok(1_000_000_000));
        assert_eq!(parse_byte_size("7B"), Ok(7));
        for bad in [
            "",
            "GiB",
            "-1",
            "1.5GiB",
            "10 GiB",
            "10XB",
            "99999999999TiB",
        ] {
            assert!(parse_byte_size(bad).is_err(), "{bad:?}");
        }
    }
}
