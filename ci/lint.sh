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
# The facade's docs as docs.rs builds them (one crate, `--no-deps`, every feature): the
# scheduler, the providers and the HTTP view are inlined pages of `shedlock`, not re-export
# lines that lead nowhere.
RUSTDOCFLAGS="-D warnings" cargo doc -p shedlock --no-deps --all-features --locked
docs=${CARGO_TARGET_DIR:-target}/doc/shedlock
for page in scheduler/struct.Scheduler.html scheduler/struct.Job.html scheduler/struct.Schedule.html \
    postgres/type.PostgresLockProvider.html redis/struct.RedisLockProvider.html \
    http/struct.LockRoutes.html json/index.html; do
  [[ -f $docs/$page ]] || { echo "ci/lint.sh: shedlock's docs have no page $page" >&2; exit 1; }
done
