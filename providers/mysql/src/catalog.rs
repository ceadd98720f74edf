//! What connecting reads from the server and its catalog (`information_schema`): which server
//! it is, the lock table's columns, key and name collation, and the session's time zone, each
//! checked so that a wrong table or session fails at connect with a message that says how to
//! fix it.

use shedlock_core::{ErrorKind, LockError, Operation};
use shedlock_sql::{
    Column, ColumnInfo, ColumnKind, LockTable, SqlBackend, TableSchema, TimestampLimit,
    statement_error,
};
use sqlx::mysql::MySqlConnection;
use sqlx::{AssertSqlSafe, Row};

use crate::MySqlBackend;
use crate::table::{
    DATETIME_LIMIT, DIALECT, Flavor, TIMESTAMP_LIMIT, WIDE_TIMESTAMP_LIMIT, create_table_statement,
};

/// The name column's character set and collation, as far as they change which names are safe.
#[derive(Debug, Clone, Default)]
pub(crate) struct NameColumn {
    /// Characters the column's character set can store (`None`: all of Unicode).
    max_char: Option<char>,
    /// The character set's name, for errors.
    charset: String,
    /// Whether the collation ignores trailing spaces (PAD SPACE).
    pads: bool,
    collation: String,
}

impl NameColumn {
    /// Refuses a name this column cannot store or keep apart from another: a character its
    /// character set lacks, or a trailing space its PAD SPACE collation ignores.
    pub(crate) fn check_name(&self, name: &str) -> Result<(), LockError> {
        if let Some(max) = self.max_char
            && let Some(c) = name.chars().find(|&c| c > max)
        {
            return Err(LockError::invalid_name(
                MySqlBackend::PROVIDER,
                name,
                format!(
                    "the name column's character set {} cannot store {c:?}",
                    self.charset
                ),
            ));
        }
        if self.pads && name.ends_with(' ') {
            return Err(LockError::invalid_name(
                MySqlBackend::PROVIDER,
                name,
                format!(
                    "it ends with a space, which the name column's collation {} ignores, so it \
                     would share a lock with the name without it",
                    self.collation
                ),
            ));
        }
        Ok(())
    }
}

/// The lock table as connecting found it.
pub(crate) struct FoundTable {
    /// What the table allows, checked.
    pub(crate) schema: TableSchema,
    /// The name column's character set and collation.
    pub(crate) name_column: NameColumn,
    /// Which server holds it.
    pub(crate) flavor: Flavor,
}

/// Reads which server this is, and how far its `TIMESTAMP` type reaches.
///
/// MariaDB's `FROM_UNIXTIME` returns NULL past the range of its `TIMESTAMP` values, which
/// reaches 2106 from 11.5 on 64-bit servers and 2038 otherwise, so the server says which it
/// has rather than a version number being read for it. MySQL's `FROM_UNIXTIME` reaches
/// further than its `TIMESTAMP` type (3001 from 8.0.28), which ends in 2038 in every version.
async fn flavor(connection: &mut MySqlConnection) -> Result<(Flavor, TimestampLimit), sqlx::Error> {
    let (version, wide): (String, i64) = sqlx::query_as(
        "SELECT CAST(VERSION() AS CHAR), \
         CAST(FROM_UNIXTIME(4294967295) IS NOT NULL AS SIGNED)",
    )
    .fetch_one(&mut *connection)
    .await?;
    Ok(if version.to_ascii_lowercase().contains("mariadb") {
        let timestamp = if wide == 1 {
            WIDE_TIMESTAMP_LIMIT
        } else {
            TIMESTAMP_LIMIT
        };
        (Flavor::MariaDb, timestamp)
    } else {
        (Flavor::MySql, TIMESTAMP_LIMIT)
    })
}

