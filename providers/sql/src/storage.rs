//! The lock table as core's [`LockStorage`], for any [`SqlBackend`]: the checks and outcomes
//! every SQL provider shares, around the backend's own statements.

use std::fmt;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use shedlock_core::{
    Capabilities, ErrorKind, LockError, Operation, TimeSource,
    raw::{HeldRecord, LockRecord, LockStorage, NodeTime, RecordOutcome},
};
use sqlx::Pool;

use crate::backend::{
    AcquireAnswer, AcquireStatement, HeldStatement, LockSelection, LockedAtOf, SqlAdmin,
    SqlBackend, StoredAcquisition, StoredLock, statement_error,
};
use crate::connections::{Checkout, Connections};
use crate::schema::TableSchema;
use crate::table::{Column, LockTable};

/// The lock table on one database: its connections, what connecting found, and the backend's
/// statements for it.
pub(crate) struct SqlStorage<B: SqlBackend> {
    connections: Connections<B>,
    table: LockTable,
    schema: TableSchema,
    time_source: TimeSource,
    backend: B,
    /// Where the pool points, without secrets.
    target: String,
}

impl<B: SqlBackend> fmt::Debug for SqlStorage<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqlStorage")
            .field("provider", &B::PROVIDER)
            .field("target", &self.target)
            .field("table", &self.table.table().to_string())
            .field("time_source", &self.time_source)
            .field("fencing", &self.schema.fencing)
            .finish_non_exhaustive()
    }
}

impl<B: SqlBackend> SqlStorage<B> {
    /// Reads and checks the table (creating it first when asked) on one of `connections`, and
    /// prepares the statements.
    pub(crate) async fn connect(
        connections: Connections<B>,
        table: LockTable,
        time_source: TimeSource,
        create_table: Option<bool>,
        target: String,
    ) -> Result<Self, LockError> {
        let mut checkout = connections
            .checkout()
            .await
            .map_err(|e| statement_error::<B>(Operation::Connect, "", e))?;
        let connected = B::connect(checkout.connection(), &table, time_source, create_table).await;
        checkout.finish(connected.is_ok());
        let (backend, schema) = connected?;
        Ok(Self {
            connections,
            table,
            schema,
            time_source,
            backend,
            target,
        })
    }

    /// Storage that trusts `table` to be ShedLock's table as the backend's
    /// `create_table_statement` makes it (`VARCHAR(64)` names, `VARCHAR(255)` holders,
    /// millisecond times reaching as far as [`SqlBackend::CREATED_LOCK_UNTIL_LIMIT`], the
    /// fencing column when `fencing`), without connecting: the first statement connects.
    pub(crate) fn unchecked(
        connections: Connections<B>,
        table: LockTable,
        time_source: TimeSource,
        fencing: bool,
        target: String,
    ) -> Self {
        let schema = TableSchema {
            max_name_chars: Some(64),
            max_locked_by_chars: Some(255),
            time_precision: Duration::from_millis(1),
            timestamps_with_time_zone: false,
            fencing,
            lock_until_type: B::CREATED_LOCK_UNTIL_TYPE.to_owned(),
            lock_until_limit: B::CREATED_LOCK_UNTIL_LIMIT,
        };
        let backend = B::unchecked(&table, &schema, time_source);
        Self {
            connections,
            table,
            schema,
            time_source,
            backend,
            target,
        }
    }

    pub(crate) fn pool(&self) -> Option<&Pool<B::Database>> {
        self.connections.pool()
    }

    pub(crate) fn table(&self) -> &LockTable {
        &self.table
    }

    pub(crate) fn schema(&self) -> &TableSchema {
        &self.schema
    }

    pub(crate) fn backend(&self) -> &B {
        &self.backend
    }

    /// A holder identity the `locked_by` column cannot hold is an error, never truncated.
    fn check_locked_by(&self, name: &str, locked_by: &str) -> Result<(), LockError> {
        match self.schema.max_locked_by_chars {
            Some(max) if locked_by.chars().count() > max => Err(LockError::backend_message(
                ErrorKind::Limit,
                B::PROVIDER,
                Operation::Acquire,
                name,
                format!(
                    "the holder identity {locked_by:?} is {} characters, longer than column {} \
                     allows ({max}); choose a shorter holder name (with_holder)",
                    locked_by.chars().count(),
                    self.table.column(Column::LockedBy)
                ),
            )),
            _ => Ok(()),
        }
    }

    /// A lock that would end past what column `lock_until` can keep is an error, and no
    /// statement is sent (the database would refuse it, or SQLite's date functions give NULL).
    ///
    /// `now` is the node's wall clock, also for server time, where the database computes the
    /// end from its own clock: every limit is decades away or more (MySQL's `TIMESTAMP` ends
    /// in 2038), so only a lock ending within the clocks' skew of its limit can be judged
    /// otherwise than the database would. MySQL then refuses it itself (nothing is written);
    /// SQLite has no other clock; PostgreSQL would store it, seconds past the limit of the
    /// year 262142, still 32,000 years short of where its take-over's arithmetic overflows.
    fn check_lock_until(
        &self,
        operation: Operation,
        name: &str,
        lock_at_most_for: Duration,
        now: NodeTime,
    ) -> Result<(), LockError> {
        let now = now.client_time().unwrap_or_else(SystemTime::now);
        self.schema.check_lock_until(
            &self.table,
            B::PROVIDER,
            operation,
            name,
            lock_at_most_for,
            now,
        )
    }

