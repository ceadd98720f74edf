//! The conformance kit's harness for any SQL provider: nodes on one fixed table in one of the
//! provider's supported configurations ([`KitRun`]), an unreachable node, and a pool of its
//! own to plant and clean rows. Each provider's conformance targets say, through
//! [`PlantRecords`], which backend they test and how its database writes a row as another
//! program would, and, through [`non_utc::NonUtcSessions`], how its sessions start far from
//! UTC. Both traits are implemented on a type of the provider's tests' own, not on the backend
//! type: the orphan rule forbids a test crate to implement this crate's trait for another
//! crate's type.

use std::future::Future;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use shedlock_conformance::backends::{Backend, LaunchError};
use shedlock_conformance::faults::{FaultHarness, pause_command, restart_command, resume_command};
use shedlock_conformance::{
    Clock, ConformanceHarness, PlantedRecord, SetupError, Support, async_trait,
};
use shedlock_core::{LockAdmin, TimeSource};
use shedlock_sql::{ConnectOptionsOf, SqlBackend, SqlLockProvider};
use sqlx::Pool;
use sqlx::pool::PoolOptions;

/// One supported configuration the kit runs against. Each has a fixed table of its own, so
/// repeated runs reuse it and runs of different configurations can go in parallel on one
/// server; each run's names are unique.
#[derive(Debug, Clone, Copy)]
pub struct KitRun {
    /// The configuration's name in the kit's trial names (`client-time::extend`); empty for the
    /// default one, whose trials are named after their checks alone.
    pub name: &'static str,
    /// Appended to the provider's name for the report file (`postgres-client-time.json`),
    /// so the runs' reports do not overwrite each other.
    pub report_suffix: &'static str,
    /// The lock table this configuration owns.
    pub table: &'static str,
    /// Whose clock decides expiry.
    pub time_source: TimeSource,
    /// Whether the table has the fencing column, so whether the provider declares fencing.
    pub fencing: bool,
}

impl KitRun {
    /// The default configuration: the database's clock, and the fencing column.
    pub const SERVER_TIME_WITH_FENCING: KitRun = KitRun {
        name: "",
        report_suffix: "",
        table: "shedlock_conformance",
        time_source: TimeSource::Server,
        fencing: true,
    };

    /// The other one: each node's clock bound as a parameter, on exactly ShedLock's table (no
    /// fencing column), as a node sharing a table with Java's client-time JdbcLockProvider runs.
    pub const CLIENT_TIME_WITHOUT_FENCING: KitRun = KitRun {
        name: "client-time",
        report_suffix: "-client-time",
        table: "shedlock_conformance_client_time",
        time_source: TimeSource::Client,
        fencing: false,
    };

    /// The default configuration far from UTC, for [`non_utc::run`].
    pub const SERVER_TIME_WITH_FENCING_NON_UTC: KitRun = KitRun {
        report_suffix: "-non-utc",
        table: "shedlock_conformance_non_utc",
        ..KitRun::SERVER_TIME_WITH_FENCING
    };

    /// Client time far from UTC, for [`non_utc::run`].
    pub const CLIENT_TIME_WITHOUT_FENCING_NON_UTC: KitRun = KitRun {
        report_suffix: "-client-time-non-utc",
        table: "shedlock_conformance_client_time_non_utc",
        ..KitRun::CLIENT_TIME_WITHOUT_FENCING
    };
}

/// How the nodes and the harness's own pool connect, as an application would configure it.
pub enum Sessions<B: SqlBackend> {
    /// Each node opens its own pool from this URL, with the provider's session settings.
    Url(String),
    /// Each node is given a pool of its own, opened with these settings, as an application
    /// passes one whose sessions it sets up itself.
    Pool {
        /// The pool's settings, such as a statement that sets each session up on connect.
        pool: PoolOptions<B::Database>,
        /// Where and how each connection connects.
        connect: ConnectOptionsOf<B::Database>,
    },
}

/// The database of a harness's backend (`Postgres` for PostgreSQL).
pub type DatabaseOf<K> = <<K as PlantRecords>::Backend as SqlBackend>::Database;

