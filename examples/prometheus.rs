//! A scheduler whose runs Prometheus scrapes: `shedlock`'s `metrics` feature records through the
//! `metrics` facade, `metrics-exporter-prometheus` is the recorder, and the application serves
//! its text at `/metrics` beside the lock view (`/locks`, and the operators' page at `/`, which
//! shows the two jobs too).
//!
//! ```sh
//! cargo run -p shedlock-examples --bin prometheus -- --listen 127.0.0.1:9898
//! curl -s http://127.0.0.1:9898/metrics | grep shedlock_
//! ```
//!
//! Options: `--url <URL>` (any URL `shedlock::connect` takes; default `memory://prometheus`, an
//! in-process store) and `--listen <ADDRESS>` (default `127.0.0.1:9898`; port `0` picks a free
//! one). The first line on stdout names the address served. It runs until Ctrl-C.
//!
//! Two jobs tick every second: `heartbeat` always succeeds, `import` fails every other run, so
//! `/metrics` shows both outcomes:
//!
//! ```text
//! shedlock_job_runs_total{job="import",outcome="failed"} 3
//! shedlock_job_runs_total{job="import",outcome="executed"} 3
//! shedlock_locks_acquired_total{lock="heartbeat"} 6
//! shedlock_acquire_seconds{lock="heartbeat",outcome="acquired",quantile="0.5"} 0.000012
//! ```

use std::error::Error;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use metrics_exporter_prometheus::PrometheusBuilder;
use shedlock::http::LockRoutes;
use shedlock::scheduler::{Job, LockDefaults, Schedule, Scheduler};

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    let mut url = "memory://prometheus".to_owned();
    let mut listen = "127.0.0.1:9898".to_owned();
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().ok_or(format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--url" => url = value,
            "--listen" => listen = value,
            _ => return Err(format!("unknown option {flag}: use --url or --listen").into()),
        }
    }

    // The recorder first: what is recorded before it is installed is lost.
    let prometheus = PrometheusBuilder::new().install_recorder()?;
    shedlock::metrics::describe();

    let provider = Arc::new(shedlock::connect(&url).await?);
    let defaults = LockDefaults::new(Duration::from_secs(30), Duration::ZERO)?;
    let mut scheduler = Scheduler::new(provider.clone(), defaults);
    let every_second = || Schedule::fixed_rate(Duration::from_secs(1));
    scheduler.add(Job::new("heartbeat", every_second(), |_run| async {}))?;
    let runs = Arc::new(AtomicU64::new(0));
    scheduler.add(Job::new("import", every_second(), move |_run| {
        let run = runs.fetch_add(1, Ordering::Relaxed);
        async move {
            if run % 2 == 1 {
                return Err("the upstream file is not there yet");
            }
            Ok(())
        }
    }))?;

    let app = Router::new()
        .route(
            "/metrics",
            get(move || std::future::ready(prometheus.render())),
        )
        .merge(
            LockRoutes::new(provider)
                .jobs(scheduler.handle())
                .into_router(),
        );
    let listener = tokio::net::TcpListener::bind(&listen).await?;
    println!("serving http://{}/metrics", listener.local_addr()?);
    axum::serve(listener, app)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    scheduler.shutdown(Duration::from_secs(10)).await;
    Ok(())
}
