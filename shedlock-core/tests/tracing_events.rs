//! The log an operator relies on: one span per run with the lock, the provider and the outcome,
//! and events for acquired (with the fencing token), skipped (with the holder and until when),
//! extended, released and lost. A capturing layer records each field, so these tests assert
//! what a subscriber receives, not how a formatter prints it.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use shedlock_core::{
    Acquisition, Capabilities, ErrorKind, LockAdmin, LockConfiguration, LockError, LockProvider,
    LockingTaskExecutor, Operation, TaskOutcome, TimeSource,
    raw::{ManualClock, async_trait},
};
use shedlock_memory::MemoryLockStore;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::{Layer, Registry};

type Fields = BTreeMap<String, String>;

#[derive(Debug, Clone)]
struct CapturedEvent {
    level: Level,
    fields: Fields,
    /// The fields of the span the event happened in, as recorded so far.
    span: Fields,
}

impl CapturedEvent {
    fn message(&self) -> &str {
        self.fields.get("message").map_or("", String::as_str)
    }
}

/// Every span's fields (kept after it closes) and every event.
#[derive(Clone, Default)]
struct Capture {
    spans: Arc<Mutex<HashMap<u64, (String, Fields)>>>,
    events: Arc<Mutex<Vec<CapturedEvent>>>,
}

struct Collect<'a>(&'a mut Fields);

impl Visit for Collect<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
}

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Capture {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, _ctx: Context<'_, S>) {
        let mut fields = Fields::new();
        attrs.record(&mut Collect(&mut fields));
        let name = attrs.metadata().name().to_owned();
        self.spans
            .lock()
            .unwrap()
            .insert(id.into_u64(), (name, fields));
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, _ctx: Context<'_, S>) {
        if let Some((_, fields)) = self.spans.lock().unwrap().get_mut(&id.into_u64()) {
            values.record(&mut Collect(fields));
        }
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let mut fields = Fields::new();
        event.record(&mut Collect(&mut fields));
        let span = ctx
            .event_span(event)
            .and_then(|span| {
                self.spans
                    .lock()
                    .unwrap()
                    .get(&span.id().into_u64())
                    .cloned()
            })
            .map(|(_, fields)| fields)
            .unwrap_or_default();
        self.events.lock().unwrap().push(CapturedEvent {
            level: *event.metadata().level(),
            fields,
            span,
        });
    }
}

impl Capture {
    fn install(&self) -> tracing::subscriber::DefaultGuard {
        tracing::subscriber::set_default(Registry::default().with(self.clone()))
    }

    fn events(&self) -> Vec<CapturedEvent> {
        self.events.lock().unwrap().clone()
    }

    fn event(&self, message_start: &str) -> CapturedEvent {
        let events = self.events();
        events
            .iter()
            .find(|event| event.message().starts_with(message_start))
            .cloned()
            .unwrap_or_else(|| panic!("no event {message_start:?} in {events:#?}"))
    }

    /// The `shedlock` spans, in no particular order.
    fn runs(&self) -> Vec<Fields> {
        self.spans
            .lock()
            .unwrap()
            .values()
            .filter(|(name, _)| name == "shedlock")
            .map(|(_, fields)| fields.clone())
            .collect()
    }
}

fn field<'a>(fields: &'a Fields, name: &str) -> &'a str {
    fields
        .get(name)
        .unwrap_or_else(|| panic!("no field {name:?} in {fields:?}"))
}

const START: Duration = Duration::from_secs(1_700_000_000);

#[tokio::test(flavor = "current_thread")]
async fn a_run_is_a_span_with_acquired_and_released_events() {
    let capture = Capture::default();
    let _guard = capture.install();
    let store = MemoryLockStore::new();
    let executor = LockingTaskExecutor::new(store.node());
    let config =
        LockConfiguration::new("nightly", Duration::from_secs(60), Duration::ZERO).unwrap();
    let outcome = executor
        .execute(&config, async { tracing::info!("inside the task") })
        .await
        .unwrap();
    assert_eq!(outcome, TaskOutcome::Executed(()));

    let runs = capture.runs();
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(field(&runs[0], "lock"), "nightly");
    assert_eq!(field(&runs[0], "provider"), "memory");
    assert_eq!(field(&runs[0], "outcome"), "executed");

    let acquired = capture.event("acquired");
    assert_eq!(acquired.level, Level::DEBUG);
    assert_eq!(field(&acquired.span, "lock"), "nightly");
    let released = capture.event("released");
    assert_eq!(released.level, Level::DEBUG);
    // The task's own events carry the lock too.
    let inside = capture.event("inside the task");
    assert_eq!(field(&inside.span, "lock"), "nightly");
    let messages: Vec<_> = capture
        .events()
        .iter()
        .map(|e| e.message().to_owned())
        .collect();
    assert_eq!(messages, ["acquired", "inside the task", "released"]);
}

