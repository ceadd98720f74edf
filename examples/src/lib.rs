//! Runnable programs live beside this file as cargo examples:
//! `cargo run -p shedlock-examples --example three_nodes`.
//!
//! The repository README is included below so that `cargo test` compiles its example and the
//! README cannot drift from the API.
#![doc = include_str!("../../README.md")]
