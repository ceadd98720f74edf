//! Direct demonstrations, outside the kit, that the providers the kit passed really have
//! their bug: each scenario drives the broken provider and its control through the public
//! API and reports what each did. Run with `-- --demo`.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use shedlock_conformance::{ConformanceHarness, PlantedRecord};
use shedlock_core::{
    Clock, LockAdmin, LockConfiguration, LockProvider, SystemClock, raw::default_holder,
};

use super::memkv::{MemBug, MemKvHarness};
use super::natskv::{NatsBug, NatsHarness};
use super::sqlish::{SqlBug, SqlHarness};

fn cfg(name: &str, at_most: Duration, at_least: Duration) -> LockConfiguration {
    LockConfiguration::new(name, at_most, at_least).unwrap()
}

fn clock() -> Arc<dyn Clock> {
    Arc::new(SystemClock)
}

const DAY: Duration = Duration::from_secs(86_400);
const MS: Duration = Duration::from_millis(1);

/// A 31-day lock; is it still held right after?
async fn long_lock<H: ConformanceHarness>(h: &H) -> String {
    let a = h.node(clock()).await.unwrap();
    let b = h.node(clock()).await.unwrap();
    let held = a
        .try_lock(&cfg("long", 31 * DAY, Duration::ZERO))
        .await
        .unwrap();
    let other = b
        .try_lock(&cfg("long", 31 * DAY, Duration::ZERO))
        .await
        .unwrap();
    format!(
        "A acquired={} ; B right after: acquired={}",
        held.is_acquired(),
        other.is_acquired()
    )
}

async fn memkv_lost_flag(bug: Option<MemBug>) -> String {
    let h = MemKvHarness::new("demo", bug);
    let a = h.node(clock()).await.unwrap();
    let b = h.node(clock()).await.unwrap();
    let c = h.node(clock()).await.unwrap();
    let stale = a
        .try_lock(&cfg("lf", 100 * MS, Duration::ZERO))
        .await
        .unwrap()
        .into_handle()
        .unwrap();
    tokio::time::sleep(150 * MS).await;
    let fresh = b
        .try_lock(&cfg("lf", 10 * 1000 * MS, Duration::ZERO))
        .await
        .unwrap();
    let stale_release = stale.unlock().await.unwrap();
    let third = c
        .try_lock(&cfg("lf", 10 * 1000 * MS, Duration::ZERO))
        .await
        .unwrap();
    format!(
        "B took the expired lock: {}; A's stale unlock answered {stale_release}; C then acquired B's lock: {}",
        fresh.is_acquired(),
        third.is_acquired()
    )
}