/// Reads the table's columns from `information_schema` (creating the table first when asked)
/// and checks them, its key and, for `TIMESTAMP` columns, the session time zone.
pub(crate) async fn find_table(
    connection: &mut MySqlConnection,
    table: &LockTable,
    create_table: Option<bool>,
) -> Result<FoundTable, LockError> {
    let connect_error = |e| statement_error::<MySqlBackend>(Operation::Connect, "", e);
    let (flavor, timestamp_limit) = flavor(&mut *connection).await.map_err(connect_error)?;
    if let Some(fencing) = create_table {
        sqlx::query(AssertSqlSafe(create_table_statement(
            table, fencing, flavor,
        )))
        .execute(&mut *connection)
        .await
        .map_err(connect_error)?;
    }
    let rows = sqlx::query(
        "SELECT CAST(COLUMN_NAME AS CHAR), CAST(COLUMN_TYPE AS CHAR), \
         CAST(DATA_TYPE AS CHAR), CAST(CHARACTER_MAXIMUM_LENGTH AS SIGNED), \
         CAST(DATETIME_PRECISION AS SIGNED), CAST(CHARACTER_SET_NAME AS CHAR), \
         CAST(COLLATION_NAME AS CHAR), CAST(COLUMN_KEY AS CHAR), CAST(EXTRA AS CHAR) \
         FROM information_schema.COLUMNS \
         WHERE TABLE_SCHEMA = COALESCE(?, DATABASE()) AND TABLE_NAME = ? \
         ORDER BY ORDINAL_POSITION",
    )
    .bind(
        table
            .table()
            .schema
            .as_ref()
            .map(|s| s.catalog_name(DIALECT)),
    )
    .bind(table.table().table.catalog_name(DIALECT))
    .fetch_all(&mut *connection)
    .await
    .map_err(connect_error)?;
    let ddl = format!("{};", create_table_statement(table, false, flavor));
    let mut columns = Vec::with_capacity(rows.len());
    let mut name_column = NameColumn::default();
    let mut name_key = String::new();
    let mut timestamp_columns = false;
    for row in &rows {
        let get = |i| -> Result<Option<String>, LockError> {
            row.try_get::<Option<String>, _>(i).map_err(connect_error)
        };
        let column_name = get(0)?.unwrap_or_default();
        let column_type = get(1)?.unwrap_or_default();
        let data_type = get(2)?.unwrap_or_default().to_ascii_lowercase();
        let max_len: Option<i64> = row.try_get(3).map_err(connect_error)?;
        let precision: Option<i64> = row.try_get(4).map_err(connect_error)?;
        let extra = get(8)?.unwrap_or_default();
        if extra.to_ascii_lowercase().contains("auto_increment") {
            return Err(LockError::backend_message(
                ErrorKind::Configuration,
                MySqlBackend::PROVIDER,
                Operation::Connect,
                "",
                format!(
                    "the lock table {t} has an AUTO_INCREMENT column {column_name}; the \
                     acquire statement reports its outcome through the insert id, so the \
                     table must not have one. ShedLock's table is:\n{ddl}",
                    t = table.table()
                ),
            ));
        }
        let kind = match data_type.as_str() {
            "varchar" | "char" => ColumnKind::Text {
                max_chars: max_len.map(|n| n as usize),
            },
            "text" | "tinytext" | "mediumtext" | "longtext" => ColumnKind::Text {
                max_chars: max_len.map(|n| n as usize),
            },
            "timestamp" | "datetime" => {
                timestamp_columns |= data_type == "timestamp";
                ColumnKind::Timestamp {
                    fraction_digits: precision.unwrap_or(0) as u32,
                    // Neither stores an instant: both hold UTC wall times here.
                    with_time_zone: false,
                    limit: if data_type == "timestamp" {
                        timestamp_limit
                    } else {
                        DATETIME_LIMIT
                    },
                }
            }
            "bigint" | "int" | "integer" | "mediumint" => ColumnKind::Integer,
            _ => ColumnKind::Other,
        };
        if table
            .column(Column::Name)
            .matches_column(DIALECT, &column_name)
        {
            let charset = get(5)?.unwrap_or_default().to_ascii_lowercase();
            let collation = get(6)?.unwrap_or_default().to_ascii_lowercase();
            name_key = get(7)?.unwrap_or_default();
            name_column = NameColumn {
                max_char: match charset.as_str() {
                    "utf8mb4" | "binary" | "" => None,
                    "utf8" | "utf8mb3" => Some('\u{FFFF}'),
                    "latin1" => Some('\u{FF}'),
                    "ascii" => Some('\u{7F}'),
                    _ => None,
                },
                charset,
                pads: !(collation.contains("nopad")
                    || collation.contains("_0900_")
                    || collation.is_empty()),
                collation,
            };
        }
        columns.push(ColumnInfo {
            name: column_name,
            declared_type: column_type,
            kind,
        });
    }
    let schema = table.check_columns(DIALECT, MySqlBackend::PROVIDER, &columns, &ddl)?;
    if !matches!(name_key.as_str(), "PRI" | "UNI") {
        return Err(LockError::backend_message(
            ErrorKind::Configuration,
            MySqlBackend::PROVIDER,
            Operation::Connect,
            "",
            format!(
                "the lock table {t}: column {c} must be its primary key (or have a unique \
                 index of its own); ShedLock's table is:\n{ddl}",
                t = table.table(),
                c = table.column(Column::Name),
            ),
        ));
    }
    if timestamp_columns {
        // TIMESTAMP columns convert between the session time zone and UTC on every read
        // and write; the statements' UTC times are only right in a UTC session.
        let offset: i64 =
            sqlx::query_scalar("SELECT TIMESTAMPDIFF(MINUTE, UTC_TIMESTAMP(), NOW())")
                .fetch_one(&mut *connection)
                .await
                .map_err(connect_error)?;
        if offset != 0 {
            return Err(LockError::backend_message(
                ErrorKind::Configuration,
                MySqlBackend::PROVIDER,
                Operation::Connect,
                "",
                format!(
                    "the lock table {t} has TIMESTAMP columns, and this pool's session \
                     time_zone is {offset} minutes from UTC; they hold UTC times, so the \
                     session must use time_zone '+00:00' (sqlx's default: do not set \
                     MySqlConnectOptions::timezone(None)), or make the columns DATETIME(3)",
                    t = table.table()
                ),
            ));
        }
    }
    if name_column.pads || name_column.collation.ends_with("_ci") {
        tracing::warn!(
            table = %table.table(),
            collation = %name_column.collation,
            "the lock name column's collation treats some distinct names as equal (case, \
             accents or trailing spaces); such names share one lock"
        );
    }
    Ok(FoundTable {
        schema,
        name_column,
        flavor,
    })
}
