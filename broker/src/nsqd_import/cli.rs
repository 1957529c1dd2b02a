//! `broker import-nsqd`: the explicit form of the import, for an operator who wants to see
//! what an nsqd data directory holds first (`--dry-run`: counts only, nothing written) or to
//! import one into a broker's data path by hand.
//!
//! `broker import-nsqd [--dry-run] [--from NSQD_DIR] <the broker's own flags>`: the broker's
//! flags (`--data-path`, `--max-bytes-per-file`, `--config`, ...) say where the import goes,
//! exactly as they would for `broker` itself; `--from` defaults to the data path. The nsqd
//! directory must not be in use (a running nsqd holds a lock on it). When a broker holds the
//! data path, the import is staged there and applied at that broker's next start.

use super::marker;
use crate::config::Config;
use crate::sys::dir_lock::{self, LockError};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// The subcommand's name, as the first argument.
pub const COMMAND: &str = "import-nsqd";

const USAGE: &str = "usage: broker import-nsqd [--dry-run] [--from NSQD_DATA_DIR] \
[--data-path DIR | --config FILE] [other broker flags]";

/// Runs the subcommand; `args` are the process's arguments after `import-nsqd`.
pub fn main(args: Vec<String>) -> ExitCode {
    match run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(text) => {
            eprintln!("broker import-nsqd: {text}");
            ExitCode::from(1)
        }
    }
}

struct Own {
    from: Option<PathBuf>,
    dry_run: bool,
    rest: Vec<String>,
}

/// Takes `--from`/`--dry-run` (one dash or two, `=` or a separate value) out of `args`.
fn split(args: impl IntoIterator<Item = String>) -> Result<Own, String> {
    let mut own = Own {
        from: None,
        dry_run: false,
        rest: Vec::new(),
    };
    let mut it = args.into_iter();
    while let Some(a) = it.next() {
        let flag = a.trim_start_matches('-');
        if a.starts_with('-') && (flag == "dry-run" || flag == "dry-run=true") {
            own.dry_run = true;
        } else if a.starts_with('-') && flag == "from" {
            let v = it.next().ok_or("--from needs a directory")?;
            own.from = Some(PathBuf::from(v));
        } else if let Some(v) = a
            .starts_with('-')
            .then(|| flag.strip_prefix("from="))
            .flatten()
        {
            own.from = Some(PathBuf::from(v));
        } else if a.starts_with('-') && (flag == "help" || flag == "h") {
            return Err(USAGE.to_string());
        } else {
            own.rest.push(a);
        }
    }
    Ok(own)
}

fn run(args: Vec<String>) -> Result<(), String> {
    let own = split(args)?;
    let argv = std::iter::once("broker".to_string()).chain(own.rest);
    let config = Config::parse_from(argv).map_err(|e| format!("{e}\n{USAGE}"))?;
    let data_path = config.data_path.clone();
    let from = own.from.unwrap_or_else(|| data_path.clone());
    let same = same_dir(&from, &data_path);

    // The source must not be in use: a running nsqd (or broker) holds its lock.
    // The source must not be in use: a running nsqd (or broker) holds its lock. A dry run
    // only reads, so it may look at a live directory, saying so.
    let in_use = format!(
        "{} is in use (a running nsqd or broker holds its lock): stop it first; nsqd writes \
         what it holds in memory to disk at a clean stop",
        from.display()
    );
    let _source_lock = match dir_lock::lock(&from) {
        Ok(l) => Some(l),
        Err(LockError::Held) if own.dry_run => {
            println!("note: {in_use}; these counts are of its files as they are now");
            None
        }
        Err(LockError::Held) => return Err(in_use),
        Err(LockError::Io(e)) => return Err(format!("cannot open {}: {e}", from.display())),
    };
    let source = super::source_name(&from);
    let mut survey = super::survey(&from).map_err(|e| e.to_string())?;
    survey.dir = PathBuf::from(&source);
    let fingerprint = marker::fingerprint(&from).map_err(|e| e.to_string())?;
    for note in &survey.notes {
        println!("note: {note}");
    }
    for line in survey.details() {
        println!("{line}");
    }
    println!("{}", survey.summary());
    if own.dry_run {
        println!("dry run: nothing written");
        return Ok(());
    }
    if let Some(e) = marker::read(&data_path)
        .map_err(|e| e.to_string())?
        .has(&fingerprint)
    {
        println!(
            "already imported into {} at {}: nothing to do",
            data_path.display(),
            e.imported_at
        );
        return Ok(());
    }
    // The data path: locked here, or held by a running broker (then staged for its restart).
    // Into another data path: locked here, or held by a running broker, for whose next
    // start the import is then staged. (The source itself is locked above.)
    let (broker_running, _data_lock) = if same {
        (false, None)
    } else {
        match dir_lock::lock(&data_path) {
            Ok(l) => (false, Some(l)),
            Err(LockError::Held) => (true, None),
            Err(LockError::Io(e)) => {
                return Err(format!("cannot open {}: {e}", data_path.display()))
            }
        }
    };
    let staging = super::stage(&survey, &data_path, config.max_bytes_per_file, fingerprint)
        .map_err(|e| e.to_string())?;
    if broker_running {
        println!(
            "staged in {}: the broker running on {} applies it at its next start (a clean \
             restart loses nothing)",
            staging.display(),
            data_path.display()
        );
        return Ok(());
    }
    super::commit(&data_path).map_err(|e| e.to_string())?;
    println!("imported into {}", data_path.display());
    Ok(())
}

fn same_dir(a: &Path, b: &Path) -> bool {
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_flags_are_taken_out_in_either_style() {
        let own = split(
            [
                "-from",
                "/n",
                "--dry-run",
                "--data-path=/b",
                "-mem-queue-size",
                "5",
            ]
            .map(String::from),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(own.from, Some(PathBuf::from("/n")));
        assert!(own.dry_run);
        assert_eq!(own.rest, ["--data-path=/b", "-mem-queue-size", "5"]);
        let own = split(vec!["--from=/x".into()]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(own.from, Some(PathBuf::from("/x")));
        assert!(split(vec!["--from".into()]).is_err());
    }
}
