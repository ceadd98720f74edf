//! The Redis master that owns a lock's key dies (SIGKILL) while the lock is held, and the
//! cluster promotes its replica: what survives, and whether a provider connected by a
//! `redis+cluster://` URL finds the new master by itself. Against the Redis Cluster of
//! `ci/start-redis-topologies.sh` (`SHEDLOCK_TEST_REDIS_CLUSTER_URL`), killed and restored by
//! `ci/redis-failover.sh` (`SHEDLOCK_TEST_REDIS_FAILOVER`, its path; `ci/test.sh` sets both).
//! Alone in its test target, since it takes a master down under everything else that uses the
//! cluster; it leaves the cluster whole (six nodes, each master with a replica), though with
//! other ports as masters.
//!
//! What Redis guarantees, and what the test holds it to: a write the replica had received
//! before its master died is there after the promotion, so a lock whose key the replica had is
//! still held (the holder extends it, another node is refused); the provider answers ordinary
//! outcomes again within a bound once the replica is promoted, failing every operation in
//! between (never answering "not held" from a node that is gone), each within its timeout.
//! Replication is asynchronous, so a lock taken just before the kill may be lost, and its
//! fencing counter with it: another node then takes the lock with a token not above the lost
//! one's. The test counts how often (the figures RELIABILITY.md reports) without asserting a
//! rate, which depends on timing. A SIGKILL loses little: the master writes a command to its
//! replicas' connections in the same event-loop turn as the reply, and the kernel still
//! delivers what a killed process had written, so by the time the holder has its answer the
//! replica nearly always has the write on its way. A host crash, a network partition or a
//! lagging replica loses more; this test measures the process kill only.

#[path = "shared/failover.rs"]
mod failover;
#[path = "shared/topologies.rs"]
mod topologies;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use failover::{Recovery, RestoreOnPanic, connection, fields, replication, run_script};
use redis::AsyncCommands;
use shedlock_core::{Acquisition, LockConfiguration, LockHandle, LockProvider};
use shedlock_redis::RedisLockProvider;
use shedlock_test_support::settings;
use tokio::time::Instant;
use topologies::{cluster_admin, hosts};

/// Kills right after the acquire returned; each costs a promotion (about 4 s with the
/// cluster-node-timeout of 2 s) and a rejoin (under a second).
const UNREPLICATED_TRIALS: usize = 4;
const OPERATION_TIMEOUT: Duration = Duration::from_secs(2);
/// What an operation may take beyond its timeout: the scheduling of a loaded machine.
const TIMEOUT_SLACK: Duration = Duration::from_secs(1);
/// From the kill until the replica is promoted and the provider answers again.
const RECOVERY_LIMIT: Duration = Duration::from_secs(30);
/// The bounds above, as the shared failover steps take them.
const RECOVERY: Recovery = Recovery {
    operation_timeout: OPERATION_TIMEOUT,
    slack: TIMEOUT_SLACK,
    limit: RECOVERY_LIMIT,
};
const LOCK_AT_MOST_FOR: Duration = Duration::from_secs(120);
const HOLDER_A: &str = "cluster-failover-a";
const HOLDER_B: &str = "cluster-failover-b";

/// `ci/redis-failover.sh cluster-kill-master PORT --on-stdin`, armed: it has found and checked
/// the master's process and kills it at the word, a pipe write away.
struct ArmedKill {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    armed: HashMap<String, String>,
}

