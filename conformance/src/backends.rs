//! Where the kit finds each backend: a URL from `SHEDLOCK_TEST_<BACKEND>_URL` first, else a
//! container started by testcontainers (cargo feature `testcontainers`, needs a Docker
//! engine), else an error naming both ways. A backend is never silently skipped.
//!
//! A process starts at most one container per backend, published on 127.0.0.1 only, and the
//! kit's runners remove it when the run ends ([`stop_containers`]). Checks share a backend
//! safely because each uses its own lock-name prefix ([`crate::NameSpace`]). The fault suite
//! restarts (`docker stop` and `start`) and pauses (`docker pause`) such a container itself
//! when no restart or pause command is configured.

use std::fmt;

use crate::trace::locked;

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

    /// The backend in the project's scheme table, which knows its URL schemes.
    pub fn backend(self) -> shedlock_core::scheme::Backend {
        use shedlock_core::scheme::Backend as Scheme;
        match self {
            Backend::Postgres => Scheme::Postgres,
            Backend::Mysql => Scheme::Mysql,
            Backend::Sqlite => Scheme::Sqlite,
            Backend::Redis => Scheme::Redis,
            Backend::Mongo => Scheme::Mongo,
            Backend::Zookeeper => Scheme::Zookeeper,
            Backend::Etcd => Scheme::Etcd,
        }
    }

    /// The lower-case name used in messages, as the scheme table writes it.
    pub fn name(self) -> &'static str {
        self.backend().name()
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

    /// The environment variable that names the image the kit starts for this backend when
    /// [`env_var`](Self::env_var) is not set (feature `testcontainers`):
    /// `SHEDLOCK_TEST_<BACKEND>_IMAGE`, `name:tag`. Unset, the backend's official image is
    /// pulled. Another image must start its server the same way: listening on all of the
    /// container's interfaces, the official image's credentials, and the same ready line on the
    /// same stream (`conformance/README.md` lists them).
    pub fn image_var(self) -> &'static str {
        match self {
            Backend::Postgres => "SHEDLOCK_TEST_POSTGRES_IMAGE",
            Backend::Mysql => "SHEDLOCK_TEST_MYSQL_IMAGE",
            Backend::Sqlite => "SHEDLOCK_TEST_SQLITE_IMAGE",
            Backend::Redis => "SHEDLOCK_TEST_REDIS_IMAGE",
            Backend::Mongo => "SHEDLOCK_TEST_MONGO_IMAGE",
            Backend::Zookeeper => "SHEDLOCK_TEST_ZOOKEEPER_IMAGE",
            Backend::Etcd => "SHEDLOCK_TEST_ETCD_IMAGE",
        }
    }

    /// The backend's URL: from [`env_var`](Self::env_var) if set and not empty, else from a
    /// container (feature `testcontainers`), else an error naming both. A process starts at
    /// most one container per backend: later calls get the same URL.
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
            let _one_at_a_time = STARTING.lock().await;
            if let Some((_, url)) = chosen_urls()
                .into_iter()
                .find(|(variable, _)| *variable == self.env_var())
            {
                return Ok(url);
            }
            container::start(self).await?
        };
        locked(&CHOSEN).push((self.env_var(), url.clone()));
        Ok(url)
    }
}

/// Held while a container starts, so two calls for one backend start one container.
static STARTING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Stops and removes the containers this process started. The kit's runners call it when a run
/// ends; a container left running (the process was killed) carries the label
/// `shedlock.conformance`, by which `docker rm` finds it.
pub async fn stop_containers() {
    container::stop_all().await;
}

