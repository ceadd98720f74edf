//! Scheduled jobs for shedlock-rs: run async functions on a cron expression, at a fixed rate or
//! with a fixed delay, each run under its lock so a fleet runs each tick at most once.
//!
//! ```
//! use std::time::Duration;
//! use shedlock_memory::MemoryLockProvider;
//! use shedlock_scheduler::{Job, LockDefaults, Schedule, Scheduler, Tz};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // Any provider: PostgresLockProvider, RedisLockProvider, ...
//! let provider = MemoryLockProvider::new();
//! // ShedLock's defaultLockAtMostFor: how long a lock outlives a node that died mid-run.
//! let defaults = LockDefaults::new(Duration::from_secs(10 * 60), Duration::ZERO)?;
//! let mut scheduler = Scheduler::new(provider, defaults);
//!
//! scheduler.add(
//!     Job::new(
//!         "purge-sessions",
//!         Schedule::cron("0 */5 * * * *", Tz::UTC)?, // second 0 of every fifth minute
//!         |_run| async { /* ... */ Ok::<(), std::io::Error>(()) },
//!     )
//!     // Held at least 1 min, so a node whose clock is a little late skips this tick too.
//!     .lock_at_least_for(Duration::from_secs(60)),
//! )?;
//! scheduler.add(
//!     Job::new("heartbeat", Schedule::fixed_rate(Duration::from_secs(2)), |run| async move {
//!         println!("tick {} under lock {}", run.tick().number, run.lock_name());
//!     })
//!     .lock_at_most_for(Duration::from_secs(10)),
//! )?;
//!
//! // At the end of the service's life:
//! scheduler.shutdown(Duration::from_secs(30)).await;
//! # Ok(()) }
//! ```
//!
//! # What a run does
//!
//! - It takes its lock through a [`LockingTaskExecutor`](shedlock_core::LockingTaskExecutor)
//!   ([`Scheduler::executor`]). When another node holds it, the run is skipped
//!   ([`RunOutcome::Skipped`], with the holder when the backend names it). When taking it fails,
//!   the run does not happen ([`RunOutcome::LockFailed`]): an unknown lock outcome never runs a
//!   job.
//! - A job that panics is caught: the panic is logged with the job's name, the lock released,
//!   and the scheduler and its other jobs go on ([`RunOutcome::Panicked`]).
//! - A job returning `Err` is logged and reported ([`RunOutcome::Failed`]); the lock is
//!   released as for a success.
//! - Runs of one job never overlap on one node. Ticks that pass while a run is still going are
//!   missed ([`RunOutcome::Missed`]), or the latest of them runs late
//!   ([`Job::missed_ticks`], [`MissedTicks`]); a fixed rate keeps its grid, a fixed delay counts
//!   from the end of the run. See [`Schedule`].
//! - With [`Job::keep_alive`], the lock is extended while the run goes on, and
//!   [`RunContext::lock_lost`] tells the job when it was lost anyway.
//!
//! Each tick is logged with `tracing` (fields `job`, `lock`, `tick`: `info` when it ran, `debug`
//! when skipped, `warn` or `error` otherwise) and handed to the
//! [`on_run`](SchedulerBuilder::on_run) observer as a [`RunReport`]. With the `metrics` feature,
//! each tick is also counted by job and outcome (`shedlock_job_runs_total`), and the ticks
//! missed (`shedlock_job_missed_ticks_total`); `shedlock_core::metrics` lists every name.
//!
//! # Lock names
//!
//! A job's lock is named after the job unless [`Job::lock_name`] names another (to share a lock
//! with a Java ShedLock service, for example) or [`Job::lock_name_with`] computes one per run
//! (per tenant, per shard, per hour). Fixed names and every job's lock bounds are checked when
//! the job is added ([`SchedulerError`]); computed names at each run
//! ([`RunOutcome::InvalidLock`], logged with the job's name, the run skipped).
//!
//! # Jobs at run time
//!
//! [`Scheduler::handle`] gives a [`SchedulerHandle`], which an admin endpoint can hold: it lists
//! the jobs ([`JobStatus`]: paused, running, next run, last report), and pauses, resumes,
//! removes or runs one now, under its lock as any run.
//!
//! # Shutdown
//!
//! [`Scheduler::shutdown`] starts no new run, cancels [`RunContext::shutdown`], waits for the
//! runs in progress up to a limit, then stops the rest at their next `.await` and lists their
//! jobs in a [`ShutdownReport`]. A run stopped at the limit keeps its lock until
//! `lock_at_most_for`, as if the node had died: stopping a future does not stop the work it
//! handed to `spawn_blocking` or a spawned task, and another node must not start the job beside
//! that work. A job that offloads work should watch [`RunContext::shutdown`] and wait for it.
//! Dropping a [`Scheduler`] aborts its tasks at once; a run cut off that way keeps its lock the
//! same way.
//!
//! # With tokio-cron-scheduler
//!
//! An application that already schedules with
//! [tokio-cron-scheduler](https://docs.rs/tokio-cron-scheduler) keeps it and wraps each job's
//! body in [`LockingTaskExecutor::execute`](shedlock_core::LockingTaskExecutor::execute): see
//! `examples/tokio_cron_scheduler.rs` in this crate (`cargo run -p shedlock-scheduler --example
//! tokio_cron_scheduler`). What the executor does not add there is what this crate does: panic
//! isolation with the job's name, run reports, keep-alive per job and a shutdown that releases
//! locks.

mod cron;
mod error;
mod job;
mod schedule;
mod scheduler;

pub use chrono_tz::Tz;
pub use error::SchedulerError;
pub use job::{Job, JobOutput, RunContext};
pub use schedule::{MissedTicks, Schedule, Tick};
pub use scheduler::{
    JobStatus, LockDefaults, RunOutcome, RunReport, Scheduler, SchedulerBuilder, SchedulerHandle,
    ShutdownReport,
};
