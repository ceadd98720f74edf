//! Failovers of the sentinels' master, and a provider connected by a `redis+sentinel://` URL
//! that follows them to the new master instead of staying bound to the old one: one ordered
//! (`SENTINEL FAILOVER`, the old master demoted to a replica), one forced (the master
//! SIGKILLed, its replica promoted by the sentinels once they find it down). Against the
//! Sentinel setup of `ci/start-redis-topologies.sh` (`SHEDLOCK_TEST_REDIS_SENTINEL_URL`), the
//! master killed and the setup restored by `ci/redis-failover.sh` (`SHEDLOCK_TEST_REDIS_FAILOVER`,
//! its path); a missing variable fails the test. Alone in
//! its test target, since it moves the master under everything else that uses the setup, and
//! the two tests take turns (each moves the master the other expects in place).

#[path = "shared/failover.rs"]
mod failover;
#[path = "shared/topologies.rs"]
mod topologies;

use std::collections::HashMap;
use std::future::Future;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use failover::{Recovery, RestoreOnPanic, connection, replication, run_script};
use redis::AsyncCommands;
use shedlock_core::{Acquisition, LockConfiguration, LockProvider};
use shedlock_redis::RedisLockProvider;
use shedlock_test_support::settings;
use tokio::time::Instant;
use topologies::{current_master, hosts, master_name};