/// What differs per database: which backend is tested, and the SQL another program would use on
/// the run's table.
#[async_trait]
pub trait PlantRecords: Send + Sync + 'static {
    /// The backend the harness's nodes run on.
    type Backend: SqlBackend;

    /// A URL where no database answers (with a password, as a real one would have).
    const UNREACHABLE_URL: &'static str;

    /// The server the fault suite stalls and restarts, and its default port; `None` for a
    /// database in a file.
    const SERVER: Option<(Backend, u16)>;

    /// Writes `record` into `table` as another program would, replacing any row of the same
    /// name.
    async fn write_record(
        admin: &Pool<DatabaseOf<Self>>,
        table: &str,
        record: &PlantedRecord,
    ) -> Result<(), sqlx::Error>;

    /// Sets the fencing column of `table`'s row `name` (which exists) to `token`.
    async fn set_fencing_token(
        admin: &Pool<DatabaseOf<Self>>,
        table: &str,
        name: &str,
        token: i64,
    ) -> Result<(), sqlx::Error>;

    /// Deletes the rows of `table` whose names start with `name_prefix`.
    async fn cleanup(
        admin: &Pool<DatabaseOf<Self>>,
        table: &str,
        name_prefix: &str,
    ) -> Result<(), sqlx::Error>;
}

/// A node's pool size: enough for the kit's concurrent calls on one node, few enough that a
/// dozen nodes fit in a server's connection limit.
const NODE_CONNECTIONS: u32 = 3;

/// The harness: where nodes connect, in which configuration, and the pool for planting and
/// cleaning records.
pub struct SqlHarness<K: PlantRecords> {
    name: String,
    sessions: Sessions<K::Backend>,
    run: KitRun,
    admin: Pool<DatabaseOf<K>>,
}

impl<K: PlantRecords> SqlHarness<K> {
    /// Opens the harness's own pool, whose sessions start as the nodes' do, so planted records
    /// are written as a program configured like the nodes would write them.
    async fn connect(
        sessions: Sessions<K::Backend>,
        admin_connections: u32,
        run: KitRun,
    ) -> Result<Self, SetupError> {
        let (pool, connect) = match &sessions {
            Sessions::Url(url) => (PoolOptions::new(), url.parse()?),
            Sessions::Pool { pool, connect } => (pool.clone(), connect.clone()),
        };
        let admin = pool
            .max_connections(admin_connections)
            .connect_with(connect)
            .await?;
        Ok(Self {
            name: format!("{}{}", K::Backend::PROVIDER, run.report_suffix),
            sessions,
            run,
            admin,
        })
    }

    /// Creates the run's table if it is missing. A table left by an earlier run with the other
    /// shape is an error, not a silently different configuration.
    async fn prepare_table(&self) -> Result<(), SetupError> {
        let run = self.run;
        let builder = SqlLockProvider::<K::Backend>::builder()
            .table_name(run.table)
            .time_source(run.time_source);
        let builder = if run.fencing {
            builder.create_table_with_fencing_if_missing()
        } else {
            builder.create_table_if_missing()
        };
        let provider = builder.build(self.admin.clone()).await?;
        if provider.has_fencing() != run.fencing {
            return Err(format!(
                "table {} {} the fencing column, but this run is meant to be {:?}: drop the table",
                run.table,
                if provider.has_fencing() {
                    "has"
                } else {
                    "lacks"
                },
                run
            )
            .into());
        }
        Ok(())
    }
}

#[async_trait]
impl<K: PlantRecords> ConformanceHarness for SqlHarness<K> {
    type Node = SqlLockProvider<K::Backend>;

    fn name(&self) -> &str {
        &self.name
    }

    async fn node(&self, clock: Arc<dyn Clock>) -> Result<SqlLockProvider<K::Backend>, SetupError> {
        let builder = SqlLockProvider::<K::Backend>::builder()
            .table_name(self.run.table)
            .time_source(self.run.time_source)
            .clock(clock);
        Ok(match &self.sessions {
            Sessions::Url(url) => {
                builder
                    .max_connections(NODE_CONNECTIONS)
                    .connect(url.clone())
                    .await?
            }
            Sessions::Pool { pool, connect } => {
                builder
                    .build(
                        pool.clone()
                            .max_connections(NODE_CONNECTIONS)
                            .connect_lazy_with(connect.clone()),
                    )
                    .await?
            }
        })
    }

