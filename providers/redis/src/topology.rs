//! The URL forms of Redis Cluster and Redis Sentinel, which the `redis` crate has none of, so
//! this crate defines them:
//!
//! - `redis+cluster://[user[:password]@]host[:port][,host[:port]...][/]`: seed nodes of a
//!   cluster (port 6379 unless given); the client learns the rest of the cluster from them.
//!   Database 0 only (a cluster has no other), so the path is empty, `/` or `/0`.
//! - `redis+sentinel://[user[:password]@]host[:port][,host[:port]...]/<master name>[/<db>]`:
//!   sentinels (port 26379 unless given) and the name of the master they monitor. The user and
//!   password are the master's; sentinels that want their own are given
//!   `?sentinel_username=...&sentinel_password=...`.
//!
//! `rediss+cluster://` and `rediss+sentinel://` (and all four under Valkey's names) are the same
//! over TLS. The host list is split here (a URL has one host, which a URL parser insists on);
//! each host, and the rest of the URL with its user info, path and query, is read by the `url`
//! crate, the parser the `redis` crate reads its own URLs with.
//!
//! A broken rule is reported as text naming the rule and, for a host, its position in the list,
//! never the text itself: when a password holds an unescaped `/`, `?` or `#`, the URL's host
//! list starts inside the password.

use url::Url;

/// The port of a cluster seed node given without one: Redis' own.
pub(crate) const CLUSTER_DEFAULT_PORT: u16 = 6379;

/// The port of a sentinel given without one: Sentinel's own.
pub(crate) const SENTINEL_DEFAULT_PORT: u16 = 26379;

/// What a URL's scheme connects to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Topology {
    /// One server (or a proxy in front of many): what the `redis` crate's own URLs name.
    Server,
    /// Seed nodes of a Redis Cluster.
    Cluster,
    /// Sentinels, and the name of the master they monitor.
    Sentinel,
}

impl Topology {
    /// The topology as the start of an error message: "invalid {what} URL".
    pub(crate) fn what(self) -> &'static str {
        match self {
            Self::Server => "Redis",
            Self::Cluster => "Redis Cluster",
            Self::Sentinel => "Redis Sentinel",
        }
    }
}

/// A user name and password from a URL, percent-decoded. Deliberately not `Debug`: it holds a
/// password.
#[derive(Clone, Default)]
pub(crate) struct Credentials {
    pub(crate) username: Option<String>,
    pub(crate) password: Option<String>,
}

/// One host of a URL's host list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Node {
    /// A host name, or an IP address without brackets.
    pub(crate) host: String,
    pub(crate) port: u16,
}

/// A `redis+cluster://` URL, read.
pub(crate) struct ClusterUrl {
    pub(crate) seeds: Vec<Node>,
    pub(crate) credentials: Credentials,
}

/// A `redis+sentinel://` URL, read.
pub(crate) struct SentinelUrl {
    pub(crate) sentinels: Vec<Node>,
    pub(crate) master_name: String,
    pub(crate) db: i64,
    /// For the master (and the `ROLE` check of a candidate master).
    pub(crate) master_credentials: Credentials,
    /// For the sentinels, from `sentinel_username` and `sentinel_password`.
    pub(crate) sentinel_credentials: Credentials,
}

/// Reads a `redis+cluster://` (or `rediss+cluster://`, `valkey...`) URL. The error is the rule
/// the URL broke.
pub(crate) fn parse_cluster_url(url: &str) -> Result<ClusterUrl, String> {
    let parts = split(url, CLUSTER_DEFAULT_PORT, "host:6379,host:6379")?;
    if !matches!(parts.rest.path(), "" | "/" | "/0") {
        return Err(
            "a Redis Cluster has database 0 only: leave the path out (or write /0)".to_owned(),
        );
    }
    if let Some((key, _)) = parts.rest.query_pairs().next() {
        return Err(format!(
            "unknown query parameter {key:?}: a Redis Cluster URL takes none"
        ));
    }
    Ok(ClusterUrl {
        seeds: parts.nodes,
        credentials: parts.credentials,
    })
}

