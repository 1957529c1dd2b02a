//! The broker's layering, checked on its source: every top-level module of `broker/src` belongs
//! to one layer of [`LAYERS`] (the same list as ARCHITECTURE.md's "Modules by layer"), may name
//! (`crate::<module>`) only modules of its own layer or below, and no two modules name each
//! other through any chain (no cycle). A new module must be given a layer here.
//!
//! Unit tests (`tests.rs` files, inline `#[cfg(test)] mod tests`) and comments are not
//! counted: a test may reach anything, a doc link is no dependency.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Bottom first. Each entry: the layer's name, its top-level modules.
const LAYERS: &[(&str, &[&str])] = &[
    (
        "utilities and OS glue",
        &[
            "sys",
            "config",
            "tls",
            "auth",
            "work_set",
            "ids",
            "id_table",
            "deadlines",
            "civil_time",
        ],
    ),
    ("storage", &["storage"]),
    (
        "domain",
        &["timer", "latency", "channel", "topic", "stats", "statsd"],
    ),
    ("mail and start-up", &["mailbox", "admin_ops", "startup"]),
    ("owner", &["shard", "owner_sim"]),
    ("front-ends", &["tcp", "http"]),
    (
        "control",
        &["control", "lookup_reg", "launch", "lib", "main"],
    ),
];

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|(_, mods)| mods.contains(&module))
}

fn source_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            source_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level module a file belongs to (`shard/flusher.rs` -> `shard`, `lib.rs` -> `lib`).
fn module_of(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).unwrap_or(file);
    let first = rel
        .components()
        .next()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .unwrap_or_default();
    first.trim_end_matches(".rs").to_string()
}

/// The code of a file without comments and without its inline unit-test module.
fn code_of(text: &str) -> String {
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
            // Skip string literals (they may hold "//" or "crate::").
            let mut end = 1;
            let bytes = rest.as_bytes();
            while end < bytes.len() && bytes[end] != b'"' {
                end += if bytes[end] == b'\\' { 2 } else { 1 };
            }
            out.push_str("\"\"");
            rest = rest.get(end + 1..).unwrap_or("");
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

/// The top-level modules `code` names through `crate::`.
fn named_modules(code: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = code;
    while let Some(i) = rest.find("crate::") {
        rest = &rest[i + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            // `use crate::{a, b::c, d::{e, f}}`: the first identifier of each top-level item.
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

fn dependency_graph() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    source_files(&src, &mut files);
    assert!(!files.is_empty(), "no source under {}", src.display());
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in files {
        if file.file_name().is_some_and(|n| n == "tests.rs") {
            continue;
        }
        let module = module_of(&src, &file);
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        let deps = graph.entry(module.clone()).or_default();
        for dep in named_modules(&code_of(&text)) {
            if dep != module && dep != "self" && dep != "super" {
                deps.insert(dep);
            }
        }
    }
    graph
}

#[test]
fn every_module_has_a_layer_and_names_only_its_layer_or_below() {
    let graph = dependency_graph();
    let mut wrong = Vec::new();
    for (module, deps) in &graph {
        let Some(mine) = layer_of(module) else {
            wrong.push(format!(
                "{module}: in no layer (add it to LAYERS and ARCHITECTURE.md)"
            ));
            continue;
        };
        for dep in deps {
            match layer_of(dep) {
                Some(theirs) if theirs <= mine => {}
                Some(theirs) => wrong.push(format!(
                    "{module} ({}) names {dep} ({}), a layer above it",
                    LAYERS[mine].0, LAYERS[theirs].0
                )),
                None => wrong.push(format!("{module} names {dep}, which is in no layer")),
            }
        }
    }
    assert!(wrong.is_empty(), "layering broken:\n{}", wrong.join("\n"));
}

#[test]
fn no_module_cycle() {
    let graph = dependency_graph();
    // Depth-first search with colours; a grey module met again closes a cycle.
    #[derive(Clone, Copy, PartialEq)]
    enum Colour {
        White,
        Grey,
        Black,
    }
    let mut colour: BTreeMap<&str, Colour> =
        graph.keys().map(|k| (k.as_str(), Colour::White)).collect();
    let mut cycles = Vec::new();
    fn visit<'a>(
        m: &'a str,
        graph: &'a BTreeMap<String, BTreeSet<String>>,
        colour: &mut BTreeMap<&'a str, Colour>,
        path: &mut Vec<&'a str>,
        cycles: &mut Vec<String>,
    ) {
        colour.insert(m, Colour::Grey);
        path.push(m);
        for dep in graph.get(m).into_iter().flatten() {
            match colour.get(dep.as_str()).copied() {
                Some(Colour::White) => visit(dep, graph, colour, path, cycles),
                Some(Colour::Grey) => {
                    let from = path.iter().position(|p| *p == dep).unwrap_or(0);
                    cycles.push(format!("{} -> {dep}", path[from..].join(" -> ")));
                }
                _ => {}
            }
        }
        path.pop();
        colour.insert(m, Colour::Black);
    }
    for m in graph.keys() {
        if colour.get(m.as_str()) == Some(&Colour::White) {
            visit(m, &graph, &mut colour, &mut Vec::new(), &mut cycles);
        }
    }
    assert!(cycles.is_empty(), "module cycles:\n{}", cycles.join("\n"));
}

#[test]
fn the_parser_sees_what_it_must() {
    let code = code_of(
        "use crate::a::B; // crate::commented\nuse crate::{c, d::{e, f}, g};\nlet s = \"crate::quoted\";\n/* crate::block */ crate::h::x();\n#[cfg(test)]\nmod tests { use crate::t; }",
    );
    let names: Vec<String> = named_modules(&code).into_iter().collect();
    assert_eq!(names, ["a", "c", "d", "g", "h"]);
}
