//! The floor of contending nodes on real servers: every contender writes a row of its own on a
//! connection of its own, once per round, and the connect-time driver's row is left alone.
//! (`SHEDLOCK_TEST_POSTGRES_URL` and `SHEDLOCK_TEST_MYSQL_URL`, set by ci/test.sh.)

#![cfg(all(feature = "postgres", feature = "mysql"))]

use shedlock_benches::floors::{ContendedWrites, Driver, SqlDriver};
use shedlock_benches::server_url;
use sqlx::{Connection, Executor, IntoArguments, Row};

const CONTENDERS: u32 = 4;
const ROUNDS: i64 = 3;

/// Each floor row's counter, rows 0 to [`CONTENDERS`].
async fn counters<C>(url: &str) -> Vec<i64>
where
    C: Connection,
    for<'c> &'c mut C: Executor<'c, Database = C::Database>,
    <C::Database as sqlx::Database>::Arguments: IntoArguments<C::Database>,
    for<'r> i64: sqlx::Decode<'r, C::Database> + sqlx::Type<C::Database>,
    usize: sqlx::ColumnIndex<<C::Database as sqlx::Database>::Row>,
{
    let mut connection = C::connect(url).await.expect("the server answers");
    let statement = format!(
        "SELECT n FROM shedlock_bench_floor WHERE id BETWEEN 0 AND {CONTENDERS} ORDER BY id"
    );
    let rows = sqlx::query(sqlx::AssertSqlSafe(statement))
        .fetch_all(&mut connection)
        .await
        .expect("the floor table is there");
    rows.iter().map(|row| row.get::<i64, _>(0)).collect()
}

/// Runs [`ROUNDS`] rounds of [`CONTENDERS`] contenders made from `driver`, and asserts the
/// counters each moved by one per round, row 0 (the driver's own) not at all; then a round of
/// two contenders made alone, on rows 1 and 2.
async fn each_contender_writes_its_own_row_once_a_round<D: Driver>(
    driver: D,
    read_counters: impl AsyncFn() -> Vec<i64>,
) {
    let writes = ContendedWrites::connect(&driver, CONTENDERS)
        .await
        .expect("the contenders connect");
    assert_eq!(writes.len(), CONTENDERS as usize);
    let before = read_counters().await;
    assert_eq!(
        before.len(),
        CONTENDERS as usize + 1,
        "rows 0 to {CONTENDERS}"
    );
    for _ in 0..ROUNDS {
        let took = writes.run().await.expect("a round of writes");
        assert!(!took.is_zero(), "a round takes time");
    }
    let after = read_counters().await;
    let moved: Vec<i64> = after.iter().zip(&before).map(|(a, b)| a - b).collect();
    let mut expected = vec![ROUNDS; CONTENDERS as usize + 1];
    expected[0] = 0;
    assert_eq!(moved, expected, "each contender's row, once a round");

    drop(writes);
    let two = ContendedWrites::connect(&driver, 2)
        .await
        .expect("two contenders connect");
    two.run().await.expect("a round of two");
    let moved: Vec<i64> = read_counters()
        .await
        .iter()
        .zip(&after)
        .map(|(a, b)| a - b)
        .collect();
    assert_eq!(moved, [0, 1, 1, 0, 0], "rows 1 and 2 only");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_contenders_write_rows_of_their_own() {
    let url = server_url("SHEDLOCK_TEST_POSTGRES_URL");
    let driver = SqlDriver::postgres(&url).await.expect("the server answers");
    each_contender_writes_its_own_row_once_a_round(driver, async || {
        counters::<sqlx::PgConnection>(&url).await
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_contenders_write_rows_of_their_own() {
    let url = server_url("SHEDLOCK_TEST_MYSQL_URL");
    let driver = SqlDriver::mysql(&url).await.expect("the server answers");
    each_contender_writes_its_own_row_once_a_round(driver, async || {
        counters::<sqlx::MySqlConnection>(&url).await
    })
    .await;
}
