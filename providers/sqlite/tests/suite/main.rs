//! The SQLite provider's tests on real database files, as one test binary: each module was a
//! binary of its own, and each binary is linked on its own, so one binary builds faster. Run one
//! part with a filter: `cargo test -p shedlock-sqlite --test suite admin::`.

#[path = "../kit/planted_records.rs"]
mod planted_records;

mod admin;
mod database;
mod sqlite_provider;
