//! [`RedisOptions`], store URLs, and opening the single-node or cluster connection.

use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::io::tcp::TcpSettings;
use redis::AsyncConnectionConfig;

use crate::error::{RedisStoreError, Result};
use crate::sentinel::SentinelTarget;

/// Connection settings of a [`crate::RedisStore`]. Build with [`RedisOptions::default`] and
/// the `with_*` methods.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct RedisOptions {
    /// How long one connection attempt may take. Defaults to 2 s.
    pub connection_timeout: Duration,
    /// How long a command (one script call) may wait for its reply before failing with
    /// [`idemgate_core::StoreError::Timeout`], so a server that accepts connections but
    /// stops answering fails the call instead of hanging it. Defaults to 2 s, the deadline
    /// the core's lifecycle puts on every store call.
    pub response_timeout: Duration,
    /// Single node: extra connection attempts after the first, when connecting and after
    /// the connection broke. Requests issued while the connection is being re-established
    /// wait for these attempts, so the default, 0, makes them fail fast with
    /// [`idemgate_core::StoreError::Unavailable`] (one attempt each) while the server is
    /// down; the next request tries again. Extra attempts are about 1 s apart.
    pub reconnect_retries: usize,
    /// Cluster: how many times a command is retried after a redirection, `TRYAGAIN`,
    /// `CLUSTERDOWN` or a lost node connection (20 to 500 ms apart, growing). Defaults to 3.
    pub cluster_retries: u32,
    /// Replicas that must acknowledge each fresh insert, take-over and outcome write (Redis
    /// `WAIT`), or 0 to wait for none. Defaults to 0. A write fewer replicas acknowledged in
    /// [`RedisOptions::wait_timeout`] fails with [`idemgate_core::StoreError::Unavailable`]
    /// (its outcome unknown: an insert is never run, an outcome write is retried), and is
    /// counted in `idempotency_store_unconfirmed_writes_total{backend="redis",op}`. Each
    /// waited write runs on a connection of its own (see [`crate::RedisStore`]). One server
    /// or `redis+sentinel://` only: on Redis Cluster a value above 0 is refused.
    pub wait_replicas: u32,
    /// How long a write waits for [`RedisOptions::wait_replicas`] acknowledgements before
    /// it counts as unconfirmed. Defaults to 500 ms, below the store deadline.
    pub wait_timeout: Duration,
}

impl Default for RedisOptions {
    fn default() -> Self {
        Self {
            connection_timeout: Duration::from_secs(2),
            response_timeout: Duration::from_secs(2),
            reconnect_retries: 0,
            cluster_retries: 3,
            wait_replicas: 0,
            wait_timeout: Duration::from_millis(500),
        }
    }
}

impl RedisOptions {
    /// Sets [`RedisOptions::connection_timeout`].
    pub fn with_connection_timeout(mut self, timeout: Duration) -> Self {
        self.connection_timeout = timeout;
        self
    }

    /// Sets [`RedisOptions::response_timeout`].
    pub fn with_response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = timeout;
        self
    }

    /// Sets [`RedisOptions::reconnect_retries`].
    pub fn with_reconnect_retries(mut self, retries: usize) -> Self {
        self.reconnect_retries = retries;
        self
    }

    /// Sets [`RedisOptions::cluster_retries`].
    pub fn with_cluster_retries(mut self, retries: u32) -> Self {
        self.cluster_retries = retries;
        self
    }

    /// Sets [`RedisOptions::wait_replicas`] and [`RedisOptions::wait_timeout`].
    pub fn with_wait(mut self, replicas: u32, timeout: Duration) -> Self {
        self.wait_replicas = replicas;
        self.wait_timeout = timeout;
        self
    }
}

/// What a store URL names.
#[derive(Clone, PartialEq, Eq, Debug)]
pub(crate) enum Target {
    /// One server (`redis://`, `rediss://`, `redis+unix://`, `unix://`).
    Single(String),
    /// Cluster seed nodes, one URL each.
    Cluster(Vec<String>),
    /// The primary the Sentinels name (`redis+sentinel://`).
    Sentinel(SentinelTarget),
}

const URL_FORMS: &str = "expected redis://[user:pass@]host[:port][/db], rediss://..., \
     redis+unix:///path, redis+cluster://[user:pass@]host:port,host:port,... \
     (rediss+cluster:// for TLS), or redis+sentinel://[user:pass@]host:port,host:port/MASTER";

pub(crate) fn invalid(reason: impl Into<String>) -> RedisStoreError {
    RedisStoreError::InvalidUrl {
        reason: reason.into(),
    }
}

