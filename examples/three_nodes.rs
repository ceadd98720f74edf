//! Three nodes share one lock store and each runs the same schedule: every tick, exactly one of
//! them runs the job and the other two skip it.
//!
//! `cargo run -p shedlock-examples --example three_nodes [ticks]`
//!
//! For nodes that are separate processes on a real backend, see `scheduled_job.rs`.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use shedlock_core::{LockConfiguration, LockingTaskExecutor};
use shedlock_memory::MemoryLockStore;

const TICK: Duration = Duration::from_millis(500);

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let ticks: usize = std::env::args().nth(1).map_or(Ok(5), |arg| arg.parse())?;
    // Held for at least 400 ms, so a node whose tick fires a little late cannot run the same
    // tick again; at most 10 s, in case a node dies mid-run.
    let config = LockConfiguration::parse("send-newsletter", "10s", "400ms")?;
    let store = MemoryLockStore::new();
    let runs = Arc::new(AtomicUsize::new(0));

    let nodes = ["node-a", "node-b", "node-c"].map(|node| {
        let executor =
            LockingTaskExecutor::new(store.node_with(node, Arc::new(shedlock_core::SystemClock)));
        let (config, runs) = (config.clone(), runs.clone());
        tokio::spawn(async move {
            let mut schedule = tokio::time::interval(TICK);
            for tick in 1..=ticks {
                schedule.tick().await;
                let job = async {
                    runs.fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(50)).await;
                };
                match executor.execute(&config, job).await {
                    Ok(outcome) if outcome.was_executed() => {
                        println!("tick {tick}: {node} ran the job")
                    }
                    Ok(_skipped) => println!("tick {tick}: {node} skipped"),
                    Err(error) => println!("tick {tick}: {node} did not run the job: {error}"),
                }
            }
        })
    });
    for node in nodes {
        node.await?;
    }
    let runs = runs.load(Ordering::SeqCst);
    println!("{ticks} ticks on 3 nodes: the job ran {runs} times");
    if runs != ticks {
        return Err(format!(
            "expected exactly one run per tick, got {runs} runs for {ticks} ticks"
        )
        .into());
    }
    Ok(())
}
