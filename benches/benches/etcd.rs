//! etcd (`SHEDLOCK_TEST_ETCD_URL`, `http://host:2379`) through the facade (`etcd://host:2379`),
//! beside a `put` and a `get` sent by etcd-client on a client of the bench's own.

use criterion::{Criterion, criterion_group, criterion_main};
use shedlock_benches::floors::EtcdDriver;
use shedlock_benches::{connect_node, groups, server_url};

fn etcd(c: &mut Criterion) {
    let endpoint = server_url("SHEDLOCK_TEST_ETCD_URL");
    let url = format!("etcd://{}", endpoint.trim_start_matches("http://"));
    let runtime = groups::multi_thread_runtime();
    let driver = runtime
        .block_on(EtcdDriver::connect([&endpoint]))
        .expect("the etcd server answers");
    groups::register(c, &runtime, "etcd", || connect_node(&url), &driver, |_| {});
}

criterion_group!(benches, etcd);
criterion_main!(benches);
