//! Which modules of one directory name which, read from the source: the graph the layering
//! tests check for layers and for cycles (a circle of imports makes a module unreadable on
//! its own).
//!
//! The nodes are the directory's children: `x.rs` and `x/` (with everything under it) are the
//! module `x`; the directory's own root file (`mod.rs`, `lib.rs`, `main.rs`) is a node named by
//! its stem. A file names a sibling `x` by `crate::<path of the directory>::x`, by the right
//! number of `super::` (one from `a.rs` or `a/mod.rs`, two from `a/b.rs`, ...) followed by `x`,
//! and, from the root file, by `x::` or `self::x`. Items of the root file are not a module:
//! a child using its parent's types adds no edge. Comments, string literals and unit tests
//! (`*tests.rs` files, an inline `#[cfg(test)] mod tests`) are not read: a doc link or a test
//! is no dependency.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Module name -> the sibling modules it names.
pub type Graph = BTreeMap<String, BTreeSet<String>>;

/// Every `.rs` file under `dir`, in a stable order.
pub fn source_files(dir: &Path) -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, &mut out);
    out.sort();
    out
}

/// The code of a file without comments, string contents and its inline unit-test module.
pub fn code_of(text: &str) -> String {
    let text = match text.find("#[cfg(test)]\nmod tests {") {
        Some(i) => &text[..i],
        None => text,
    };
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix("//") {
            rest = after.find('\n').map_or("", |i| &after[i..]);
        } else if let Some(after) = rest.strip_prefix("/*") {
            rest = after.find("*/").map_or("", |i| &after[i + 2..]);
        } else if rest.starts_with('"') {
            // A string may hold "//" or "crate::".
            let bytes = rest.as_bytes();
            let mut end = 1;
            while end < bytes.len() && bytes[end] != b'"' {
                end += if bytes[end] == b'\\' { 2 } else { 1 };
            }
            out.push_str("\"\"");
            rest = rest.get(end + 1..).unwrap_or("");
        } else if rest.starts_with('\'') && rest.get(2..3) == Some("'") {
            // A char literal such as '"' must not open a string.
            out.push_str("' '");
            rest = &rest[3..];
        } else if rest.starts_with("'\\") {
            let end = rest[2..].find('\'').map_or(rest.len(), |i| i + 3);
            out.push_str("' '");
            rest = &rest[end..];
        } else {
            let c = rest.chars().next().unwrap_or(' ');
            out.push(c);
            rest = &rest[c.len_utf8()..];
        }
    }
    out
}

fn ident_at(s: &str) -> &str {
    let end = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    &s[..end]
}

fn is_ident_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The first identifiers after every occurrence of `prefix` in `code` (where `prefix` is not
/// the tail of a longer path or identifier), including each item of a `prefix{a, b::c}` group.
pub fn names_after(code: &str, prefix: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut from = 0;
    while let Some(i) = code[from..].find(prefix) {
        let at = from + i;
        from = at + prefix.len();
        let before = code[..at].chars().next_back();
        if before.is_some_and(|c| is_ident_char(c) || c == ':') {
            continue;
        }
        let rest = &code[from..];
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 0;
            let mut at_item_start = true;
            for (j, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => at_item_start = true,
                    c if at_item_start && (c.is_ascii_alphabetic() || c == '_') => {
                        out.insert(ident_at(&group[j..]).to_string());
                        at_item_start = false;
                    }
                    _ => {}
                }
            }
        } else {
            let name = ident_at(rest);
            if !name.is_empty() {
                out.insert(name.to_string());
            }
        }
    }
    out
}

fn is_root_file(name: &str) -> bool {
    matches!(name, "mod.rs" | "lib.rs" | "main.rs")
}

fn is_test_file(name: &str) -> bool {
    name.ends_with("tests.rs")
}

