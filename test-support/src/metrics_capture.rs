//! What the `metrics` facade recorded, for tests: a recording recorder installed once per test
//! binary (the first call of any function here installs it), read back by name and labels.
//!
//! A snapshot of the recorder drains what it reads, and tests run side by side, so every
//! snapshot is added to what earlier ones saw: each test reads its own lock and job names.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use metrics_util::{CompositeKey, MetricKind};

/// Everything recorded so far: the sum of every snapshot taken.
struct Recorded {
    snapshotter: Snapshotter,
    counters: HashMap<Series, u64>,
    histograms: HashMap<Series, Vec<f64>>,
    descriptions: HashMap<String, String>,
}

/// A metric's name and its labels, sorted.
type Series = (String, Vec<(String, String)>);

/// Labels as a test writes them: `&[("lock", "nightly")]`.
pub type Labels<'a> = &'a [(&'a str, &'a str)];

fn recorded() -> &'static Mutex<Recorded> {
    static RECORDED: OnceLock<Mutex<Recorded>> = OnceLock::new();
    RECORDED.get_or_init(|| {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        recorder
            .install()
            .expect("no other recorder in this test binary");
        Mutex::new(Recorded {
            snapshotter,
            counters: HashMap::new(),
            histograms: HashMap::new(),
            descriptions: HashMap::new(),
        })
    })
}

fn key_of(key: &CompositeKey) -> Series {
    let mut labels: Vec<(String, String)> = key
        .key()
        .labels()
        .map(|label| (label.key().to_owned(), label.value().to_owned()))
        .collect();
    labels.sort();
    (key.key().name().to_owned(), labels)
}

fn wanted(name: &str, labels: Labels<'_>) -> Series {
    let mut labels: Vec<(String, String)> = labels
        .iter()
        .map(|(key, value)| ((*key).to_owned(), (*value).to_owned()))
        .collect();
    labels.sort();
    (name.to_owned(), labels)
}

fn take_snapshot(recorded: &mut Recorded) {
    for (key, _unit, description, value) in recorded.snapshotter.snapshot().into_vec() {
        if let Some(description) = description {
            recorded
                .descriptions
                .insert(key.key().name().to_owned(), description.into_owned());
        }
        match (key.kind(), value) {
            (MetricKind::Counter, DebugValue::Counter(count)) => {
                *recorded.counters.entry(key_of(&key)).or_default() += count;
            }
            (MetricKind::Histogram, DebugValue::Histogram(values)) => recorded
                .histograms
                .entry(key_of(&key))
                .or_default()
                .extend(values.into_iter().map(|value| value.into_inner())),
            _ => {}
        }
    }
}

/// A counter's value (0 when never incremented).
pub fn counter(name: &str, labels: Labels<'_>) -> u64 {
    let mut recorded = recorded().lock().unwrap();
    take_snapshot(&mut recorded);
    recorded
        .counters
        .get(&wanted(name, labels))
        .copied()
        .unwrap_or(0)
}

/// Every value a histogram recorded.
pub fn histogram(name: &str, labels: Labels<'_>) -> Vec<f64> {
    let mut recorded = recorded().lock().unwrap();
    take_snapshot(&mut recorded);
    recorded
        .histograms
        .get(&wanted(name, labels))
        .cloned()
        .unwrap_or_default()
}

/// Every series of `name` that carries `label` = `value`, with its labels.
pub fn counters_with(name: &str, label: (&str, &str)) -> Vec<(Vec<(String, String)>, u64)> {
    let mut recorded = recorded().lock().unwrap();
    take_snapshot(&mut recorded);
    let mut found: Vec<_> = recorded
        .counters
        .iter()
        .filter(|((series, labels), _)| {
            series == name
                && labels
                    .iter()
                    .any(|(key, value)| key == label.0 && value == label.1)
        })
        .map(|((_, labels), count)| (labels.clone(), *count))
        .collect();
    found.sort();
    found
}

/// The description a metric was given (`describe_counter!` and the like), once it has a value.
pub fn description(name: &str) -> Option<String> {
    let mut recorded = recorded().lock().unwrap();
    take_snapshot(&mut recorded);
    recorded.descriptions.get(name).cloned()
}

/// Installs the recorder now, so that what a test records before it reads anything back is
/// kept.
pub fn install() {
    recorded();
}
