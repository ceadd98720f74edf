//! `shedlock bench`: what a lock costs on each backend named, beside that backend's floor (the
//! cheapest round trip its own driver makes to the same server), as a table or JSON and as an
//! SVG chart of the latency distributions.

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Args;
use plotters::prelude::*;
use shedlock::redact_url;
use shedlock_benches::floors::AnyDriver;
#[cfg(feature = "sqlite")]
use shedlock_benches::floors::SqliteFile;
use shedlock_benches::measure::Samples;
use shedlock_benches::suite::{self, Bench, BenchError, Figures};

use crate::Failure;
use crate::backend::{self, ConnectOptions, DEFAULT_TIMEOUT, parse_timeout};
use crate::progress::Progress;

const BENCH_EXAMPLES: &str = "\
Benches, per backend: floor_write and floor_read (the backend's own driver on a connection of
its own: a one-row UPDATE, SET, put, setData or updateOne that commits, and a read of that
same row, key, node or document by its key), cycle (acquire + release of one name), first_acquire (of a name never seen), refused (the
name held by another node), floor_contention_8 and floor_contention_32 (that many
connections each make the floor write on a row of their own at once: the time until the last is
acknowledged), contention_8 and contention_32 (that many nodes, each a provider with its own
connections, try one name at once: the time until the last knows its outcome; exactly one must
win), and with --after-idle, before_idle and after_idle (32 nodes make one cycle each, one after
another; then the same after that long without a call). RATIO is a bench's p50 over its FLOOR's
(what the bench cannot do without: 2 writes for a cycle, 1 read for a refused acquire, as many
writes at once for contention; before_idle for after_idle): 1.00x means shedlock adds nothing
measurable to what the server and the machine cost anyway, or for after_idle, that the idle
time costs the next run nothing.

Every lock the bench takes has a name of its own (bench-<random>-...); the records it leaves
(SQL rows, MongoDB documents, ZooKeeper nodes) are removed at the end. A SQL database needs
ShedLock's table, as every node of a fleet does: the bench creates one only when told to
(--create-table), or in the temporary SQLite file of a run without --url.

Examples:
  # The embedded backends (memory, SQLite in a temporary file): runs anywhere
  shedlock bench
  # Two servers, 20 s each, as JSON
  shedlock bench --url postgres://postgres@db/test --url redis://cache:6379 --duration 20s --json
  # A new SQLite file, its table created by the bench
  shedlock bench --url 'sqlite://locks.db?mode=rwc' --create-table
  # What a job that runs every 10 minutes or less often pays on its next run
  shedlock bench --url postgres://postgres@db/test --after-idle 10m

Exit codes: 0 measured, 1 error (bad input, a backend unreachable or failing), 2 usage error.";

/// Measure what a lock costs on each backend, beside the backend's floor.
#[derive(Args)]
#[command(after_help = BENCH_EXAMPLES)]
pub struct BenchArgs {
    /// A backend to bench (give --url once per backend). None: the embedded backends, the
    /// in-process store and SQLite in a temporary file. A Redis Cluster or Sentinel, etcds://
    /// and zk+tls:// are not benched (the floor's driver would not reach the same server the
    /// same way).
    #[arg(long = "url", value_name = "URL")]
    urls: Vec<String>,
    /// How long each backend is measured, shared among its nine benches.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_timeout)]
    duration: Duration,
    /// Also measure before_idle and after_idle: 32 nodes make one cycle each, one after
    /// another, then the same after this long without a call, as a job that runs hourly meets
    /// its connections. Adds this long to each backend's run (10m shows what a connection idle
    /// past firewalls' and servers' idle limits costs).
    #[arg(long, value_name = "DURATION", value_parser = parse_timeout)]
    after_idle: Option<Duration>,
    /// One JSON document with every figure (latencies in microseconds), instead of the table.
    #[arg(long)]
    json: bool,
    /// Where the SVG chart of the latency distributions (cycle and floor write per backend) is
    /// written.
    #[arg(long, value_name = "SVG_FILE", default_value = "shedlock-bench.svg")]
    chart: PathBuf,
    /// How long connecting, and then each request to the backend, may take before it fails.
    #[arg(long, value_name = "DURATION", default_value = DEFAULT_TIMEOUT, value_parser = parse_timeout)]
    timeout: Duration,
    /// Create ShedLock's table in a SQL database that has none (without it, such a database
    /// is an error that says how to create the table).
    #[arg(long)]
    create_table: bool,
    /// A PEM file of the CA that signed a rediss:// server's certificate, when a private CA did.
    #[arg(long, value_name = "PEM_FILE")]
    tls_ca_file: Option<PathBuf>,
}

