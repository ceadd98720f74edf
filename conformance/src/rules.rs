#![doc = include_str!("../RULES.md")]
