//! Blind batch 1: in-process lock providers on three simulated backends, each a correct
//! control or the control with one realistic bug, run one after another through the
//! conformance kit by the defect suite `tests/blind.rs`.

pub mod catalog;
pub mod common;
pub mod demos;
pub mod memkv;
pub mod natskv;
pub mod sqlish;