/// Reads a `redis+sentinel://` (or `rediss+sentinel://`, `valkey...`) URL. The error is the
/// rule the URL broke.
pub(crate) fn parse_sentinel_url(url: &str) -> Result<SentinelUrl, String> {
    const FORM: &str = "redis+sentinel://host:26379,host:26379/<master name>[/<db>]";
    let parts = split(url, SENTINEL_DEFAULT_PORT, "host:26379,host:26379")?;
    let mut segments = parts
        .rest
        .path()
        .strip_prefix('/')
        .unwrap_or_default()
        .split('/');
    let master_name = decode(segments.next().unwrap_or_default())
        .map_err(|()| "the master name is not UTF-8 once percent-decoded".to_owned())?;
    if master_name.is_empty() {
        return Err(format!(
            "it names no master: give the name the sentinels monitor as the path, {FORM}"
        ));
    }
    let db = match segments.next() {
        None | Some("") => 0,
        Some(db) => db
            .parse::<i64>()
            .ok()
            .filter(|db| *db >= 0)
            .ok_or_else(|| format!("the database {db:?} is not a number from 0 up: {FORM}"))?,
    };
    if segments.any(|segment| !segment.is_empty()) {
        return Err(format!(
            "the path has more than a master name and a database: {FORM}"
        ));
    }
    let mut sentinel_credentials = Credentials::default();
    for (key, value) in parts.rest.query_pairs() {
        match &*key {
            "sentinel_username" => sentinel_credentials.username = Some(value.into_owned()),
            "sentinel_password" => sentinel_credentials.password = Some(value.into_owned()),
            _ => {
                return Err(format!(
                    "unknown query parameter {key:?}: a Redis Sentinel URL takes \
                     sentinel_username and sentinel_password only"
                ));
            }
        }
    }
    Ok(SentinelUrl {
        sentinels: parts.nodes,
        master_name,
        db,
        master_credentials: parts.credentials,
        sentinel_credentials,
    })
}

/// A URL taken apart: its hosts, its credentials, and the rest (path, query) as a URL of one
/// stand-in host.
struct Parts {
    nodes: Vec<Node>,
    credentials: Credentials,
    rest: Url,
}

fn split(url: &str, default_port: u16, example: &str) -> Result<Parts, String> {
    let (scheme, after_scheme) = url
        .split_once("://")
        .ok_or_else(|| "it is not a URL (no scheme:// in front)".to_owned())?;
    let authority_end = after_scheme
        .find(['/', '?', '#'])
        .unwrap_or(after_scheme.len());
    let (authority, tail) = after_scheme.split_at(authority_end);
    let (user_info, hosts) = match authority.rsplit_once('@') {
        Some((user_info, hosts)) => (Some(user_info), hosts),
        None => (None, authority),
    };
    if hosts.is_empty() {
        return Err(format!(
            "it names no host: list at least one, {scheme}://{example}"
        ));
    }
    let count = hosts.split(',').count();
    let nodes = hosts
        .split(',')
        .enumerate()
        .map(|(index, entry)| node(entry, index + 1, count, default_port))
        .collect::<Result<Vec<_>, _>>()?;
    let user_info = user_info.map(|user_info| format!("{user_info}@"));
    let rest = Url::parse(&format!(
        "{scheme}://{}seed{tail}",
        user_info.unwrap_or_default()
    ))
    .map_err(|error| {
        format!(
            "its user name, password, path or query is not valid URL text ({error}); \
             percent-encode reserved characters such as '/', '?', '#' or '@' in a password"
        )
    })?;
    if rest.fragment().is_some() {
        return Err("it has a fragment (#...), which these URL forms do not take".to_owned());
    }
    let username = match rest.username() {
        "" => None,
        username => Some(
            decode(username)
                .map_err(|()| "the user name is not UTF-8 once percent-decoded".to_owned())?,
        ),
    };
    let password = rest
        .password()
        .map(decode)
        .transpose()
        .map_err(|()| "the password is not UTF-8 once percent-decoded".to_owned())?;
    Ok(Parts {
        nodes,
        credentials: Credentials { username, password },
        rest,
    })
}

/// Host `position` (of `count`) of a host list, `host[:port]`.
fn node(entry: &str, position: usize, count: usize, default_port: u16) -> Result<Node, String> {
    let which = format!("host {position} of {count} in the host list");
    if entry.is_empty() {
        return Err(format!(
            "{which} is empty: separate hosts with single commas, host:port,host:port"
        ));
    }
    let parsed = Url::parse(&format!("redis://{entry}")).map_err(|error| match error {
        url::ParseError::InvalidPort => {
            format!("{which} has an invalid port: a port is a number from 1 to 65535")
        }
        other => format!("{which} is not a host name or IP address ({other})"),
    })?;
    let host = match parsed.host() {
        Some(url::Host::Domain(name)) if !name.is_empty() => name.to_owned(),
        Some(url::Host::Ipv4(address)) => address.to_string(),
        Some(url::Host::Ipv6(address)) => address.to_string(),
        _ => return Err(format!("{which} has no host name before its port")),
    };
    let port = match parsed.port() {
        Some(0) => {
            return Err(format!(
                "{which} has port 0: a port is a number from 1 to 65535"
            ));
        }
        Some(port) => port,
        None => default_port,
    };
    Ok(Node { host, port })
}

