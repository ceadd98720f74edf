//! Runs each lock operation for a check, times it, and records it on the check's timeline.

use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use shedlock_core::{
    Acquisition, AcquisitionId, LockAdmin, LockConfiguration, LockError, LockHandle, LockInfo,
    LockProvider, PageRequest,
};
use tokio::time::Instant;

use crate::failure::{CheckFailure, Event, Refusal, Rule};

/// A `try_lock` that took this long and then got a lock it must not have got waited for the
/// holder: no backend on one machine takes a second to answer one request.
const WAITED_FOR_HOLDER: Duration = Duration::from_secs(1);

/// The most locks a check's listing may return: the checks hold a handful under each prefix.
const LISTING_LIMIT: usize = 1_000;

/// How long the kit waits for any single operation before calling it hung.
pub(crate) const OPERATION_LIMIT: Duration = Duration::from_secs(15);

/// `mutex`, locked, whether or not a panic poisoned it. The kit's mutexes hold what a run
/// saw (events, tokens, attempts, results), each changed by one push or assignment; when a
/// provider panics in a check, the run must still report what it saw and the panic, not fail
/// every later step on the poison flag.
pub(crate) fn locked<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A value with the interval in which the backend produced it.
#[derive(Debug)]
pub(crate) struct Timed<T> {
    pub value: T,
    pub sent: Instant,
    pub answered: Instant,
}

/// A lock that is surely held until a deadline: what [`Trace::probe_while_held`] probes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct HeldLock<'a> {
    pub lock: &'a LockConfiguration,
    /// The kit's clock proves the lock held until then (see [`crate::Timing`]).
    pub surely_held_until: Instant,
    /// The rule that keeps it held.
    pub rule: Rule,
    /// Who holds it until when, for the failure.
    pub why: &'a str,
}

/// What a probe of a lock that is surely held until some deadline proved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HeldProbe {
    /// Answered by the deadline and refused, as the rule demands.
    Refused,
    /// Answered after the deadline, so it proves nothing either way; `acquired` says whether
    /// it got the lock (its handle is dropped, so the lock stays held until its at-most).
    TooLate { acquired: bool },
}

/// One check's clock origin and timeline.
#[derive(Debug)]
pub(crate) struct Trace {
    check: &'static str,
    start: Instant,
    events: Mutex<Vec<Event>>,
    /// The longest any recorded request took to answer, for a failure that blames lateness.
    slowest: Mutex<Duration>,
}

/// How an acquisition reads on the timeline.
pub(crate) fn describe_acquisition(result: &Result<Acquisition, LockError>) -> String {
    match result {
        Ok(Acquisition::Acquired(handle)) => match handle.fencing_token() {
            Some(token) => format!("acquired (token {token})"),
            None => "acquired".to_owned(),
        },
        Ok(Acquisition::NotAcquired(holder)) => {
            // The holder's held-until as the backend answered it: a refusal that keeps
            // pushing it out (an acquire that extends the holder's lock) shows here.
            let until = holder.as_ref().and_then(|h| h.held_until).map(|until| {
                let now = std::time::SystemTime::now();
                let left = match until.duration_since(now) {
                    Ok(left) => format!("in {:.1} ms", left.as_secs_f64() * 1000.0),
                    Err(past) => format!("{:.1} ms ago", past.duration().as_secs_f64() * 1000.0),
                };
                format!(
                    "until {} ({left})",
                    shedlock_core::raw::Rfc3339::micros(until)
                )
            });
            match (holder.as_ref().and_then(|h| h.locked_by.as_deref()), until) {
                (Some(by), Some(until)) => format!("not acquired (held by {by} {until})"),
                (Some(by), None) => format!("not acquired (held by {by})"),
                (None, Some(until)) => format!("not acquired (held {until})"),
                (None, None) => "not acquired".to_owned(),
            }
        }
        Err(error) => format!("error: {error}"),
    }
}

/// How a release or extend answer reads on the timeline.
fn describe_answer(result: &Result<bool, LockError>) -> String {
    match result {
        Ok(answer) => answer.to_string(),
        Err(error) => format!("error: {error}"),
    }
}

impl Trace {
    pub fn new(check: &'static str) -> Self {
        Self {
            check,
            start: Instant::now(),
            events: Mutex::new(Vec::new()),
            slowest: Mutex::new(Duration::ZERO),
        }
    }