    async fn unreachable_node(&self) -> Result<Support<SqlLockProvider<K::Backend>>, SetupError> {
        let builder = SqlLockProvider::<K::Backend>::builder()
            .table_name(self.run.table)
            .time_source(self.run.time_source)
            .connect_timeout(Duration::from_secs(2));
        let builder = if self.run.fencing {
            builder.fencing_column()
        } else {
            builder
        };
        Ok(Support::Supported(
            builder.connect_lazy(K::UNREACHABLE_URL).await?,
        ))
    }

    fn admin<'node>(
        &self,
        node: &'node SqlLockProvider<K::Backend>,
    ) -> Support<&'node dyn LockAdmin> {
        Support::Supported(node)
    }

    fn clear_name_cache(&self, node: &SqlLockProvider<K::Backend>) -> Support<()> {
        node.clear_name_cache();
        Support::Supported(())
    }

    async fn write_record(&self, record: &PlantedRecord) -> Result<Support<()>, SetupError> {
        K::write_record(&self.admin, self.run.table, record).await?;
        Ok(Support::Supported(()))
    }

    /// The row's fencing column is the counter the next acquisition adds one to: an expired
    /// row whose column says `past`.
    async fn advance_fencing_tokens(
        &self,
        name: &str,
        past: u64,
    ) -> Result<Support<()>, SetupError> {
        if !self.run.fencing {
            return Ok(Support::not_applicable(
                "this run's table has no fencing column",
            ));
        }
        let now = SystemTime::now();
        let hour = Duration::from_secs(3600);
        let expired = PlantedRecord {
            name: name.to_owned(),
            lock_until: now - hour,
            locked_at: now - 2 * hour,
            locked_by: "conformance-kit".to_owned(),
        };
        K::write_record(&self.admin, self.run.table, &expired).await?;
        K::set_fencing_token(&self.admin, self.run.table, name, i64::try_from(past)?).await?;
        Ok(Support::Supported(()))
    }

    async fn cleanup(&self, name_prefix: &str) -> Result<(), SetupError> {
        Ok(K::cleanup(&self.admin, self.run.table, name_prefix).await?)
    }
}

/// How long a node reached through the fault suite's proxy waits for a statement or a
/// connection: a stalled network answers an error this soon.
const STALLED_TIMEOUT: Duration = Duration::from_secs(2);

/// `url` split around its `host:port`: what comes before, the authority, and the rest.
fn split_authority(url: &str) -> Option<(&str, &str, &str)> {
    let start = url.find("://")? + 3;
    let end = url[start..]
        .find(['/', '?'])
        .map_or(url.len(), |at| start + at);
    let host = url[start..end]
        .rfind('@')
        .map_or(start, |at| start + at + 1);
    Some((&url[..host], &url[host..end], &url[end..]))
}

#[async_trait]
impl<K: PlantRecords> FaultHarness for SqlHarness<K> {
    /// SQLite's `'now'` is read in each node's own process, from the machine's clock.
    fn backend_clock_is_the_nodes(&self) -> bool {
        K::SERVER.is_none()
    }

    fn backend_address(&self) -> Support<String> {
        let (Some((_, default_port)), Sessions::Url(url)) = (K::SERVER, &self.sessions) else {
            return Support::not_applicable(
                "the database is a file the node opens itself: there is no network to stall",
            );
        };
        match split_authority(url) {
            Some((_, authority, _)) if !authority.is_empty() && !authority.contains(',') => {
                Support::Supported(if authority.contains(':') {
                    authority.to_owned()
                } else {
                    format!("{authority}:{default_port}")
                })
            }
            _ => Support::not_applicable("the URL names no single host to put a proxy in front of"),
        }
    }

    async fn node_via(&self, address: &str) -> Result<SqlLockProvider<K::Backend>, SetupError> {
        let Sessions::Url(url) = &self.sessions else {
            return Err(SetupError::new(
                "node_via() needs nodes that connect from a URL",
            ));
        };
        let (before, _, after) =
            split_authority(url).ok_or_else(|| SetupError::new("the URL has no host"))?;
        Ok(SqlLockProvider::<K::Backend>::builder()
            .max_connections(NODE_CONNECTIONS)
            .operation_timeout(STALLED_TIMEOUT)
            .connect_timeout(STALLED_TIMEOUT)
            .table_name(self.run.table)
            .time_source(self.run.time_source)
            .connect(format!("{before}{address}{after}"))
            .await?)
    }