/// Both tests move the master: one at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Polls `check` every 100 ms until it holds, or fails naming `what` after `limit`.
async fn wait_for<F, Fut>(what: &str, limit: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<bool, String>>,
{
    let started = Instant::now();
    loop {
        let last = match check().await {
            Ok(true) => return,
            Ok(false) => "not yet".to_owned(),
            Err(error) => error,
        };
        assert!(
            started.elapsed() < limit,
            "{what} did not happen within {limit:?} (last: {last})"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Whether a failover can start now: the master has a replica whose link is up, and every
/// sentinel sees that replica healthy and has its quorum.
async fn ready_to_fail_over(url: &str) -> Result<bool, String> {
    let name = master_name(url);
    let master = current_master(url).await.map_err(|e| e.to_string())?;
    let info = replication(&master).await.map_err(|e| e.to_string())?;
    if info.get("role").map(String::as_str) != Some("master")
        || info.get("connected_slaves").map(String::as_str) != Some("1")
    {
        return Ok(false);
    }
    for sentinel in hosts(url) {
        let mut sentinel = connection(&sentinel).await.map_err(|e| e.to_string())?;
        let replicas: Vec<Vec<String>> = redis::cmd("SENTINEL")
            .arg("REPLICAS")
            .arg(&name)
            .query_async(&mut sentinel)
            .await
            .map_err(|e| e.to_string())?;
        let healthy = replicas.iter().any(|fields| {
            let fields: HashMap<&str, &str> = fields
                .chunks(2)
                .map(|pair| (pair[0].as_str(), pair[1].as_str()))
                .collect();
            fields.get("flags") == Some(&"slave") && fields.get("master-link-status") == Some(&"ok")
        });
        let quorum: redis::RedisResult<String> = redis::cmd("SENTINEL")
            .arg("CKQUORUM")
            .arg(&name)
            .query_async(&mut sentinel)
            .await;
        if !healthy || quorum.is_err() {
            return Ok(false);
        }
    }
    Ok(true)
}

#[tokio::test(flavor = "multi_thread")]
async fn the_provider_follows_the_master_to_the_replica_promoted_by_a_failover() {
    let _serial = SERIAL.lock().await;
    let url = settings::REDIS_SENTINEL.value();
    let name = master_name(&url);
    let test = async {
        wait_for("a healthy replica", Duration::from_secs(15), || {
            ready_to_fail_over(&url)
        })
        .await;
        let provider = RedisLockProvider::builder()
            .env(format!("failover-{}", uuid::Uuid::new_v4().simple()))
            .operation_timeout(Duration::from_secs(2))
            .connect(&url)
            .await
            .unwrap();
        let config =
            LockConfiguration::new("after-failover", Duration::from_secs(30), Duration::ZERO)
                .unwrap();
        // Connected to the master before the failover.
        let before = current_master(&url).await.unwrap();
        let handle = provider
            .try_lock(&config)
            .await
            .unwrap()
            .into_handle()
            .unwrap();
        assert!(handle.unlock().await.unwrap());

        let mut sentinel = connection(&hosts(&url)[0]).await.unwrap();
        let asked = Instant::now();
        loop {
            let answer: redis::RedisResult<String> = redis::cmd("SENTINEL")
                .arg("FAILOVER")
                .arg(&name)
                .query_async(&mut sentinel)
                .await;
            match answer {
                Ok(_) => break,
                // Another failover still in progress, or the replica not seen healthy yet.
                Err(error) if matches!(error.code(), Some("INPROG" | "NOGOODSLAVE")) => {
                    assert!(asked.elapsed() < Duration::from_secs(10), "{error}");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(error) => panic!("SENTINEL FAILOVER {name}: {error}"),
            }
        }
        let switched = Instant::now();
        let after = loop {
            let now = current_master(&url).await.unwrap();
            if now != before {
                break now;
            }
            assert!(
                switched.elapsed() < Duration::from_secs(10),
                "the sentinels still name {before} 10 s after SENTINEL FAILOVER"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        };

        // Until the sentinels demote the old master it still takes writes, and a node still
        // connected to it writes there (Redis' split-brain window, which the crate docs
        // describe): the provider is checked from the demotion on. The demotion also closes the
        // old master's client connections.
        wait_for("the old master's demotion", Duration::from_secs(15), || {
            let before = &before;
            async move {
                let info = replication(before).await.map_err(|e| e.to_string())?;
                Ok(info.get("role").map(String::as_str) == Some("slave"))
            }
        })
        .await;

        // The provider's next operations reach the new master within a bounded time, and no
        // acquire is ever answered "not acquired" (nobody holds this lock).
        let started = Instant::now();
        let mut errors = Vec::new();
        let handle = loop {
            match provider.try_lock(&config).await {
                Ok(Acquisition::Acquired(handle)) => break handle,
                Ok(other) => panic!("nobody holds the lock, yet: {other:?}"),
                Err(error) => {
                    errors.push(error.to_string());
                    assert!(
                        started.elapsed() < Duration::from_secs(10),
                        "still failing after 10 s: {errors:#?}"
                    );
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        };
        assert!(
            errors.len() <= 2,
            "the provider should follow at once, failing at most the operation that met the \
             old master's closed connection: {errors:#?}"
        );
        let key = provider.lock_key("after-failover").unwrap();
        let mut new_master = connection(&after).await.unwrap();
        let value: String = new_master.get(&key).await.unwrap();
        assert!(value.starts_with("ADDED:"), "{key} on {after}: {value}");
        assert!(handle.unlock().await.unwrap(), "released on the new master");
        let exists: bool = new_master.exists(&key).await.unwrap();
        assert!(!exists, "{key} deleted from {after}");

        // The old master replicates the new one; wait until its link is up, so the setup is
        // ready for the next run.
        wait_for(
            "the old master to replicate the new one",
            Duration::from_secs(15),
            || {
                let before = &before;
                let after = &after;
                async move {
                    let info = replication(before).await.map_err(|e| e.to_string())?;
                    Ok(info.get("role").map(String::as_str) == Some("slave")
                        && info.get("master_port").map(String::as_str) == after.rsplit(':').next()
                        && info.get("master_link_status").map(String::as_str) == Some("up"))
                }
            },
        )
        .await;
    };
    tokio::time::timeout(Duration::from_secs(30), test)
        .await
        .expect("the failover test finishes within 30 s");
}

/// Each operation's own bound while the master is down.
const OPERATION_TIMEOUT: Duration = Duration::from_secs(2);
/// What an operation may take beyond its timeout: the scheduling of a loaded machine.
const TIMEOUT_SLACK: Duration = Duration::from_secs(1);
/// From the kill until the replica is promoted and the provider answers again: the sentinels'
/// down-after-milliseconds (5 s) and an election, with room for a loaded machine.
const RECOVERY_LIMIT: Duration = Duration::from_secs(20);
/// The bounds above, as the shared failover steps take them.
const RECOVERY: Recovery = Recovery {
    operation_timeout: OPERATION_TIMEOUT,
    slack: TIMEOUT_SLACK,
    limit: RECOVERY_LIMIT,
};
const LOCK_AT_MOST_FOR: Duration = Duration::from_secs(120);
const HOLDER_A: &str = "sentinel-kill-a";
const HOLDER_B: &str = "sentinel-kill-b";

/// The master dies (SIGKILL) while a lock it holds is held, and the sentinels promote the
/// replica, which had received the lock. The provider fails closed meanwhile (errors, never
/// "not acquired" for a free lock), answers again by itself within a bound, and the lock is
/// still held on the new master: another node is refused, the holder releases it.
#[tokio::test(flavor = "multi_thread")]
async fn a_lock_survives_the_sigkill_of_the_master_and_the_provider_follows_the_promotion() {
    let _serial = SERIAL.lock().await;
    let script = settings::REDIS_FAILOVER.value();
    let url = settings::REDIS_SENTINEL.value();
    // Dropped before `_serial`: the setup is whole again before the other test goes on.
    let _restore = RestoreOnPanic {
        script: script.clone(),
        restore: "sentinel-restore",
    };
    let test = async {
        // Whole before the kill (a previous run or the other test may have left it rejoining).
        run_script(&script, &["sentinel-restore"]);
        let env = format!("sentinel-kill-{}", uuid::Uuid::new_v4().simple());
        let settings = RedisLockProvider::builder()
            .env(env)
            .operation_timeout(OPERATION_TIMEOUT);
        let a = settings
            .clone()
            .holder(HOLDER_A)
            .connect(&url)
            .await
            .unwrap();
        let b = settings.holder(HOLDER_B).connect(&url).await.unwrap();
        let name = "held-across-the-kill";
        let config = LockConfiguration::new(name, LOCK_AT_MOST_FOR, Duration::ZERO).unwrap();
        let key = a.lock_key(name).unwrap();

        let master = current_master(&url).await.unwrap();
        let held = match a.try_lock(&config).await.unwrap() {
            Acquisition::Acquired(handle) => handle,
            other => panic!("{name} is free, but try_lock answered {other:?}"),
        };
        // WAIT counts the replicas that acknowledged this connection's last write, so the test
        // writes one of its own after the provider's acquire: the replication stream is in
        // order, and a replica that acknowledged it had the lock before.
        let mut on_master = connection(&master).await.unwrap();
        let marker = format!("{key}:replicated");
        let () = on_master.set_ex(&marker, "1", 60).await.unwrap();
        let acknowledged: i64 = redis::cmd("WAIT")
            .arg(1)
            .arg(1000)
            .query_async(&mut on_master)
            .await
            .unwrap();
        assert!(
            acknowledged >= 1,
            "no replica of {master} acknowledged within 1 s"
        );
        let info = replication(&master).await.unwrap();
        let replica = replica_of(&info).unwrap_or_else(|| panic!("{master} names no replica"));
        let on_replica: Option<String> =
            connection(&replica).await.unwrap().get(&key).await.unwrap();
        assert!(
            on_replica
                .as_deref()
                .is_some_and(|value| value.contains(HOLDER_A)),
            "{key} on the replica {replica}: {on_replica:?}"
        );
        drop(on_master);

        let report = run_script(&script, &["sentinel-kill-master"]);
        assert_eq!(report.get("killed"), Some(&master), "{report:?}");
        assert_eq!(report.get("replica"), Some(&replica), "{report:?}");
        // The kill's moment on the test's clock, from the wall clock both share.
        let sigkill_at: f64 = report["sigkill_at"].replace(',', ".").parse().unwrap();
        let since_kill = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs_f64()
            - sigkill_at;
        let killed = Instant::now() - Duration::from_secs_f64(since_kill.max(0.0));
        let promotion = tokio::spawn(RECOVERY.until_promoted(replica.clone(), killed));

        // Acquires of locks nobody holds, each a fresh name: errors until the provider reaches
        // the promoted replica, never "not acquired".
        let mut attempt = 0;
        let (free, mut errors) = RECOVERY
            .until_answered("an acquire of a free lock", killed, || {
                attempt += 1;
                let free = LockConfiguration::new(
                    format!("free-{attempt}"),
                    Duration::from_secs(60),
                    Duration::ZERO,
                )
                .unwrap();
                let a = &a;
                async move {
                    match a.try_lock(&free).await? {
                        Acquisition::Acquired(handle) => Ok(handle),
                        other => panic!("free-{attempt} is free, yet try_lock answered {other:?}"),
                    }
                }
            })
            .await;
        let answered_after = killed.elapsed();
        let polling_errors = errors.len();
        let promoted_after = promotion.await.unwrap();
        assert!(free.unlock().await.unwrap(), "released on the new master");
        // The sentinel that led the failover promoted the replica; the one asked first may
        // learn of it only from the next hello messages (every 2 s), so it is asked until it
        // names the replica (seen once: the provider was on the new master while the first
        // sentinel still named the old one).
        let now_master = loop {
            let now_master = current_master(&url).await.unwrap();
            if now_master == replica || killed.elapsed() > RECOVERY_LIMIT {
                break now_master;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        assert_eq!(
            now_master, replica,
            "the sentinels name the promoted replica within {RECOVERY_LIMIT:?} of the kill"
        );

        // The lock the replica had is still held: another node is refused, naming the holder.
        let (refused, more) = RECOVERY
            .until_answered("another node's try_lock", killed, || b.try_lock(&config))
            .await;
        errors.extend(more);
        match refused {
            Acquisition::NotAcquired(holder) => {
                let by = holder.and_then(|holder| holder.locked_by);
                assert!(
                    by.as_deref().is_some_and(|by| by.starts_with(HOLDER_A)),
                    "{name} refused to node B, held by {by:?}"
                );
            }
            Acquisition::Acquired(_) => panic!(
                "{name}: the replica {replica} had the lock before its master {master} died, \
                 yet another node acquired it after the promotion"
            ),
        }
        // And its holder releases it there.
        let (released, more) = RECOVERY
            .until_answered("the holder's unlock", killed, || held.unlock())
            .await;
        errors.extend(more);
        assert!(
            released,
            "{name} released by its holder on the new master ({errors:#?})"
        );
        let mut on_new_master = connection(&replica).await.unwrap();
        let exists: bool = on_new_master.exists(&key).await.unwrap();
        assert!(!exists, "{key} deleted from {replica}");
        let _: () = on_new_master.del(&marker).await.unwrap();

        // Node A polled every 100 ms until the new master answered; node B, idle meanwhile,
        // meets its connection to the dead master on its first operation.
        eprintln!(
            "redis sentinel failover: SIGKILL to the master {master}; replica {replica} promoted \
             after {:.1} s, provider answered again after {:.1} s; errors meanwhile: {} of node \
             A's acquires (every 100 ms), {} of node B's operations after ({})",
            promoted_after.as_secs_f64(),
            answered_after.as_secs_f64(),
            polling_errors,
            errors.len() - polling_errors,
            summary(&errors),
        );

        let restoring = Instant::now();
        let restored = run_script(&script, &["sentinel-restore"]);
        eprintln!(
            "redis sentinel failover: {master} back as a replica of {replica}, setup whole \
             again {:.1} s after the restart ({restored:?})",
            restoring.elapsed().as_secs_f64()
        );
    };
    tokio::time::timeout(Duration::from_secs(120), test)
        .await
        .expect("the SIGKILL failover test finishes within 120 s");
}

/// The `host:port` of the first replica a master's `INFO REPLICATION` lists.
fn replica_of(info: &HashMap<String, String>) -> Option<String> {
    // slave0:ip=127.0.0.1,port=6391,state=online,offset=...,lag=0
    let fields: HashMap<&str, &str> = info
        .get("slave0")?
        .split(',')
        .filter_map(|pair| pair.split_once('='))
        .collect();
    Some(format!("{}:{}", fields.get("ip")?, fields.get("port")?))
}

/// The first and last of `errors`, for a one-line report.
fn summary(errors: &[String]) -> String {
    match errors {
        [] => "none".to_owned(),
        [only] => only.clone(),
        [first, .., last] => format!("first {first}; last {last}"),
    }
}