#[tokio::test(flavor = "current_thread")]
async fn a_skipped_run_names_the_holder_and_the_expiry() {
    let capture = Capture::default();
    let _guard = capture.install();
    let clock = ManualClock::new(SystemTime::UNIX_EPOCH + START);
    let store = MemoryLockStore::with_clock(Arc::new(clock.clone()));
    let a = LockingTaskExecutor::new(store.node_with("node-a", Arc::new(clock.clone())));
    let b = LockingTaskExecutor::new(store.node_with("node-b", Arc::new(clock)));
    let config =
        LockConfiguration::new("nightly", Duration::from_secs(60), Duration::ZERO).unwrap();
    let outcome = a
        .execute(&config, b.execute(&config, async {}))
        .await
        .unwrap();
    assert!(matches!(
        outcome,
        TaskOutcome::Executed(Ok(TaskOutcome::Skipped(Some(_))))
    ));
    let skipped = capture.event("skipped");
    assert_eq!(skipped.level, Level::DEBUG);
    assert_eq!(field(&skipped.fields, "holder"), "node-a", "{skipped:?}");
    // 1_700_000_000 s + 60 s after the epoch.
    assert_eq!(
        field(&skipped.fields, "held_until"),
        "2023-11-14T22:14:20.000Z"
    );
    assert_eq!(field(&skipped.span, "lock"), "nightly");
    let mut outcomes: Vec<_> = capture
        .runs()
        .iter()
        .map(|run| field(run, "outcome").to_owned())
        .collect();
    outcomes.sort();
    assert_eq!(outcomes, ["executed", "skipped"]);
}

/// A provider with fencing whose every lock is numbered 42, and which refuses one name.
#[derive(Debug)]
struct Fenced {
    inner: shedlock_memory::MemoryLockProvider,
}

