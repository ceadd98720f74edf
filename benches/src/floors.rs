//! Each backend's floor: through the same driver the provider uses, on a connection of the
//! bench's own, the cheapest round trip with the same durability as a lock write, and the
//! cheapest read-only round trip. A lock operation cannot cost less than its round trips, so
//! its ratio to these says what the provider adds.
//!
//! Under contention the floor is many connections, each writing a row of its own at the same
//! instant ([`ContendedWrites`]): what the server's serialising of the writes and the machine's
//! cores cost anyway, so that contending nodes' figure reads as the provider's share.
//!
//! The driver is also how a bench prepares names ([`Driver::prepare_names`]): one batched write
//! of lock records, where writing them one by one through the provider would take 10,000 round
//! trips.

use std::error::Error;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use shedlock::scheme::{Backend, Scheme};

use crate::measure::at_once;

/// A failure of the backend's own driver.
pub type DriverError = Box<dyn Error + Send + Sync>;

/// What every backend's driver does for the benches.
pub trait Driver: Send + Sync + Sized + 'static {
    /// The cheapest durable write: a write the server acknowledges as committed, as the
    /// provider's lock writes are. Each driver writes a row (key, node, document) of its own:
    /// row 0 for the one a backend's connect makes, the row given to [`another`](Self::another)
    /// for the others.
    fn write(&self) -> impl Future<Output = Result<(), DriverError>> + Send;

    /// A driver on a connection of its own to the same server, whose [`write`](Self::write)
    /// goes to row `row` (made if missing): one of the contenders of [`ContendedWrites`].
    fn another(&self, row: u32) -> impl Future<Output = Result<Self, DriverError>> + Send;

    /// The cheapest read a lock check cannot go below: one round trip that reads the floor's
    /// own record by its key (a row by primary key, a key, a node, a document by `_id`), as a
    /// refused acquire reads the lock's. A round trip that looks nothing up (`SELECT 1`,
    /// `PING`, `ping`) is no such floor: on SQLite, sqlx answers `SELECT 1` by a path no
    /// statement that reads a table takes (2.6 µs against 46 to 55 µs for any such statement,
    /// bound parameters or not, measured here), so ratios to it swung from 1.3x to 22x between
    /// runs.
    fn read(&self) -> impl Future<Output = Result<(), DriverError>>;

    /// Makes `names` known to the backend as free locks, in one batched request, so the
    /// provider takes over an existing record rather than creating one. A backend that keeps a
    /// lock's record only while it is held (Redis, etcd) has nothing to prepare.
    fn prepare_names(&self, names: &[String]) -> impl Future<Output = Result<(), DriverError>>;

    /// Removes the lock record of every name that starts with `prefix` (a run's, made of
    /// letters, digits and `-`: [`run_prefix`](crate::scenarios::run_prefix)), so a run leaves
    /// no locks behind. Records a backend deletes at release (Redis, etcd) are gone already.
    fn remove_names(&self, prefix: &str) -> impl Future<Output = Result<(), DriverError>>;
}

/// The key, row or node the floor writes, apart from any lock (with its row number after it,
/// where the backend names rows by key).
const FLOOR_KEY: &str = "shedlock-bench-floor";

/// The key of row `row` of the floor, on a backend that names rows by key.
fn floor_key(row: u32) -> String {
    format!("{FLOOR_KEY}-{row}")
}

/// A server's URL or connect string, kept to open more connections; it may hold a password, so
/// its `Debug` shows none of it.
#[derive(Clone)]
struct ServerAddress(String);

impl fmt::Debug for ServerAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ServerAddress(..)")
    }
}

/// The floor of contending nodes: as many drivers as nodes, each on a connection of its own and
/// writing a row of its own, all at the same instant. A round's figure is the time from the
/// first write's start until the last is acknowledged, as a contention round's is until the last
/// node knows its outcome.
#[derive(Debug)]
pub struct ContendedWrites<D> {
    drivers: Vec<Arc<D>>,
}

impl<D: Driver> ContendedWrites<D> {
    /// `count` drivers made from `driver` ([`Driver::another`]), on rows 1 to `count`.
    pub async fn connect(driver: &D, count: u32) -> Result<Self, DriverError> {
        let mut drivers = Vec::with_capacity(count as usize);
        for row in 1..=count {
            drivers.push(Arc::new(driver.another(row).await?));
        }
        Ok(Self { drivers })
    }

