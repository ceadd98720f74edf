//! Where the kit finds each backend: a URL from `SHEDLOCK_TEST_<BACKEND>_URL` first, else a
//! container started by testcontainers (cargo feature `testcontainers`, needs a Docker
//! engine), else an error naming both ways. A backend is never silently skipped.
//!
//! A container started here lives until the test process exits. Checks share a backend
//! safely because each uses its own lock-name prefix ([`crate::NameSpace`]).

use std::fmt;

/// No way to reach a backend was configured, or the container could not start.
#[derive(Debug)]
pub struct LaunchError {
    /// The backend asked for (`"postgres"`).
    pub backend: &'static str,
    /// What went wrong and how to fix it.
    pub message: String,
}

impl fmt::Display for LaunchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} backend: {}", self.backend, self.message)
    }
}

impl std::error::Error for LaunchError {}

/// A backend the kit can find or start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// PostgreSQL; the URL is `postgres://user:password@host:port/database`.
    Postgres,
    /// MySQL or MariaDB; the URL is `mysql://user:password@host:port/database`.
    Mysql,
    /// SQLite; the URL is `sqlite://path?mode=rwc`. Needs no server: without the variable a
    /// fresh file in the temp folder is used.
    Sqlite,
    /// Redis; the URL is `redis://host:port`.
    Redis,
    /// MongoDB; the URL is `mongodb://host:port`.
    Mongo,
    /// ZooKeeper; the value is a connect string `host:port`.
    Zookeeper,
    /// etcd; the URL is `http://host:port`.
    Etcd,
}

impl Backend {
    /// Every backend the kit can find or start: each runs as a server, or in a file.
    pub const ALL: [Backend; 7] = [
        Backend::Postgres,
        Backend::Mysql,
        Backend::Sqlite,
        Backend::Redis,
        Backend::Mongo,
        Backend::Zookeeper,
        Backend::Etcd,
    ];

    /// The lower-case name used in messages.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Postgres => "postgres",
            Backend::Mysql => "mysql",
            Backend::Sqlite => "sqlite",
            Backend::Redis => "redis",
            Backend::Mongo => "mongo",
            Backend::Zookeeper => "zookeeper",
            Backend::Etcd => "etcd",
        }
    }

    /// The environment variable that gives this backend's URL: `SHEDLOCK_TEST_<BACKEND>_URL`.
    pub fn env_var(self) -> &'static str {
        match self {
            Backend::Postgres => "SHEDLOCK_TEST_POSTGRES_URL",
            Backend::Mysql => "SHEDLOCK_TEST_MYSQL_URL",
            Backend::Sqlite => "SHEDLOCK_TEST_SQLITE_URL",
            Backend::Redis => "SHEDLOCK_TEST_REDIS_URL",
            Backend::Mongo => "SHEDLOCK_TEST_MONGO_URL",
            Backend::Zookeeper => "SHEDLOCK_TEST_ZOOKEEPER_URL",
            Backend::Etcd => "SHEDLOCK_TEST_ETCD_URL",
        }
    }

    /// The backend's URL: from [`env_var`](Self::env_var) if set and not empty, else from a
    /// container (feature `testcontainers`), else an error naming both.
    pub async fn url(self) -> Result<String, LaunchError> {
        if let Ok(url) = std::env::var(self.env_var())
            && !url.trim().is_empty()
        {
            return Ok(url.trim().to_owned());
        }
        let url = if self == Backend::Sqlite {
            let file = std::env::temp_dir().join(format!(
                "shedlock-conformance-{}.db",
                uuid::Uuid::new_v4().simple()
            ));
            format!("sqlite://{}?mode=rwc", file.display())
        } else {
            container::start(self).await?
        };
        CHOSEN.lock().unwrap().push((self.env_var(), url.clone()));
        Ok(url)
    }
}

