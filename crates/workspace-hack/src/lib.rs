//! No code: see Cargo.toml. The crate exists for the dependency features it names.