    /// How many drivers write in a round.
    pub fn len(&self) -> usize {
        self.drivers.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.drivers.is_empty()
    }

    /// One round: every driver waits at a barrier, each in a task of its own as a contending
    /// node does, then writes its row once.
    pub async fn run(&self) -> Result<Duration, DriverError> {
        if self.drivers.is_empty() {
            return Err("a round of contended writes needs at least one driver".into());
        }
        let writes = self.drivers.iter().map(|driver| {
            let driver = driver.clone();
            async move { driver.write().await }
        });
        let (written, took) = at_once(writes).await;
        written.into_iter().collect::<Result<Vec<()>, _>>()?;
        Ok(took)
    }
}

/// Who a prepared lock record says held it last.
const PREPARED_BY: &str = "shedlock-benches";

#[cfg(feature = "memory")]
pub use memory::MemoryDriver;

#[cfg(feature = "memory")]
mod memory {
    use std::collections::HashMap;
    use std::hint::black_box;
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, Instant};

    use super::{Driver, DriverError, floor_key};

    /// The in-process floor: one entry of a `HashMap` under a `Mutex`, written with an expiry
    /// (what an in-process lock table cannot do with less) and read. The drivers made by
    /// [`another`](Driver::another) share the map, as nodes of one process share a memory
    /// store, each writing an entry of its own.
    #[derive(Debug)]
    pub struct MemoryDriver {
        slots: Arc<Mutex<HashMap<String, Instant>>>,
        key: String,
    }

    impl MemoryDriver {
        /// A driver on `slots`, writing row `row`, made now.
        fn on(slots: Arc<Mutex<HashMap<String, Instant>>>, row: u32) -> Self {
            let key = floor_key(row);
            slots.lock().unwrap().insert(key.clone(), Instant::now());
            Self { slots, key }
        }
    }

    impl Default for MemoryDriver {
        fn default() -> Self {
            Self::on(Arc::default(), 0)
        }
    }

    impl Driver for MemoryDriver {
        async fn write(&self) -> Result<(), DriverError> {
            let until = Instant::now() + Duration::from_secs(60);
            let mut slots = self.slots.lock().unwrap();
            *slots.get_mut(black_box(&self.key)).expect("made at start") = until;
            Ok(())
        }

        async fn another(&self, row: u32) -> Result<Self, DriverError> {
            Ok(Self::on(self.slots.clone(), row))
        }

        async fn read(&self) -> Result<(), DriverError> {
            black_box(
                self.slots
                    .lock()
                    .unwrap()
                    .get(black_box(&self.key))
                    .copied(),
            );
            Ok(())
        }

        /// The in-process store makes a record on first use at no cost worth preparing.
        async fn prepare_names(&self, _names: &[String]) -> Result<(), DriverError> {
            Ok(())
        }

        /// The store goes with the process.
        async fn remove_names(&self, _prefix: &str) -> Result<(), DriverError> {
            Ok(())
        }
    }
}

#[cfg(any(feature = "postgres", feature = "mysql", feature = "sqlite"))]
pub use sql::SqlDriver;
#[cfg(feature = "sqlite")]
pub use sql::SqliteFile;

#[cfg(any(feature = "postgres", feature = "mysql", feature = "sqlite"))]
mod sql {
    use sqlx::{AssertSqlSafe, Connection, Executor, IntoArguments};
    use tokio::sync::Mutex;

    use super::{Driver, DriverError, PREPARED_BY, ServerAddress};

    /// The floor table: a row per driver, its counter bumped by each of the driver's writes.
    const CREATE_FLOOR_TABLE: &str = "CREATE TABLE IF NOT EXISTS shedlock_bench_floor \
         (id INT NOT NULL PRIMARY KEY, n BIGINT NOT NULL)";
    /// Long past, in a form PostgreSQL's `TIMESTAMP`, MySQL's `TIMESTAMP(3)` and the SQLite
    /// provider's text all read: a prepared lock is free.
    const EXPIRED: &str = "2000-01-01 00:00:00.000";

