//! Command-line conventions the binaries share with NSQ's Go programs: long flags written with
//! one dash (`-tcp-address=:4150`), and the log level names `fatal` included.

/// Rewrites each single-dash long flag whose name is in `known` (`-tcp-address=x`,
/// `-tcp-address x`) to its double-dash form, so that clap reads Go-style command lines.
/// Anything else, a value that starts with a dash included, is left as it is.
pub fn go_style_flags<I>(args: I, known: &[String]) -> Vec<String>
where
    I: IntoIterator<Item = String>,
{
    args.into_iter()
        .enumerate()
        .map(|(i, arg)| {
            let Some(rest) = arg.strip_prefix('-') else {
                return arg;
            };
            if i == 0 || rest.starts_with('-') {
                return arg;
            }
            let name = rest.split('=').next().unwrap_or_default();
            if known.iter().any(|k| k == name) {
                format!("-{arg}")
            } else {
                arg
            }
        })
        .collect()
}

/// A `--log-level` value as nsqd reads it (any case): `debug`, `info`, `warn`, `error`, or
/// `fatal` (logged as `error`, the most severe level there is here). Returns the level's
/// lower-case name.
pub fn log_level_name(s: &str) -> Result<&'static str, String> {
    match s.to_ascii_lowercase().as_str() {
        "debug" => Ok("debug"),
        "info" => Ok("info"),
        "warn" => Ok("warn"),
        "error" | "fatal" => Ok("error"),
        _ => Err(format!(
            "invalid log level {s:?}: debug, info, warn, error or fatal"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn known_single_dash_flags_get_two_dashes() {
        let known = strings(&["tcp-address", "log-level", "help"]);
        let out = go_style_flags(
            strings(&[
                "-prog",
                "-tcp-address=:1",
                "-log-level",
                "-x",
                "--help",
                "-nope",
                "v",
            ]),
            &known,
        );
        assert_eq!(
            out,
            strings(&[
                "-prog",
                "--tcp-address=:1",
                "--log-level",
                "-x",
                "--help",
                "-nope",
                "v"
            ])
        );
    }

    #[test]
    fn log_levels_as_nsqd_names_them() {
        assert_eq!(log_level_name("FATAL"), Ok("error"));
        assert_eq!(log_level_name("Warn"), Ok("warn"));
        assert!(log_level_name("loud").is_err());
        assert!(log_level_name("trace").is_err());
    }
}
