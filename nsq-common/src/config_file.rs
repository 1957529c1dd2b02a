//! `--config FILE`: the TOML files nsqd, nsqlookupd and nsqadmin read, turned into the
//! command-line flags they stand for, ahead of the flags actually given, so a flag on the
//! command line always wins over the file (as nsqd's option resolution does).
//!
//! A key is a flag's name with `_` for `-` (`tcp_address` for `--tcp-address`), except the
//! names NSQ's programs rename (`nsqlookupd_tcp_addresses` for `--lookupd-tcp-address`), which
//! each binary passes in. Values take nsqd's types: strings, integers, floats, booleans, and
//! arrays for the flags given several times; an integer for a duration flag is milliseconds,
//! as nsqd reads it. Each value is checked by the binary's own flag parser, alone, before
//! anything starts: an unknown key, a nested table or a value the flag refuses is an error
//! naming the file, the line and the key (nsqd ignores some of these silently; we do not).

use clap::CommandFactory;
use std::path::{Path, PathBuf};

/// Why a config file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigFileError {
    #[error("cannot read config file {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("config file {}: not valid TOML: {message}", path.display())]
    Syntax { path: PathBuf, message: String },
    #[error("config file {} line {line}: unknown key `{key}`", path.display())]
    UnknownKey {
        path: PathBuf,
        line: usize,
        key: String,
    },
    #[error("config file {} line {line}: `{key}`: {reason}", path.display())]
    BadValue {
        path: PathBuf,
        line: usize,
        key: String,
        reason: String,
    },
}

/// The value of `--config` in `args` (`--config F`, `--config=F`, or Go's one-dash forms).
fn config_path(args: &[String]) -> Option<String> {
    let mut it = args.iter().skip(1);
    while let Some(a) = it.next() {
        let flag = a.strip_prefix("--").or_else(|| a.strip_prefix('-'));
        match flag {
            Some("config") => return it.next().cloned(),
            Some(f) if f.starts_with("config=") => return Some(f["config=".len()..].to_string()),
            _ => {}
        }
    }
    None
}

/// The long names of the flags given on the command line.
fn given_flags(args: &[String]) -> Vec<String> {
    args.iter()
        .skip(1)
        .filter_map(|a| a.strip_prefix("--").or_else(|| a.strip_prefix('-')))
        .map(|f| f.split('=').next().unwrap_or_default().to_string())
        .collect()
}

/// The line (from 1) where `key` is set in `text`, or 0 when it cannot be found.
fn line_of(text: &str, key: &str) -> usize {
    text.lines()
        .position(|l| {
            let l = l.trim_start();
            l.strip_prefix(key)
                .or_else(|| l.strip_prefix(&format!("\"{key}\"")))
                .is_some_and(|rest| rest.trim_start().starts_with('='))
        })
        .map_or(0, |i| i + 1)
}

/// One TOML value as the text of a flag's value (`None`: not a scalar).
fn scalar(v: &toml::Value) -> Option<String> {
    match v {
        toml::Value::String(s) => Some(s.clone()),
        toml::Value::Integer(i) => Some(i.to_string()),
        toml::Value::Float(f) => Some(f.to_string()),
        toml::Value::Boolean(b) => Some(b.to_string()),
        toml::Value::Datetime(d) => Some(d.to_string()),
        toml::Value::Array(_) | toml::Value::Table(_) => None,
    }
}

/// The flag words `value` stands for, as `F` accepts them: `--flag=value`, or for an integer
/// refused as such, `--flag=<value>ms` (a duration in milliseconds); for a boolean switch that
/// takes no value, the bare flag when true and nothing when false. `Err`: the parser's reason.
fn words_for<F: CommandFactory>(
    flag: &str,
    value: &toml::Value,
    text: &str,
) -> Result<Vec<String>, String> {
    let accepts = |words: &[String]| -> Result<(), String> {
        let mut argv = vec!["config-check".to_string()];
        argv.extend_from_slice(words);
        F::command()
            .try_get_matches_from(argv)
            .map(|_| ())
            .map_err(|e| {
                let rendered = e.to_string();
                rendered
                    .lines()
                    .find(|l| !l.trim().is_empty())
                    .unwrap_or_default()
                    .trim_start_matches("error: ")
                    .to_string()
            })
    };
    let plain = vec![format!("--{flag}={text}")];
    let first = match accepts(&plain) {
        Ok(()) => return Ok(plain),
        Err(e) => e,
    };
    match value {
        toml::Value::Integer(_) => {
            let ms = vec![format!("--{flag}={text}ms")];
            if accepts(&ms).is_ok() {
                return Ok(ms);
            }
        }
        toml::Value::Boolean(true) => {
            let bare = vec![format!("--{flag}")];
            if accepts(&bare).is_ok() {
                return Ok(bare);
            }
        }
        // A switch that is off unless given: false is its default.
        toml::Value::Boolean(false) if accepts(&[format!("--{flag}")]).is_ok() => {
            return Ok(Vec::new());
        }
        _ => {}
    }
    Err(first)
}

