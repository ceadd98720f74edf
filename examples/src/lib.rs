//! Runnable programs live beside this file as cargo examples: `cargo run -p shedlock-examples --example three_nodes`.
