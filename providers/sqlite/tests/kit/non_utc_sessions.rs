//! SQLite has no session time zone: its `'now'` is UTC, and only its `'localtime'` modifier
//! reads the process's zone (`TZ`), which the non-UTC run sets. Shared by this crate's non-UTC
//! targets.

use shedlock_conformance::{SetupError, async_trait};
use shedlock_sqlite::SqliteBackend;
use shedlock_test_support::sql::conformance_harness::Sessions;
use shedlock_test_support::sql::conformance_harness::non_utc::NonUtcSessions;
use sqlx::SqlitePool;

use crate::planted_records::SqliteKit;

#[async_trait]
impl NonUtcSessions for SqliteKit {
    fn sessions(url: String) -> Result<Sessions<SqliteBackend>, SetupError> {
        Ok(Sessions::Url(url))
    }

    async fn session_time_zone(pool: &SqlitePool) -> Result<(String, i64), sqlx::Error> {
        sqlx::query_as(
            "SELECT 'localtime', \
             CAST(round((julianday('now', 'localtime') - julianday('now')) * 1440) AS INTEGER)",
        )
        .fetch_one(pool)
        .await
    }
}
