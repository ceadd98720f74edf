//! How MySQL and MariaDB sessions start far from UTC; shared by this crate's non-UTC targets.
//!
//! The provider sets `time_zone = '+00:00'` on every pool it opens from a URL, whatever the
//! URL says, so nodes far from UTC are given a pool of their own, as an application that sets
//! its own session time zone does. Such a session converts `TIMESTAMP` values through its
//! zone, and the provider refuses it on `TIMESTAMP` columns, so the run's table has ShedLock's
//! columns as `DATETIME(3)`, which hold UTC wall times in any session.

use std::str::FromStr;

use shedlock_conformance::{SetupError, async_trait};
use shedlock_mysql::{Flavor, LockTable, MySqlBackend, create_table_statement};
use shedlock_test_support::sql::conformance_harness::Sessions;
use shedlock_test_support::sql::conformance_harness::non_utc::NonUtcSessions;
use sqlx::MySqlPool;
use sqlx::mysql::{MySqlConnectOptions, MySqlPoolOptions};

use crate::planted_records::MySqlKit;

/// East of UTC, with minutes: an offset, because a server whose time zone tables were never
/// loaded (`mysql_tzinfo_to_sql`, which Debian's MariaDB package does not run) knows no zone
/// names.
const ZONE: &str = "+05:30";

#[async_trait]
impl NonUtcSessions for MySqlKit {
    fn sessions(url: String) -> Result<Sessions<MySqlBackend>, SetupError> {
        Ok(Sessions::Pool {
            pool: MySqlPoolOptions::new(),
            connect: MySqlConnectOptions::from_str(&url)?.timezone(Some(ZONE.to_owned())),
        })
    }

    async fn create_table(admin: &MySqlPool, table: &str, fencing: bool) -> Result<(), SetupError> {
        let mariadb: i64 = sqlx::query_scalar("SELECT VERSION() LIKE '%MariaDB%'")
            .fetch_one(admin)
            .await?;
        let flavor = if mariadb != 0 {
            Flavor::MariaDb
        } else {
            Flavor::MySql
        };
        let ddl = create_table_statement(&LockTable::new(table)?, fencing, flavor)
            .replace(" TIMESTAMP(3) ", " DATETIME(3) ");
        sqlx::query(sqlx::AssertSqlSafe(ddl)).execute(admin).await?;
        Ok(())
    }

    async fn session_time_zone(pool: &MySqlPool) -> Result<(String, i64), sqlx::Error> {
        sqlx::query_as(
            "SELECT CAST(@@session.time_zone AS CHAR), \
             TIMESTAMPDIFF(MINUTE, UTC_TIMESTAMP(), NOW())",
        )
        .fetch_one(pool)
        .await
    }
}