/// The graph of the modules directly in `dir`, whose module path in its crate is `path`
/// (`&[]` for `src`, `&["tcp"]` for `src/tcp`).
pub fn sibling_graph(dir: &Path, path: &[&str]) -> Graph {
    let files = source_files(dir);
    assert!(!files.is_empty(), "no source under {}", dir.display());
    let node_of = |file: &Path| -> Option<(String, usize, bool)> {
        let rel = file.strip_prefix(dir).ok()?;
        let parts: Vec<String> = rel
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        let last = parts.last()?;
        if is_test_file(last) {
            return None;
        }
        if parts.len() == 1 && is_root_file(last) {
            return Some((last.trim_end_matches(".rs").to_string(), 0, true));
        }
        // `super::` hops from this file up to `dir`.
        let mut hops = parts.len();
        if last == "mod.rs" {
            hops -= 1;
        }
        Some((parts[0].trim_end_matches(".rs").to_string(), hops, false))
    };
    let nodes: Vec<(PathBuf, String, usize, bool)> = files
        .iter()
        .filter_map(|f| node_of(f).map(|(n, h, r)| (f.clone(), n, h, r)))
        .collect();
    let children: BTreeSet<String> = nodes
        .iter()
        .filter(|(_, _, _, root)| !root)
        .map(|(_, n, _, _)| n.clone())
        .collect();
    let crate_prefix = std::iter::once("crate")
        .chain(path.iter().copied())
        .collect::<Vec<_>>()
        .join("::")
        + "::";
    let mut graph = Graph::new();
    for (file, module, hops, root) in &nodes {
        let code = code_of(&std::fs::read_to_string(file).unwrap_or_default());
        let mut named = names_after(&code, &crate_prefix);
        if *root {
            named.extend(names_after(&code, "self::"));
            // A root file names its children with bare paths (`reader::run`).
            for child in &children {
                let bare = format!("{child}::");
                if code
                    .match_indices(&bare)
                    .any(|(i, _)| !code[..i].ends_with(|c: char| is_ident_char(c) || c == ':'))
                {
                    named.insert(child.clone());
                }
            }
        } else {
            named.extend(names_after(&code, &"super::".repeat(*hops)));
        }
        let deps = graph.entry(module.clone()).or_default();
        for dep in named {
            if dep != *module && children.contains(&dep) {
                deps.insert(dep);
            }
        }
    }
    graph
}

/// Every cycle found by a depth-first search, each as `a -> b -> a`.
pub fn cycles(graph: &Graph) -> Vec<String> {
    #[derive(Clone, Copy, PartialEq)]
    enum Colour {
        White,
        Grey,
        Black,
    }
    fn visit<'a>(
        m: &'a str,
        graph: &'a Graph,
        colour: &mut BTreeMap<&'a str, Colour>,
        path: &mut Vec<&'a str>,
        found: &mut Vec<String>,
    ) {
        colour.insert(m, Colour::Grey);
        path.push(m);
        for dep in graph.get(m).into_iter().flatten() {
            match colour.get(dep.as_str()).copied() {
                Some(Colour::White) => visit(dep, graph, colour, path, found),
                Some(Colour::Grey) => {
                    let from = path.iter().position(|p| *p == dep).unwrap_or(0);
                    found.push(format!("{} -> {dep}", path[from..].join(" -> ")));
                }
                _ => {}
            }
        }
        path.pop();
        colour.insert(m, Colour::Black);
    }
    let mut colour: BTreeMap<&str, Colour> =
        graph.keys().map(|k| (k.as_str(), Colour::White)).collect();
    let mut found = Vec::new();
    for m in graph.keys() {
        if colour.get(m.as_str()) == Some(&Colour::White) {
            visit(m, graph, &mut colour, &mut Vec::new(), &mut found);
        }
    }
    found
}

/// Panics naming every cycle among the modules directly in `dir` (module path `path`).
pub fn assert_no_cycle(dir: &Path, path: &[&str]) {
    let graph = sibling_graph(dir, path);
    let found = cycles(&graph);
    let edges: Vec<String> = graph
        .iter()
        .map(|(m, deps)| format!("  {m} -> {deps:?}"))
        .collect();
    assert!(
        found.is_empty(),
        "circles of imports in {}:\n{}\nthe graph:\n{}",
        dir.display(),
        found.join("\n"),
        edges.join("\n")
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reader_sees_what_it_must() {
        let code = code_of(
            "use crate::a::B; // crate::commented\nuse crate::{c, d::{e, f}, g};\nlet s = \"crate::quoted\";\nlet q = '\"'; /* crate::block */ crate::h::x(); other_crate::z();\n#[cfg(test)]\nmod tests { use crate::t; }",
        );
        let names: Vec<String> = names_after(&code, "crate::").into_iter().collect();
        assert_eq!(names, ["a", "c", "d", "g", "h"]);
    }

    #[test]
    fn a_circle_through_super_and_crate_paths_is_found() {
        let dir = std::env::temp_dir().join(format!("imports-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("b")).unwrap();
        std::fs::write(
            dir.join("mod.rs"),
            "mod a; mod b; pub struct T; fn f() { a::g() }",
        )
        .unwrap();
        std::fs::write(dir.join("a.rs"), "use super::T; use crate::net::b::h;").unwrap();
        std::fs::write(dir.join("b/mod.rs"), "mod c;").unwrap();
        std::fs::write(dir.join("b/c.rs"), "use super::super::a::x;").unwrap();
        std::fs::write(dir.join("b/c_tests.rs"), "use super::super::zzz;").unwrap();
        let graph = sibling_graph(&dir, &["net"]);
        assert_eq!(graph["mod"], BTreeSet::from(["a".to_string()]));
        assert_eq!(graph["a"], BTreeSet::from(["b".to_string()]));
        assert_eq!(graph["b"], BTreeSet::from(["a".to_string()]));
        assert_eq!(cycles(&graph), ["a -> b -> a"]);
        std::fs::write(dir.join("b/c.rs"), "use super::super::T;").unwrap();
        assert!(cycles(&sibling_graph(&dir, &["net"])).is_empty());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
