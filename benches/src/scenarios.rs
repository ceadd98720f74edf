//! The lock operations the benches measure, each one call of an `async fn run`, on
//! [`AnyLockProvider`] so every backend is measured through the same code.
//!
//! A scenario panics when a lock answers what the scenario rules out (a free lock refused, a
//! held one granted, two winners of one round): that is a broken lock, not a slow one, and a
//! figure for it would be meaningless. A backend's failure is returned as the [`LockError`].
//!
//! Every name starts with a prefix unique to the run ([`run_prefix`]), so a lock left held by an
//! interrupted run, or a record left by an earlier one, never changes what this run measures,
//! and the run's records can be removed after it
//! ([`Driver::remove_names`](crate::floors::Driver::remove_names)).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use shedlock::{AnyLockProvider, LockConfiguration, LockError, LockHandle, LockProvider};

use crate::measure::at_once;

/// How long a lock may be held: long enough never to expire during a bench.
const LOCK_AT_MOST_FOR: Duration = Duration::from_secs(600);

/// `bench-<32 hex digits>`, new for each call: 38 characters of letters, digits and `-`,
/// leaving room for a suffix within the 64 characters ShedLock's SQL tables allow.
pub fn run_prefix() -> String {
    format!("bench-{}", uuid::Uuid::new_v4().simple())
}

/// Held at most [`LOCK_AT_MOST_FOR`], at least nothing: released, a lock is free at once.
fn config(name: &str) -> LockConfiguration {
    LockConfiguration::new(name, LOCK_AT_MOST_FOR, Duration::ZERO)
        .unwrap_or_else(|error| panic!("{name:?} is not a lock name: {error}"))
}

/// Acquires `config`, which nobody else holds.
async fn acquire_free(
    node: &AnyLockProvider,
    config: &LockConfiguration,
) -> Result<Box<dyn LockHandle>, LockError> {
    match node.try_lock(config).await?.into_handle() {
        Some(handle) => Ok(handle),
        None => panic!("{:?} is free, yet it was refused", config.name()),
    }
}

/// Releases `handle`, which still holds its lock.
async fn release_held(handle: Box<dyn LockHandle>) -> Result<(), LockError> {
    assert!(
        handle.unlock().await?,
        "{:?} was held by this acquisition, yet release found it was not",
        handle.name()
    );
    Ok(())
}

/// Acquire, then release, one name: what a scheduled job pays for its lock on every run.
#[derive(Debug)]
pub struct Cycle {
    node: AnyLockProvider,
    config: LockConfiguration,
}

impl Cycle {
    /// Cycles on a name of its own, `<prefix>-cycle`, on `node`.
    pub fn new(node: AnyLockProvider, prefix: &str) -> Self {
        Self {
            node,
            config: config(&format!("{prefix}-cycle")),
        }
    }

    /// One acquire and one release.
    pub async fn run(&self) -> Result<(), LockError> {
        release_held(acquire_free(&self.node, &self.config).await?).await
    }
}

/// The first acquire of a name the backend has never seen, and its release: a job's first run,
/// which may create the lock's record (a row, a document, a node) on the way.
#[derive(Debug)]
pub struct FirstAcquire {
    node: AnyLockProvider,
    prefix: String,
    next: AtomicU64,
}

impl FirstAcquire {
    /// New names on `node`, `<prefix>-first-<n>`, each used once.
    pub fn new(node: AnyLockProvider, prefix: &str) -> Self {
        Self {
            node,
            prefix: format!("{prefix}-first"),
            next: AtomicU64::new(0),
        }
    }

    /// Acquires and releases the next new name. Creating the name's configuration is part of
    /// the call: well under a microsecond, beside a round trip.
    pub async fn run(&self) -> Result<(), LockError> {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let config = config(&format!("{}-{n}", self.prefix));
        release_held(acquire_free(&self.node, &config).await?).await
    }
}

/// An acquire refused because another node holds the name: what every other node of a fleet
/// pays while one runs the job.
#[derive(Debug)]
pub struct Refused {
    held: Box<dyn LockHandle>,
    contender: AnyLockProvider,
    config: LockConfiguration,
}

impl Refused {
    /// Takes `<prefix>-refused` on `holder`, for `contender` to try. Call
    /// [`release`](Self::release) after.
    pub async fn new(
        holder: &AnyLockProvider,
        contender: AnyLockProvider,
        prefix: &str,
    ) -> Result<Self, LockError> {
        let config = config(&format!("{prefix}-refused"));
        let held = acquire_free(holder, &config).await?;
        Ok(Self {
            held,
            contender,
            config,
        })
    }

