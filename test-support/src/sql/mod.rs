//! What the SQL providers' tests share (`shedlock-postgres`, `shedlock-mysql`,
//! `shedlock-sqlite`): each provider's tests pass their backend type (or, where the harness needs
//! a trait implemented, a type of their own naming the backend), and the SQL that differs per
//! database through the traits here. Whole tests take the provider's [`TestDatabase`], and each
//! provider's test binary declares them with [`sql_provider_tests!`](crate::sql_provider_tests),
//! [`sql_admin_tests!`](crate::sql_admin_tests) and [`sql_tests_on!`](crate::sql_tests_on).
//!
//! [`TestDatabase`]: test_database::TestDatabase

pub mod admin_tests;
pub mod binding;
pub mod conformance_harness;
pub mod provider_tests;
pub mod round_trips;
pub mod test_database;
pub mod tls;
