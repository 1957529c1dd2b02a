//! The broker's layering, checked on its source: every top-level module of `broker/src` belongs
//! to one layer of [`LAYERS`] (the same list as ARCHITECTURE.md's "Modules by layer"), may name
//! (`crate::<module>`) only modules of its own layer or below, and no two modules name each
//! other through any chain (no cycle). A new module must be given a layer here.
//!
//! Inside `tcp/`, too, no two modules name each other through any chain.
//!
//! How the source is read (`test_harness::imports`): unit tests (`*tests.rs` files, inline
//! `#[cfg(test)] mod tests`) and comments are not counted: a test may reach anything, a doc
//! link is no dependency.

use std::path::Path;
use test_harness::imports;

/// Bottom first. Each entry: the layer's name, its top-level modules.
const LAYERS: &[(&str, &[&str])] = &[
    (
        "utilities and OS glue",
        &[
            "sys",
            "config",
            "placement",
            "tls",
            "auth",
            "work_set",
            "ids",
            "id_table",
            "deadlines",
            "civil_time",
            "cluster",
        ],
    ),
    ("storage", &["storage"]),
    (
        "domain",
        &[
            "timer",
            "latency",
            "channel",
            "topic",
            "stats",
            "statsd",
            "replication",
        ],
    ),
    (
        "mail and start-up",
        &["mailbox", "admin_ops", "startup", "nsqd_import"],
    ),
    ("owner", &["shard", "owner_sim"]),
    ("front-ends", &["tcp", "http"]),
    (
        "control",
        &[
            "control",
            "lookup_reg",
            "controller_session",
            "launch",
            "lib",
            "main",
        ],
    ),
];

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|(_, mods)| mods.contains(&module))
}

fn src() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

#[test]
fn every_module_has_a_layer_and_names_only_its_layer_or_below() {
    let graph = imports::sibling_graph(&src(), &[]);
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
    imports::assert_no_cycle(&src(), &[]);
}

#[test]
fn no_circle_of_imports_in_tcp() {
    imports::assert_no_cycle(&src().join("tcp"), &["tcp"]);
}
