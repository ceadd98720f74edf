//! How PostgreSQL sessions start far from UTC; shared by this crate's non-UTC targets.
//!
//! sqlx sends `TimeZone=UTC` in every connection's startup message, and it overrides a
//! `TimeZone` given in the URL's `options` (or set for the role or database), so a pool the
//! provider opens from a URL is always UTC. Nodes far from UTC are given a pool of their own
//! that sets the zone on connect, as an application whose sessions use local time does.

use std::str::FromStr;

use shedlock_conformance::{SetupError, async_trait};
use shedlock_postgres::PostgresBackend;
use shedlock_test_support::sql::conformance_harness::Sessions;
use shedlock_test_support::sql::conformance_harness::non_utc::NonUtcSessions;
use sqlx::PgPool;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

use crate::planted_records::PostgresKit;

#[async_trait]
impl NonUtcSessions for PostgresKit {
    fn sessions(url: String) -> Result<Sessions<PostgresBackend>, SetupError> {
        Ok(Sessions::Pool {
            pool: PgPoolOptions::new().after_connect(|connection, _| {
                Box::pin(async move {
                    // Eight hours west of UTC in winter, seven in summer.
                    sqlx::query("SET TIME ZONE 'America/Los_Angeles'")
                        .execute(connection)
                        .await
                        .map(|_| ())
                })
            }),
            connect: PgConnectOptions::from_str(&url)?,
        })
    }

    async fn session_time_zone(pool: &PgPool) -> Result<(String, i64), sqlx::Error> {
        sqlx::query_as(
            "SELECT current_setting('TimeZone'), (EXTRACT(TIMEZONE FROM now()) / 60)::int8",
        )
        .fetch_one(pool)
        .await
    }
}
