//! MongoDB (`SHEDLOCK_TEST_MONGO_URL`) through the facade, in a database of the bench's own,
//! beside an `updateOne` and a `findOne` of that document by `_id`, sent by the mongodb driver
//! on a client of the bench's own.

use criterion::{Criterion, criterion_group, criterion_main};
use shedlock_benches::floors::MongoDriver;
use shedlock_benches::{connect_node, groups, server_url};

/// The database the locks and the floor document are kept in.
const DATABASE: &str = "shedlock_benches";

fn mongo(c: &mut Criterion) {
    let server = server_url("SHEDLOCK_TEST_MONGO_URL");
    let url = format!("{}/{DATABASE}", server.trim_end_matches('/'));
    let runtime = groups::multi_thread_runtime();
    let driver = runtime
        .block_on(MongoDriver::connect(&url))
        .expect("the MongoDB server answers");
    groups::register(c, &runtime, "mongo", || connect_node(&url), &driver, |_| {});
}

criterion_group!(benches, mongo);
criterion_main!(benches);
