//! The log lines an operator relies on: a skipped run says who holds the lock and until when,
//! a lost lock is a warning, and both carry the lock name as a field.

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use shedlock_core::{LockConfiguration, LockingTaskExecutor, ManualClock, TaskOutcome};
use shedlock_memory::MemoryLockStore;

/// Collects everything the subscriber writes.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn text(&self) -> String {
        String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
    }
}

fn capture() -> (Captured, tracing::subscriber::DefaultGuard) {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::DEBUG)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    (captured, tracing::subscriber::set_default(subscriber))
}

#[tokio::test(flavor = "current_thread")]
async fn a_skipped_run_names_the_lock_the_holder_and_the_expiry() {
    let (captured, _guard) = capture();
    let clock = ManualClock::new(SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000));
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
        TaskOutcome::Executed(Ok(TaskOutcome::Skipped))
    ));
    let log = captured.text();
    let line = log
        .lines()
        .find(|line| line.contains("skipped"))
        .unwrap_or_else(|| panic!("no skip event in:\n{log}"));
    assert!(line.contains("DEBUG"), "{line}");
    assert!(line.contains("lock=\"nightly\""), "{line}");
    assert!(line.contains("holder=\"node-a#"), "{line}");
    assert!(line.contains("held_until=Some("), "{line}");
}

#[tokio::test(flavor = "current_thread")]
async fn a_lost_lock_is_a_warning_with_the_lock_name() {
    let (captured, _guard) = capture();
    let store = MemoryLockStore::new();
    let a = LockingTaskExecutor::new(store.node());
    let config =
        LockConfiguration::new("hourly", Duration::from_millis(150), Duration::ZERO).unwrap();
    let outcome = a
        .execute_with_keep_alive(&config, async |lost| {
            let now = SystemTime::now();
            store.put_record("hourly", now + Duration::from_secs(60), now, "intruder");
            tokio::time::timeout(Duration::from_secs(5), lost.cancelled())
                .await
                .is_ok()
        })
        .await
        .unwrap();
    assert_eq!(outcome, TaskOutcome::Executed(true));
    let log = captured.text();
    let lost = log
        .lines()
        .find(|line| line.contains("lock lost"))
        .unwrap_or_else(|| panic!("no lost-lock event in:\n{log}"));
    assert!(
        lost.contains("WARN") && lost.contains("lock=\"hourly\""),
        "{lost}"
    );
    let release = log
        .lines()
        .find(|line| line.contains("lost before release"))
        .unwrap_or_else(|| panic!("no release warning in:\n{log}"));
    assert!(
        release.contains("WARN") && release.contains("lock=\"hourly\""),
        "{release}"
    );
}
