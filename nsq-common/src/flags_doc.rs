//! The flags reference, `docs/flags.md`, generated from each binary's clap definition: one
//! Markdown table per binary (flag, config-file key, default, meaning) between that binary's
//! two marker lines, and the check that the committed file still matches the code.
//!
//! Invariants: a binary's section is only ever rewritten between its own markers (the rest of
//! the file is prose kept by hand); the table lists every visible long flag in clap's order;
//! a config-file key is the flag's name with `_` for `-` unless the binary renames it, and
//! `--config` itself has none. Each binary's crate has a unit test calling [`check_section`],
//! so `cargo test` fails when a flag's name, default or help text changes without the file.

use std::path::Path;

/// The environment variable that makes [`check_section`] write the file instead of failing.
pub const UPDATE_VAR: &str = "UPDATE_FLAGS_DOC";

/// The command that regenerates every section of the file.
pub const REGENERATE: &str =
    "UPDATE_FLAGS_DOC=1 cargo test --release --workspace --lib --bins flags_doc";

/// The Markdown table of `command`'s long flags. `renamed`: (config key, flag name) pairs
/// where the binary's config file does not spell the key as the flag with `_` for `-`.
pub fn table(command: &clap::Command, renamed: &[(&str, &str)]) -> String {
    let mut out =
        String::from("| flag | config key | default | meaning |\n| --- | --- | --- | --- |\n");
    for arg in command.get_arguments() {
        let Some(long) = arg.get_long() else { continue };
        if arg.is_hide_set() || long == "help" || long == "version" {
            continue;
        }
        let key = if long == "config" {
            "–".to_string()
        } else {
            let key = renamed
                .iter()
                .find(|(_, flag)| *flag == long)
                .map_or_else(|| long.replace('-', "_"), |(key, _)| key.to_string());
            format!("`{key}`")
        };
        let repeatable = matches!(arg.get_action(), clap::ArgAction::Append);
        let defaults: Vec<String> = arg
            .get_default_values()
            .iter()
            .map(|v| v.to_string_lossy().into_owned())
            .collect();
        let default = match (defaults.as_slice(), repeatable) {
            ([], true) => "none (repeatable)".to_string(),
            ([], false) => "–".to_string(),
            ([v], _) if v.is_empty() => "`\"\"`".to_string(),
            (vs, _) => format!("`{}`", vs.join(",")),
        };
        let help = arg
            .get_help()
            .map(|h| h.to_string())
            .unwrap_or_default()
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        out.push_str(&format!(
            "| `--{long}` | {key} | {default} | {} |\n",
            escape(&help)
        ));
    }
    out
}

/// Help text made safe inside a Markdown table cell: `|` would end the cell and `<addr>`
/// would read as an HTML tag.
fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('|', "\\|")
}

/// The marker lines around `binary`'s section.
fn markers(binary: &str) -> (String, String) {
    (
        format!("<!-- flags:{binary}:begin (generated from the code: do not edit) -->"),
        format!("<!-- flags:{binary}:end -->"),
    )
}

/// Checks that `doc` holds `generated` as `binary`'s section. With `UPDATE_FLAGS_DOC=1` in
/// the environment, writes it there instead. `Err`: what is wrong and how to fix it.
pub fn check_section(doc: &Path, binary: &str, generated: &str) -> Result<(), String> {
    let text =
        std::fs::read_to_string(doc).map_err(|e| format!("cannot read {}: {e}", doc.display()))?;
    let name = doc.display().to_string();
    match compare(&name, &text, binary, generated)? {
        None => Ok(()),
        Some(_) if std::env::var(UPDATE_VAR).is_ok_and(|v| v == "1") => {
            let updated = replace_section(&text, binary, generated)?;
            std::fs::write(doc, updated).map_err(|e| format!("cannot write {name}: {e}"))
        }
        Some(stale) => Err(stale),
    }
}