    /// A SQL database's floor on one connection of its own, with no transaction around a
    /// statement (each commits, as the provider's do): a one-row `UPDATE` of a table of its
    /// own, and a `SELECT` of that row by its primary key.
    #[derive(Debug)]
    pub struct SqlDriver<C> {
        connection: Mutex<C>,
        url: ServerAddress,
        /// `INSERT` of a floor row that is missing, in the database's dialect.
        insert_row_if_missing: fn(u32) -> String,
        /// The `UPDATE` of this driver's row.
        write: String,
        /// The `SELECT` of this driver's row by its primary key.
        read: String,
    }

    impl<C> SqlDriver<C>
    where
        C: Connection,
        for<'c> &'c mut C: Executor<'c, Database = C::Database>,
        <C::Database as sqlx::Database>::Arguments: IntoArguments<C::Database>,
    {
        /// Connects to `url` and makes the floor table and row `row` if they are missing.
        async fn connect(
            url: &str,
            row: u32,
            insert_row_if_missing: fn(u32) -> String,
        ) -> Result<Self, DriverError> {
            let mut connection = C::connect(url).await?;
            sqlx::query(CREATE_FLOOR_TABLE)
                .execute(&mut connection)
                .await?;
            sqlx::query(AssertSqlSafe(insert_row_if_missing(row)))
                .execute(&mut connection)
                .await?;
            Ok(Self {
                connection: Mutex::new(connection),
                url: ServerAddress(url.to_owned()),
                insert_row_if_missing,
                write: format!("UPDATE shedlock_bench_floor SET n = n + 1 WHERE id = {row}"),
                read: format!("SELECT n FROM shedlock_bench_floor WHERE id = {row}"),
            })
        }

        /// Runs `statement`, prepared once per connection as the provider's statements are.
        async fn execute(&self, statement: &str) -> Result<(), DriverError> {
            let mut connection = self.connection.lock().await;
            sqlx::query(AssertSqlSafe(statement))
                .execute(&mut *connection)
                .await?;
            Ok(())
        }
    }

    /// PostgreSQL's and SQLite's `INSERT` of a missing floor row.
    #[cfg(any(feature = "postgres", feature = "sqlite"))]
    fn insert_on_conflict_do_nothing(row: u32) -> String {
        format!("INSERT INTO shedlock_bench_floor VALUES ({row}, 0) ON CONFLICT DO NOTHING")
    }

    #[cfg(feature = "postgres")]
    impl SqlDriver<sqlx::PgConnection> {
        /// PostgreSQL's floor.
        pub async fn postgres(url: &str) -> Result<Self, DriverError> {
            Self::connect(url, 0, insert_on_conflict_do_nothing).await
        }
    }

    #[cfg(feature = "mysql")]
    impl SqlDriver<sqlx::MySqlConnection> {
        /// MySQL's or MariaDB's floor.
        pub async fn mysql(url: &str) -> Result<Self, DriverError> {
            Self::connect(url, 0, |row| {
                format!("INSERT IGNORE INTO shedlock_bench_floor VALUES ({row}, 0)")
            })
            .await
        }
    }

    #[cfg(feature = "sqlite")]
    impl SqlDriver<sqlx::SqliteConnection> {
        /// SQLite's floor, in the file the provider uses.
        pub async fn sqlite(url: &str) -> Result<Self, DriverError> {
            Self::connect(url, 0, insert_on_conflict_do_nothing).await
        }
    }

