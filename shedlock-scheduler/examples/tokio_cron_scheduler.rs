//! Keeping tokio-cron-scheduler and adding locks: each job's body runs through a
//! `LockingTaskExecutor`, so a fleet of replicas runs each tick once.
//!
//! Three replicas in one process (three `JobScheduler`s, each with its own provider on one
//! in-memory store, as three services would each connect to one database) run a job every
//! second for about four seconds; each tick is run by exactly one of them.
//!
//! ```sh
//! cargo run -p shedlock-scheduler --example tokio_cron_scheduler
//! ```

use std::sync::Arc;
use std::time::Duration;

use shedlock_core::{LockConfiguration, LockingTaskExecutor, TaskOutcome};
use shedlock_memory::MemoryLockStore;
use shedlock_scheduler::Tz;
use tokio_cron_scheduler::{Job, JobScheduler};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // In production: `PostgresLockProvider::connect(url)` (or any provider) on each replica.
    let store = MemoryLockStore::new();
    // Held at least 500 ms, so a replica whose tick fires a little late skips it too; at most
    // 30 s if a replica dies mid-run.
    let config = Arc::new(LockConfiguration::parse("report", "30s", "500ms")?);
    let mut replicas = Vec::new();
    for replica in ["replica-a", "replica-b", "replica-c"] {
        // One executor per provider, cloned into each job.
        let executor = LockingTaskExecutor::new(
            store.node_with(replica, Arc::new(shedlock_core::SystemClock)),
        );
        let scheduler = JobScheduler::new().await?;
        let config = config.clone();
        scheduler
            .add(Job::new_async_tz(
                "* * * * * *",
                Tz::Europe__Berlin,
                move |_id, _scheduler| {
                    let (executor, config) = (executor.clone(), config.clone());
                    Box::pin(async move {
                        match executor.execute(&config, run_report(replica)).await {
                            Ok(TaskOutcome::Executed(())) => {}
                            Ok(TaskOutcome::Skipped(_)) => {
                                println!("{replica}: skipped, held elsewhere")
                            }
                            // Fail closed: the lock's state is unknown, so the job did not run.
                            Err(error) => eprintln!("{replica}: not run: {error}"),
                        }
                    })
                },
            )?)
            .await?;
        replicas.push(scheduler);
    }
    for scheduler in &mut replicas {
        scheduler.start().await?;
    }
    tokio::time::sleep(Duration::from_millis(4200)).await;
    for scheduler in &mut replicas {
        scheduler.shutdown().await?;
    }
    Ok(())
}

async fn run_report(replica: &str) {
    println!(
        "{replica}: ran the report at {}",
        chrono::Utc::now().format("%H:%M:%S%.3f")
    );
}