/// `args` (the program name first) with the flags of the `--config` file, if one is given,
/// inserted after the program name. `renamed`: (file key, flag name) pairs where NSQ's key is
/// not the flag's name with `_` for `-`.
pub fn with_config_file<F: CommandFactory>(
    args: Vec<String>,
    renamed: &[(&str, &str)],
) -> Result<Vec<String>, ConfigFileError> {
    with_config_file_ignoring::<F>(args, renamed, &[]).map(|(args, _)| args)
}

/// [`with_config_file`], where the keys in `ignored` are accepted with any value and stand for
/// no flag: keys the NSQ program knows (its options without a flag, its flags without an
/// option) that mean nothing here. Also returns the ignored keys the file sets, for the
/// program to say they have no effect.
pub fn with_config_file_ignoring<F: CommandFactory>(
    args: Vec<String>,
    renamed: &[(&str, &str)],
    ignored: &[&str],
) -> Result<(Vec<String>, Vec<String>), ConfigFileError> {
    let Some(path) = config_path(&args) else {
        return Ok((args, Vec::new()));
    };
    let path = PathBuf::from(path);
    let text = std::fs::read_to_string(&path).map_err(|source| ConfigFileError::Read {
        path: path.clone(),
        source,
    })?;
    let (words, found) = file_flags::<F>(&path, &text, renamed, ignored, &given_flags(&args))?;
    let mut out = Vec::with_capacity(args.len() + words.len());
    let mut rest = args.into_iter();
    out.extend(rest.next());
    out.extend(words);
    out.extend(rest);
    Ok((out, found))
}

