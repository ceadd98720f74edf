//! What the SQL providers' tests share (`shedlock-postgres`, `shedlock-mysql`,
//! `shedlock-sqlite`): each provider's tests pass their backend type (or, where the harness needs
//! a trait implemented, a type of their own naming the backend), and the SQL that differs per
//! database through the traits here.

pub mod admin_tests;
pub mod conformance_harness;
pub mod provider_tests;
pub mod round_trips;