/// Percent-decodes `text`; `Err` when the bytes are not UTF-8.
fn decode(text: &str) -> Result<String, ()> {
    percent_encoding::percent_decode_str(text)
        .decode_utf8()
        .map(|decoded| decoded.into_owned())
        .map_err(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(host: &str, port: u16) -> Node {
        Node {
            host: host.to_owned(),
            port,
        }
    }

    #[test]
    fn a_cluster_url_lists_its_seeds_with_default_ports_and_decoded_credentials() {
        let url = parse_cluster_url(
            "redis+cluster://app:p%40ss%2Fw0rd@10.0.0.1:7000,redis-b,[::1]:7002/",
        )
        .unwrap();
        assert_eq!(
            url.seeds,
            [
                node("10.0.0.1", 7000),
                node("redis-b", 6379),
                node("::1", 7002)
            ]
        );
        assert_eq!(url.credentials.username.as_deref(), Some("app"));
        assert_eq!(url.credentials.password.as_deref(), Some("p@ss/w0rd"));
        let url = parse_cluster_url("rediss+cluster://:secret@h:1/0").unwrap();
        assert_eq!(url.credentials.username, None);
        assert_eq!(url.credentials.password.as_deref(), Some("secret"));
    }

    #[test]
    fn a_sentinel_url_names_its_sentinels_master_and_database() {
        let url = parse_sentinel_url(
            "redis+sentinel://:pw@s1,s2:26380/my%20master/3?sentinel_username=watch&sentinel_password=s%26p",
        )
        .unwrap();
        assert_eq!(url.sentinels, [node("s1", 26379), node("s2", 26380)]);
        assert_eq!(url.master_name, "my master");
        assert_eq!(url.db, 3);
        assert_eq!(url.master_credentials.password.as_deref(), Some("pw"));
        assert_eq!(url.sentinel_credentials.username.as_deref(), Some("watch"));
        assert_eq!(url.sentinel_credentials.password.as_deref(), Some("s&p"));
        let url = parse_sentinel_url("redis+sentinel://s1/shedlock/").unwrap();
        assert_eq!(url.master_name, "shedlock");
        assert_eq!(url.db, 0);
        assert!(url.sentinel_credentials.password.is_none());
    }

    #[test]
    fn each_broken_rule_is_named() {
        for (url, rule) in [
            ("redis+cluster://", "it names no host"),
            ("redis+cluster://user:pw@/", "it names no host"),
            (
                "redis+cluster://a:1,,b:2",
                "host 2 of 3 in the host list is empty",
            ),
            (
                "redis+cluster://a:1,",
                "host 2 of 2 in the host list is empty",
            ),
            (
                "redis+cluster://a:99999",
                "host 1 of 1 in the host list has an invalid port",
            ),
            (
                "redis+cluster://a:1,b:x",
                "host 2 of 2 in the host list has an invalid port",
            ),
            ("redis+cluster://a:0", "has port 0"),
            ("redis+cluster://:7000", "host 1 of 1 in the host list"),
            (
                "redis+cluster://a b:7000",
                "is not a host name or IP address",
            ),
            ("redis+cluster://a:1/2", "database 0 only"),
            (
                "redis+cluster://a:1?protocol=3",
                "unknown query parameter \"protocol\"",
            ),
            ("redis+cluster://a:1#insecure", "fragment"),
            ("redis+sentinel://a:1", "it names no master"),
            ("redis+sentinel://a:1/", "it names no master"),
            (
                "redis+sentinel://a:1/m/x",
                "the database \"x\" is not a number",
            ),
            ("redis+sentinel://a:1/m/-1", "is not a number from 0 up"),
            (
                "redis+sentinel://a:1/m/0/extra",
                "more than a master name and a database",
            ),
            (
                "redis+sentinel://a:1/m?password=x",
                "unknown query parameter \"password\"",
            ),
        ] {
            let error = if url.starts_with("redis+cluster") {
                parse_cluster_url(url).err()
            } else {
                parse_sentinel_url(url).err()
            };
            let error = error.unwrap_or_else(|| panic!("{url} was accepted"));
            assert!(error.contains(rule), "{url}: {error}");
        }
    }

    #[test]
    fn a_password_with_an_unescaped_slash_is_never_quoted() {
        // The host list then starts inside the password: the rule names positions only.
        for url in [
            "redis+cluster://user:S3c/r3t@h:7000",
            "redis+cluster://user:S3c?r3t@h:7000",
            "redis+sentinel://user:S3c#r3t@h:7000/m",
        ] {
            let error = if url.starts_with("redis+cluster") {
                parse_cluster_url(url).err()
            } else {
                parse_sentinel_url(url).err()
            };
            let error = error.unwrap_or_else(|| panic!("{url} was accepted"));
            assert!(!error.contains("S3c") && !error.contains("r3t"), "{error}");
        }
    }
}