    impl<C> Driver for SqlDriver<C>
    where
        C: Connection + 'static,
        for<'c> &'c mut C: Executor<'c, Database = C::Database>,
        <C::Database as sqlx::Database>::Arguments: IntoArguments<C::Database>,
    {
        async fn write(&self) -> Result<(), DriverError> {
            self.execute(&self.write).await
        }

        async fn another(&self, row: u32) -> Result<Self, DriverError> {
            Self::connect(&self.url.0, row, self.insert_row_if_missing).await
        }

        async fn read(&self) -> Result<(), DriverError> {
            let mut connection = self.connection.lock().await;
            sqlx::query(AssertSqlSafe(self.read.as_str()))
                .fetch_optional(&mut *connection)
                .await?
                .ok_or("the floor row is missing")?;
            Ok(())
        }

        /// One multi-row `INSERT` into ShedLock's table, every row expired. The names are the
        /// bench's own, written as literals (a statement of 10,000 rows would exceed the bind
        /// parameter limits).
        async fn prepare_names(&self, names: &[String]) -> Result<(), DriverError> {
            if names.is_empty() {
                return Ok(());
            }
            let rows: Vec<String> = names
                .iter()
                .map(|name| {
                    let name = name.replace('\'', "''");
                    format!("('{name}', '{EXPIRED}', '{EXPIRED}', '{PREPARED_BY}')")
                })
                .collect();
            let statement = format!(
                "INSERT INTO shedlock (name, lock_until, locked_at, locked_by) VALUES {}",
                rows.join(", ")
            );
            let mut connection = self.connection.lock().await;
            sqlx::query(AssertSqlSafe(statement))
                .execute(&mut *connection)
                .await?;
            Ok(())
        }

        async fn remove_names(&self, prefix: &str) -> Result<(), DriverError> {
            let statement = format!(
                "DELETE FROM shedlock WHERE substr(name, 1, {}) = '{}'",
                prefix.chars().count(),
                prefix.replace('\'', "''")
            );
            let mut connection = self.connection.lock().await;
            sqlx::query(AssertSqlSafe(statement))
                .execute(&mut *connection)
                .await?;
            Ok(())
        }
    }

    /// A SQLite database file of the bench's own in the temporary directory, removed (with its
    /// journal) when this is dropped.
    #[cfg(feature = "sqlite")]
    #[derive(Debug)]
    pub struct SqliteFile {
        path: std::path::PathBuf,
    }

    #[cfg(feature = "sqlite")]
    impl SqliteFile {
        /// A new file name; the file is made by the first connection.
        pub fn new() -> Self {
            let name = format!("shedlock-benches-{}.db", uuid::Uuid::new_v4().simple());
            Self {
                path: std::env::temp_dir().join(name),
            }
        }

        /// The URL that opens the file, creating it if needed.
        pub fn url(&self) -> String {
            format!("sqlite://{}?mode=rwc", self.path.display())
        }
    }

    #[cfg(feature = "sqlite")]
    impl Default for SqliteFile {
        fn default() -> Self {
            Self::new()
        }
    }

    #[cfg(feature = "sqlite")]
    impl Drop for SqliteFile {
        fn drop(&mut self) {
            for suffix in ["", "-journal", "-wal", "-shm"] {
                let mut path = self.path.clone().into_os_string();
                path.push(suffix);
                // A file that was never made (or a journal already gone) is fine.
                let _ = std::fs::remove_file(path);
            }
        }
    }
}

#[cfg(feature = "redis")]
pub use self::redis::RedisDriver;

#[cfg(feature = "redis")]
mod redis {
    use redis::aio::MultiplexedConnection;

    use super::{Driver, DriverError, ServerAddress, floor_key};

    /// Redis' floor on a multiplexed connection, as the provider's: `SET` and `GET` of its own
    /// key.
    #[derive(Debug, Clone)]
    pub struct RedisDriver {
        connection: MultiplexedConnection,
        url: ServerAddress,
        key: String,
    }

    impl RedisDriver {
        /// Connects to `url`.
        pub async fn connect(url: &str) -> Result<Self, DriverError> {
            Self::on_row(url, 0).await
        }

        async fn on_row(url: &str, row: u32) -> Result<Self, DriverError> {
            let client = redis::Client::open(url)?;
            Ok(Self {
                connection: client.get_multiplexed_async_connection().await?,
                url: ServerAddress(url.to_owned()),
                key: floor_key(row),
            })
        }
    }

    impl Driver for RedisDriver {
        async fn another(&self, row: u32) -> Result<Self, DriverError> {
            Self::on_row(&self.url.0, row).await
        }

        async fn write(&self) -> Result<(), DriverError> {
            let mut connection = self.connection.clone();
            redis::cmd("SET")
                .arg(&self.key)
                .arg("1")
                .query_async::<()>(&mut connection)
                .await?;
            Ok(())
        }