/// The URLs this process chose for backends whose variable was not set (a fresh SQLite file,
/// a container): the fault suite's node processes get them in their environment, so they
/// reach the same backend rather than choosing their own.
static CHOSEN: std::sync::Mutex<Vec<(&'static str, String)>> = std::sync::Mutex::new(Vec::new());

/// The variables and URLs of [`CHOSEN`].
pub(crate) fn chosen_urls() -> Vec<(&'static str, String)> {
    locked(&CHOSEN).clone()
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
pub(crate) mod container {
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

    pub(crate) async fn started(_backend: Backend) -> bool {
        false
    }

    pub(crate) async fn restart(_backend: Backend) -> Result<(), String> {
        Err("no container was started".to_owned())
    }

    pub(crate) async fn pause(
        _backend: Backend,
        _limit: std::time::Duration,
    ) -> Result<(), String> {
        Err("no container was started".to_owned())
    }

    pub(crate) async fn resume(_backend: Backend) -> Result<(), String> {
        Err("no container was started".to_owned())
    }

    pub(crate) async fn stop_all() {}
}

/// The containers the kit starts: [`Backend::url`] starts them, the fault suite restarts and
/// pauses them.
#[cfg(feature = "testcontainers")]
pub(crate) mod container {
    use std::collections::HashMap;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use testcontainers::bollard::models::PortBinding;
    use testcontainers::core::{IntoContainerPort, WaitFor};
    use testcontainers::runners::AsyncRunner;
    use testcontainers::{ContainerAsync, GenericImage, ImageExt};

    use super::{Backend, LaunchError};

    /// How long a container may take to become ready: images are pulled on first use.
    const STARTUP_LIMIT: Duration = Duration::from_secs(300);

    /// The stream a server logs its ready line on.
    #[derive(Clone, Copy)]
    enum Stream {
        Stdout,
        Stderr,
    }

    /// A line the server logs on a stream once it serves clients.
    type Line = (Stream, &'static str);

    /// How to run one backend in a container.
    struct Spec {
        /// The official image, `name:tag`, used unless [`Backend::image_var`] names another.
        image: &'static str,
        /// The port the server listens on inside the container.
        port: u16,
        /// The lines that say the container is ready, all of them, on first start. An official
        /// image that runs a temporary server to initialise its data logs some of them early;
        /// the set is chosen so that only the final server completes it, and the last is one
        /// the final server logs each time it starts: after a restart, one more of it says the
        /// server serves again.
        ready: &'static [Line],
        env: &'static [(&'static str, &'static str)],
        /// The command, when the image's own does not start a server the kit can use.
        cmd: &'static [&'static str],
        /// The URL of the server listening on 127.0.0.1 at this host port.
        url: fn(u16) -> String,
    }

    fn spec(backend: Backend) -> Option<Spec> {
        Some(match backend {
            Backend::Postgres => Spec {
                image: "postgres:16",
                port: 5432,
                // The official image's temporary server logs it on stdout; the final one on stderr.
                ready: &[(
                    Stream::Stderr,
                    "database system is ready to accept connections",
                )],
                env: &[("POSTGRES_HOST_AUTH_METHOD", "trust")],
                cmd: &[],
                url: |port| format!("postgres://postgres@127.0.0.1:{port}/postgres"),
            },
            Backend::Mysql => Spec {
                image: "mariadb:10.11",
                port: 3306,
                // The official image's temporary server logs "port: 0" (no network).
                ready: &[
                    (Stream::Stderr, "ready for connections"),
                    (Stream::Stderr, "port: 3306"),
                ],
                env: &[
                    ("MARIADB_DATABASE", "test"),
                    ("MARIADB_ALLOW_EMPTY_ROOT_PASSWORD", "1"),
                ],
                cmd: &[],
                url: |port| format!("mysql://root@127.0.0.1:{port}/test"),
            },
            Backend::Redis => Spec {
                image: "redis:7",
                port: 6379,
                ready: &[(Stream::Stdout, "Ready to accept connections")],
                env: &[],
                cmd: &[],
                url: |port| format!("redis://127.0.0.1:{port}"),
            },
            Backend::Mongo => Spec {
                image: "mongo:7",
                port: 27017,
                ready: &[(Stream::Stdout, "Waiting for connections")],
                env: &[],
                cmd: &[],
                // One server, whatever replica set it announces: its members' addresses are
                // the container's own, which the host must not use.
                url: |port| format!("mongodb://127.0.0.1:{port}/?directConnection=true"),
            },
            Backend::Zookeeper => Spec {
                image: "zookeeper:3.9",
                port: 2181,
                ready: &[(Stream::Stdout, "PrepRequestProcessor (sid:0) started")],
                env: &[],
                cmd: &[],
                url: |port| format!("127.0.0.1:{port}"),
            },
            Backend::Etcd => Spec {
                image: "quay.io/coreos/etcd:v3.5.17",
                port: 2379,
                ready: &[(Stream::Stderr, "ready to serve client requests")],
                env: &[],
                // The official image has no command of its own.
                cmd: &[
                    "etcd",
                    "--data-dir=/var/lib/etcd/data",
                    "--listen-client-urls=http://0.0.0.0:2379",
                    "--advertise-client-urls=http://127.0.0.1:2379",
                ],
                url: |port| format!("http://127.0.0.1:{port}"),
            },
            Backend::Sqlite => return None,
        })
    }

    /// A container this process started, with what a restart waits for.
    struct Started {
        container: ContainerAsync<GenericImage>,
        started: Line,
    }

    /// The containers this process started, by backend. They live until the run ends
    /// ([`stop_all`]); dropping one stops and removes it.
    static STARTED: tokio::sync::Mutex<Vec<(Backend, Arc<Started>)>> =
        tokio::sync::Mutex::const_new(Vec::new());

    fn failed(backend: Backend, image: &str, error: impl std::fmt::Display) -> LaunchError {
        LaunchError {
            backend: backend.name(),
            message: format!(
                "{} is not set and starting a container of {image} failed ({error}); set {} to a running backend's URL, or start a Docker engine (and set {} to an image this machine has, if it cannot pull {image})",
                backend.env_var(),
                backend.env_var(),
                backend.image_var(),
            ),
        }
    }

    /// `name:tag` split at the tag's colon (a registry's port is not a tag).
    pub(super) fn name_and_tag(image: &str) -> (&str, &str) {
        match image.rsplit_once(':') {
            Some((name, tag)) if !tag.contains('/') => (name, tag),
            _ => (image, "latest"),
        }
    }

    /// A port free on 127.0.0.1 now. The container's port is published on it rather than on
    /// one Docker picks, because Docker picks anew at every start and a restart must keep the
    /// URL the nodes already hold.
    fn free_port() -> std::io::Result<u16> {
        Ok(std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port())
    }

    pub(super) async fn start(backend: Backend) -> Result<String, LaunchError> {
        let Some(spec) = spec(backend) else {
            return Err(LaunchError {
                backend: backend.name(),
                message: "it needs no container".to_owned(),
            });
        };
        let image = match std::env::var(backend.image_var()) {
            Ok(image) if !image.trim().is_empty() => image.trim().to_owned(),
            _ => spec.image.to_owned(),
        };
        let (name, tag) = name_and_tag(&image);
        let host_port = free_port().map_err(|error| failed(backend, &image, error))?;
        let binding = format!("{}/tcp", spec.port);
        let mut request = GenericImage::new(name, tag)
            .with_exposed_port(spec.port.tcp())
            .with_label("shedlock.conformance", backend.name())
            .with_startup_timeout(STARTUP_LIMIT)
            .with_ready_conditions(spec.ready.iter().map(|line| wait_for(*line)).collect())
            // Published on 127.0.0.1 only, at the port chosen above.
            .with_host_config_modifier(move |host| {
                host.publish_all_ports = Some(false);
                host.port_bindings = Some(HashMap::from([(
                    binding.clone(),
                    Some(vec![PortBinding {
                        host_ip: Some("127.0.0.1".to_owned()),
                        host_port: Some(host_port.to_string()),
                    }]),
                )]));
            });
        for (key, value) in spec.env {
            request = request.with_env_var(*key, *value);
        }
        if !spec.cmd.is_empty() {
            request = request.with_cmd(spec.cmd.iter().copied());
        }
        let Some(&started) = spec.ready.last() else {
            return Err(failed(backend, &image, "no ready line is known for it"));
        };
        let container = request
            .start()
            .await
            .map_err(|error| failed(backend, &image, error))?;
        let published = container
            .get_host_port_ipv4(spec.port.tcp())
            .await
            .map_err(|error| failed(backend, &image, error))?;
        if published != host_port {
            return Err(failed(
                backend,
                &image,
                format!("its port was published on {published}, not on {host_port} as asked"),
            ));
        }
        STARTED
            .lock()
            .await
            .push((backend, Arc::new(Started { container, started })));
        Ok((spec.url)(host_port))
    }

    fn wait_for((stream, message): Line) -> WaitFor {
        match stream {
            Stream::Stdout => WaitFor::message_on_stdout(message),
            Stream::Stderr => WaitFor::message_on_stderr(message),
        }
    }

    async fn find(backend: Backend) -> Result<Arc<Started>, String> {
        STARTED
            .lock()
            .await
            .iter()
            .find(|(started, _)| *started == backend)
            .map(|(_, started)| started.clone())
            .ok_or_else(|| format!("no {} container was started", backend.name()))
    }

    pub(crate) async fn started(backend: Backend) -> bool {
        STARTED
            .lock()
            .await
            .iter()
            .any(|(started, _)| *started == backend)
    }

    /// How many times the server logged its start line so far.
    async fn starts(started: &Started) -> Result<usize, String> {
        let (stream, message) = started.started;
        let log = match stream {
            Stream::Stdout => started.container.stdout_to_vec().await,
            Stream::Stderr => started.container.stderr_to_vec().await,
        }
        .map_err(|error| format!("could not read the container's log: {error}"))?;
        Ok(String::from_utf8_lossy(&log).matches(message).count())
    }

    /// Stops the container (SIGTERM, then SIGKILL after 30 s) and starts it again with its
    /// data, returning once the server logged its start line once more.
    pub(crate) async fn restart(backend: Backend) -> Result<(), String> {
        let started = find(backend).await?;
        let before = starts(&started).await?;
        started
            .container
            .stop_with_timeout(Some(30))
            .await
            .map_err(|error| format!("docker stop failed: {error}"))?;
        started
            .container
            .start()
            .await
            .map_err(|error| format!("docker start failed: {error}"))?;
        let deadline = Instant::now() + STARTUP_LIMIT;
        while starts(&started).await? <= before {
            if Instant::now() > deadline {
                return Err(format!(
                    "the server did not log {:?} within {STARTUP_LIMIT:?} of its restart",
                    started.started.1
                ));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok(())
    }

    /// `docker pause`: every process of the container is frozen, nothing is closed. A task
    /// resumes it after `limit` whatever happens to the caller; if this process dies first, its
    /// containers go with it.
    pub(crate) async fn pause(backend: Backend, limit: Duration) -> Result<(), String> {
        let started = find(backend).await?;
        started
            .container
            .pause()
            .await
            .map_err(|error| format!("docker pause failed: {error}"))?;
        let started = Arc::downgrade(&started);
        tokio::spawn(async move {
            tokio::time::sleep(limit).await;
            if let Some(started) = started.upgrade() {
                let _ = started.container.unpause().await;
            }
        });
        Ok(())
    }

    /// `docker unpause`. Resuming a container that already runs (the watchdog was first) is not
    /// an error.
    pub(crate) async fn resume(backend: Backend) -> Result<(), String> {
        let started = find(backend).await?;
        match started.container.unpause().await {
            Ok(()) => Ok(()),
            Err(_) if started.container.is_running().await.unwrap_or(false) => Ok(()),
            Err(error) => Err(format!("docker unpause failed: {error}")),
        }
    }

    /// Stops and removes every container this process started.
    pub(crate) async fn stop_all() {
        let started: Vec<_> = std::mem::take(&mut *STARTED.lock().await);
        for (_, started) in started {
            if let Ok(started) = Arc::try_unwrap(started) {
                let _ = started.container.rm().await;
            }
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

    #[test]
    fn every_backend_has_its_own_image_variable() {
        for backend in Backend::ALL {
            assert_eq!(
                backend.image_var(),
                format!("SHEDLOCK_TEST_{}_IMAGE", backend.name().to_uppercase())
            );
        }
    }

    #[cfg(feature = "testcontainers")]
    #[test]
    fn an_image_splits_at_its_tag_not_at_a_registry_port() {
        use super::container::name_and_tag;
        assert_eq!(
            name_and_tag("quay.io/coreos/etcd:v3.5.17"),
            ("quay.io/coreos/etcd", "v3.5.17")
        );
        assert_eq!(
            name_and_tag("shedlock-ci/redis:bookworm"),
            ("shedlock-ci/redis", "bookworm")
        );
        assert_eq!(
            name_and_tag("registry.local:5000/redis"),
            ("registry.local:5000/redis", "latest")
        );
        assert_eq!(
            name_and_tag("registry.local:5000/redis:7"),
            ("registry.local:5000/redis", "7")
        );
        assert_eq!(name_and_tag("redis"), ("redis", "latest"));
    }

    /// Without an engine, the error names the variable to set, the image and its variable, and
    /// starts nothing. (A real container is started by every provider's conformance run in CI.)
    /// The environment is the child's: this test runs itself again with it.
    #[cfg(feature = "testcontainers")]
    #[tokio::test]
    async fn a_missing_engine_names_the_variables_and_the_image() {
        const CHILD: &str = "SHEDLOCK_KIT_TEST_NO_ENGINE_CHILD";
        if std::env::var_os(CHILD).is_none() {
            let output = std::process::Command::new(std::env::current_exe().unwrap())
                .args([
                    "--exact",
                    "backends::tests::a_missing_engine_names_the_variables_and_the_image",
                    "--nocapture",
                ])
                .env(CHILD, "1")
                .env("DOCKER_HOST", "unix:///nonexistent/docker.sock")
                .env(Backend::Etcd.image_var(), "example.invalid/etcd:none")
                .env_remove(Backend::Etcd.env_var())
                .output()
                .unwrap();
            let printed = String::from_utf8_lossy(&output.stdout);
            assert!(output.status.success(), "{printed}");
            assert!(printed.contains("1 passed"), "{printed}");
            return;
        }
        let message = Backend::Etcd.url().await.unwrap_err().to_string();
        assert!(message.starts_with("etcd backend: "), "{message}");
        assert!(message.contains("SHEDLOCK_TEST_ETCD_URL"), "{message}");
        assert!(message.contains("SHEDLOCK_TEST_ETCD_IMAGE"), "{message}");
        assert!(message.contains("example.invalid/etcd:none"), "{message}");
        assert!(chosen_urls().is_empty(), "{:?}", chosen_urls());
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
