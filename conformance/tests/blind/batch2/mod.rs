//! Blind batch 2: in-process lock providers on three simulated backends (etcd-like leases and
//! revisions, DynamoDB-like conditional writes, MongoDB-like upserts with `$$NOW`), each a
//! correct control or the control with one realistic bug, run one after another through the
//! conformance kit by the defect suite `tests/blind.rs`.

pub mod catalog;
pub mod common;
pub mod demos;
pub mod dynamoish;
pub mod etcdish;
pub mod mongoish;