        async fn read(&self) -> Result<(), DriverError> {
            let mut connection = self.connection.clone();
            redis::cmd("GET")
                .arg(&self.key)
                .query_async::<Option<String>>(&mut connection)
                .await?;
            Ok(())
        }

        /// A lock is a key only while held (release deletes it): nothing to prepare.
        async fn prepare_names(&self, _names: &[String]) -> Result<(), DriverError> {
            Ok(())
        }

        /// Release deleted every key of the run.
        async fn remove_names(&self, _prefix: &str) -> Result<(), DriverError> {
            Ok(())
        }
    }
}

#[cfg(feature = "etcd")]
pub use etcd::EtcdDriver;

#[cfg(feature = "etcd")]
mod etcd {
    use super::{Driver, DriverError, floor_key};

    /// etcd's floor: a `put` (committed through Raft, as a lock's transaction is) and a `get`
    /// of the same key.
    #[derive(Clone)]
    pub struct EtcdDriver {
        client: etcd_client::Client,
        endpoints: Vec<String>,
        key: String,
    }

    impl std::fmt::Debug for EtcdDriver {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.debug_struct("EtcdDriver").finish_non_exhaustive()
        }
    }

    impl EtcdDriver {
        /// Connects to `endpoints` (`http://host:2379`, each).
        pub async fn connect<E: AsRef<str>>(
            endpoints: impl IntoIterator<Item = E>,
        ) -> Result<Self, DriverError> {
            let endpoints = endpoints
                .into_iter()
                .map(|endpoint| endpoint.as_ref().to_owned())
                .collect();
            Self::on_row(endpoints, 0).await
        }

        async fn on_row(endpoints: Vec<String>, row: u32) -> Result<Self, DriverError> {
            Ok(Self {
                client: etcd_client::Client::connect(&endpoints, None).await?,
                endpoints,
                key: floor_key(row),
            })
        }
    }

    impl Driver for EtcdDriver {
        async fn write(&self) -> Result<(), DriverError> {
            self.client
                .clone()
                .put(self.key.as_str(), "1", None)
                .await?;
            Ok(())
        }

        async fn another(&self, row: u32) -> Result<Self, DriverError> {
            Self::on_row(self.endpoints.clone(), row).await
        }

        async fn read(&self) -> Result<(), DriverError> {
            self.client.clone().get(self.key.as_str(), None).await?;
            Ok(())
        }

        /// A lock is a key only while held (release deletes it): nothing to prepare.
        async fn prepare_names(&self, _names: &[String]) -> Result<(), DriverError> {
            Ok(())
        }

        /// Release deleted every key of the run.
        async fn remove_names(&self, _prefix: &str) -> Result<(), DriverError> {
            Ok(())
        }
    }
}

#[cfg(feature = "zookeeper")]
pub use zookeeper::ZookeeperDriver;

#[cfg(feature = "zookeeper")]
mod zookeeper {
    use zookeeper_client::{Acls, Client, CreateMode, CreateOptions, Error};

    use super::{Driver, DriverError, ServerAddress, floor_key};

    /// Where the provider keeps its lock nodes unless told otherwise (ShedLock's Curator root).
    const LOCK_ROOT: &str = "/shedlock";
    /// ShedLock's node options: persistent, open ACL.
    const PERSISTENT: CreateOptions<'static> = CreateMode::Persistent.with_acls(Acls::anyone_all());

    /// ZooKeeper's floor: `setData` of a node of its own (a write the ensemble commits, as a
    /// lock write is) and `exists` of it.
    #[derive(Debug, Clone)]
    pub struct ZookeeperDriver {
        client: Client,
        connect_string: ServerAddress,
        path: String,
    }

    impl ZookeeperDriver {
        /// Connects to `connect_string` (`host:2181[,host:2181...]`) and makes the floor node
        /// if it is missing.
        pub async fn connect(connect_string: &str) -> Result<Self, DriverError> {
            Self::on_row(connect_string, 0).await
        }

        async fn on_row(connect_string: &str, row: u32) -> Result<Self, DriverError> {
            let client = Client::connect(connect_string).await?;
            let path = format!("/{}", floor_key(row));
            match client.create(&path, b"", &PERSISTENT).await {
                Ok(_) | Err(Error::NodeExists) => Ok(Self {
                    client,
                    connect_string: ServerAddress(connect_string.to_owned()),
                    path,
                }),
                Err(error) => Err(error.into()),
            }
        }
    }

