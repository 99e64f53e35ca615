//! `include/ruvllm.h` is what cbindgen generates from the crate today. Run with
//! `RUVLLM_BLESS=1` to rewrite it after changing the ABI.

use std::path::Path;

#[test]
fn header_is_current() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(root.join("cbindgen.toml")).expect("cbindgen.toml");
    let mut out = Vec::new();
    cbindgen::Builder::new()
        .with_config(config)
        .with_src(root.join("src/lib.rs"))
        .generate()
        .expect("cbindgen parses src/lib.rs")
        .write(&mut out);
    let path = root.join("include/ruvllm.h");
    if std::env::var_os("RUVLLM_BLESS").is_some() {
        std::fs::write(&path, &out).unwrap();
    }
    let committed = std::fs::read(&path).unwrap_or_default();
    assert!(
        committed == out,
        "include/ruvllm.h is not what cbindgen generates: run \
         `RUVLLM_BLESS=1 cargo test -p ruvllm-capi --test header`"
    );
}