    async fn pause_backend(&self, limit: Duration) -> Result<Support<()>, SetupError> {
        match K::SERVER {
            Some((backend, _)) => pause_command(backend, limit).await,
            None => Ok(Support::not_applicable(
                "the database is a file each node opens itself: there is no server to pause",
            )),
        }
    }

    async fn resume_backend(&self) -> Result<(), SetupError> {
        match K::SERVER {
            Some((backend, _)) => resume_command(backend).await,
            None => Ok(()),
        }
    }

    async fn restart_backend(&self) -> Result<Support<()>, SetupError> {
        match K::SERVER {
            Some((backend, _)) => restart_command(backend, Duration::from_secs(120)).await,
            None => Ok(Support::not_applicable(
                "the database is a file: there is no server to restart",
            )),
        }
    }
}

/// Runs the fault suite (`shedlock_conformance::faults`) in configuration `run` on the
/// server `url` finds: the body of each SQL provider's `tests/faults.rs`.
pub fn run_faults<K: PlantRecords>(
    url: impl Future<Output = Result<String, LaunchError>>,
    admin_connections: u32,
    run: KitRun,
) -> ExitCode {
    shedlock_conformance::faults::run(|| async move {
        let harness =
            SqlHarness::<K>::connect(Sessions::Url(url.await?), admin_connections, run).await?;
        harness.prepare_table().await?;
        Ok(harness)
    })
}

/// Runs the fault suite's broken nodes (`shedlock_conformance::faults::run_defects`) in
/// configuration `run` on the server `url` finds: each fault check must catch its defect.
pub fn run_fault_defects<K: PlantRecords>(
    url: impl Future<Output = Result<String, LaunchError>>,
    admin_connections: u32,
    run: KitRun,
) -> ExitCode {
    shedlock_conformance::faults::run_defects(|| async move {
        let harness =
            SqlHarness::<K>::connect(Sessions::Url(url.await?), admin_connections, run).await?;
        harness.prepare_table().await?;
        Ok(harness)
    })
}

/// Runs the kit in each configuration of `runs`, in one test binary, on the server `url`
/// finds (called once per configuration: the kit's launcher starts at most one container per
/// backend), with `admin_connections` for each harness's own pool. Each run's table is
/// created before checks run in parallel. The non-UTC targets start through
/// [`non_utc::run`] instead.
pub fn run<K: PlantRecords, Url>(
    url: impl Fn() -> Url,
    admin_connections: u32,
    runs: &[KitRun],
) -> ExitCode
where
    Url: Future<Output = Result<String, LaunchError>>,
{
    let configurations = runs.iter().map(|run| (run.name, *run)).collect();
    shedlock_conformance::run_configurations(configurations, |run| {
        let url = url();
        async move {
            let harness =
                SqlHarness::<K>::connect(Sessions::Url(url.await?), admin_connections, run).await?;
            harness.prepare_table().await?;
            Ok(harness)
        }
    })
}

/// The kit with every clock reading local time far from UTC: the process's local time zone
/// and each database session's, as an application far from UTC has them. A provider that
/// writes or compares local times, or relies on a UTC session it does not set up itself,
/// then misreads the records the kit plants an hour from now, and the ShedLock-format check
/// fails.
pub mod non_utc {
    use std::future::Future;
    use std::process::{Command, ExitCode};
    use std::sync::Arc;

    use shedlock_conformance::backends::LaunchError;
    use shedlock_conformance::{ConformanceHarness, SetupError, async_trait};
    use shedlock_core::SystemClock;
    use sqlx::Pool;

    use super::{DatabaseOf, KitRun, PlantRecords, Sessions, SqlHarness};

    /// The test process's time zone: far west of UTC, with daylight saving time.
    pub const PROCESS_TIME_ZONE: &str = "America/Los_Angeles";

    /// What a non-UTC run needs of a database: sessions that start far from UTC, set up the way
    /// an application does it with this driver, and a way to read the zone back.
    #[async_trait]
    pub trait NonUtcSessions: PlantRecords {
        /// How the nodes and the harness's pool connect to `url` so that their sessions start
        /// more than an hour from UTC.
        fn sessions(url: String) -> Result<Sessions<Self::Backend>, SetupError>;