/// One backend's figures and how to show it.
struct Benched {
    backend: String,
    shown_url: String,
    figures: Figures,
}

/// Benches every backend named, then prints the figures and writes the chart.
pub async fn run(args: BenchArgs) -> Result<(), Failure> {
    let options = ConnectOptions {
        timeout: args.timeout,
        tls_ca_file: args.tls_ca_file.clone(),
    };
    // The SQLite file of a run without URLs lives until the end of the run, then goes.
    #[cfg(feature = "sqlite")]
    let sqlite_file = SqliteFile::new();
    // A file of the run's own gets ShedLock's table; a database named by URL only when asked.
    let (urls, create_table) = if args.urls.is_empty() {
        let urls = embedded_urls(
            #[cfg(feature = "sqlite")]
            &sqlite_file,
        )?;
        (urls, true)
    } else {
        (args.urls.clone(), args.create_table)
    };
    let each = args.duration / Bench::ALL.len() as u32;
    let planned = Bench::planned(args.after_idle).len();
    let progress = Progress::start("benching");
    let steps = urls.len() * planned;
    let mut benched = Vec::with_capacity(urls.len());
    for (index, url) in urls.iter().enumerate() {
        let backend = label(url, index, &urls)?;
        let done_before = index * planned;
        let mut done = done_before;
        let run = Run {
            create_table,
            each,
            after_idle: args.after_idle,
        };
        let figures = bench_one(url, &options, run, |bench| {
            progress.set(format!(
                "{} {done}/{steps} {backend}: {bench}",
                bar(done, steps)
            ));
            done += 1;
        })
        .await?;
        benched.push(Benched {
            backend,
            shown_url: redact_url(url),
            figures,
        });
    }
    progress.finish();
    write_chart(&args.chart, &benched)?;
    if args.json {
        println!("{}", json(&benched, each, &args.chart));
    } else {
        print!("{}", table(&benched));
        println!(
            "\n{} per bench; RATIO: p50 over FLOOR (that many floor writes' or reads' p50). Chart: {}",
            human(each),
            args.chart.display()
        );
    }
    Ok(())
}

/// The in-process store and, with SQLite built in, `file`.
fn embedded_urls(#[cfg(feature = "sqlite")] file: &SqliteFile) -> Result<Vec<String>, Failure> {
    let mut urls = Vec::new();
    #[cfg(feature = "memory")]
    urls.push(format!(
        "memory://{}",
        shedlock_benches::scenarios::run_prefix()
    ));
    #[cfg(feature = "sqlite")]
    urls.push(file.url());
    if urls.is_empty() {
        return Err(Failure::Error(
            "this build has no embedded backend (memory, sqlite) to bench: give --url".to_owned(),
        ));
    }
    Ok(urls)
}

/// The backend's name, numbered when the same backend is benched more than once.
fn label(url: &str, index: usize, urls: &[String]) -> Result<String, Failure> {
    let name = |url: &str| {
        backend::backend_name(url).ok_or_else(|| {
            Failure::Error(format!(
                "{} is not a URL of a backend shedlock knows (memory://, sqlite:, postgres://, \
                 mysql://, redis://, etcd://, mongodb://, zk://)",
                redact_url(url)
            ))
        })
    };
    let backend = name(url)?;
    let same = urls
        .iter()
        .filter(|other| backend::backend_name(other) == Some(backend))
        .count();
    if same == 1 {
        return Ok(backend.to_owned());
    }
    let nth = urls[..=index]
        .iter()
        .filter(|other| backend::backend_name(other) == Some(backend))
        .count();
    Ok(format!("{backend}#{nth}"))
}

