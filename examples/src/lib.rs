//! Runnable programs live beside this file: `scheduled_job`, one node of a fleet on a real
//! backend, started as several processes
//! (`cargo run -p shedlock-examples --bin scheduled_job -- --url <URL> --node a`), and
//! `three_nodes`, three nodes in one process on the in-memory provider
//! (`cargo run -p shedlock-examples --example three_nodes`).
//!
//! The repository README is included below so that `cargo test` compiles its example and the
//! README cannot drift from the API.
#![doc = include_str!("../../README.md")]