/// The flag words of a config file's `text`, leaving out the flags in `given`, and the keys
/// of `ignored` it sets.
fn file_flags<F: CommandFactory>(
    path: &Path,
    text: &str,
    renamed: &[(&str, &str)],
    ignored: &[&str],
    given: &[String],
) -> Result<(Vec<String>, Vec<String>), ConfigFileError> {
    let table: toml::Table =
        text.parse()
            .map_err(|e: toml::de::Error| ConfigFileError::Syntax {
                path: path.to_path_buf(),
                message: e.message().to_string(),
            })?;
    let command = F::command();
    let known: Vec<String> = command
        .get_arguments()
        .filter_map(|a| a.get_long().map(str::to_string))
        .collect();
    let mut words = Vec::new();
    let mut found = Vec::new();
    for (key, value) in &table {
        if ignored.contains(&key.as_str()) {
            found.push(key.clone());
            continue;
        }
        let line = line_of(text, key);
        let flag = renamed
            .iter()
            .find(|(k, _)| k == key)
            .map_or_else(|| key.replace('_', "-"), |(_, f)| f.to_string());
        if !known.contains(&flag) || flag == "config" {
            return Err(ConfigFileError::UnknownKey {
                path: path.to_path_buf(),
                line,
                key: key.clone(),
            });
        }
        if given.contains(&flag) {
            continue;
        }
        let bad = |reason: String| ConfigFileError::BadValue {
            path: path.to_path_buf(),
            line,
            key: key.clone(),
            reason,
        };
        let repeatable = command
            .get_arguments()
            .find(|a| a.get_long() == Some(flag.as_str()))
            .is_some_and(|a| matches!(a.get_action(), clap::ArgAction::Append));
        let items: Vec<&toml::Value> = match value {
            toml::Value::Array(_) if !repeatable => {
                return Err(bad("a list, for a flag that takes one value".into()))
            }
            toml::Value::Array(items) => items.iter().collect(),
            toml::Value::Table(_) => return Err(bad("a table is not a flag value".into())),
            v => vec![v],
        };
        for item in items {
            let text =
                scalar(item).ok_or_else(|| bad("nested lists are not flag values".into()))?;
            words.extend(words_for::<F>(&flag, item, &text).map_err(bad)?);
        }
    }
    Ok((words, found))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser, Debug)]
    #[command(name = "t")]
    struct Flags {
        #[arg(long)]
        config: Option<String>,
        #[arg(long, default_value = "0.0.0.0:4150")]
        tcp_address: String,
        #[arg(long = "lookupd-tcp-address")]
        lookupd: Vec<String>,
        #[arg(long, default_value = "60s", value_parser = parse_secs)]
        msg_timeout: std::time::Duration,
        #[arg(long, default_value_t = 10)]
        mem_queue_size: u64,
        #[arg(long)]
        durable: bool,
        #[arg(long)]
        percentile: Vec<f64>,
    }

    fn parse_secs(s: &str) -> Result<std::time::Duration, String> {
        if let Some(ms) = s.strip_suffix("ms") {
            return ms
                .parse()
                .map(std::time::Duration::from_millis)
                .map_err(|e| format!("{e}"));
        }
        s.strip_suffix('s')
            .ok_or("missing unit")?
            .parse()
            .map(std::time::Duration::from_secs)
            .map_err(|e| format!("{e}"))
    }

    const RENAMED: &[(&str, &str)] = &[("nsqlookupd_tcp_addresses", "lookupd-tcp-address")];

    fn parse(file: &str, args: &[&str]) -> Result<Flags, ConfigFileError> {
        let dir = std::env::temp_dir().join(format!(
            "nsq-config-{}-{}",
            std::process::id(),
            args.len() + file.len()
        ));
        std::fs::create_dir_all(&dir).ok();
        let path = dir.join("t.cfg");
        std::fs::write(&path, file).ok();
        let mut argv = vec!["t".to_string(), format!("--config={}", path.display())];
        argv.extend(args.iter().map(|s| s.to_string()));
        let words = with_config_file::<Flags>(argv, RENAMED)?;
        Ok(Flags::try_parse_from(words).unwrap_or_else(|e| panic!("{e}")))
    }

    #[test]
    fn keys_types_and_overrides_as_nsq() {
        let f = parse(
            "tcp_address = \"127.0.0.1:4150\"\nnsqlookupd_tcp_addresses = [\"a:4160\", \"b:4160\"]\nmsg_timeout = 1500\nmem_queue_size = 5\ndurable = true\npercentile = [1.0, 0.99]\n",
            &["--mem-queue-size=7"],
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(f.tcp_address, "127.0.0.1:4150");
        assert_eq!(f.lookupd, ["a:4160", "b:4160"]);
        assert_eq!(f.msg_timeout, std::time::Duration::from_millis(1500));
        assert_eq!(f.mem_queue_size, 7, "the command line wins");
        assert!(f.durable);
        assert_eq!(f.percentile, [1.0, 0.99]);
        let f =
            parse("durable = false\nmsg_timeout = \"2s\"\n", &[]).unwrap_or_else(|e| panic!("{e}"));
        assert!(!f.durable);
        assert_eq!(f.msg_timeout, std::time::Duration::from_secs(2));
    }

    #[test]
    fn ignored_keys_are_accepted_with_any_value_and_reported() {
        let dir = std::env::temp_dir().join(format!("nsq-config-ignored-{}", std::process::id()));
        std::fs::create_dir_all(&dir).ok();
        let path = dir.join("t.cfg");
        std::fs::write(
            &path,
            "scan_interval = \"100ms\"\nmem_queue_size = 3\ndirty = 0.25\nconfig = \"x\"\n",
        )
        .ok();
        let argv = vec!["t".to_string(), format!("--config={}", path.display())];
        let (words, found) = with_config_file_ignoring::<Flags>(
            argv.clone(),
            RENAMED,
            &["scan_interval", "dirty", "config"],
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let f = Flags::try_parse_from(words).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(f.mem_queue_size, 3);
        let mut found = found;
        found.sort();
        assert_eq!(found, ["config", "dirty", "scan_interval"]);
        // Not ignored: still refused.
        let e = with_config_file::<Flags>(argv, RENAMED)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains("line 4: unknown key `config`"), "{e}");
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn errors_name_the_line_and_the_key() {
        let e = parse("tcp_address = \"x\"\n\nno_such_key = 1\n", &[])
            .err()
            .map(|e| e.to_string());
        let e = e.unwrap_or_default();
        assert!(e.contains("line 3: unknown key `no_such_key`"), "{e}");
        let e = parse("mem_queue_size = \"many\"\n", &[])
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains("line 1: `mem_queue_size`:"), "{e}");
        let e = parse("tcp_address = [\"a\", \"b\"]\n", &[])
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains("a list, for a flag that takes one value"), "{e}");
        let e = parse("[section]\nx = 1\n", &[])
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains("unknown key `section`"), "{e}");
        let e = parse("tcp_address = \n", &[])
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains("not valid TOML"), "{e}");
    }
}