/// Connects the floor's driver and the bench's nodes to `url`, and measures every bench.
/// What a run measures on every backend.
#[derive(Clone, Copy)]
struct Run {
    /// Create ShedLock's table where it is missing.
    create_table: bool,
    /// How long each bench is measured.
    each: Duration,
    /// The idle time of [`Bench::AfterIdle`], when asked for.
    after_idle: Option<Duration>,
}

async fn bench_one(
    url: &str,
    options: &ConnectOptions,
    run: Run,
    starting: impl FnMut(Bench),
) -> Result<Figures, Failure> {
    let shown = redact_url(url);
    let mut builder = backend::builder(url, options)?;
    if run.create_table {
        builder = builder.create_table_if_missing();
    }
    // The first node before the floor: it creates the SQLite file and ShedLock's table.
    let first = backend::connect_with(builder.clone(), url, options.timeout).await?;
    let driver = match tokio::time::timeout(options.timeout, AnyDriver::connect(url)).await {
        Ok(Ok(driver)) => driver,
        Ok(Err(error)) => {
            return Err(Failure::from_error(
                &format!("cannot connect the floor's driver to {shown}: "),
                &*error,
            ));
        }
        Err(_elapsed) => {
            return Err(Failure::Error(format!(
                "the floor's driver got no answer from {shown} within {:?} (--timeout)",
                options.timeout
            )));
        }
    };
    let first = std::sync::Mutex::new(Some(first));
    let node = || {
        let reused = first.lock().unwrap_or_else(|e| e.into_inner()).take();
        let builder = builder.clone();
        async move {
            match reused {
                Some(node) => Ok(node),
                None => backend::connect_with(builder, url, options.timeout)
                    .await
                    .map_err(|failure| BenchError::new("connecting a node", failure.message())),
            }
        }
    };
    suite::run(node, &driver, run.each, run.after_idle, starting)
        .await
        .map_err(|error| Failure::from_error(&format!("bench of {shown}: "), &error))
}

/// `[####------]`: `done` of `total`.
fn bar(done: usize, total: usize) -> String {
    const WIDTH: usize = 20;
    let filled = (done * WIDTH).checked_div(total).unwrap_or(WIDTH);
    format!("[{}{}]", "#".repeat(filled), "-".repeat(WIDTH - filled))
}

/// A latency as a person reads it: three significant digits, in ns, µs, ms or s.
fn human(duration: Duration) -> String {
    let nanos = duration.as_nanos() as f64;
    let (value, unit) = if nanos < 1e3 {
        (nanos, "ns")
    } else if nanos < 1e6 {
        (nanos / 1e3, "µs")
    } else if nanos < 1e9 {
        (nanos / 1e6, "ms")
    } else {
        (nanos / 1e9, "s")
    };
    let decimals = if value < 10.0 {
        2
    } else if value < 100.0 {
        1
    } else {
        0
    };
    format!("{value:.decimals$} {unit}")
}

const HEADER: [&str; 7] = ["BACKEND", "BENCH", "P50", "P99", "OPS/S", "FLOOR", "RATIO"];