    impl Driver for ZookeeperDriver {
        async fn write(&self) -> Result<(), DriverError> {
            self.client.set_data(&self.path, b"1", None).await?;
            Ok(())
        }

        async fn another(&self, row: u32) -> Result<Self, DriverError> {
            Self::on_row(&self.connect_string.0, row).await
        }

        async fn read(&self) -> Result<(), DriverError> {
            self.client.check_stat(&self.path).await?;
            Ok(())
        }

        /// Creates every lock node, expired in ShedLock's format, as one pipeline: each request
        /// is sent when it is made, and the answers are awaited after. The names are plain, so
        /// each node is `/shedlock/<name>` as the provider escapes it.
        async fn prepare_names(&self, names: &[String]) -> Result<(), DriverError> {
            self.client.mkdir(LOCK_ROOT, &PERSISTENT).await?;
            let paths: Vec<String> = names
                .iter()
                .map(|name| format!("{LOCK_ROOT}/{name}"))
                .collect();
            let expired = b"2000-01-01T00:00:00.000Z";
            let creates: Vec<_> = paths
                .iter()
                .map(|path| self.client.create(path, expired, &PERSISTENT))
                .collect();
            for create in creates {
                create.await?;
            }
            Ok(())
        }

        /// Lists the root's children and deletes the run's, as one pipeline.
        async fn remove_names(&self, prefix: &str) -> Result<(), DriverError> {
            let children = match self.client.list_children(LOCK_ROOT).await {
                Err(Error::NoNode) => return Ok(()),
                listed => listed?,
            };
            let paths: Vec<String> = children
                .iter()
                .filter(|child| child.starts_with(prefix))
                .map(|child| format!("{LOCK_ROOT}/{child}"))
                .collect();
            let deletes: Vec<_> = paths
                .iter()
                .map(|path| self.client.delete(path, None))
                .collect();
            for delete in deletes {
                delete.await?;
            }
            Ok(())
        }
    }
}

#[cfg(feature = "mongo")]
pub use mongo::MongoDriver;

#[cfg(feature = "mongo")]
mod mongo {
    use mongodb::bson::{DateTime, doc};
    use mongodb::{Client, Database};

    use super::{Driver, DriverError, FLOOR_KEY, PREPARED_BY, ServerAddress};

    /// The provider's collection unless told otherwise (ShedLock's).
    const LOCK_COLLECTION: &str = "shedLock";

    /// MongoDB's floor: `updateOne` of a document of its own, with the collection's default
    /// write concern as the provider's writes, and `findOne` of it by `_id`.
    #[derive(Debug, Clone)]
    pub struct MongoDriver {
        database: Database,
        url: ServerAddress,
        row: u32,
    }

    impl MongoDriver {
        /// Connects to `url`, which names the database the locks are in
        /// (`mongodb://host:27017/<database>`), and makes the floor document if it is missing.
        pub async fn connect(url: &str) -> Result<Self, DriverError> {
            Self::on_row(url, 0).await
        }

        /// A client of its own (so a pool of its own), writing document `row`.
        async fn on_row(url: &str, row: u32) -> Result<Self, DriverError> {
            let client = Client::with_uri_str(url).await?;
            let database = client
                .default_database()
                .ok_or("the MongoDB URL names no database: mongodb://host:27017/<database>")?;
            database
                .collection::<mongodb::bson::Document>(FLOOR_KEY)
                .update_one(doc! { "_id": row }, doc! { "$setOnInsert": { "n": 0_i64 } })
                .upsert(true)
                .await?;
            Ok(Self {
                database,
                url: ServerAddress(url.to_owned()),
                row,
            })
        }
    }

    impl Driver for MongoDriver {
        async fn write(&self) -> Result<(), DriverError> {
            self.database
                .collection::<mongodb::bson::Document>(FLOOR_KEY)
                .update_one(doc! { "_id": self.row }, doc! { "$inc": { "n": 1_i64 } })
                .await?;
            Ok(())
        }

        async fn another(&self, row: u32) -> Result<Self, DriverError> {
            Self::on_row(&self.url.0, row).await
        }

