//! What the key-value providers' tests share (`shedlock-etcd`, `shedlock-redis`,
//! `shedlock-mongo`, `shedlock-zookeeper`): the steps their tests take through the provider
//! traits ([`LockProvider`](shedlock_core::LockProvider),
//! [`LockAdmin`](shedlock_core::LockAdmin)) with any of them, and the pieces of their
//! conformance harnesses that do not depend on the driver. Each provider's tests keep what
//! reads or writes its backend directly.

pub mod admin;
pub mod conformance;
pub mod errors;
pub mod locks;
pub mod tls;