/// Where `binary`'s section lies in `text`: the byte range between its two markers.
fn section(name: &str, text: &str, binary: &str) -> Result<std::ops::Range<usize>, String> {
    let (begin, end) = markers(binary);
    let (Some(start), Some(stop)) = (text.find(&begin), text.find(&end)) else {
        return Err(format!(
            "{name} has no section for {binary}: add the lines\n{begin}\n{end}\nthen run `{REGENERATE}`"
        ));
    };
    let body_start = start + begin.len();
    if stop < body_start {
        return Err(format!(
            "{name}: the end marker of {binary}'s section comes before its start"
        ));
    }
    Ok(body_start..stop)
}

/// `None` when `text` holds `generated` as `binary`'s section, else the message saying the
/// file is stale, with the first line that differs.
fn compare(
    name: &str,
    text: &str,
    binary: &str,
    generated: &str,
) -> Result<Option<String>, String> {
    let current = &text[section(name, text, binary)?];
    let wanted = format!("\n{generated}");
    if current == wanted {
        return Ok(None);
    }
    let first_difference = current
        .lines()
        .zip(wanted.lines())
        .find(|(a, b)| a != b)
        .map_or_else(
            || "a row added or removed".to_string(),
            |(a, b)| format!("\n  file: {a}\n  code: {b}"),
        );
    Ok(Some(format!(
        "{name} is stale for {binary}: run `{REGENERATE}` to regenerate it. First difference: {first_difference}"
    )))
}

/// `text` with `binary`'s section replaced by `generated`.
fn replace_section(text: &str, binary: &str, generated: &str) -> Result<String, String> {
    let range = section("the flags reference", text, binary)?;
    Ok(format!(
        "{}\n{generated}{}",
        &text[..range.start],
        &text[range.end..]
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{CommandFactory, Parser};

    /// A stand-in for a binary's flags.
    #[derive(Parser)]
    #[allow(dead_code)]
    struct Flags {
        /// <addr>:<port> to listen on | or a path
        #[arg(long, default_value = "0.0.0.0:4150")]
        tcp_address: String,
        /// lookup TCP address (may be given multiple times)
        #[arg(long = "lookupd-tcp-address")]
        lookupd_tcp_addresses: Vec<String>,
        /// path to certificate file
        #[arg(long, default_value = "")]
        tls_cert: String,
        /// path to config file
        #[arg(long)]
        config: Option<String>,
    }

    const RENAMED: &[(&str, &str)] = &[("nsqlookupd_tcp_addresses", "lookupd-tcp-address")];

    #[test]
    fn rows_name_the_key_the_default_and_the_escaped_help() {
        let t = table(&Flags::command(), RENAMED);
        let rows: Vec<&str> = t.lines().collect();
        assert_eq!(rows.len(), 6, "{t}");
        assert_eq!(
            rows[2],
            "| `--tcp-address` | `tcp_address` | `0.0.0.0:4150` | &lt;addr&gt;:&lt;port&gt; to listen on \\| or a path |"
        );
        assert_eq!(
            rows[3],
            "| `--lookupd-tcp-address` | `nsqlookupd_tcp_addresses` | none (repeatable) | lookup TCP address (may be given multiple times) |"
        );
        assert_eq!(
            rows[4],
            "| `--tls-cert` | `tls_cert` | `\"\"` | path to certificate file |"
        );
        assert_eq!(rows[5], "| `--config` | – | – | path to config file |");
    }

    #[test]
    fn a_stale_section_is_an_error_naming_the_command() {
        let (begin, end) = markers("x");
        let old = format!("# intro\n{begin}\n| old |\n{end}\nafter\n");
        let err = compare("flags.md", &old, "x", "| new |\n")
            .unwrap()
            .unwrap();
        assert!(
            err.contains("flags.md is stale for x") && err.contains(REGENERATE),
            "{err}"
        );
        let new = replace_section(&old, "x", "| new |\n").unwrap();
        assert_eq!(new, format!("# intro\n{begin}\n| new |\n{end}\nafter\n"));
        assert_eq!(compare("flags.md", &new, "x", "| new |\n"), Ok(None));
        let err = compare("flags.md", &new, "y", "| new |\n").unwrap_err();
        assert!(err.contains("has no section for y"), "{err}");
    }
}
