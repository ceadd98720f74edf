//! MySQL or MariaDB (`SHEDLOCK_TEST_MYSQL_URL`) through the facade, beside a one-row `UPDATE`
//! and a `SELECT` of that row by its key, sent by sqlx on a connection of the bench's own.

use criterion::{Criterion, criterion_group, criterion_main};
use shedlock_benches::floors::SqlDriver;
use shedlock_benches::{connect_node, groups, server_url};

fn mysql(c: &mut Criterion) {
    let url = server_url("SHEDLOCK_TEST_MYSQL_URL");
    let runtime = groups::multi_thread_runtime();
    let driver = runtime
        .block_on(SqlDriver::mysql(&url))
        .expect("the MySQL server answers");
    groups::register(c, &runtime, "mysql", || connect_node(&url), &driver, |_| {});
}

criterion_group!(benches, mysql);
criterion_main!(benches);