/// The figures as an aligned table, a row per backend and bench.
fn table(benched: &[Benched]) -> String {
    let mut rows = vec![HEADER.map(str::to_owned)];
    for one in benched {
        for (bench, samples) in one.figures.iter() {
            let stats = samples.stats();
            let floor = match bench.floor() {
                Some((floor, trips)) => format!("{trips} x {}", floor_kind(floor)),
                None => "-".to_owned(),
            };
            let ratio = one
                .figures
                .ratio_to_floor(bench)
                .map_or_else(|| "-".to_owned(), |ratio| format!("{ratio:.2}x"));
            rows.push([
                one.backend.clone(),
                bench.to_string(),
                human(stats.p50),
                human(stats.p99),
                format!("{:.0}", stats.ops_per_sec),
                floor,
                ratio,
            ]);
        }
    }
    let widths: Vec<usize> = (0..HEADER.len())
        .map(|column| {
            rows.iter()
                .map(|row| row[column].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut text = String::new();
    for row in rows {
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, width)| format!("{cell:<width$}"))
            .collect();
        text.push_str(cells.join("  ").trim_end());
        text.push('\n');
    }
    text
}

/// `write`, `read`, or the bench a bench is set beside, for the FLOOR column.
fn floor_kind(floor: Bench) -> &'static str {
    match floor {
        Bench::FloorRead => "read",
        Bench::FloorWrite => "write",
        other => other.name(),
    }
}

/// Every figure as one JSON document.
fn json(benched: &[Benched], each: Duration, chart: &Path) -> serde_json::Value {
    let micros = |duration: Duration| duration.as_secs_f64() * 1e6;
    let backends: Vec<serde_json::Value> = benched
        .iter()
        .map(|one| {
            let benches: Vec<serde_json::Value> = one
                .figures
                .iter()
                .map(|(bench, samples)| {
                    let stats = samples.stats();
                    serde_json::json!({
                        "bench": bench.name(),
                        "samples": stats.samples,
                        "p50_us": micros(stats.p50),
                        "p99_us": micros(stats.p99),
                        "mean_us": micros(stats.mean),
                        "ops_per_sec": stats.ops_per_sec,
                        "floor": bench.floor().map(|(floor, trips)| serde_json::json!({
                            "bench": floor.name(),
                            "times": trips,
                        })),
                        "ratio_to_floor": one.figures.ratio_to_floor(bench),
                    })
                })
                .collect();
            serde_json::json!({
                "backend": one.backend,
                "url": one.shown_url,
                "benches": benches,
            })
        })
        .collect();
    serde_json::json!({
        "measured_per_bench_ms": each.as_secs_f64() * 1e3,
        "chart": chart.display().to_string(),
        "backends": backends,
    })
}

/// The most points a line of the chart has: a distribution of 100,000 calls is drawn from this
/// many of its quantiles.
const POINTS_PER_LINE: usize = 400;

/// One line of the chart: a bench's distribution of one backend.
struct ChartLine {
    label: String,
    /// The backend's place in the run, which picks its colour.
    color: usize,
    /// A cycle's line is thick, a floor's thin.
    thick: bool,
    /// (latency in µs, % of calls at or under it).
    points: Vec<(f64, f64)>,
}

