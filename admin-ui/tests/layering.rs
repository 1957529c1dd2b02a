//! admin-ui's modules, checked on their source: no two of them name each other through any
//! chain (a circle of imports), so each can be read from the bottom up (the shapes of the
//! upstream answers first, the pages and the API on top). How the source is read:
//! `test_harness::imports`.

use std::path::Path;

#[test]
fn no_circle_of_imports() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    test_harness::imports::assert_no_cycle(&src, &[]);
}
