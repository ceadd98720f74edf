//! Everything the `tracing` logs of a test say, as text: every span's and event's fields, at
//! every level and from every crate (the providers', their clients', the executor's), for
//! tests that assert what a log line may never hold, such as a password.
//!
//! A plain `tracing::Subscriber`, so it needs nothing beyond `tracing` (this crate's default
//! build). Installed for the current thread: run the test on a current-thread runtime, so the
//! tasks its clients spawn log on that thread too.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tracing::field::{Field, Visit};
use tracing::level_filters::LevelFilter;
use tracing::span::{Attributes, Id, Record};
use tracing::subscriber::{DefaultGuard, Interest};
use tracing::{Dispatch, Event, Metadata, Subscriber};

/// What [`LogCapture::install`] holds while it captures.
pub struct Installed {
    _default: DefaultGuard,
    _beside: Dispatch,
}

/// The captured lines; clones share them.
#[derive(Clone, Default)]
pub struct LogCapture {
    lines: Arc<Mutex<Vec<String>>>,
    next_span: Arc<AtomicU64>,
}

impl LogCapture {
    /// Captures everything logged on this thread until the guard is dropped.
    ///
    /// A second dispatcher lives as long as the guard. With one dispatcher alone, tracing
    /// takes it for the global one and asks the thread that first reaches a log statement
    /// (say a test running beside this one, with no subscriber) whether the statement is
    /// wanted, and keeps that answer: "never", and this thread's events there would be lost.
    pub fn install(&self) -> Installed {
        let beside = Dispatch::new(LogCapture::default());
        Installed {
            _default: tracing::subscriber::set_default(self.clone()),
            _beside: beside,
        }
    }

    /// Every line so far, one per span, span record and event.
    pub fn text(&self) -> String {
        self.lines.lock().unwrap().join("\n")
    }

    fn push(&self, line: String) {
        self.lines.lock().unwrap().push(line);
    }
}

/// A line's fields, `name=value` each, values as their `Debug` or as the text given.
struct Fields(String);

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        let _ = write!(self.0, " {}={value:?}", field.name());
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        let _ = write!(self.0, " {}={value}", field.name());
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        let _ = write!(self.0, " {}={value}", field.name());
        let mut source = value.source();
        while let Some(cause) = source {
            let _ = write!(self.0, ": {cause}");
            source = cause.source();
        }
    }
}

impl Subscriber for LogCapture {
    fn register_callsite(&self, _: &'static Metadata<'static>) -> Interest {
        Interest::always()
    }

    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }

    fn max_level_hint(&self) -> Option<LevelFilter> {
        Some(LevelFilter::TRACE)
    }

    fn new_span(&self, span: &Attributes<'_>) -> Id {
        let metadata = span.metadata();
        let mut fields = Fields(format!("span {} {}:", metadata.target(), metadata.name()));
        span.record(&mut fields);
        self.push(fields.0);
        Id::from_u64(self.next_span.fetch_add(1, Ordering::Relaxed) + 1)
    }

    fn record(&self, span: &Id, values: &Record<'_>) {
        let mut fields = Fields(format!("span #{} recorded:", span.into_u64()));
        values.record(&mut fields);
        self.push(fields.0);
    }

    fn record_follows_from(&self, _: &Id, _: &Id) {}

    fn event(&self, event: &Event<'_>) {
        let metadata = event.metadata();
        let mut fields = Fields(format!("{} {}:", metadata.level(), metadata.target()));
        event.record(&mut fields);
        self.push(fields.0);
    }

    fn enter(&self, _: &Id) {}

    fn exit(&self, _: &Id) {}
}
