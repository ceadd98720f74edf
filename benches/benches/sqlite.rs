//! SQLite through the facade, beside a one-row `UPDATE` and a `SELECT` of that row by its key, sent
//! by sqlx to the same database file (one of the bench's own, removed at the end).

use criterion::{Criterion, criterion_group, criterion_main};
use shedlock_benches::floors::{SqlDriver, SqliteFile};
use shedlock_benches::{connect_node, groups};

fn sqlite(c: &mut Criterion) {
    let runtime = groups::multi_thread_runtime();
    let file = SqliteFile::new();
    let url = file.url();
    let driver = runtime
        .block_on(SqlDriver::sqlite(&url))
        .expect("the SQLite file opens");
    groups::register(
        c,
        &runtime,
        "sqlite",
        || connect_node(&url),
        &driver,
        |_| {},
    );
}

criterion_group!(benches, sqlite);
criterion_main!(benches);