    /// One attempt by the contender.
    pub async fn run(&self) -> Result<(), LockError> {
        let acquisition = self.contender.try_lock(&self.config).await?;
        assert!(
            !acquisition.is_acquired(),
            "{:?} is held by another node, yet it was granted",
            self.config.name()
        );
        Ok(())
    }

    /// Frees the name the holder took.
    pub async fn release(self) -> Result<(), LockError> {
        release_held(self.held).await
    }
}

/// Nodes, each a provider with connections of its own, trying one name at the same instant: a
/// fleet whose schedules all fire together.
#[derive(Debug)]
pub struct Contention {
    nodes: Vec<AnyLockProvider>,
    config: LockConfiguration,
}

impl Contention {
    /// `nodes` contending for a name of their own, `<prefix>-contended-<node count>`.
    pub fn new(nodes: Vec<AnyLockProvider>, prefix: &str) -> Self {
        let config = config(&format!("{prefix}-contended-{}", nodes.len()));
        Self { nodes, config }
    }

    /// One round: every node waits at a barrier, then tries the name. Returns the time from the
    /// first attempt's start to the moment the last node knows its outcome; the winner's
    /// release comes after and is not part of it.
    ///
    /// # Panics
    ///
    /// Unless exactly one node won.
    pub async fn run(&self) -> Result<Duration, LockError> {
        let attempts = self.nodes.iter().map(|node| {
            let (node, config) = (node.clone(), self.config.clone());
            async move { node.try_lock(&config).await }
        });
        let (outcomes, took) = at_once(attempts).await;
        let (mut winners, mut error) = (Vec::new(), None);
        for outcome in outcomes {
            match outcome {
                Ok(acquisition) => winners.extend(acquisition.into_handle()),
                Err(failed) => error = Some(failed),
            }
        }
        let won = winners.len();
        for winner in winners {
            release_held(winner).await?;
        }
        if let Some(error) = error {
            return Err(error);
        }
        assert_eq!(
            won,
            1,
            "{} nodes tried {:?} at once: exactly one must win",
            self.nodes.len(),
            self.config.name()
        );
        Ok(took)
    }
}

/// Acquire and release over many names in turn, each already known to the backend: a service
/// with many jobs. Its cost per cycle should not grow with the number of names.
///
/// A node of the SQL backends also remembers the names it has seen (up to 10,000, exactly
/// these): its first visit to a prepared name tries the insert before the take-over, one
/// statement more than every later visit, once per name and process. A measurement of the
/// steady state visits each name once first ([`visit_each_once`](Self::visit_each_once)).
#[derive(Debug)]
pub struct ManyNames {
    node: AnyLockProvider,
    configs: Vec<LockConfiguration>,
    next: AtomicUsize,
}

impl ManyNames {
    /// `count` names of their own on `node`, `<prefix>-many-<n>`. The backend does not know
    /// them yet: pass [`names`](Self::names) to the backend's
    /// [`Driver::prepare_names`](crate::floors::Driver::prepare_names) before measuring.
    pub fn new(node: AnyLockProvider, prefix: &str, count: usize) -> Self {
        let prefix = format!("{prefix}-many");
        Self {
            node,
            configs: (0..count)
                .map(|n| config(&format!("{prefix}-{n}")))
                .collect(),
            next: AtomicUsize::new(0),
        }
    }

    /// Every name, in the order [`run`](Self::run) goes through them.
    pub fn names(&self) -> Vec<String> {
        self.configs.iter().map(|c| c.name().to_owned()).collect()
    }

    /// Acquires and releases every name once, some at a time: what a service has done once
    /// each of its jobs has run, after which its node has seen every name.
    pub async fn visit_each_once(&self) -> Result<(), LockError> {
        const AT_ONCE: usize = 16;
        for chunk in self.configs.chunks(AT_ONCE) {
            let mut visits = tokio::task::JoinSet::new();
            for config in chunk {
                let (node, config) = (self.node.clone(), config.clone());
                visits
                    .spawn(async move { release_held(acquire_free(&node, &config).await?).await });
            }
            while let Some(visit) = visits.join_next().await {
                visit.expect("a visit panicked")?;
            }
        }
        Ok(())
    }

    /// One acquire and one release of the next name, back to the first after the last.
    pub async fn run(&self) -> Result<(), LockError> {
        let n = self.next.fetch_add(1, Ordering::Relaxed) % self.configs.len();
        release_held(acquire_free(&self.node, &self.configs[n]).await?).await
    }
}