async fn memkv_fencing(bug: Option<MemBug>) -> String {
    let h = Arc::new(MemKvHarness::new("demo", bug));
    let last = Arc::new(std::sync::Mutex::new((0u64, 0usize)));
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let node = h.node(clock()).await.unwrap();
        let last = last.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..300 {
                if let Some(handle) = node
                    .try_lock(&cfg("fence", 2000 * MS, Duration::ZERO))
                    .await
                    .unwrap()
                    .into_handle()
                {
                    let token = handle.fencing_token().unwrap_or(0);
                    {
                        let mut l = last.lock().unwrap();
                        if token <= l.0 {
                            l.1 += 1;
                        }
                        l.0 = l.0.max(token);
                    }
                    handle.unlock().await.unwrap();
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let l = last.lock().unwrap();
    format!(
        "acquisitions whose token did not exceed an earlier one: {}",
        l.1
    )
}

async fn natskv_shorten(bug: Option<NatsBug>) -> String {
    let h = NatsHarness::new("demo", bug);
    let a = h.node(clock()).await.unwrap();
    let b = h.node(clock()).await.unwrap();
    let handle = a
        .try_lock(&cfg("sh", 2000 * MS, Duration::ZERO))
        .await
        .unwrap()
        .into_handle()
        .unwrap();
    let extended = handle.extend(200 * MS).await.unwrap();
    tokio::time::sleep(400 * MS).await;
    let other = b
        .try_lock(&cfg("sh", 2000 * MS, Duration::ZERO))
        .await
        .unwrap();
    format!(
        "extend(200ms) of a 2s lock answered {extended}; 400 ms later B acquired={} (must be true)",
        other.is_acquired()
    )
}

async fn natskv_names(bug: Option<NatsBug>, first: &str, second: &str) -> String {
    let h = NatsHarness::new("demo", bug);
    let a = h.node(clock()).await.unwrap();
    let b = h.node(clock()).await.unwrap();
    let x = a
        .try_lock(&cfg(first, 10 * 1000 * MS, Duration::ZERO))
        .await
        .unwrap();
    let y = b
        .try_lock(&cfg(second, 10 * 1000 * MS, Duration::ZERO))
        .await
        .unwrap();
    format!(
        "{first:?} acquired={}, then {second:?} acquired={} (must be true)",
        x.is_acquired(),
        y.is_acquired()
    )
}

async fn natskv_u16(bug: Option<NatsBug>) -> String {
    let h = NatsHarness::new("demo", bug);
    let a = h.node(clock()).await.unwrap();
    let mut previous = 0;
    for round in 0..40_000u32 {
        let handle = a
            .try_lock(&cfg("u16", 10 * 1000 * MS, Duration::ZERO))
            .await
            .unwrap()
            .into_handle()
            .unwrap();
        let token = handle.fencing_token().unwrap();
        if token <= previous {
            return format!("round {round}: token {token} after {previous}");
        }
        previous = token;
        handle.unlock().await.unwrap();
    }
    format!("40000 rounds, tokens increased, last {previous}")
}

async fn sqlish_early(bug: Option<SqlBug>) -> String {
    let h = SqlHarness::new("demo", bug);
    let a = h.node(clock()).await.unwrap();
    let b = h.node(clock()).await.unwrap();
    let mut earliest = Duration::MAX;
    for round in 0..5 {
        let name = format!("early{round}");
        let started = Instant::now();
        let _held = a
            .try_lock(&cfg(&name, 2000 * MS, Duration::ZERO))
            .await
            .unwrap()
            .into_handle()
            .unwrap();
        loop {
            if b.try_lock(&cfg(&name, 2000 * MS, Duration::ZERO))
                .await
                .unwrap()
                .is_acquired()
            {
                earliest = earliest.min(started.elapsed());
                break;
            }
            tokio::time::sleep(10 * MS).await;
        }
    }
    format!(
        "a 2 s lock was taken by another node after {earliest:?} at the earliest (declared precision {:?})",
        a.capabilities().time_precision
    )
}

async fn sqlish_force_unlock_fence(bug: Option<SqlBug>) -> String {
    let h = SqlHarness::new("demo", bug);
    let a = h.node(clock()).await.unwrap();
    let b = h.node(clock()).await.unwrap();
    let first = a
        .try_lock(&cfg("fu", 10 * 1000 * MS, Duration::ZERO))
        .await
        .unwrap()
        .into_handle()
        .unwrap();
    let info = a.inspect_lock("fu").await.unwrap().unwrap();
    let freed = a.force_unlock("fu", &info.acquisition).await.unwrap();
    let second = b
        .try_lock(&cfg("fu", 10 * 1000 * MS, Duration::ZERO))
        .await
        .unwrap()
        .into_handle()
        .unwrap();
    format!(
        "token {:?}, force_unlock answered {freed}, next acquisition's token {:?} (must be greater)",
        first.fencing_token(),
        second.fencing_token()
    )
}

async fn sqlish_java_same_host(bug: Option<SqlBug>) -> String {
    let h = SqlHarness::new("demo", bug);
    let now = SystemTime::now();
    h.write_record(&PlantedRecord {
        name: "java".into(),
        lock_until: now + Duration::from_secs(3600),
        locked_at: now,
        locked_by: default_holder(),
    })
    .await
    .unwrap();
    let a = h.node(clock()).await.unwrap();
    let got = a
        .try_lock(&cfg("java", 10 * 1000 * MS, Duration::ZERO))
        .await
        .unwrap();
    format!(
        "a Java record held for 1 h by {:?} (this host): acquired={} (must be false)",
        default_holder(),
        got.is_acquired()
    )
}

/// Runs every demonstration, broken provider beside its control.
pub fn run() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        for (label, bug) in [
            ("memkv", None),
            ("memkv-raw-long-ttl", Some(MemBug::RawLongTtl)),
        ] {
            println!(
                "{label}: {}",
                long_lock(&MemKvHarness::new("demo", bug)).await
            );
        }
        for (label, bug) in [
            ("sqlish", None),
            ("sqlish-int-millis", Some(SqlBug::IntMillis)),
        ] {
            println!(
                "{label}: {}",
                long_lock(&SqlHarness::new("demo", bug)).await
            );
        }
        for (label, bug) in [
            ("memkv", None),
            (
                "memkv-lost-flag-blind-release",
                Some(MemBug::LostFlagBlindRelease),
            ),
        ] {
            println!("{label}: {}", memkv_lost_flag(bug).await);
        }
        println!(
            "memkv-incr-then-add-fencing: {}",
            memkv_fencing(Some(MemBug::IncrThenAddFencing)).await
        );
        for (label, bug) in [
            ("natskv", None),
            (
                "natskv-extend-never-shortens",
                Some(NatsBug::ExtendNeverShortens),
            ),
        ] {
            println!("{label}: {}", natskv_shorten(bug).await);
        }
        for (label, bug) in [
            ("natskv", None),
            ("natskv-slash-tokens", Some(NatsBug::SlashTokens)),
        ] {
            println!("{label}: {}", natskv_names(bug, "x/a//b", "x/a/b").await);
            println!("{label}: {}", natskv_names(bug, "y/a/", "y/a").await);
        }
        for (label, bug) in [
            ("natskv", None),
            ("natskv-utf16-escape", Some(NatsBug::Utf16Escape)),
        ] {
            println!(
                "{label}: {}",
                natskv_names(bug, "z\u{1F512}", "z\u{F512}").await
            );
        }
        println!(
            "natskv-u16-token: {}",
            natskv_u16(Some(NatsBug::U16Token)).await
        );
        for (label, bug) in [
            ("sqlish", None),
            (
                "sqlish-second-timestamps-coarse",
                Some(SqlBug::SecondTimestampsDeclaredCoarse),
            ),
        ] {
            println!("{label}: {}", sqlish_early(bug).await);
        }
        for (label, bug) in [
            ("sqlish", None),
            (
                "sqlish-force-unlock-deletes",
                Some(SqlBug::ForceUnlockDeletes),
            ),
        ] {
            println!("{label}: {}", sqlish_force_unlock_fence(bug).await);
        }
        for (label, bug) in [
            ("sqlish", None),
            ("sqlish-java-host-is-own", Some(SqlBug::JavaHostIsOwn)),
        ] {
            println!("{label}: {}", sqlish_java_same_host(bug).await);
        }
    });
}
