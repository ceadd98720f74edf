//! What the shedlock-rs SQL providers (`shedlock-postgres`, `shedlock-mysql`,
//! `shedlock-sqlite`) share, so each of them holds only its own SQL.
//!
//! - [`LockTable`]: the table's name (optionally schema-qualified) and its column names, with
//!   ShedLock's defaults (`shedlock`: `name`, `lock_until`, `locked_at`, `locked_by`) and the
//!   optional `fencing_token` column.
//! - [`Identifier`] and [`Dialect`]: table and column names are configuration, never data, yet
//!   they end up inside SQL text. Only plain identifiers are accepted and every use is quoted,
//!   so a configured name can never change a statement's meaning.
//! - [`ColumnInfo`] and [`LockTable::check_columns`]: what a provider read from its catalog,
//!   checked once at connect, with errors that say how to create or fix the table. Each
//!   date-time type carries its [`TimestampLimit`], so a lock that would end past what column
//!   `lock_until` can keep (MySQL's `TIMESTAMP` ends in 2038) is refused before anything is
//!   sent, with an error that names the limit.
//! - [`SqlBackend`]: what differs between databases (session settings, catalog checks, the
//!   lock statements), implemented once by each provider crate.
//! - [`SqlLockProvider`] and [`SqlLockProviderBuilder`]: the provider and its builder for any
//!   backend, with the connect timeouts, redacted error messages, name and holder checks they
//!   all share. Each provider crate names them for its database
//!   (`pub type PostgresLockProvider = SqlLockProvider<PostgresBackend>`).
//! - [`LockAdmin`](shedlock_core::LockAdmin) for [`SqlLockProvider`]: listing (keyset pages in
//!   name order), inspecting and force-unlocking, on the backend's admin statements
//!   ([`SqlAdmin::read_locks`], [`SqlAdmin::force_unlock`]). An acquisition id is
//!   `<locked_by>/<locked_at>[/<fencing_token>]`, `locked_at` exactly as stored, so it names
//!   one acquisition even of a Java node, whose `locked_by` is only its host name.
//!
//! This crate depends on sqlx without any database driver: each provider crate brings its
//! own driver, reads its own catalog and hands the result here.

#![cfg_attr(docsrs, feature(doc_cfg))]

mod admin;
mod backend;
mod builder;
mod connect_failure;
mod connections;
mod identifier;
mod provider;
mod schema;
mod storage;
mod table;
mod timestamp_limit;
mod url;
mod utc_instant;

pub use backend::{
    AcquireAnswer, AcquireStatement, ConnectOptionsOf, ConnectionOf, HeldStatement, LIKE_ESCAPE,
    LockSelection, LockStatements, LockedAtOf, SqlAdmin, SqlBackend, StoredAcquisition, StoredLock,
    client_time_parameter, statement_error,
};
pub use builder::{
    DEFAULT_CONNECT_TIMEOUT, DEFAULT_IDLE_CHECK_INTERVAL, DEFAULT_MAX_CONNECTIONS,
    SqlLockProviderBuilder,
};
pub use identifier::{Dialect, Identifier, IdentifierError, MAX_IDENTIFIER_LEN, TableName};
pub use provider::SqlLockProvider;
pub use schema::{ColumnInfo, ColumnKind, TableSchema};
pub use table::{Column, LockTable};
pub use timestamp_limit::TimestampLimit;
pub use utc_instant::UtcInstant;
