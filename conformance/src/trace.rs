//! Runs each lock operation for a check, times it, and records it on the check's timeline.

use std::sync::Mutex;
use std::time::Duration;

use shedlock_core::{Acquisition, LockConfiguration, LockError, LockHandle, LockProvider};
use tokio::time::Instant;

use crate::failure::{CheckFailure, Event, Rule};

/// How long the kit waits for any single operation before calling it hung.
pub(crate) const OPERATION_LIMIT: Duration = Duration::from_secs(15);

/// A value with the interval in which the backend produced it.
#[derive(Debug)]
pub(crate) struct Timed<T> {
    pub value: T,
    pub sent: Instant,
    pub answered: Instant,
}

/// One check's clock origin and timeline.
#[derive(Debug)]
pub(crate) struct Trace {
    check: &'static str,
    start: Instant,
    events: Mutex<Vec<Event>>,
}

/// How an acquisition reads on the timeline.
pub(crate) fn describe_acquisition(result: &Result<Acquisition, LockError>) -> String {
    match result {
        Ok(Acquisition::Acquired(handle)) => match handle.fencing_token() {
            Some(token) => format!("acquired (token {token})"),
            None => "acquired".to_owned(),
        },
        Ok(Acquisition::NotAcquired(holder)) => {
            match holder.as_ref().and_then(|h| h.locked_by.as_deref()) {
                Some(by) => format!("not acquired (held by {by})"),
                None => "not acquired".to_owned(),
            }
        }
        Err(error) => format!("error: {error}"),
    }
}

impl Trace {
    pub fn new(check: &'static str) -> Self {
        Self {
            check,
            start: Instant::now(),
            events: Mutex::new(Vec::new()),
        }
    }

    /// `instant` as an offset from the check's start.
    pub fn offset(&self, instant: Instant) -> Duration {
        instant.saturating_duration_since(self.start)
    }

    /// `instant` as "+123.4 ms".
    pub fn at(&self, instant: Instant) -> String {
        format!("+{:.1} ms", self.offset(instant).as_secs_f64() * 1000.0)
    }

    pub fn record(
        &self,
        node: &str,
        action: String,
        sent: Instant,
        answered: Instant,
        outcome: String,
    ) {
        let event = Event {
            sent: self.offset(sent),
            answered: self.offset(answered),
            node: node.to_owned(),
            action,
            outcome,
        };
        self.events.lock().unwrap().push(event);
    }

    /// A note on the timeline (what the kit is doing, or why it retries).
    pub fn note(&self, text: impl Into<String>) {
        let now = Instant::now();
        self.record("kit", text.into(), now, now, String::new());
    }

    /// The failure of this check under `rule`, with the timeline so far.
    pub fn failure(&self, rule: Rule, observed: impl Into<String>) -> CheckFailure {
        CheckFailure {
            check: self.check,
            rule,
            observed: observed.into(),
            timeline: self.events.lock().unwrap().clone(),
        }
    }

    /// Sleeps until `deadline` (returns at once if it has passed).
    pub async fn sleep_until(&self, deadline: Instant) {
        tokio::time::sleep_until(deadline).await;
    }

    async fn bounded<T>(
        &self,
        node: &str,
        action: &str,
        future: impl Future<Output = T>,
    ) -> Result<Timed<T>, CheckFailure> {
        let sent = Instant::now();
        match tokio::time::timeout(OPERATION_LIMIT, future).await {
            Ok(value) => Ok(Timed {
                value,
                sent,
                answered: Instant::now(),
            }),
            Err(_) => {
                self.record(
                    node,
                    action.to_owned(),
                    sent,
                    Instant::now(),
                    "no answer".to_owned(),
                );
                Err(self.failure(
                    Rule::BOUNDED_TIME,
                    format!("node {node}: {action} gave no answer within {OPERATION_LIMIT:?}"),
                ))
            }
        }
    }

    /// `try_lock`, recorded; any outcome including an error is returned.
    pub async fn try_lock(
        &self,
        node: &str,
        provider: &dyn LockProvider,
        config: &LockConfiguration,
    ) -> Result<Timed<Result<Acquisition, LockError>>, CheckFailure> {
        let action = format!(
            "try_lock {:?} (at most {:?}, at least {:?})",
            config.name(),
            config.lock_at_most_for(),
            config.lock_at_least_for()
        );
        let timed = self
            .bounded(node, &action, provider.try_lock(config))
            .await?;
        let outcome = describe_acquisition(&timed.value);
        self.record(node, action, timed.sent, timed.answered, outcome);
        Ok(timed)
    }

    /// `try_lock` on a reachable backend: an error fails the check.
    pub async fn acquire(
        &self,
        node: &str,
        provider: &dyn LockProvider,
        config: &LockConfiguration,
    ) -> Result<Timed<Acquisition>, CheckFailure> {
        let timed = self.try_lock(node, provider, config).await?;
        match timed.value {
            Ok(acquisition) => Ok(Timed {
                value: acquisition,
                sent: timed.sent,
                answered: timed.answered,
            }),
            Err(error) => Err(self.failure(
                Rule::THREE_OUTCOMES,
                format!(
                    "node {node}: try_lock {:?} returned an error while the backend is up: {error}",
                    config.name()
                ),
            )),
        }
    }