        /// Creates the run's table where the provider's own DDL does not suit such sessions;
        /// the provider creates any table still missing afterwards.
        async fn create_table(
            admin: &Pool<DatabaseOf<Self>>,
            table: &str,
            fencing: bool,
        ) -> Result<(), SetupError> {
            let _ = (admin, table, fencing);
            Ok(())
        }

        /// The time zone a session of `pool` reads local time in, and its offset from UTC
        /// now, in minutes.
        async fn session_time_zone(
            pool: &Pool<DatabaseOf<Self>>,
        ) -> Result<(String, i64), sqlx::Error>;
    }

    /// Runs the kit in each configuration of `runs` (the `_NON_UTC` ones, whose tables are
    /// their own) like [`super::run`], in [`PROCESS_TIME_ZONE`] and in `K`'s non-UTC sessions.
    /// Setup fails, rather than quietly testing UTC, unless the process, the harness's pool
    /// and a node's pool all read local time more than an hour from UTC.
    pub fn run<K: NonUtcSessions, Url>(
        url: impl Fn() -> Url,
        admin_connections: u32,
        runs: &[KitRun],
    ) -> ExitCode
    where
        Url: Future<Output = Result<String, LaunchError>>,
    {
        in_process_time_zone(|| {
            let configurations = runs.iter().map(|run| (run.name, *run)).collect();
            shedlock_conformance::run_configurations(configurations, |run| {
                let url = url();
                async move {
                    let local = chrono::Local::now().offset().local_minus_utc();
                    far_from_utc("this process", PROCESS_TIME_ZONE, i64::from(local / 60))?;
                    let sessions = K::sessions(url.await?)?;
                    let harness =
                        SqlHarness::<K>::connect(sessions, admin_connections, run).await?;
                    K::create_table(&harness.admin, run.table, run.fencing).await?;
                    harness.prepare_table().await?;
                    let node = harness.node(Arc::new(SystemClock)).await?;
                    // A node that opened its own connections from the URL starts its sessions as
                    // the harness's pool, opened from the same URL, does.
                    let node_pool = node.pool().map(|pool| ("a node's pool", pool));
                    let harness_pool = Some(("the harness's own pool", &harness.admin));
                    for (whose, pool) in harness_pool.into_iter().chain(node_pool) {
                        let (zone, offset) = K::session_time_zone(pool).await?;
                        far_from_utc(whose, &zone, offset)?;
                    }
                    Ok(harness)
                }
            })
        })
    }

    /// Runs `kit` in a process whose `TZ` is [`PROCESS_TIME_ZONE`]: this test binary again,
    /// with the same arguments, unless `TZ` already is that zone. (Setting `TZ` in this
    /// process would take `unsafe`: `std::env::set_var`.)
    fn in_process_time_zone(kit: impl FnOnce() -> ExitCode) -> ExitCode {
        if std::env::var_os("TZ").is_some_and(|zone| zone == PROCESS_TIME_ZONE) {
            return kit();
        }
        let status = std::env::current_exe().and_then(|exe| {
            Command::new(exe)
                .args(std::env::args_os().skip(1))
                .env("TZ", PROCESS_TIME_ZONE)
                .status()
        });
        match status {
            Ok(status) => status
                .code()
                .and_then(|code| u8::try_from(code).ok())
                .map_or(ExitCode::FAILURE, ExitCode::from),
            Err(error) => {
                eprintln!("could not run the kit again with TZ={PROCESS_TIME_ZONE}: {error}");
                ExitCode::FAILURE
            }
        }
    }

    /// The kit plants records an hour from now, so a provider reading local time instead of
    /// UTC is only caught when local time is more than an hour away.
    fn far_from_utc(whose: &str, zone: &str, offset_minutes: i64) -> Result<(), SetupError> {
        if offset_minutes.abs() > 60 {
            return Ok(());
        }
        Err(format!(
            "{whose} reads local time in {zone:?}, {offset_minutes} minutes from UTC; this run \
             needs more than an hour, or it cannot tell local time from UTC (is the zone \
             known to this machine and server?)"
        )
        .into())
    }
}
