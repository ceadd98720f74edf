//! ZooKeeper (`SHEDLOCK_TEST_ZOOKEEPER_URL`, a connect string `host:2181`) through the facade
//! (`zk://host:2181`), beside a `setData` and an `exists` sent by zookeeper-client on a session
//! of the bench's own.

use criterion::{Criterion, criterion_group, criterion_main};
use shedlock_benches::floors::ZookeeperDriver;
use shedlock_benches::{connect_node, groups, server_url};

fn zookeeper(c: &mut Criterion) {
    let connect_string = server_url("SHEDLOCK_TEST_ZOOKEEPER_URL");
    let url = format!("zk://{connect_string}");
    let runtime = groups::multi_thread_runtime();
    let driver = runtime
        .block_on(ZookeeperDriver::connect(&connect_string))
        .expect("the ZooKeeper ensemble answers");
    groups::register(
        c,
        &runtime,
        "zookeeper",
        || connect_node(&url),
        &driver,
        |_| {},
    );
}

criterion_group!(benches, zookeeper);
criterion_main!(benches);
