#!/usr/bin/env bash
# The checks that keep the tree clean: formatting, clippy with warnings as errors, and docs
# without warnings.
set -euo pipefail
cd "$(dirname "$0")/.."

cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
# The workspace build turns on the CLI's default features only; its backend code too:
cargo clippy -p shedlock-cli --all-targets --all-features --locked -- -D warnings
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --locked