    /// The longest any recorded request of this check took to answer so far.
    pub fn slowest(&self) -> Duration {
        *locked(&self.slowest)
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
        {
            let mut slowest = locked(&self.slowest);
            *slowest = (*slowest).max(answered.saturating_duration_since(sent));
        }
        let event = Event {
            sent: self.offset(sent),
            answered: self.offset(answered),
            node: node.to_owned(),
            action,
            outcome,
        };
        locked(&self.events).push(event);
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
            timeline: locked(&self.events).clone(),
            refused: None,
        }
    }

    /// The failure of this check under `rule` for a node refused `lock`, which the check
    /// expected to be free: the runner diagnoses whose refusal it was
    /// ([`crate::checks::diagnose_refusal`]).
    pub fn refusal(
        &self,
        rule: Rule,
        observed: impl Into<String>,
        lock: &LockConfiguration,
    ) -> CheckFailure {
        CheckFailure {
            refused: Some(Box::new(Refusal {
                lock: lock.clone(),
                start: self.start,
            })),
            ..self.failure(rule, observed)
        }
    }

    /// The trace of a check that failed on `refusal`, to record more requests after the
    /// failure's timeline on the same clock.
    pub fn continuing(failure: &CheckFailure, refusal: &Refusal) -> Self {
        Self {
            check: failure.check,
            start: refusal.start,
            events: Mutex::new(failure.timeline.clone()),
            slowest: Mutex::new(Duration::ZERO),
        }
    }

    /// Sleeps until `deadline` (returns at once if it has passed).
    pub async fn sleep_until(&self, deadline: Instant) {
        tokio::time::sleep_until(deadline).await;
    }

    /// Sends one request, waits at most [`OPERATION_LIMIT`] for its answer, and records both
    /// on the timeline (`describe` says how the answer reads); no answer fails the check.
    async fn request<T>(
        &self,
        node: &str,
        action: String,
        future: impl Future<Output = T>,
        describe: impl FnOnce(&T) -> String,
    ) -> Result<Timed<T>, CheckFailure> {
        let sent = Instant::now();
        match tokio::time::timeout(OPERATION_LIMIT, future).await {
            Ok(value) => {
                let answered = Instant::now();
                self.record(node, action, sent, answered, describe(&value));
                Ok(Timed {
                    value,
                    sent,
                    answered,
                })
            }
            Err(_) => {
                self.record(
                    node,
                    action.clone(),
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

    /// The answer of a request to a reachable backend: an error breaks the three-outcomes
    /// rule, as the backend is up. `operation` names the request and its lock (`unlock "x"`).
    fn answered_without_error<T>(
        &self,
        node: &str,
        operation: &str,
        timed: Timed<Result<T, LockError>>,
    ) -> Result<Timed<T>, CheckFailure> {
        let Timed {
            value,
            sent,
            answered,
        } = timed;
        value
            .map(|value| Timed {
                value,
                sent,
                answered,
            })
            .map_err(|error| {
                self.failure(
                    Rule::THREE_OUTCOMES,
                    format!(
                        "node {node}: {operation} returned an error while the backend is up: {error}"
                    ),
                )
            })
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
        self.request(
            node,
            action,
            provider.try_lock(config),
            describe_acquisition,
        )
        .await
    }

    /// `try_lock` on a reachable backend: an error fails the check.
    pub async fn acquire(
        &self,
        node: &str,
        provider: &dyn LockProvider,
        config: &LockConfiguration,
    ) -> Result<Timed<Acquisition>, CheckFailure> {
        let timed = self.try_lock(node, provider, config).await?;
        if let Err(error @ LockError::InvalidName { .. }) = &timed.value {
            let chars = config.name().chars().count();
            let limit = provider.capabilities().max_name_chars;
            if limit.is_none_or(|max| chars <= max) {
                let declared =
                    limit.map_or("no limit".to_owned(), |max| format!("a limit of {max}"));
                return Err(self.failure(
                    Rule::NAME_LENGTH,
                    format!(
                        "node {node}: lock {:?} ({chars} characters) was refused as an invalid name, though the provider declares {declared}: {error}",
                        config.name()
                    ),
                ));
            }
        }
        self.answered_without_error(node, &format!("try_lock {:?}", config.name()), timed)
    }

    /// `try_lock` on a reachable backend, as [`acquire`](Self::acquire), but kept off the
    /// timeline: for checks that send thousands of requests, which would drown it.
    pub async fn acquire_unrecorded(
        &self,
        node: &str,
        provider: &dyn LockProvider,
        config: &LockConfiguration,
    ) -> Result<Timed<Acquisition>, CheckFailure> {
        let operation = format!("try_lock {:?}", config.name());
        let sent = Instant::now();
        let value = tokio::time::timeout(OPERATION_LIMIT, provider.try_lock(config))
            .await
            .map_err(|_| {
                self.failure(
                    Rule::BOUNDED_TIME,
                    format!("node {node}: {operation} gave no answer within {OPERATION_LIMIT:?}"),
                )
            })?;
        let answered = Instant::now();
        self.answered_without_error(
            node,
            &operation,
            Timed {
                value,
                sent,
                answered,
            },
        )
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
            Acquisition::NotAcquired(_) => Err(self.refusal(
                rule,
                format!(
                    "node {node} did not get lock {:?} (answered {}): {why}",
                    config.name(),
                    self.at(timed.answered)
                ),
                config,
            )),
        }
    }

    /// `try_lock` of a lock nobody has held yet: it must be taken.
    pub async fn must_acquire_free(
        &self,
        node: &str,
        provider: &dyn LockProvider,
        config: &LockConfiguration,
    ) -> Result<Timed<Box<dyn LockHandle>>, CheckFailure> {
        self.must_acquire(
            node,
            provider,
            config,
            Rule::FREE_LOCK_IS_TAKEN,
            "nobody held it",
        )
        .await
    }

    /// `try_lock` that must take the lock under `rule`, then `unlock` that must release it:
    /// proves the lock free at this moment and leaves it free. An `unlock` answered `false`
    /// well inside the lock's at-most fails under \[release-result\], or under \[at-most\] when
    /// the node can take the lock again at once (it had ended already).
    pub async fn must_acquire_and_release(
        &self,
        node: &str,
        provider: &dyn LockProvider,
        config: &LockConfiguration,
        rule: Rule,
        why: &str,
    ) -> Result<(), CheckFailure> {
        let taken = self.must_acquire(node, provider, config, rule, why).await?;
        self.must_release_just_taken(node, provider, config, taken)
            .await
    }

    /// `unlock` of `taken`, which `node` has just taken through `provider` with `config`: an
    /// answer `false` well inside the lock's at-most fails under \[release-result\], or under
    /// \[at-most\] when the node can take the lock again at once (it had ended already, early).
    pub async fn must_release_just_taken(
        &self,
        node: &str,
        provider: &dyn LockProvider,
        config: &LockConfiguration,
        taken: Timed<Box<dyn LockHandle>>,
    ) -> Result<(), CheckFailure> {
        let released = self.unlock(node, &*taken.value).await?;
        // A backend slow enough to spend a good part of the lock's at-most on these two
        // requests may have let it expire in between: `false` is then a fair answer. A fast
        // one answers well inside it, and `false` there is a broken release.
        let surely_held_until = taken.sent + config.lock_at_most_for() / 4;
        if !released.value {
            if released.answered > surely_held_until {
                self.note(format!(
                    "node {node}'s release answered false after a quarter of its lock's at-most: it may have expired first; not judged"
                ));
            } else {
                // Free already? Then the lock ended early and the release found it gone: a
                // lock_until stored rounded down shows so when the probes before missed it.
                let again = self.acquire(node, provider, config).await?;
                if let Acquisition::Acquired(handle) = again.value {
                    self.unlock(node, &*handle).await?;
                    return Err(self.failure(
                        Rule::AT_MOST,
                        format!(
                            "node {node}: unlock {:?} returned Ok(false) (answered {}), inside the lock's lock_at_most_for of {:?}, and node {node} took the lock again at once (answered {}): the lock ended before its lock_at_most_for, and the release found it gone",
                            config.name(),
                            self.at(released.answered),
                            config.lock_at_most_for(),
                            self.at(again.answered)
                        ),
                    ));
                }
                return Err(self.failure(
                    Rule::RELEASE_RESULT,
                    format!(
                        "node {node}: unlock {:?} returned Ok(false) (answered {}): node {node} holds it",
                        config.name(),
                        self.at(released.answered)
                    ),
                ));
            }
        }
        Ok(())
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
            return Err(self.got_held_lock(node, config, &timed, rule, why));
        }
        Ok(())
    }

    /// `try_lock` of a lock that is surely held until a deadline: an answer by then must be a
    /// refusal under the lock's rule; a later answer proves nothing either way, as the lock
    /// may have been free by then.
    pub async fn probe_while_held(
        &self,
        node: &str,
        provider: &dyn LockProvider,
        held: &HeldLock<'_>,
    ) -> Result<HeldProbe, CheckFailure> {
        let timed = self.acquire(node, provider, held.lock).await?;
        let acquired = timed.value.is_acquired();
        if timed.answered > held.surely_held_until {
            return Ok(HeldProbe::TooLate { acquired });
        }
        if acquired {
            return Err(self.got_held_lock(node, held.lock, &timed, held.rule, held.why));
        }
        Ok(HeldProbe::Refused)
    }

    /// The failure for a node that got a lock it must not have got.
    fn got_held_lock(
        &self,
        node: &str,
        config: &LockConfiguration,
        timed: &Timed<Acquisition>,
        rule: Rule,
        why: &str,
    ) -> CheckFailure {
        let took = timed.answered.saturating_duration_since(timed.sent);
        if took >= WAITED_FOR_HOLDER {
            // Not a lock freed early: a try_lock that waited until the holder was gone.
            return self.failure(
                Rule::THREE_OUTCOMES,
                format!(
                    "node {node}'s try_lock {:?} was sent at {} and answered \"acquired\" {took:?} later: try_lock never waits for a holder, it answers \"not acquired\" at once ({why})",
                    config.name(),
                    self.at(timed.sent)
                ),
            );
        }
        self.failure(
            rule,
            format!(
                "node {node} got lock {:?} (answered {}): {why}",
                config.name(),
                self.at(timed.answered)
            ),
        )
    }

    /// `unlock`, recorded; the raw result is returned.
    pub async fn try_unlock(
        &self,
        node: &str,
        handle: &dyn LockHandle,
    ) -> Result<Timed<Result<bool, LockError>>, CheckFailure> {
        let action = format!("unlock {:?}", handle.name());
        self.request(node, action, handle.unlock(), describe_answer)
            .await
    }

    /// `unlock`, recorded; an error fails the check.
    pub async fn unlock(
        &self,
        node: &str,
        handle: &dyn LockHandle,
    ) -> Result<Timed<bool>, CheckFailure> {
        let operation = format!("unlock {:?}", handle.name());
        let timed = self
            .request(node, operation.clone(), handle.unlock(), describe_answer)
            .await?;
        self.answered_without_error(node, &operation, timed)
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

    /// `unlock` by the node that holds the lock: it must answer `true`.
    pub async fn must_release(
        &self,
        node: &str,
        handle: &dyn LockHandle,
    ) -> Result<Timed<bool>, CheckFailure> {
        self.must_unlock_with(
            node,
            handle,
            true,
            Rule::RELEASE_RESULT,
            &format!("node {node} holds it"),
        )
        .await
    }

    /// `extend`, recorded; the raw result is returned.
    pub async fn try_extend(
        &self,
        node: &str,
        handle: &dyn LockHandle,
        lock_at_most_for: Duration,
    ) -> Result<Timed<Result<bool, LockError>>, CheckFailure> {
        let action = format!("extend {:?} to now + {lock_at_most_for:?}", handle.name());
        self.request(
            node,
            action,
            handle.extend(lock_at_most_for),
            describe_answer,
        )
        .await
    }

    /// `extend` on a reachable backend: an error fails the check.
    pub async fn extend(
        &self,
        node: &str,
        handle: &dyn LockHandle,
        lock_at_most_for: Duration,
    ) -> Result<Timed<bool>, CheckFailure> {
        let timed = self.try_extend(node, handle, lock_at_most_for).await?;
        self.answered_without_error(node, &format!("extend {:?}", handle.name()), timed)
    }
}

impl Trace {
    /// Every lock under `prefix`, read `page_size` at a time, recorded as one request; an
    /// error fails the check.
    pub async fn list_locks(
        &self,
        node: &str,
        admin: &dyn LockAdmin,
        prefix: &str,
        page_size: usize,
    ) -> Result<Vec<LockInfo>, CheckFailure> {
        let action = format!("list locks under {prefix:?}, {page_size} per page");
        // Page by page, so a page over the limit shows; a cursor that never moves makes a
        // listing endless, so the listing stops at a bound no check reaches.
        let pages = async {
            let mut locks = Vec::new();
            let mut request = PageRequest::first(prefix).with_limit(page_size);
            loop {
                let page = admin.list_locks(&request).await?;
                if page.locks.len() > page_size {
                    return Ok(Err(page.locks.len()));
                }
                locks.extend(page.locks);
                match page.next {
                    Some(cursor) if locks.len() <= LISTING_LIMIT => {
                        request.after = Some(cursor);
                    }
                    _ => return Ok(Ok(locks)),
                }
            }
        };
        let timed = self
            .request(node, action.clone(), pages, |result| match result {
                Ok(Ok(locks)) => format!("{} locks", locks.len()),
                Ok(Err(page)) => format!("a page of {page} locks"),
                Err(error) => format!("error: {error}"),
            })
            .await?;
        let locks = match self.answered_without_error(node, &action, timed)?.value {
            Ok(locks) => locks,
            Err(page) => {
                return Err(self.failure(
                    Rule::ADMIN,
                    format!(
                        "node {node}: {action} returned a page of {page} locks: a page holds at most the limit asked for"
                    ),
                ));
            }
        };
        if locks.len() > LISTING_LIMIT {
            return Err(self.failure(
                Rule::ADMIN,
                format!(
                    "node {node}: {action} did not end after {LISTING_LIMIT} locks, far more than the check holds: does the page cursor move?"
                ),
            ));
        }
        Ok(locks)
    }

    /// `inspect_lock`, recorded; an error fails the check.
    pub async fn inspect_lock(
        &self,
        node: &str,
        admin: &dyn LockAdmin,
        name: &str,
    ) -> Result<Option<LockInfo>, CheckFailure> {
        let action = format!("inspect {name:?}");
        let timed = self
            .request(
                node,
                action.clone(),
                admin.inspect_lock(name),
                |result| match result {
                    Ok(Some(lock)) => format!(
                        "{} by {}",
                        lock.state,
                        lock.locked_by.as_deref().unwrap_or("(no holder stored)")
                    ),
                    Ok(None) => "no such lock".to_owned(),
                    Err(error) => format!("error: {error}"),
                },
            )
            .await?;
        Ok(self.answered_without_error(node, &action, timed)?.value)
    }

    /// `inspect_lock` of a lock that node `holder` holds: showing none fails the check under
    /// [admin].
    pub async fn must_inspect_held(
        &self,
        node: &str,
        admin: &dyn LockAdmin,
        name: &str,
        holder: &str,
    ) -> Result<LockInfo, CheckFailure> {
        match self.inspect_lock(node, admin, name).await? {
            Some(lock) => Ok(lock),
            None => Err(self.failure(
                Rule::ADMIN,
                format!("node {holder} holds lock {name:?}, but inspecting it shows none"),
            )),
        }
    }

    /// `force_unlock`, recorded; an error fails the check.
    pub async fn force_unlock(
        &self,
        node: &str,
        admin: &dyn LockAdmin,
        name: &str,
        acquisition: &AcquisitionId,
    ) -> Result<Timed<bool>, CheckFailure> {
        let action = format!("force_unlock {name:?} of acquisition {acquisition}");
        let timed = self
            .request(
                node,
                action.clone(),
                admin.force_unlock(name, acquisition),
                describe_answer,
            )
            .await?;
        self.answered_without_error(node, &action, timed)
    }

    /// `force_unlock`, recorded; an error fails the check, the answer must be `expected`.
    pub async fn must_force_unlock_with(
        &self,
        node: &str,
        admin: &dyn LockAdmin,
        name: &str,
        acquisition: &AcquisitionId,
        expected: bool,
        why: &str,
    ) -> Result<(), CheckFailure> {
        let action = format!("force_unlock {name:?} of acquisition {acquisition}");
        let answered = self.force_unlock(node, admin, name, acquisition).await?;
        if answered.value != expected {
            return Err(self.failure(
                Rule::ADMIN,
                format!(
                    "node {node}: {action} returned Ok({}) (answered {}): {why}",
                    answered.value,
                    self.at(answered.answered)
                ),
            ));
        }
        Ok(())
    }
}

/// A lock configuration the kit built from valid parts.
pub(crate) fn config(name: &str, at_most: Duration, at_least: Duration) -> LockConfiguration {
    LockConfiguration::new(name, at_most, at_least)
        .unwrap_or_else(|error| panic!("the kit built an invalid lock configuration: {error}"))
}
