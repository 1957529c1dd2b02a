//! The broker's section of the flags reference (`docs/flags.md`), generated from [`Args`] and
//! checked against the committed file: a flag changed without the file fails `cargo test`.

use super::{Args, RENAMED_KEYS};
use clap::CommandFactory;

#[test]
fn flags_doc_matches_the_code() {
    let doc = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/flags.md");
    let table = nsq_common::flags_doc::table(&Args::command(), RENAMED_KEYS);
    if let Err(e) = nsq_common::flags_doc::check_section(&doc, "broker", &table) {
        panic!("{e}");
    }
}