    async fn acquire(
        &self,
        statement: AcquireStatement,
        record: &LockRecord<'_>,
    ) -> Result<RecordOutcome, LockError> {
        self.check_locked_by(record.name, record.locked_by)?;
        self.check_lock_until(
            Operation::Acquire,
            record.name,
            record.lock_at_most_for,
            record.now,
        )?;
        let mut checkout = self.checkout(Operation::Acquire, record.name).await?;
        let answer = self
            .backend
            .acquire(checkout.connection(), statement, record)
            .await;
        checkout.finish(answer.is_ok());
        Ok(match answer? {
            AcquireAnswer::Acquired(token) => RecordOutcome::Acquired {
                fencing_token: self.schema.fencing.then_some(token),
            },
            AcquireAnswer::NotAcquired(holder) => RecordOutcome::NotAcquired(holder),
            AcquireAnswer::Missing => RecordOutcome::Missing,
        })
    }

    async fn change_held(
        &self,
        statement: HeldStatement,
        held: &HeldRecord,
        duration: Duration,
        now: NodeTime,
    ) -> Result<bool, LockError> {
        let mut checkout = self.checkout(statement.operation(), &held.name).await?;
        let changed = self
            .backend
            .change_held(checkout.connection(), statement, held, duration, now)
            .await;
        checkout.finish(changed.is_ok());
        changed
    }

    /// Reads the rows `selection` names, on one connection.
    pub(crate) async fn read_locks(
        &self,
        selection: LockSelection<'_>,
        now: NodeTime,
    ) -> Result<Vec<StoredLock>, LockError> {
        let mut checkout = self
            .checkout(selection.operation(), selection.name())
            .await?;
        let rows = self
            .backend
            .admin()
            .read_locks(checkout.connection(), selection, now)
            .await;
        checkout.finish(rows.is_ok());
        rows
    }

    /// Frees `name` if `acquisition` still holds it, on one connection.
    pub(crate) async fn force_unlock(
        &self,
        name: &str,
        acquisition: &StoredAcquisition<LockedAtOf<B>>,
        now: NodeTime,
    ) -> Result<bool, LockError> {
        let mut checkout = self.checkout(Operation::ForceUnlock, name).await?;
        let freed = self
            .backend
            .admin()
            .force_unlock(checkout.connection(), name, acquisition, now)
            .await;
        checkout.finish(freed.is_ok());
        freed
    }

    pub(crate) fn time_source(&self) -> TimeSource {
        self.time_source
    }

    async fn checkout(
        &self,
        operation: Operation,
        name: &str,
    ) -> Result<Checkout<'_, B>, LockError> {
        self.connections
            .checkout()
            .await
            .map_err(|e| statement_error::<B>(operation, name, e))
    }
}

#[async_trait]
impl<B: SqlBackend> LockStorage for SqlStorage<B> {
    fn provider_name(&self) -> &'static str {
        B::PROVIDER
    }

    fn capabilities(&self) -> Capabilities {
        let capabilities = Capabilities::new(self.time_source)
            .with_fencing(self.schema.fencing)
            .with_time_precision(self.schema.time_precision);
        match self.schema.max_name_chars {
            Some(max) => capabilities.with_max_name_chars(max),
            None => capabilities,
        }
    }

    fn check_name(&self, name: &str) -> Result<(), LockError> {
        self.capabilities().check_name_length(B::PROVIDER, name)?;
        self.backend.check_name(name)
    }

    /// A known name is only ever updated, so an attempt on a held lock never waits on its
    /// row (see [`AcquireStatement`]); a new name costs one insert, as does a node's first
    /// attempt on a name after a restart (the row exists, so a take-over follows).
    fn update_creates_missing_record(&self) -> bool {
        false
    }

    async fn insert_record(&self, record: &LockRecord<'_>) -> Result<RecordOutcome, LockError> {
        self.acquire(AcquireStatement::Insert, record).await
    }

    async fn update_record(&self, record: &LockRecord<'_>) -> Result<RecordOutcome, LockError> {
        self.acquire(AcquireStatement::TakeOver, record).await
    }

    async fn extend(
        &self,
        held: &HeldRecord,
        lock_at_most_for: Duration,
        now: NodeTime,
    ) -> Result<bool, LockError> {
        self.check_lock_until(Operation::Extend, &held.name, lock_at_most_for, now)?;
        self.change_held(HeldStatement::Extend, held, lock_at_most_for, now)
            .await
    }

    async fn unlock(&self, held: &HeldRecord, now: NodeTime) -> Result<bool, LockError> {
        // No limit check, and none needed: release sets `lock_until` to at most `locked_at +
        // lock_at_least_for`, and the acquire that wrote `locked_at` refused a
        // `lock_at_most_for` (never shorter than `lock_at_least_for`) that would end the lock
        // past the limit. Refusing a release would keep the lock held instead.
        let at_least = held.lock_at_least_for;
        self.change_held(HeldStatement::Release, held, at_least, now)
            .await
    }
}
