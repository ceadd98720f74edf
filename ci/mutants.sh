#!/usr/bin/env bash
# Mutation testing with cargo-mutants; what is mutated, and what is left out and why, is in
# .cargo/mutants.toml.
#
#   ci/mutants.sh           only the lines changed since $SHEDLOCK_MUTANTS_BASE (default: the
#                           parent of HEAD), so a branch no test notices is caught as it lands;
#                           this is what .ci/run does
#   ci/mutants.sh --all     every mutant (shedlock-core: about 10 minutes on 2 cores; the SQL
#                           code and the model take hours, their tests run a kit each time)
#
# Each area runs the tests that can notice its mutants: shedlock-configuration's own,
# shedlock-core's own (on the in-memory provider), the SQLite and PostgreSQL providers' for the
# shared SQL code, and the kit's defect suite for its model. A mutant that no test notices fails the run.
set -euo pipefail
cd "$(dirname "$0")/.."

VERSION=27.1.0
if ! cargo mutants --version 2>/dev/null | grep -qx "cargo-mutants $VERSION"; then
  cargo install cargo-mutants --locked --version "$VERSION"
fi
# The SQL code's tests need PostgreSQL (started, like every backend, by ci/start-backends.sh).
ci/start-backends.sh
export SHEDLOCK_TEST_POSTGRES_URL=${SHEDLOCK_TEST_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/test}

# Each mutant is built in a copy of the tree; a target dir shared with the copies would be
# rebuilt from scratch for every one of them.
unset CARGO_TARGET_DIR
OUT=${SHEDLOCK_MUTANTS_OUT:-/var/tmp/shedlock-mutants}
mkdir -p "$OUT"

# area: the files (within .cargo/mutants.toml's), the package they are in, the packages whose
# tests run, cargo-mutants' own options for it (shedlock-core's with its `metrics` feature, so
# the metrics test runs and a mutant of what it records is noticed), and which of their tests (the kit under server and client time, in UTC, on SQLite
# and PostgreSQL: its non-UTC runs add nothing the shared code decides; and their `suite`
# targets: the provider and admin tests, and PostgreSQL's wire round-trip counts, which notice
# a connection that is not reused)
areas=(
  "shedlock-configuration/src|shedlock-configuration|shedlock-configuration||"
  "shedlock-core/src|shedlock-core|shedlock-core|--features metrics|"
  "providers/sql/src|shedlock-sql|shedlock-sql shedlock-sqlite shedlock-postgres||--lib --test suite --test conformance"
  "conformance/src/checks/model.rs|shedlock-conformance|shedlock-conformance||"
  "conformance/src/faults/ledger.rs|shedlock-conformance|shedlock-conformance||--lib"
  "conformance/src/first_use.rs|shedlock-conformance|shedlock-conformance||--lib --test first_use"
)

status=0
for area in "${areas[@]}"; do
  IFS='|' read -r files package packages options tests <<<"$area"
  args=(--no-shuffle --jobs 2 --package "$package" --output "$OUT/$package")
  # shellcheck disable=SC2206 # $options is a list of words
  args+=($options)
  # An area of one file mutates only that file, not the rest of its package's examined files.
  [[ $files == *.rs ]] && args+=(--file "$files")
  if [[ -n $tests ]]; then
    # cargo-mutants runs its baseline on the mutated package's tests alone, where these test
    # targets do not exist; .ci/run has just run them all unmutated, and a mutant's tests are
    # bounded by the timeout instead of the baseline's time.
    args+=(--baseline skip --timeout 300)
  fi
  for tested in $packages; do args+=(--test-package "$tested"); done
  if [[ ${1:-} != --all ]]; then
    diff="$OUT/$package.diff"
    git diff "${SHEDLOCK_MUTANTS_BASE:-HEAD~1}" HEAD -- "$files" >"$diff"
    if [[ ! -s $diff ]]; then
      echo "[mutants] $files: unchanged since ${SHEDLOCK_MUTANTS_BASE:-HEAD~1}"
      continue
    fi
    args+=(--in-diff "$diff")
  fi
  echo "[mutants] $files, tested by: $packages"
  # shellcheck disable=SC2086 # $tests is a list of words
  cargo mutants "${args[@]}" -- $tests || status=1
done
exit $status
