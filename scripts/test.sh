#!/usr/bin/env bash
# The test command: fetch the assets (idempotent), then format check, lints and every test.
# Fails, never skips, when an asset or ../shared/data is missing.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
[ -d ../shared/data ] || { echo "test: ../shared/data is missing (it must sit beside the repository)" >&2; exit 1; }
bash scripts/fetch-assets.sh
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo test --workspace --locked
