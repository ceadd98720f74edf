//! The MySQL/MariaDB provider's tests against the server in `SHEDLOCK_TEST_MYSQL_URL`, as one
//! test binary: each module was a binary of its own, and each binary is linked on its own, so
//! one binary builds faster. Run one part with a filter: `cargo test -p shedlock-mysql
//! --test suite admin::`.

#[path = "../kit/planted_records.rs"]
mod planted_records;

mod admin;
mod database;
mod mysql_provider;
mod round_trips;