    /// `try_lock` that must take the lock under `rule`; gives the handle.
    pub async fn must_acquire(
        &self,
        node: &str,
        provider: &dyn LockProvider,
        config: &LockConfiguration,
        rule: Rule,
        why: &str,
    ) -> Result<Timed<Box<dyn LockHandle>>, CheckFailure> {
        let timed = self.acquire(node, provider, config).await?;
        match timed.value {
            Acquisition::Acquired(handle) => Ok(Timed {
                value: handle,
                sent: timed.sent,
                answered: timed.answered,
            }),
            Acquisition::NotAcquired(_) => Err(self.failure(
                rule,
                format!(
                    "node {node} did not get lock {:?} (answered {}): {why}",
                    config.name(),
                    self.at(timed.answered)
                ),
            )),
        }
    }

    /// `try_lock` that must be refused under `rule`.
    pub async fn must_not_acquire(
        &self,
        node: &str,
        provider: &dyn LockProvider,
        config: &LockConfiguration,
        rule: Rule,
        why: &str,
    ) -> Result<(), CheckFailure> {
        let timed = self.acquire(node, provider, config).await?;
        if timed.value.is_acquired() {
            return Err(self.failure(
                rule,
                format!(
                    "node {node} got lock {:?} (answered {}): {why}",
                    config.name(),
                    self.at(timed.answered)
                ),
            ));
        }
        Ok(())
    }

    /// `unlock`, recorded; an error fails the check.
    pub async fn unlock(
        &self,
        node: &str,
        handle: &dyn LockHandle,
    ) -> Result<Timed<bool>, CheckFailure> {
        let action = format!("unlock {:?}", handle.name());
        let timed = self.bounded(node, &action, handle.unlock()).await?;
        let outcome = match &timed.value {
            Ok(released) => released.to_string(),
            Err(error) => format!("error: {error}"),
        };
        self.record(node, action, timed.sent, timed.answered, outcome);
        match timed.value {
            Ok(released) => Ok(Timed {
                value: released,
                sent: timed.sent,
                answered: timed.answered,
            }),
            Err(error) => Err(self.failure(
                Rule::THREE_OUTCOMES,
                format!(
                    "node {node}: unlock {:?} returned an error while the backend is up: {error}",
                    handle.name()
                ),
            )),
        }
    }

    /// `unlock` that must answer `expected` under `rule`.
    pub async fn must_unlock_with(
        &self,
        node: &str,
        handle: &dyn LockHandle,
        expected: bool,
        rule: Rule,
        why: &str,
    ) -> Result<Timed<bool>, CheckFailure> {
        let timed = self.unlock(node, handle).await?;
        if timed.value != expected {
            return Err(self.failure(
                rule,
                format!(
                    "node {node}: unlock {:?} returned Ok({}) (answered {}): {why}",
                    handle.name(),
                    timed.value,
                    self.at(timed.answered)
                ),
            ));
        }
        Ok(timed)
    }

    /// `extend`, recorded; the raw result is returned.
    pub async fn try_extend(
        &self,
        node: &str,
        handle: &dyn LockHandle,
        lock_at_most_for: Duration,
    ) -> Result<Timed<Result<bool, LockError>>, CheckFailure> {
        let action = format!("extend {:?} to now + {lock_at_most_for:?}", handle.name());
        let timed = self
            .bounded(node, &action, handle.extend(lock_at_most_for))
            .await?;
        let outcome = match &timed.value {
            Ok(extended) => extended.to_string(),
            Err(error) => format!("error: {error}"),
        };
        self.record(node, action, timed.sent, timed.answered, outcome);
        Ok(timed)
    }

    /// `extend` on a reachable backend: an error fails the check.
    pub async fn extend(
        &self,
        node: &str,
        handle: &dyn LockHandle,
        lock_at_most_for: Duration,
    ) -> Result<Timed<bool>, CheckFailure> {
        let timed = self.try_extend(node, handle, lock_at_most_for).await?;
        match timed.value {
            Ok(extended) => Ok(Timed {
                value: extended,
                sent: timed.sent,
                answered: timed.answered,
            }),
            Err(error) => Err(self.failure(
                Rule::THREE_OUTCOMES,
                format!(
                    "node {node}: extend {:?} returned an error while the backend is up: {error}",
                    handle.name()
                ),
            )),
        }
    }
}

/// A lock configuration the kit built from valid parts.
pub(crate) fn config(name: &str, at_most: Duration, at_least: Duration) -> LockConfiguration {
    LockConfiguration::new(name, at_most, at_least)
        .unwrap_or_else(|error| panic!("the kit built an invalid lock configuration: {error}"))
}