/// The URLs this process chose for backends whose variable was not set (a fresh SQLite file,
/// a container): the fault suite's node processes get them in their environment, so they
/// reach the same backend rather than choosing their own.
static CHOSEN: std::sync::Mutex<Vec<(&'static str, String)>> = std::sync::Mutex::new(Vec::new());

/// The variables and URLs of [`CHOSEN`].
pub(crate) fn chosen_urls() -> Vec<(&'static str, String)> {
    CHOSEN.lock().unwrap().clone()
}

/// PostgreSQL: `SHEDLOCK_TEST_POSTGRES_URL`, else a `postgres` container.
pub async fn postgres_url() -> Result<String, LaunchError> {
    Backend::Postgres.url().await
}

/// MySQL/MariaDB: `SHEDLOCK_TEST_MYSQL_URL`, else a `mariadb` container (root, no password,
/// database `test`).
pub async fn mysql_url() -> Result<String, LaunchError> {
    Backend::Mysql.url().await
}

/// SQLite: `SHEDLOCK_TEST_SQLITE_URL`, else a fresh database file in the temp folder.
pub async fn sqlite_url() -> Result<String, LaunchError> {
    Backend::Sqlite.url().await
}

/// Redis: `SHEDLOCK_TEST_REDIS_URL`, else a `redis` container.
pub async fn redis_url() -> Result<String, LaunchError> {
    Backend::Redis.url().await
}

/// MongoDB: `SHEDLOCK_TEST_MONGO_URL`, else a `mongo` container.
pub async fn mongo_url() -> Result<String, LaunchError> {
    Backend::Mongo.url().await
}

/// ZooKeeper: `SHEDLOCK_TEST_ZOOKEEPER_URL` (a `host:port` connect string), else a
/// `zookeeper` container.
pub async fn zookeeper_url() -> Result<String, LaunchError> {
    Backend::Zookeeper.url().await
}

/// etcd: `SHEDLOCK_TEST_ETCD_URL`, else a `quay.io/coreos/etcd` container.
pub async fn etcd_url() -> Result<String, LaunchError> {
    Backend::Etcd.url().await
}

#[cfg(not(feature = "testcontainers"))]
mod container {
    use super::{Backend, LaunchError};

    pub(super) async fn start(backend: Backend) -> Result<String, LaunchError> {
        Err(LaunchError {
            backend: backend.name(),
            message: format!(
                "no backend configured: set {} to its URL, or build shedlock-conformance with the `testcontainers` feature on a machine with a Docker engine",
                backend.env_var()
            ),
        })
    }
}

#[cfg(feature = "testcontainers")]
mod container {
    use std::sync::Mutex;

    use testcontainers_modules::testcontainers::core::{IntoContainerPort, WaitFor};
    use testcontainers_modules::testcontainers::runners::AsyncRunner;
    use testcontainers_modules::testcontainers::{ContainerAsync, GenericImage, Image, ImageExt};
    use testcontainers_modules::{mariadb, mongo, postgres, redis, zookeeper};

    use super::{Backend, LaunchError};

    /// Containers live as long as the test process: dropping one would stop it mid-run.
    static KEEP_ALIVE: Mutex<Vec<Box<dyn Send>>> = Mutex::new(Vec::new());

    fn failed(backend: Backend, error: impl std::fmt::Display) -> LaunchError {
        LaunchError {
            backend: backend.name(),
            message: format!(
                "{} is not set and starting a container failed ({error}); set {} to a running backend's URL, or start a Docker engine",
                backend.env_var(),
                backend.env_var()
            ),
        }
    }

    async fn launch<I: Image + 'static>(
        backend: Backend,
        image: impl Into<testcontainers_modules::testcontainers::ContainerRequest<I>>,
        port: u16,
        url: impl FnOnce(&str, u16) -> String,
    ) -> Result<String, LaunchError> {
        let container: ContainerAsync<I> = image
            .into()
            .start()
            .await
            .map_err(|error| failed(backend, error))?;
        let host = container
            .get_host()
            .await
            .map_err(|error| failed(backend, error))?;
        let mapped = container
            .get_host_port_ipv4(port.tcp())
            .await
            .map_err(|error| failed(backend, error))?;
        KEEP_ALIVE.lock().unwrap().push(Box::new(container));
        Ok(url(&host.to_string(), mapped))
    }

    pub(super) async fn start(backend: Backend) -> Result<String, LaunchError> {
        match backend {
            Backend::Postgres => {
                launch(
                    backend,
                    postgres::Postgres::default(),
                    5432,
                    |host, port| format!("postgres://postgres:postgres@{host}:{port}/postgres"),
                )
                .await
            }
            Backend::Mysql => {
                launch(backend, mariadb::Mariadb::default(), 3306, |host, port| {
                    format!("mysql://root@{host}:{port}/test")
                })
                .await
            }
            Backend::Redis => {
                launch(backend, redis::Redis::default(), 6379, |host, port| {
                    format!("redis://{host}:{port}")
                })
                .await
            }
            Backend::Mongo => {
                launch(backend, mongo::Mongo::default(), 27017, |host, port| {
                    format!("mongodb://{host}:{port}")
                })
                .await
            }
            Backend::Zookeeper => {
                launch(
                    backend,
                    zookeeper::Zookeeper::default(),
                    2181,
                    |host, port| format!("{host}:{port}"),
                )
                .await
            }
            Backend::Etcd => {
                let image = GenericImage::new("quay.io/coreos/etcd", "v3.5.17")
                    .with_exposed_port(2379.tcp())
                    .with_wait_for(WaitFor::message_on_stderr("ready to serve client requests"))
                    .with_cmd([
                        "etcd",
                        "--listen-client-urls=http://0.0.0.0:2379",
                        "--advertise-client-urls=http://0.0.0.0:2379",
                    ]);
                launch(backend, image, 2379, |host, port| {
                    format!("http://{host}:{port}")
                })
                .await
            }
            Backend::Sqlite => Err(failed(backend, "SQLite needs no container")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_backend_has_its_own_variable() {
        let mut vars: Vec<_> = Backend::ALL.iter().map(|b| b.env_var()).collect();
        vars.sort();
        vars.dedup();
        assert_eq!(vars.len(), Backend::ALL.len());
        for backend in Backend::ALL {
            assert_eq!(
                backend.env_var(),
                format!("SHEDLOCK_TEST_{}_URL", backend.name().to_uppercase())
            );
        }
    }

    #[cfg(not(feature = "testcontainers"))]
    #[tokio::test]
    async fn a_missing_backend_names_the_variable_and_the_feature() {
        // No test sets this variable: the backend is reachable neither way.
        let error = Backend::Etcd.url().await;
        if std::env::var(Backend::Etcd.env_var()).is_ok() {
            return;
        }
        let message = error.unwrap_err().to_string();
        assert!(message.contains("SHEDLOCK_TEST_ETCD_URL"), "{message}");
        assert!(message.contains("`testcontainers` feature"), "{message}");
    }
}
