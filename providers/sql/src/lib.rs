//! The ShedLock table as the shedlock-rs SQL providers (`shedlock-postgres`, `shedlock-mysql`,
//! `shedlock-sqlite`) share it, so the three describe, check and name it the same way.
//!
//! - [`LockTable`]: the table's name (optionally schema-qualified) and its column names, with
//!   ShedLock's defaults (`shedlock`: `name`, `lock_until`, `locked_at`, `locked_by`) and the
//!   optional `fencing_token` column.
//! - [`Identifier`] and [`Dialect`]: table and column names are configuration, never data, yet
//!   they end up inside SQL text. Only plain identifiers are accepted and every use is quoted,
//!   so a configured name can never change a statement's meaning.
//! - [`ColumnInfo`] and [`LockTable::check_columns`]: what a provider read from its catalog,
//!   checked once at connect, with errors that say how to create or fix the table.
//!
//! This crate has no database client in its dependencies: each provider reads its own catalog
//! and hands the result here.

mod identifier;
mod schema;
mod table;

pub use identifier::{Dialect, Identifier, IdentifierError, MAX_IDENTIFIER_LEN, TableName};
pub use schema::{ColumnInfo, ColumnKind, TableSchema};
pub use table::{Column, LockTable};
