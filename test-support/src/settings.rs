//! Every server (and file) the workspace's tests reach, named once as a setting: the environment variable
//! that points at it, what it must be, and an example, the address `ci/test.sh` gives it. A test
//! whose variable is unset fails saying all three; it never skips.

/// One test server or file, found through an environment variable.
#[derive(Clone, Copy, Debug)]
pub struct Setting {
    /// The environment variable, `SHEDLOCK_TEST_…`.
    pub var: &'static str,
    /// What it must point at, for the message of a test run without it.
    pub what: &'static str,
    /// An example value: what `ci/test.sh` sets.
    pub example: &'static str,
}

impl Setting {
    /// The variable's value, trimmed; unset or empty, the message that names the variable,
    /// what it must point at and an example, for a harness to report as its setup error.
    pub fn lookup(self) -> Result<String, String> {
        let Setting { var, what, example } = self;
        match std::env::var(var) {
            Ok(value) if !value.trim().is_empty() => Ok(value.trim().to_owned()),
            _ => Err(format!(
                "{var} is not set: these tests need {what}, e.g. {var}={example} \
                 (ci/start-backends.sh starts every server, ci/test.sh sets every variable)"
            )),
        }
    }

    /// The variable's value, trimmed; unset or empty, the test fails saying what
    /// [`lookup`](Self::lookup) says.
    pub fn value(self) -> String {
        self.lookup().unwrap_or_else(|message| panic!("{message}"))
    }

    /// The contents of the file the variable names.
    pub fn file_contents(self) -> Vec<u8> {
        let path = self.value();
        std::fs::read(&path).unwrap_or_else(|e| panic!("read {} {path}: {e}", self.what))
    }
}

/// The CA that signed every TLS test server's certificate.
pub const TLS_CA: Setting = Setting {
    var: "SHEDLOCK_TEST_TLS_CA_FILE",
    what: "the CA that signed the TLS test servers' certificates",
    example: "/var/tmp/shedlock-ci/tls/ca.pem",
};

/// ChromeDriver, which drives the headless Chromium the HTTP view's page is tested in.
pub const CHROMEDRIVER: Setting = Setting {
    var: "SHEDLOCK_TEST_CHROMEDRIVER",
    what: "ChromeDriver's executable (Debian's chromium-driver package)",
    example: "/usr/bin/chromedriver",
};

/// The Chromium that ChromeDriver starts, headless.
pub const CHROMIUM: Setting = Setting {
    var: "SHEDLOCK_TEST_CHROMIUM",
    what: "Chromium's executable (Debian's chromium package)",
    example: "/usr/bin/chromium",
};

/// A PostgreSQL server.
pub const POSTGRES: Setting = Setting {
    var: "SHEDLOCK_TEST_POSTGRES_URL",
    what: "a PostgreSQL server",
    example: "postgres://postgres@127.0.0.1:5432/test",
};

/// A PostgreSQL server that accepts TLS connections only.
pub const POSTGRES_TLS: Setting = Setting {
    var: "SHEDLOCK_TEST_POSTGRES_TLS_URL",
    what: "a PostgreSQL server that accepts TLS connections only",
    example: "postgres://postgres@localhost:5433/test",
};

/// A MySQL or MariaDB server.
pub const MYSQL: Setting = Setting {
    var: "SHEDLOCK_TEST_MYSQL_URL",
    what: "a MySQL or MariaDB server",
    example: "mysql://root@127.0.0.1:3306/test",
};

/// A MySQL or MariaDB server that accepts TLS connections only.
pub const MYSQL_TLS: Setting = Setting {
    var: "SHEDLOCK_TEST_MYSQL_TLS_URL",
    what: "a MySQL or MariaDB server that accepts TLS connections only",
    example: "mysql://root@localhost:3307/test",
};

/// A Redis server without TLS.
pub const REDIS: Setting = Setting {
    var: "SHEDLOCK_TEST_REDIS_URL",
    what: "a Redis server without TLS",
    example: "redis://127.0.0.1:6379",
};

/// A Redis 6.2 server: the last release before `SET ... NX ... GET`.
pub const REDIS_6: Setting = Setting {
    var: "SHEDLOCK_TEST_REDIS_6_URL",
    what: "a Redis 6.2 server (before Redis 7.0) without TLS",
    example: "redis://127.0.0.1:6399",
};

/// A Redis server that listens for TLS only.
pub const REDIS_TLS: Setting = Setting {
    var: "SHEDLOCK_TEST_REDIS_TLS_URL",
    what: "a Redis server that listens for TLS only",
    example: "rediss://localhost:6380",
};

/// An etcd server.
pub const ETCD: Setting = Setting {
    var: "SHEDLOCK_TEST_ETCD_URL",
    what: "an etcd server",
    example: "http://127.0.0.1:2379",
};

/// An etcd that serves clients over TLS only.
pub const ETCD_TLS: Setting = Setting {
    var: "SHEDLOCK_TEST_ETCD_TLS_URL",
    what: "an etcd that serves clients over TLS only",
    example: "https://localhost:2381",
};

/// A ZooKeeper server.
pub const ZOOKEEPER: Setting = Setting {
    var: "SHEDLOCK_TEST_ZOOKEEPER_URL",
    what: "a ZooKeeper server",
    example: "127.0.0.1:2181",
};

