//! Which backend a lock provider URL names: the one table of URL schemes that the facade's
//! `connect`, the CLI, the benchmarks and the conformance kit all read, so a scheme added here
//! is known everywhere at once.

use std::fmt;

/// A storage backend this project has a provider for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Backend {
    /// `shedlock-memory`: one process, no server.
    Memory,
    /// `shedlock-sqlite`: one file, no server.
    Sqlite,
    /// `shedlock-postgres`.
    Postgres,
    /// `shedlock-mysql`, for MySQL and MariaDB.
    Mysql,
    /// `shedlock-redis`, for Redis and Valkey: one server, a cluster or a sentinel set.
    Redis,
    /// `shedlock-etcd`.
    Etcd,
    /// `shedlock-mongo`.
    Mongo,
    /// `shedlock-zookeeper`.
    Zookeeper,
}

impl Backend {
    /// Every backend, in the order messages list them.
    pub const ALL: [Backend; 8] = [
        Backend::Memory,
        Backend::Sqlite,
        Backend::Postgres,
        Backend::Mysql,
        Backend::Redis,
        Backend::Etcd,
        Backend::Mongo,
        Backend::Zookeeper,
    ];

    /// The backend's short name, which is also the cargo feature that builds its provider
    /// into the facade and the CLI (`postgres` for `postgresql://` too).
    pub fn name(self) -> &'static str {
        match self {
            Backend::Memory => "memory",
            Backend::Sqlite => "sqlite",
            Backend::Postgres => "postgres",
            Backend::Mysql => "mysql",
            Backend::Redis => "redis",
            Backend::Etcd => "etcd",
            Backend::Mongo => "mongo",
            Backend::Zookeeper => "zookeeper",
        }
    }

    /// Whether the backend is a server reached over the network (every one but memory and
    /// SQLite), and so has connections, timeouts and outages.
    pub fn is_server(self) -> bool {
        !matches!(self, Backend::Memory | Backend::Sqlite)
    }

    /// The schemes that name this backend.
    pub fn schemes(self) -> impl Iterator<Item = &'static Scheme> {
        SCHEMES.iter().filter(move |scheme| scheme.backend == self)
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One URL scheme: its text, the backend it names and whether the scheme itself asks for TLS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Scheme {
    /// The scheme as written before `://`, lower case (`rediss+cluster`).
    pub name: &'static str,
    /// The backend it names.
    pub backend: Backend,
    /// Whether the scheme itself turns TLS on (`rediss`, `etcds`, `zk+tls`, `mongodb+srv`).
    /// PostgreSQL and MySQL ask for TLS in the URL's parameters instead, so theirs say `false`.
    pub tls: bool,
}

const fn scheme(name: &'static str, backend: Backend, tls: bool) -> Scheme {
    Scheme { name, backend, tls }
}

/// Every scheme a lock provider URL may start with.
pub const SCHEMES: &[Scheme] = &[
    scheme("memory", Backend::Memory, false),
    scheme("sqlite", Backend::Sqlite, false),
    scheme("postgres", Backend::Postgres, false),
    scheme("postgresql", Backend::Postgres, false),
    scheme("mysql", Backend::Mysql, false),
    scheme("mariadb", Backend::Mysql, false),
    scheme("redis", Backend::Redis, false),
    scheme("rediss", Backend::Redis, true),
    scheme("redis+unix", Backend::Redis, false),
    scheme("unix", Backend::Redis, false),
    scheme("redis+cluster", Backend::Redis, false),
    scheme("rediss+cluster", Backend::Redis, true),
    scheme("redis+sentinel", Backend::Redis, false),
    scheme("rediss+sentinel", Backend::Redis, true),
    scheme("valkey", Backend::Redis, false),
    scheme("valkeys", Backend::Redis, true),
    scheme("valkey+unix", Backend::Redis, false),
    scheme("valkey+cluster", Backend::Redis, false),
    scheme("valkeys+cluster", Backend::Redis, true),
    scheme("valkey+sentinel", Backend::Redis, false),
    scheme("valkeys+sentinel", Backend::Redis, true),
    scheme("etcd", Backend::Etcd, false),
    scheme("etcds", Backend::Etcd, true),
    scheme("mongodb", Backend::Mongo, false),
    scheme("mongodb+srv", Backend::Mongo, true),
    scheme("zk", Backend::Zookeeper, false),
    scheme("zookeeper", Backend::Zookeeper, false),
    scheme("zk+tls", Backend::Zookeeper, true),
    scheme("zookeeper+tls", Backend::Zookeeper, true),
];