/// Parses a store URL.
///
/// `redis+cluster://[user:pass@]h1:p1,h2:p2[/]` becomes one `redis://[user:pass@]h:p` URL
/// per node (`rediss+cluster://` gives `rediss://`).
pub(crate) fn parse_url(url: &str) -> Result<Target> {
    let url = url.trim();
    let Some((scheme, rest)) = url.split_once("://") else {
        return Err(invalid(URL_FORMS));
    };
    let node_scheme = match scheme.to_ascii_lowercase().as_str() {
        "redis" | "rediss" | "redis+unix" | "unix" | "valkey" | "valkeys" | "valkey+unix" => {
            return Ok(Target::Single(url.to_owned()))
        }
        "redis+cluster" => "redis",
        "rediss+cluster" => "rediss",
        "redis+sentinel" => return Ok(Target::Sentinel(SentinelTarget::parse(rest)?)),
        _ => return Err(invalid(format!("unknown scheme `{scheme}`; {URL_FORMS}"))),
    };
    let (userinfo, hosts) = match rest.rsplit_once('@') {
        Some((user, hosts)) => (Some(user), hosts),
        None => (None, rest),
    };
    let hosts = hosts.strip_suffix('/').unwrap_or(hosts);
    if hosts.contains(['/', '?', '#']) {
        return Err(invalid(
            "a cluster URL takes no database, path or query (a cluster has database 0 only)",
        ));
    }
    let nodes: Vec<String> = hosts
        .split(',')
        .map(|host| match (host.trim(), userinfo) {
            ("", _) => Err(invalid("empty host in the cluster node list")),
            (host, Some(user)) => Ok(format!("{node_scheme}://{user}@{host}")),
            (host, None) => Ok(format!("{node_scheme}://{host}")),
        })
        .collect::<Result<_>>()?;
    Ok(Target::Cluster(nodes))
}

/// A URL with `rediss`/`valkeys` TLS: makes sure rustls has a crypto provider.
fn prepare_tls(url: &str) {
    if url.starts_with("rediss") || url.starts_with("valkeys") {
        // Only installs ring when no process-wide provider was chosen yet; a provider the
        // application installed itself is kept.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

fn tcp_settings() -> TcpSettings {
    // Scripts are one small request each; Nagle's algorithm would only add latency.
    TcpSettings::default().set_nodelay(true)
}

/// The settings of a plain connection: the options' connection timeout and TCP settings,
/// and `response_timeout`.
pub(crate) fn async_config(
    opts: &RedisOptions,
    response_timeout: Duration,
) -> AsyncConnectionConfig {
    AsyncConnectionConfig::new()
        .set_connection_timeout(opts.connection_timeout)
        .set_response_timeout(response_timeout)
        .set_tcp_settings(tcp_settings())
}

/// The client of a single-node URL.
pub(crate) fn single_client(url: &str) -> Result<redis::Client> {
    prepare_tls(url);
    Ok(redis::Client::open(url)?)
}

/// Opens a reconnecting single-node connection.
pub(crate) async fn connect_single(
    client: &redis::Client,
    opts: &RedisOptions,
) -> Result<ConnectionManager> {
    let config = ConnectionManagerConfig::new()
        .set_connection_timeout(opts.connection_timeout)
        .set_response_timeout(opts.response_timeout)
        .set_number_of_retries(opts.reconnect_retries)
        // extra attempts (if any) about 1 s apart: backon's 1 s minimum, capped at 1 s
        .set_factor(2)
        .set_max_delay(1000)
        .set_tcp_settings(tcp_settings());
    Ok(ConnectionManager::new_with_config(client.clone(), config).await?)
}

/// Opens a cluster connection from seed node URLs.
pub(crate) async fn connect_cluster(
    nodes: &[String],
    opts: &RedisOptions,
) -> Result<ClusterConnection> {
    if nodes.is_empty() {
        return Err(invalid("a cluster needs at least one node URL"));
    }
    for node in nodes {
        prepare_tls(node);
    }
    let client = ClusterClientBuilder::new(nodes.to_vec())
        .connection_timeout(opts.connection_timeout)
        .response_timeout(opts.response_timeout)
        .retries(opts.cluster_retries)
        .min_retry_wait(20)
        .max_retry_wait(500)
        .tcp_settings(tcp_settings())
        .build()?;
    Ok(client.get_async_connection().await?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn single_node_urls_pass_through() {
        for url in [
            "redis://127.0.0.1:6379",
            "rediss://user:pw@cache.example:6380/2",
            "redis+unix:///run/redis.sock",
        ] {
            assert_eq!(parse_url(url).unwrap(), Target::Single(url.into()));
        }
    }

    #[test]
    fn cluster_urls_become_node_urls() {
        assert_eq!(
            parse_url("redis+cluster://127.0.0.1:7101,127.0.0.1:7102/").unwrap(),
            Target::Cluster(vec![
                "redis://127.0.0.1:7101".into(),
                "redis://127.0.0.1:7102".into()
            ])
        );
        assert_eq!(
            parse_url("rediss+cluster://app:p%40ss@a:1, b:2").unwrap(),
            Target::Cluster(vec![
                "rediss://app:p%40ss@a:1".into(),
                "rediss://app:p%40ss@b:2".into()
            ])
        );
    }

    #[test]
    fn bad_urls_are_refused_without_echoing_them() {
        for url in [
            "http://x",
            "127.0.0.1:6379",
            "redis+cluster://a:1,,b:2",
            "redis+cluster://a:1/0",
        ] {
            let err = parse_url(url).unwrap_err();
            assert!(matches!(err, RedisStoreError::InvalidUrl { .. }), "{url}");
        }
        let err = parse_url("memcached://secret@host")
            .unwrap_err()
            .to_string();
        assert!(!err.contains("secret"), "{err}");
    }
}