/// A ZooKeeper that serves clients over TLS only.
pub const ZOOKEEPER_TLS: Setting = Setting {
    var: "SHEDLOCK_TEST_ZOOKEEPER_TLS_URL",
    what: "a ZooKeeper that serves clients over TLS only",
    example: "zk+tls://localhost:2282",
};

/// A client certificate (PEM) the TLS ZooKeeper accepts.
pub const ZOOKEEPER_TLS_CLIENT_CERT: Setting = Setting {
    var: "SHEDLOCK_TEST_ZOOKEEPER_TLS_CLIENT_CERT",
    what: "a client certificate the TLS ZooKeeper accepts",
    example: "/var/tmp/shedlock-ci/zookeeper-tls/client.pem",
};

/// The key of [`ZOOKEEPER_TLS_CLIENT_CERT`].
pub const ZOOKEEPER_TLS_CLIENT_KEY: Setting = Setting {
    var: "SHEDLOCK_TEST_ZOOKEEPER_TLS_CLIENT_KEY",
    what: "the key of that client certificate",
    example: "/var/tmp/shedlock-ci/zookeeper-tls/client.key",
};

/// A MongoDB server.
pub const MONGO: Setting = Setting {
    var: "SHEDLOCK_TEST_MONGO_URL",
    what: "a MongoDB server",
    example: "mongodb://127.0.0.1:27017",
};

/// A MongoDB server that serves TLS only.
pub const MONGO_TLS: Setting = Setting {
    var: "SHEDLOCK_TEST_MONGO_TLS_URL",
    what: "a MongoDB server that serves TLS only",
    example: "mongodb://localhost:27018",
};

/// The primary of the PostgreSQL pair that `ci/start-clusters.sh` starts.
pub const POSTGRES_PRIMARY: Setting = Setting {
    var: "SHEDLOCK_TEST_POSTGRES_PRIMARY_URL",
    what: "the primary of a PostgreSQL primary-replica pair",
    example: "postgres://postgres@127.0.0.1:5440/test",
};

/// The replica of that pair.
pub const POSTGRES_REPLICA: Setting = Setting {
    var: "SHEDLOCK_TEST_POSTGRES_REPLICA_URL",
    what: "the streaming replica of that primary",
    example: "postgres://postgres@127.0.0.1:5441/test",
};

/// The script that fails PostgreSQL over, kills etcd and ZooKeeper members, and restores them.
pub const POSTGRES_FAILOVER: Setting = Setting {
    var: "SHEDLOCK_TEST_POSTGRES_FAILOVER",
    what: "the path of ci/failover.sh",
    example: "$PWD/ci/failover.sh",
};

/// The seed nodes of a Redis Cluster, as a `redis+cluster://` URL.
pub const REDIS_CLUSTER: Setting = Setting {
    var: "SHEDLOCK_TEST_REDIS_CLUSTER_URL",
    what: "a Redis Cluster",
    example: "redis+cluster://127.0.0.1:7000,127.0.0.1:7001,127.0.0.1:7002",
};

/// Sentinels and the master name they watch, as a `redis+sentinel://` URL.
pub const REDIS_SENTINEL: Setting = Setting {
    var: "SHEDLOCK_TEST_REDIS_SENTINEL_URL",
    what: "Redis Sentinels watching a master with a replica",
    example: "redis+sentinel://127.0.0.1:26390,127.0.0.1:26391,127.0.0.1:26392/shedlock",
};

/// The script that fails a Redis Cluster or Sentinel master over.
pub const REDIS_FAILOVER: Setting = Setting {
    var: "SHEDLOCK_TEST_REDIS_FAILOVER",
    what: "the path of ci/redis-failover.sh",
    example: "$PWD/ci/redis-failover.sh",
};

/// The members of a three-member etcd cluster.
pub const ETCD_CLUSTER: Setting = Setting {
    var: "SHEDLOCK_TEST_ETCD_CLUSTER_URL",
    what: "the members of a three-member etcd cluster",
    example: "http://127.0.0.1:2479,http://127.0.0.1:2579,http://127.0.0.1:2679",
};

/// The script that kills an etcd cluster's leader and restores it.
pub const ETCD_FAILOVER: Setting = Setting {
    var: "SHEDLOCK_TEST_ETCD_FAILOVER",
    what: "the path of ci/failover.sh",
    example: "$PWD/ci/failover.sh",
};

/// The servers of a three-server ZooKeeper ensemble.
pub const ZOOKEEPER_ENSEMBLE: Setting = Setting {
    var: "SHEDLOCK_TEST_ZOOKEEPER_ENSEMBLE_URL",
    what: "the servers of a three-server ZooKeeper ensemble",
    example: "127.0.0.1:2191,127.0.0.1:2192,127.0.0.1:2193",
};

/// The script that kills a ZooKeeper ensemble's follower or leader and restores it.
pub const ZOOKEEPER_FAILOVER: Setting = Setting {
    var: "SHEDLOCK_TEST_ZOOKEEPER_FAILOVER",
    what: "the path of ci/failover.sh",
    example: "$PWD/ci/failover.sh",
};