        async fn read(&self) -> Result<(), DriverError> {
            self.database
                .collection::<mongodb::bson::Document>(FLOOR_KEY)
                .find_one(doc! { "_id": self.row })
                .await?
                .ok_or("the floor document is missing")?;
            Ok(())
        }

        /// One `insertMany` of ShedLock's documents, every one expired.
        async fn prepare_names(&self, names: &[String]) -> Result<(), DriverError> {
            if names.is_empty() {
                return Ok(());
            }
            let expired = DateTime::from_millis(946_684_800_000); // 2000-01-01T00:00:00Z
            let documents = names.iter().map(|name| {
                doc! {
                    "_id": name,
                    "lockUntil": expired,
                    "lockedAt": expired,
                    "lockedBy": PREPARED_BY,
                }
            });
            self.database
                .collection::<mongodb::bson::Document>(LOCK_COLLECTION)
                .insert_many(documents)
                .await?;
            Ok(())
        }

        async fn remove_names(&self, prefix: &str) -> Result<(), DriverError> {
            self.database
                .collection::<mongodb::bson::Document>(LOCK_COLLECTION)
                .delete_many(doc! { "_id": { "$regex": format!("^{prefix}") } })
                .await?;
            Ok(())
        }
    }
}

/// The floor of whichever backend a `shedlock::connect` URL names, for a run that benches
/// backends by URL (`shedlock bench`).
#[derive(Debug)]
#[non_exhaustive]
pub enum AnyDriver {
    /// `memory://`.
    #[cfg(feature = "memory")]
    Memory(MemoryDriver),
    /// `sqlite:`.
    #[cfg(feature = "sqlite")]
    Sqlite(SqlDriver<sqlx::SqliteConnection>),
    /// `postgres://`, `postgresql://`.
    #[cfg(feature = "postgres")]
    Postgres(SqlDriver<sqlx::PgConnection>),
    /// `mysql://`, `mariadb://`.
    #[cfg(feature = "mysql")]
    Mysql(SqlDriver<sqlx::MySqlConnection>),
    /// One Redis or Valkey server: `redis://`, `rediss://`, `valkey://`, `valkeys://`,
    /// `redis+unix://`, `unix://`.
    #[cfg(feature = "redis")]
    Redis(RedisDriver),
    /// `etcd://`; boxed, as etcd's client is some kilobytes and the other drivers are not.
    #[cfg(feature = "etcd")]
    Etcd(Box<EtcdDriver>),
    /// `zk://`, `zookeeper://`.
    #[cfg(feature = "zookeeper")]
    Zookeeper(ZookeeperDriver),
    /// `mongodb://`, `mongodb+srv://`, naming the database.
    #[cfg(feature = "mongo")]
    Mongo(MongoDriver),
}

impl AnyDriver {
    /// Connects the floor's driver to the server `url` names, as `shedlock::connect` reads it.
    ///
    /// A URL this build has no driver for, or a form the floor cannot mirror (a Redis Cluster
    /// or Sentinel, etcd or ZooKeeper over TLS), is an error that says so: a figure without its
    /// floor would be a figure without meaning.
    pub async fn connect(url: &str) -> Result<Self, DriverError> {
        let text = Scheme::text_of(url)
            .unwrap_or_default()
            .to_ascii_lowercase();
        #[allow(unused_variables)] // With few backends built, some arms are compiled out.
        let rest = url.split_once("://").map_or("", |(_, rest)| rest);
        // A cluster or a sentinel set is many servers: one connection cannot be its floor.
        let one_server = Scheme::named(&text).filter(|scheme| {
            !scheme.name.ends_with("+cluster") && !scheme.name.ends_with("+sentinel")
        });
        match one_server.map(|scheme| (scheme.backend, scheme.tls)) {
            #[cfg(feature = "memory")]
            Some((Backend::Memory, _)) => Ok(Self::Memory(MemoryDriver::default())),
            #[cfg(feature = "sqlite")]
            Some((Backend::Sqlite, _)) => Ok(Self::Sqlite(SqlDriver::sqlite(url).await?)),
            #[cfg(feature = "postgres")]
            Some((Backend::Postgres, _)) => Ok(Self::Postgres(SqlDriver::postgres(url).await?)),
            #[cfg(feature = "mysql")]
            Some((Backend::Mysql, _)) => Ok(Self::Mysql(
                SqlDriver::mysql(&format!("mysql://{rest}")).await?,
            )),
            #[cfg(feature = "redis")]
            Some((Backend::Redis, _)) => Ok(Self::Redis(RedisDriver::connect(url).await?)),
            #[cfg(feature = "etcd")]
            Some((Backend::Etcd, false)) => Ok(Self::Etcd(Box::new(
                EtcdDriver::connect(
                    rest.split(',')
                        .map(|endpoint| format!("http://{}", endpoint.trim())),
                )
                .await?,
            ))),
            #[cfg(feature = "zookeeper")]
            Some((Backend::Zookeeper, false)) => {
                Ok(Self::Zookeeper(ZookeeperDriver::connect(rest).await?))
            }
            #[cfg(feature = "mongo")]
            Some((Backend::Mongo, _)) => Ok(Self::Mongo(MongoDriver::connect(url).await?)),
            _ => Err(format!(
                "no floor for {text}:// in this build: the bench measures one server of \
                 memory://, sqlite:, postgres://, mysql://, redis://, rediss://, etcd://, zk:// \
                 or mongodb://, each with the backend's feature on"
            )
            .into()),
        }
    }
}

