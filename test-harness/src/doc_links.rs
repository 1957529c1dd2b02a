//! A check of the documentation's relative links: every `[text](target)` in the guide's
//! Markdown files (README.md, ARCHITECTURE.md, CONTRIBUTING.md, docs/, and the crates' own
//! guides) that is not a URL must name a file or directory that exists, and a `#anchor` must
//! name a heading of its file (GitHub's slugs). Links in code blocks and code spans are not
//! links and are skipped. No Markdown file keeps a merge's conflict markers.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The Markdown files checked, relative to the workspace root (directories: their `*.md`,
/// recursively).
const CHECKED: &[&str] = &[
    "README.md",
    "ARCHITECTURE.md",
    "CONTRIBUTING.md",
    "docs",
    "deploy/README.md",
    "lookup/README.md",
    "admin-ui/API.md",
    "admin-ui/UI.md",
];

fn markdown_files(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack: Vec<PathBuf> = CHECKED.iter().map(|p| root.join(p)).collect();
    while let Some(p) = stack.pop() {
        if p.is_dir() {
            for entry in std::fs::read_dir(&p).expect("a docs directory is readable") {
                stack.push(entry.expect("a directory entry is readable").path());
            }
        } else if p.extension().is_some_and(|e| e == "md") && p.exists() {
            out.push(p);
        }
    }
    out.sort();
    out
}

/// `text` without fenced code blocks and inline code spans (both replaced by nothing, line
/// breaks kept so that line numbers hold).
fn prose(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if !fenced {
            let mut in_code = false;
            for c in line.chars() {
                if c == '`' {
                    in_code = !in_code;
                } else if !in_code {
                    out.push(c);
                }
            }
        }
        out.push('\n');
    }
    out
}

/// GitHub's anchor for a heading: lower case, punctuation other than `-` and `_` dropped,
/// spaces as `-`.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors of a Markdown file's headings (a repeated heading gets `-1`, `-2`, ...).
fn anchors(text: &str) -> Vec<String> {
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut out = Vec::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        let Some(heading) = line.strip_prefix('#') else {
            continue;
        };
        if fenced {
            continue;
        }
        let base = slug(heading.trim_start_matches('#'));
        let n = seen.entry(base.clone()).or_insert(0);
        out.push(if *n == 0 {
            base.clone()
        } else {
            format!("{base}-{n}")
        });
        *n += 1;
    }
    out
}

/// The targets of `](target)` links in `text`, with their line numbers.
fn links(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (i, line) in prose(text).lines().enumerate() {
        let mut rest = line;
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let Some(end) = after.find(')') else { break };
            let target = after[..end].split_whitespace().next().unwrap_or_default();
            out.push((i + 1, target.to_string()));
            rest = &after[end..];
        }
    }
    out
}

/// What is wrong with `file`'s links, one message each.
fn broken_links(root: &Path, file: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(file).expect("a Markdown file is readable");
    let name = file
        .strip_prefix(root)
        .unwrap_or(file)
        .display()
        .to_string();
    let mut problems = Vec::new();
    for (line, target) in links(&text) {
        if target.is_empty() || target.contains("://") || target.starts_with("mailto:") {
            continue;
        }
        let (path, anchor) = match target.split_once('#') {
            Some((p, a)) => (p, Some(a)),
            None => (target.as_str(), None),
        };
        let dest = if path.is_empty() {
            file.to_path_buf()
        } else {
            file.parent().unwrap_or(root).join(path)
        };
        if !dest.exists() {
            problems.push(format!("{name}:{line}: `{target}`: no such file"));
            continue;
        }
        if let Some(anchor) = anchor {
            if dest.extension().is_some_and(|e| e == "md") {
                let dest_text = std::fs::read_to_string(&dest).expect("a linked file is readable");
                if !anchors(&dest_text).iter().any(|a| a == anchor) {
                    problems.push(format!(
                        "{name}:{line}: `{target}`: no heading with anchor #{anchor}"
                    ));
                }
            }
        }
    }
    problems
}

#[test]
fn documentation_links_resolve() {
    let root = crate::workspace_root();
    let files = markdown_files(&root);
    assert!(
        files.len() > 5,
        "the documentation was not found under {}",
        root.display()
    );
    let problems: Vec<String> = files.iter().flat_map(|f| broken_links(&root, f)).collect();
    assert!(
        problems.is_empty(),
        "broken links in the documentation:\n{}",
        problems.join("\n")
    );
}

/// A line a merge left unresolved (`<<<<<<< `, `=======`, `>>>>>>> ` at its start).
fn conflict_markers(text: &str) -> Vec<usize> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| l.starts_with("<<<<<<< ") || *l == "=======" || l.starts_with(">>>>>>> "))
        .map(|(i, _)| i + 1)
        .collect()
}

#[test]
fn no_merge_conflict_markers_in_the_documentation() {
    let root = crate::workspace_root();
    let mut found = Vec::new();
    for file in markdown_files(&root) {
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        for line in conflict_markers(&text) {
            let name = file.strip_prefix(&root).unwrap_or(&file).display();
            found.push(format!("{name}:{line}"));
        }
    }
    assert!(
        found.is_empty(),
        "unresolved merge markers:\n{}",
        found.join("\n")
    );
    assert_eq!(
        conflict_markers("a\n<<<<<<< HEAD\nb\n=======\nc\n>>>>>>> x\n"),
        [2, 4, 6]
    );
}

#[test]
fn slugs_and_links_are_read_as_github_does() {
    assert_eq!(slug(" HTTP `/pub`"), "http-pub");
    assert_eq!(
        slug(" On-disk format (version 2; version 1 is read)"),
        "on-disk-format-version-2-version-1-is-read"
    );
    assert_eq!(anchors("# A\n```\n# not\n```\n## A\n"), ["a", "a-1"]);
    assert_eq!(
        links("see [x](a.md#b) and `[y](code)` and [z](c/)\n```\n[w](d)\n```\n"),
        [(1, "a.md#b".to_string()), (1, "c/".to_string())]
    );
}