impl ArmedKill {
    fn arm(script: &str, master: &str) -> Self {
        let port = master.rsplit(':').next().unwrap();
        let mut child = Command::new(script)
            .args(["cluster-kill-master", port, "--on-stdin"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|error| panic!("could not run {script}: {error}"));
        let stdin = child.stdin.take();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut lines = String::new();
        tokio::task::block_in_place(|| {
            while !lines.contains("armed=yes") {
                if stdout.read_line(&mut lines).unwrap() == 0 {
                    let status = child.wait().unwrap();
                    panic!("{script} cluster-kill-master {port} --on-stdin failed: {status}");
                }
            }
        });
        Self {
            child,
            stdin,
            stdout,
            armed: fields(&lines),
        }
    }

    /// Kills the master now; returns when the word was sent, once the process is gone, with
    /// the script's report (`sigkill_at=`: when the signal went, in epoch seconds).
    fn fire(&mut self) -> (Instant, HashMap<String, String>) {
        let mut stdin = self.stdin.take().expect("fired once");
        stdin.write_all(b"kill\n").unwrap();
        stdin.flush().unwrap();
        let sent = Instant::now();
        drop(stdin);
        let report = tokio::task::block_in_place(|| {
            let mut rest = String::new();
            while self.stdout.read_line(&mut rest).unwrap() != 0 {}
            let status = self.child.wait().unwrap();
            assert!(status.success(), "the kill failed: {status} ({rest})");
            fields(&rest)
        });
        assert!(report.contains_key("killed"), "{report:?}");
        (sent, report)
    }
}

impl Drop for ArmedKill {
    /// Unfired, the script sees its stdin close and leaves the master running.
    fn drop(&mut self) {
        self.stdin.take();
        let _ = self.child.wait();
    }
}

fn offset(info: &HashMap<String, String>, field: &str) -> u64 {
    info.get(field)
        .and_then(|value| value.parse().ok())
        .unwrap_or_else(|| panic!("INFO REPLICATION has no {field}: {info:?}"))
}

/// The master serving a key's slot and its replica, as `host:port`.
#[derive(Debug, Clone)]
struct Shard {
    master: String,
    replica: String,
}

/// Where `key` lives, from `CLUSTER KEYSLOT` and `CLUSTER NODES` of the first seed that
/// answers: the master (not flagged failing) whose slot ranges hold the key's slot, and the
/// replica that follows it.
async fn shard_of(url: &str, key: &str) -> Shard {
    let mut last_error = None;
    for seed in hosts(url) {
        let answer: redis::RedisResult<(u16, String)> = async {
            let mut connection = connection(&seed).await?;
            let slot = redis::cmd("CLUSTER")
                .arg("KEYSLOT")
                .arg(key)
                .query_async(&mut connection)
                .await?;
            let nodes = redis::cmd("CLUSTER")
                .arg("NODES")
                .query_async(&mut connection)
                .await?;
            Ok((slot, nodes))
        }
        .await;
        let (slot, nodes) = match answer {
            Ok(answer) => answer,
            Err(error) => {
                last_error = Some(error);
                continue;
            }
        };
        // <id> <ip:port@cport> <flags> <master id> <ping> <pong> <epoch> <link> <slot>...
        let lines: Vec<Vec<&str>> = nodes
            .lines()
            .map(|line| line.split_whitespace().collect())
            .filter(|fields: &Vec<&str>| fields.len() >= 8)
            .collect();
        let address = |fields: &[&str]| fields[1].split('@').next().unwrap().to_owned();
        let healthy = |fields: &[&str]| !fields[2].contains("fail");
        let master = lines
            .iter()
            .find(|fields| {
                fields[2].contains("master")
                    && healthy(fields)
                    && fields[8..].iter().any(|range| {
                        let (first, last) = range.split_once('-').unwrap_or((range, range));
                        match (first.parse::<u16>(), last.parse::<u16>()) {
                            (Ok(first), Ok(last)) => (first..=last).contains(&slot),
                            _ => false, // an importing or migrating slot, [slot-<-id]
                        }
                    })
            })
            .unwrap_or_else(|| panic!("no healthy master serves slot {slot}:\n{nodes}"));
        let replica = lines
            .iter()
            .find(|fields| fields[2].contains("slave") && fields[3] == master[0] && healthy(fields))
            .unwrap_or_else(|| panic!("the master of slot {slot} has no replica:\n{nodes}"));
        return Shard {
            master: address(master),
            replica: address(replica),
        };
    }
    panic!(
        "no seed of {url} answered CLUSTER NODES: {}",
        last_error.unwrap()
    );
}

/// Waits until the replica has processed everything its master had written by now (the lock
/// just taken with it), and holds the key.
async fn wait_until_replicated(shard: &Shard, key: &str, value_of_holder: &str) {
    let written = offset(
        &replication(&shard.master).await.unwrap(),
        "master_repl_offset",
    );
    let started = Instant::now();
    loop {
        let info = replication(&shard.replica).await.unwrap();
        if offset(&info, "slave_repl_offset") >= written {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{} did not reach offset {written} of {} within 10 s: {info:?}",
            shard.replica,
            shard.master
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut replica = connection(&shard.replica).await.unwrap();
    let () = redis::cmd("READONLY")
        .query_async(&mut replica)
        .await
        .unwrap();
    let value: Option<String> = replica.get(key).await.unwrap();
    assert!(
        value
            .as_deref()
            .is_some_and(|value| value.contains(value_of_holder)),
        "{key} on the replica {}: {value:?}",
        shard.replica
    );
}

struct Nodes {
    url: String,
    script: String,
    /// The holder, then another node of the same service: two providers on one env.
    a: RedisLockProvider,
    b: RedisLockProvider,
}

struct Trial {
    master: String,
    replicated: bool,
    lost: bool,
    /// Lost, and taken again with a token not above the lost acquisition's.
    token_not_above: bool,
    kill_after_acquire: Duration,
    promoted_after: Duration,
    answered_after: Duration,
    errors: usize,
    restored_in: Duration,
}

async fn trial(nodes: &Nodes, name: &str, replicated: bool) -> Trial {
    let config = LockConfiguration::new(name, LOCK_AT_MOST_FOR, Duration::ZERO).unwrap();
    let key = nodes.a.lock_key(name).unwrap();
    let shard = shard_of(&nodes.url, &key).await;
    let mut kill = ArmedKill::arm(&nodes.script, &shard.master);
    assert_eq!(
        kill.armed.get("replica"),
        Some(&shard.replica),
        "CLUSTER NODES and the master's INFO REPLICATION name the same replica"
    );

    let held: Box<dyn LockHandle> = match nodes.a.try_lock(&config).await.unwrap() {
        Acquisition::Acquired(handle) => handle,
        other => panic!("{name} is free, but try_lock answered {other:?}"),
    };
    let acquired = SystemTime::now();
    let token = held.fencing_token().expect("fencing is on");
    if replicated {
        wait_until_replicated(&shard, &key, HOLDER_A).await;
    }
    let (killed, report) = kill.fire();
    drop(kill);
    // From the acquire's return to the signal, on the wall clock both share.
    let sigkill_at: f64 = report["sigkill_at"].replace(',', ".").parse().unwrap();
    let kill_after_acquire = Duration::from_secs_f64(
        (sigkill_at - acquired.duration_since(UNIX_EPOCH).unwrap().as_secs_f64()).max(0.0),
    );
    let promotion = tokio::spawn(RECOVERY.until_promoted(shard.replica.clone(), killed));

    // The holder's extend answers again once the new master serves the slot: true if the lock
    // survived, false if the promoted replica never had it.
    let handle: &dyn LockHandle = held.as_ref();
    let (still_held, mut errors) = RECOVERY
        .until_answered("the holder's extend", killed, move || {
            handle.extend(LOCK_AT_MOST_FOR)
        })
        .await;
    let answered_after = killed.elapsed();
    let promoted_after = promotion.await.unwrap();

    // Another node: refused by the holder if the lock survived, acquired if it was lost. An
    // acquire of its own that failed without an answer may have landed; the provider removes
    // it in the background, so a refusal naming this node is retried.
    let taken_over = loop {
        let (outcome, more) = RECOVERY
            .until_answered("another node's try_lock", killed, || {
                nodes.b.try_lock(&config)
            })
            .await;
        errors.extend(more);
        match outcome {
            Acquisition::Acquired(handle) => break Some(handle),
            Acquisition::NotAcquired(Some(holder))
                if holder
                    .locked_by
                    .as_deref()
                    .is_some_and(|by| by.starts_with(HOLDER_B)) =>
            {
                assert!(
                    killed.elapsed() < RECOVERY_LIMIT,
                    "{name} still held by an unanswered acquire of node B"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Acquisition::NotAcquired(holder) => {
                let by = holder.and_then(|holder| holder.locked_by);
                assert!(
                    by.as_deref().is_some_and(|by| by.starts_with(HOLDER_A)),
                    "{name} refused to node B, held by {by:?}"
                );
                break None;
            }
        }
    };
    assert_eq!(
        taken_over.is_none(),
        still_held,
        "{name}: the holder's extend answered {still_held}, yet another node's try_lock {}",
        if taken_over.is_some() {
            "acquired it"
        } else {
            "was refused"
        }
    );
    if replicated {
        assert!(
            still_held,
            "{name}: the replica {} had received the lock before its master {} died, yet the \
             lock was lost in the promotion",
            shard.replica, shard.master
        );
    }
    let mut token_not_above = false;
    if let Some(second) = taken_over {
        let second_token = second.fencing_token().expect("fencing is on");
        token_not_above = second_token <= token;
        assert!(second.unlock().await.unwrap(), "released on the new master");
    } else {
        assert!(held.unlock().await.unwrap(), "released on the new master");
    }
    if !errors.is_empty() {
        eprintln!(
            "redis cluster failover: {name}: errors while {} was down: {errors:#?}",
            shard.master
        );
    }

    let restoring = Instant::now();
    run_script(&nodes.script, &["cluster-restore"]);
    let restored_in = restoring.elapsed();
    let mut admin = cluster_admin(&nodes.url).await.unwrap();
    let _: () = admin
        .del(&[key, nodes.a.fencing_key(name).unwrap()])
        .await
        .unwrap();

    Trial {
        master: shard.master,
        replicated,
        lost: !still_held,
        token_not_above,
        kill_after_acquire,
        promoted_after,
        answered_after,
        errors: errors.len(),
        restored_in,
    }
}

fn range(trials: &[Trial], of: impl Fn(&Trial) -> Duration) -> String {
    let seconds: Vec<f64> = trials.iter().map(|t| of(t).as_secs_f64()).collect();
    let min = seconds.iter().copied().fold(f64::INFINITY, f64::min);
    let max = seconds.iter().copied().fold(0.0, f64::max);
    format!("{min:.1}-{max:.1} s")
}

#[tokio::test(flavor = "multi_thread")]
async fn a_lock_whose_master_dies_survives_if_replicated_and_the_provider_follows_the_promotion() {
    let script = settings::REDIS_FAILOVER.value();
    let url = settings::REDIS_CLUSTER.value();
    let _restore = RestoreOnPanic {
        script: script.clone(),
        restore: "cluster-restore",
    };
    let test = async {
        let started = Instant::now();
        // Whole before the first kill (a previous run may have left it rejoining).
        run_script(&script, &["cluster-restore"]);
        let env = format!("cluster-failover-{}", uuid::Uuid::new_v4().simple());
        let settings = RedisLockProvider::builder()
            .env(env)
            .fencing(true)
            .operation_timeout(OPERATION_TIMEOUT);
        let nodes = Nodes {
            a: settings
                .clone()
                .holder(HOLDER_A)
                .connect(&url)
                .await
                .unwrap(),
            b: settings.holder(HOLDER_B).connect(&url).await.unwrap(),
            url: url.clone(),
            script: script.clone(),
        };

        let mut trials = vec![trial(&nodes, "replicated", true).await];
        for index in 0..UNREPLICATED_TRIALS {
            trials.push(trial(&nodes, &format!("unreplicated-{index}"), false).await);
        }
        for (index, trial) in trials.iter().enumerate() {
            eprintln!(
                "redis cluster failover: trial {index} ({}): SIGKILL to {} {} µs after the \
                 acquire returned; replica promoted after {:.1} s, provider answered after \
                 {:.1} s ({} errors before); lock {}{}; cluster whole again {:.1} s after the \
                 restart",
                if trial.replicated {
                    "replica had the lock"
                } else {
                    "killed at once"
                },
                trial.master,
                trial.kill_after_acquire.as_micros(),
                trial.promoted_after.as_secs_f64(),
                trial.answered_after.as_secs_f64(),
                trial.errors,
                if trial.lost { "lost" } else { "survived" },
                if trial.token_not_above {
                    ", retaken with a token not above the lost one's"
                } else {
                    ""
                },
                trial.restored_in.as_secs_f64()
            );
        }
        let unreplicated: Vec<&Trial> = trials.iter().filter(|t| !t.replicated).collect();
        let lost = unreplicated.iter().filter(|t| t.lost).count();
        let not_above = unreplicated.iter().filter(|t| t.token_not_above).count();
        eprintln!(
            "redis cluster failover: of {} locks taken just before their master died, {lost} \
             were lost (another node took them after the promotion), {not_above} with a \
             fencing token not above the lost one's; a lock the replica had received survived \
             (promotion {} after the SIGKILL, provider answering again after {}; {:.0} s in all)",
            unreplicated.len(),
            range(&trials, |t| t.promoted_after),
            range(&trials, |t| t.answered_after),
            started.elapsed().as_secs_f64()
        );
    };
    tokio::time::timeout(Duration::from_secs(150), test)
        .await
        .expect("the cluster failover test finishes within 150 s");
}