impl Scheme {
    /// The scheme text in front of `url`, as written: the text before `://`, or `sqlite` for
    /// SQLite's `sqlite:path` form. `None` when the text is not a URL (no scheme, or one with
    /// characters a scheme cannot have); the rest of the URL is never looked at, as it may hold
    /// a password.
    pub fn text_of(url: &str) -> Option<&str> {
        let text = match url.split_once("://") {
            Some((text, _)) => text,
            None => url
                .get(..7)
                .filter(|start| start.eq_ignore_ascii_case("sqlite:"))
                .map(|start| &start[..6])?,
        };
        let mut chars = text.chars();
        let is_scheme = chars.next().is_some_and(|c| c.is_ascii_alphabetic())
            && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
        is_scheme.then_some(text)
    }

    /// The scheme called `name`, in any case; `None` for a scheme no backend has.
    pub fn named(name: &str) -> Option<&'static Scheme> {
        SCHEMES
            .iter()
            .find(|scheme| scheme.name.eq_ignore_ascii_case(name))
    }

    /// The scheme `url` starts with; `None` when it is not a URL or its scheme is unknown.
    pub fn of_url(url: &str) -> Option<&'static Scheme> {
        Scheme::named(Scheme::text_of(url)?)
    }
}

/// Every scheme, comma-separated, for messages that list what is accepted.
#[derive(Debug, Clone, Copy, Default)]
pub struct SchemeList;

impl fmt::Display for SchemeList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (index, scheme) in SCHEMES.iter().enumerate() {
            if index > 0 {
                f.write_str(", ")?;
            }
            f.write_str(scheme.name)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_backend_has_a_scheme_named_after_it_or_its_product() {
        for backend in Backend::ALL {
            let names: Vec<_> = backend.schemes().map(|scheme| scheme.name).collect();
            assert!(!names.is_empty(), "{backend} has no scheme");
            let own = match backend {
                Backend::Mongo => "mongodb",
                Backend::Zookeeper => "zk",
                other => other.name(),
            };
            assert!(names.contains(&own), "{backend}: {names:?}");
        }
    }

    #[test]
    fn scheme_names_are_unique_and_lower_case() {
        for (index, scheme) in SCHEMES.iter().enumerate() {
            assert_eq!(scheme.name, scheme.name.to_ascii_lowercase());
            assert!(
                SCHEMES[index + 1..]
                    .iter()
                    .all(|other| other.name != scheme.name),
                "{} twice",
                scheme.name
            );
        }
    }

    #[test]
    fn a_url_reads_as_its_scheme_in_any_case_and_never_past_it() {
        assert_eq!(
            Scheme::text_of("Postgres://u:secret@h/db"),
            Some("Postgres")
        );
        assert_eq!(
            Scheme::of_url("POSTGRESQL://u:secret@h/db").map(|s| s.backend),
            Some(Backend::Postgres)
        );
        assert_eq!(Scheme::text_of("sqlite:locks.db"), Some("sqlite"));
        assert_eq!(Scheme::text_of("SQLite:locks.db"), Some("SQLite"));
        assert_eq!(Scheme::text_of("host:5432"), None);
        assert_eq!(Scheme::text_of("1redis://h"), None);
        assert_eq!(Scheme::text_of("re dis://h"), None);
        assert_eq!(Scheme::text_of(""), None);
        assert_eq!(Scheme::of_url("ftp://h"), None);
        let tls = Scheme::of_url("rediss+cluster://h:1,h:2").unwrap();
        assert_eq!((tls.backend, tls.tls), (Backend::Redis, true));
        assert!(!Scheme::of_url("redis://h").unwrap().tls);
        assert!(Scheme::of_url("zk+tls://h/app").unwrap().tls);
        assert!(Scheme::of_url("etcds://h").unwrap().tls);
    }

    #[test]
    fn the_list_names_every_scheme_once_in_table_order() {
        let list = SchemeList.to_string();
        assert!(list.starts_with("memory, sqlite, postgres, postgresql, mysql"));
        assert_eq!(list.split(", ").count(), SCHEMES.len());
        assert!(Backend::Postgres.is_server() && !Backend::Sqlite.is_server());
        assert!(!Backend::Memory.is_server());
        assert_eq!(Backend::Mongo.to_string(), "mongo");
        assert_eq!(format!("{}", Backend::Zookeeper), "zookeeper");
    }
}
