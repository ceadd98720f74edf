//! The scheduler re-exported as `shedlock::scheduler` takes its locks from the provider
//! `shedlock::connect` returns: a lock held through another connect to the same store keeps the
//! job from running until it is released.

#![cfg(all(feature = "scheduler", feature = "memory"))]

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use shedlock::scheduler::{Job, LockDefaults, Schedule, Scheduler};
use shedlock::{LockConfiguration, LockProvider};

#[tokio::test]
async fn a_scheduler_on_a_connected_provider_skips_while_another_node_holds_the_lock() {
    let url = format!("memory://scheduler-{}", uuid::Uuid::new_v4().simple());
    let other_node = shedlock::connect(&url).await.unwrap();
    let held = other_node
        .try_lock(
            &LockConfiguration::new("report", Duration::from_secs(30), Duration::ZERO).unwrap(),
        )
        .await
        .unwrap()
        .into_handle()
        .expect("a fresh store's lock is free");

    let runs = Arc::new(AtomicU32::new(0));
    let counted = runs.clone();
    let defaults = LockDefaults::new(Duration::from_secs(30), Duration::ZERO).unwrap();
    let mut scheduler = Scheduler::new(shedlock::connect(&url).await.unwrap(), defaults);
    scheduler
        .add(Job::new(
            "report",
            Schedule::fixed_rate(Duration::from_millis(20)),
            move |_run| {
                let counted = counted.clone();
                async move {
                    counted.fetch_add(1, Ordering::SeqCst);
                }
            },
        ))
        .unwrap();

    // About ten ticks while the other node holds the lock: every one is skipped.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        runs.load(Ordering::SeqCst),
        0,
        "ran while another node held the lock"
    );

    assert!(held.unlock().await.unwrap());
    tokio::time::timeout(Duration::from_secs(10), async {
        while runs.load(Ordering::SeqCst) == 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the job runs once the lock is released");
    tokio::time::timeout(
        Duration::from_secs(10),
        scheduler.shutdown(Duration::from_secs(5)),
    )
    .await
    .expect("the scheduler shuts down");
}