/// Runs `$call` on the driver inside an [`AnyDriver`].
macro_rules! on_driver {
    ($any:expr, $driver:ident => $call:expr) => {
        match $any {
            #[cfg(feature = "memory")]
            AnyDriver::Memory($driver) => $call,
            #[cfg(feature = "sqlite")]
            AnyDriver::Sqlite($driver) => $call,
            #[cfg(feature = "postgres")]
            AnyDriver::Postgres($driver) => $call,
            #[cfg(feature = "mysql")]
            AnyDriver::Mysql($driver) => $call,
            #[cfg(feature = "redis")]
            AnyDriver::Redis($driver) => $call,
            #[cfg(feature = "etcd")]
            AnyDriver::Etcd($driver) => $call,
            #[cfg(feature = "zookeeper")]
            AnyDriver::Zookeeper($driver) => $call,
            #[cfg(feature = "mongo")]
            AnyDriver::Mongo($driver) => $call,
        }
    };
}

impl Driver for AnyDriver {
    async fn write(&self) -> Result<(), DriverError> {
        on_driver!(self, driver => driver.write().await)
    }

    async fn another(&self, row: u32) -> Result<Self, DriverError> {
        Ok(match self {
            #[cfg(feature = "memory")]
            AnyDriver::Memory(driver) => AnyDriver::Memory(driver.another(row).await?),
            #[cfg(feature = "sqlite")]
            AnyDriver::Sqlite(driver) => AnyDriver::Sqlite(driver.another(row).await?),
            #[cfg(feature = "postgres")]
            AnyDriver::Postgres(driver) => AnyDriver::Postgres(driver.another(row).await?),
            #[cfg(feature = "mysql")]
            AnyDriver::Mysql(driver) => AnyDriver::Mysql(driver.another(row).await?),
            #[cfg(feature = "redis")]
            AnyDriver::Redis(driver) => AnyDriver::Redis(driver.another(row).await?),
            #[cfg(feature = "etcd")]
            AnyDriver::Etcd(driver) => AnyDriver::Etcd(Box::new(driver.another(row).await?)),
            #[cfg(feature = "zookeeper")]
            AnyDriver::Zookeeper(driver) => AnyDriver::Zookeeper(driver.another(row).await?),
            #[cfg(feature = "mongo")]
            AnyDriver::Mongo(driver) => AnyDriver::Mongo(driver.another(row).await?),
        })
    }

    async fn read(&self) -> Result<(), DriverError> {
        on_driver!(self, driver => driver.read().await)
    }

    async fn prepare_names(&self, names: &[String]) -> Result<(), DriverError> {
        on_driver!(self, driver => driver.prepare_names(names).await)
    }

    async fn remove_names(&self, prefix: &str) -> Result<(), DriverError> {
        on_driver!(self, driver => driver.remove_names(prefix).await)
    }
}
