//! Lock names that no other check, and no other run on the same backend, will ever use.

use std::sync::atomic::{AtomicU64, Ordering};

/// The lock names of one check: each starts with a prefix unique to this run and this check,
/// so checks run in parallel, and repeated runs on a persistent backend, never share a lock.
///
/// Prefixes are short (about a dozen characters) so that names fit SQL's `VARCHAR(64)`.
#[derive(Debug, Clone)]
pub struct NameSpace {
    prefix: String,
    children: std::sync::Arc<AtomicU64>,
}

impl NameSpace {
    /// A fresh run prefix: `k` plus six random hex digits and a dash (`k3f9a1c-`).
    pub fn new_run() -> Self {
        let random = uuid::Uuid::new_v4().simple().to_string();
        Self::with_prefix(format!("k{}-", &random[..6]))
    }

    /// A name space whose names all start with `prefix`.
    pub fn with_prefix(prefix: impl Into<String>) -> Self {
        Self {
            prefix: prefix.into(),
            children: std::sync::Arc::new(AtomicU64::new(0)),
        }
    }

    /// A nested name space `<prefix><tag>-`, for one check of a run.
    pub fn child(&self, tag: &str) -> NameSpace {
        NameSpace::with_prefix(format!("{}{tag}-", self.prefix))
    }

    /// A nested name space that no earlier call returned (`<prefix><n>-`), for one case of a
    /// repeated experiment.
    pub fn fresh_child(&self) -> NameSpace {
        let n = self.children.fetch_add(1, Ordering::Relaxed);
        self.child(&n.to_string())
    }

    /// The full lock name for `local`.
    pub fn name(&self, local: &str) -> String {
        format!("{}{local}", self.prefix)
    }

    /// What every name of this space starts with.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }
}