#[async_trait]
impl LockProvider for Fenced {
    async fn try_lock(&self, config: &LockConfiguration) -> Result<Acquisition, LockError> {
        if config.name() == "bad/name" {
            return Err(LockError::invalid_name("fenced", config.name(), "no '/'"));
        }
        self.inner.try_lock(config).await
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    fn provider_name(&self) -> &'static str {
        "fenced"
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_refused_name_is_an_invalid_name_not_an_unknown_outcome() {
    let capture = Capture::default();
    let _guard = capture.install();
    let executor = LockingTaskExecutor::new(Fenced {
        inner: MemoryLockStore::new().node(),
    });
    let config =
        LockConfiguration::new("bad/name", Duration::from_secs(60), Duration::ZERO).unwrap();
    let error = executor.execute(&config, async {}).await.unwrap_err();
    assert!(matches!(error, LockError::InvalidName { .. }), "{error}");
    let refused = capture.event("not run");
    assert_eq!(refused.level, Level::WARN);
    assert_eq!(refused.message(), "not run: invalid name");
    assert_eq!(
        field(&refused.fields, "error"),
        "lock name \"bad/name\" is not accepted by the fenced provider: no '/'"
    );
    let runs = capture.runs();
    assert_eq!(field(&runs[0], "outcome"), "invalid name");
    assert_eq!(field(&runs[0], "provider"), "fenced");
    assert!(
        capture
            .events()
            .iter()
            .all(|e| !e.message().contains("unknown")),
        "{:#?}",
        capture.events()
    );
}

/// A provider whose every acquire fails with a backend error of one kind.
#[derive(Debug)]
struct Failing(ErrorKind);

#[async_trait]
impl LockProvider for Failing {
    async fn try_lock(&self, config: &LockConfiguration) -> Result<Acquisition, LockError> {
        Err(LockError::backend_message(
            self.0,
            "failing",
            Operation::Acquire,
            config.name(),
            "it failed",
        ))
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::new(TimeSource::Client)
    }

    fn provider_name(&self) -> &'static str {
        "failing"
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_backend_error_is_logged_as_its_kind_and_only_a_missing_answer_as_unknown() {
    for (kind, said) in [
        (ErrorKind::Unreachable, "unreachable"),
        (ErrorKind::CredentialsRefused, "credentials refused"),
        (ErrorKind::Configuration, "invalid configuration"),
        (ErrorKind::CorruptData, "corrupt data"),
        (ErrorKind::Limit, "limit reached"),
        (ErrorKind::OutcomeUnknown, "outcome unknown"),
    ] {
        let capture = Capture::default();
        let _guard = capture.install();
        let executor = LockingTaskExecutor::new(Failing(kind));
        let config =
            LockConfiguration::new("job", Duration::from_secs(60), Duration::ZERO).unwrap();
        let error = executor.execute(&config, async {}).await.unwrap_err();
        assert_eq!(error.kind(), kind);
        let refused = capture.event("not run");
        assert_eq!(refused.message(), format!("not run: {said}"));
        assert_eq!(field(&capture.runs()[0], "outcome"), said);
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_panicking_run_is_recorded_as_panicked_and_still_released() {
    let capture = Capture::default();
    let _guard = capture.install();
    let executor = LockingTaskExecutor::new(MemoryLockStore::new().node());
    let config = LockConfiguration::new("flaky", Duration::from_secs(60), Duration::ZERO).unwrap();
    let run = executor.execute(&config, async { panic!("boom") });
    let panicked = futures_util::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(run)).await;
    assert!(panicked.is_err());
    assert_eq!(field(&capture.runs()[0], "outcome"), "panicked");
    capture.event("released");
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn keep_alive_reports_extends_then_the_loss() {
    let capture = Capture::default();
    let _guard = capture.install();
    let store = MemoryLockStore::new();
    let executor = LockingTaskExecutor::new(store.node());
    let config =
        LockConfiguration::new("hourly", Duration::from_millis(300), Duration::ZERO).unwrap();
    let outcome = executor
        .execute_with_keep_alive(&config, async |lost| {
            // Two extends (at 100 ms and 200 ms), then someone takes the lock over.
            tokio::time::sleep(Duration::from_millis(250)).await;
            let now = SystemTime::now();
            store.put_record("hourly", now + Duration::from_secs(60), now, "intruder");
            tokio::time::timeout(Duration::from_secs(5), lost.cancelled())
                .await
                .is_ok()
        })
        .await
        .unwrap();
    assert_eq!(
        outcome,
        TaskOutcome::Executed(true),
        "the task heard of the loss"
    );
    let messages: Vec<_> = capture
        .events()
        .iter()
        .map(|e| e.message().to_owned())
        .collect();
    assert_eq!(
        messages,
        [
            "acquired",
            "extended",
            "extended",
            "lock lost: keep-alive found it expired or taken",
            "lock lost before release: keep-alive had found it expired or taken while the task ran, and another node may have run the task",
        ]
    );
    let lost = capture.event("lock lost: keep-alive");
    assert_eq!(lost.level, Level::WARN);
    assert_eq!(field(&lost.span, "lock"), "hourly");
    assert_eq!(
        field(&capture.event("extended").fields, "lock_at_most_for"),
        "300ms"
    );
}

#[tokio::test(flavor = "current_thread")]
async fn the_fencing_token_is_a_field_of_the_event_and_the_span() {
    let capture = Capture::default();
    let _guard = capture.install();
    let executor = LockingTaskExecutor::new(FencingCounter::default());
    let config = LockConfiguration::new("ledger", Duration::from_secs(60), Duration::ZERO).unwrap();
    executor
        .execute(&config, async {})
        .await
        .unwrap()
        .executed()
        .unwrap();
    assert_eq!(
        field(&capture.event("acquired").fields, "fencing_token"),
        "1"
    );
    assert_eq!(field(&capture.runs()[0], "fencing_token"), "1");
    assert_eq!(field(&capture.runs()[0], "provider"), "counter");
}

/// Grants every lock, numbering the acquisitions: the smallest provider with fencing.
#[derive(Debug, Default)]
struct FencingCounter {
    issued: std::sync::atomic::AtomicU64,
}

#[derive(Debug)]
struct Numbered(String, u64);

#[async_trait]
impl shedlock_core::LockHandle for Numbered {
    fn name(&self) -> &str {
        &self.0
    }

    fn fencing_token(&self) -> Option<u64> {
        Some(self.1)
    }

    fn time_source(&self) -> TimeSource {
        TimeSource::Server
    }

    async fn unlock(&self) -> Result<bool, LockError> {
        Ok(true)
    }

    async fn extend(&self, _lock_at_most_for: Duration) -> Result<bool, LockError> {
        Ok(true)
    }
}

#[async_trait]
impl LockProvider for FencingCounter {
    async fn try_lock(&self, config: &LockConfiguration) -> Result<Acquisition, LockError> {
        let token = self
            .issued
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            + 1;
        Ok(Acquisition::Acquired(Box::new(Numbered(
            config.name().to_owned(),
            token,
        ))))
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::new(TimeSource::Server)
            .with_fencing(true)
            .with_extend(true)
    }

    fn provider_name(&self) -> &'static str {
        "counter"
    }
}

#[tokio::test(flavor = "current_thread")]
async fn the_provider_field_names_the_backend_of_a_shared_provider() {
    let capture = Capture::default();
    let _guard = capture.install();
    let config = LockConfiguration::new("job", Duration::from_secs(60), Duration::ZERO).unwrap();
    let shared = Arc::new(MemoryLockStore::new().node());
    assert_eq!(shared.provider_name(), "memory");
    let executor = LockingTaskExecutor::new(shared);
    executor
        .execute(&config, async {})
        .await
        .unwrap()
        .executed()
        .unwrap();
    let providers: Vec<_> = capture
        .runs()
        .iter()
        .map(|run| field(run, "provider").to_owned())
        .collect();
    assert_eq!(providers, ["memory"]);
}

/// The warning of a release that finds the lock gone, for a task run with a lock of
/// `lock_at_most_for` that sleeps `task_takes` while `meanwhile` runs on the store.
async fn release_warning(
    lock_at_most_for: Duration,
    task_takes: Duration,
    meanwhile: impl AsyncFnOnce(&MemoryLockStore),
) -> CapturedEvent {
    let capture = Capture::default();
    let _guard = capture.install();
    let store = MemoryLockStore::new();
    let executor = LockingTaskExecutor::new(store.node());
    let config = LockConfiguration::new("nightly", lock_at_most_for, Duration::ZERO).unwrap();
    let outcome = executor
        .execute(&config, async {
            meanwhile(&store).await;
            tokio::time::sleep(task_takes).await;
        })
        .await
        .unwrap();
    assert_eq!(outcome, TaskOutcome::Executed(()));
    let warning = capture.event("lock lost before release");
    assert_eq!(warning.level, Level::WARN);
    warning
}

#[tokio::test(flavor = "current_thread")]
async fn a_release_after_an_operators_force_unlock_says_the_lock_was_freed_early() {
    let warning = release_warning(Duration::from_secs(60), Duration::ZERO, async |store| {
        let operator = store.node();
        let held = operator.inspect_lock("nightly").await.unwrap().unwrap();
        assert!(
            operator
                .force_unlock("nightly", &held.acquisition)
                .await
                .unwrap()
        );
    })
    .await;
    assert_eq!(
        warning.message(),
        "lock lost before release, before lock_at_most_for had passed: it was freed or taken \
         early (an operator's force-unlock, its record deleted or overwritten, or the backend's \
         clock ahead of this node's), and another node may have run the task"
    );
    assert_eq!(field(&warning.fields, "lock_at_most_for"), "60s");
}

#[tokio::test(flavor = "current_thread")]
async fn a_release_after_the_task_outlasted_its_lock_says_it_expired() {
    let warning = release_warning(
        Duration::from_millis(50),
        Duration::from_millis(120),
        async |_| {},
    )
    .await;
    assert_eq!(
        warning.message(),
        "lock lost before release: the task outlasted lock_at_most_for, so the lock expired and \
         another node may have run the task (make lock_at_most_for longer than the task, or run \
         it with keep-alive)"
    );
    assert_eq!(field(&warning.fields, "lock_at_most_for"), "50ms");
}

/// The memory provider, declaring whole seconds of time precision.
#[derive(Debug)]
struct WholeSeconds(shedlock_memory::MemoryLockProvider);

#[async_trait]
impl LockProvider for WholeSeconds {
    async fn try_lock(&self, config: &LockConfiguration) -> Result<Acquisition, LockError> {
        self.0.try_lock(config).await
    }

    fn capabilities(&self) -> Capabilities {
        self.0
            .capabilities()
            .with_time_precision(Duration::from_secs(1))
    }

    fn provider_name(&self) -> &'static str {
        "whole-seconds"
    }
}

/// A backend that stores whole seconds may end a lock up to one second early, so a release
/// that finds the lock gone 1.2 s into a 2 s lock does not claim it was ended early.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn the_backends_time_precision_is_spared_before_a_lock_is_called_ended_early() {
    let capture = Capture::default();
    let _guard = capture.install();
    let store = MemoryLockStore::new();
    let executor = LockingTaskExecutor::new(WholeSeconds(store.node()));
    let config = LockConfiguration::new("coarse", Duration::from_secs(2), Duration::ZERO).unwrap();
    let outcome = executor
        .execute(&config, async {
            tokio::time::sleep(Duration::from_millis(1200)).await;
            assert!(store.remove_record("coarse"));
        })
        .await
        .unwrap();
    assert_eq!(outcome, TaskOutcome::Executed(()));
    assert!(
        capture
            .event("lock lost before release")
            .message()
            .starts_with("lock lost before release: the task outlasted lock_at_most_for"),
        "{:#?}",
        capture.events()
    );
}