/// A cumulative distribution per backend of its cycle (thick) and its floor write (thin), on a
/// logarithmic latency axis, so backends a thousand times apart share one chart.
fn write_chart(path: &Path, benched: &[Benched]) -> Result<(), Failure> {
    let failed = |error: &dyn std::fmt::Display| {
        Failure::Error(format!(
            "cannot write the chart to {}: {error}",
            path.display()
        ))
    };
    let lines: Vec<ChartLine> = benched
        .iter()
        .enumerate()
        .flat_map(|(index, one)| {
            [(Bench::Cycle, true), (Bench::FloorWrite, false)]
                .into_iter()
                .filter_map(move |(bench, thick)| {
                    let samples = one.figures.get(bench)?;
                    Some(ChartLine {
                        label: format!("{} {bench}", one.backend),
                        color: index,
                        thick,
                        points: distribution(samples),
                    })
                })
        })
        .collect();
    let all_micros = lines
        .iter()
        .flat_map(|line| line.points.iter().map(|point| point.0));
    let (low, high) = all_micros.fold((f64::MAX, f64::MIN), |(low, high), x| {
        (low.min(x), high.max(x))
    });
    let (low, high) = if low <= high {
        ((low * 0.8).max(0.01), high * 1.25)
    } else {
        (0.1, 1e6)
    };

    let root = SVGBackend::new(path, (1000, 600)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| failed(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "shedlock bench: lock cycle and floor write latency",
            ("sans-serif", 22),
        )
        .margin(16)
        .x_label_area_size(44)
        .y_label_area_size(56)
        .build_cartesian_2d((low..high).log_scale(), 0f64..100f64)
        .map_err(|e| failed(&e))?;
    chart
        .configure_mesh()
        .x_desc("latency, microseconds (log scale)")
        .y_desc("calls at or under it (%)")
        .draw()
        .map_err(|e| failed(&e))?;
    for ChartLine {
        label,
        color,
        thick,
        points,
    } in lines
    {
        let color = Palette99::pick(color);
        let style = if thick {
            color.stroke_width(3)
        } else {
            color.mix(0.6).stroke_width(1)
        };
        chart
            .draw_series(LineSeries::new(points, style))
            .map_err(|e| failed(&e))?
            .label(label)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 24, y)], style));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .draw()
        .map_err(|e| failed(&e))?;
    root.present().map_err(|e| failed(&e))
}

/// Points (latency in µs, % of calls at or under it) of `samples`' cumulative distribution.
fn distribution(samples: &Samples) -> Vec<(f64, f64)> {
    let latencies = samples.latencies();
    let count = latencies.len();
    let step = count.div_ceil(POINTS_PER_LINE).max(1);
    let mut points: Vec<(f64, f64)> = (step - 1..count)
        .step_by(step)
        .chain(std::iter::once(count - 1))
        .map(|rank| {
            (
                latencies[rank].as_secs_f64() * 1e6,
                (rank + 1) as f64 * 100.0 / count as f64,
            )
        })
        .collect();
    points.dedup();
    points
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_durations_keep_three_significant_digits() {
        assert_eq!(human(Duration::from_nanos(320)), "320 ns");
        assert_eq!(human(Duration::from_nanos(1_234)), "1.23 µs");
        assert_eq!(human(Duration::from_micros(412)), "412 µs");
        assert_eq!(human(Duration::from_micros(45_670)), "45.7 ms");
        assert_eq!(human(Duration::from_millis(2_500)), "2.50 s");
    }

    #[test]
    fn the_bar_fills_with_the_steps_done() {
        assert_eq!(bar(0, 4), format!("[{}]", "-".repeat(20)));
        assert_eq!(bar(1, 4), format!("[{}{}]", "#".repeat(5), "-".repeat(15)));
        assert_eq!(bar(4, 4), format!("[{}]", "#".repeat(20)));
    }

    #[test]
    fn the_distribution_ends_at_the_slowest_call_and_100_percent() {
        let samples =
            Samples::from_latencies((1..=1000).map(Duration::from_micros).collect()).unwrap();
        let points = distribution(&samples);
        assert!(points.len() <= POINTS_PER_LINE + 1, "{}", points.len());
        assert_eq!(points.last(), Some(&(1000.0, 100.0)));
        assert!(
            points
                .windows(2)
                .all(|w| w[0].0 < w[1].0 && w[0].1 < w[1].1)
        );

        let one = Samples::from_latencies(vec![Duration::from_micros(7)]).unwrap();
        assert_eq!(distribution(&one), [(7.0, 100.0)]);
    }

    #[test]
    fn a_backend_benched_twice_is_numbered() {
        let urls = ["postgres://a/x", "memory://m", "postgresql://b/y"].map(str::to_owned);
        let labels: Vec<String> = (0..urls.len())
            .map(|index| label(&urls[index], index, &urls).ok().unwrap())
            .collect();
        assert_eq!(labels, ["postgres#1", "memory", "postgres#2"]);
        assert!(label("ftp://x", 0, &["ftp://x".to_owned()]).is_err());
    }
}
