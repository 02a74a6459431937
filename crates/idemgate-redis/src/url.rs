//! Opening a [`RedisStore`] from a URL ([`RedisStore::connect_with`],
//! [`RedisStore::from_url`]) or cluster node URLs, and [`RedisStore::check_url`].

use std::sync::Arc;

use redis::IntoConnectionInfo;

use crate::conn::Conn;
use crate::error::{RedisStoreError, Result};
use crate::options::{
    connect_cluster, connect_single, invalid, parse_url, single_client, RedisOptions, Target,
};
use crate::sentinel::SentinelConn;
use crate::store::RedisStore;
use crate::wait::{Nodes, Waiter};

impl RedisStore {
    /// Connects with [`RedisOptions::default`]; see [`RedisStore::connect_with`].
    ///
    /// # Errors
    /// As [`RedisStore::connect_with`].
    pub async fn connect(url: &str) -> Result<Self> {
        Self::connect_with(url, &RedisOptions::default()).await
    }

    /// Connects to the server or cluster `url` names and checks that it answers. Keys get
    /// the prefix `idemgate:` unless changed with [`RedisStore::with_key_prefix`].
    ///
    /// URL forms:
    /// - `redis://[user[:password]@]host[:port][/db]` (default port 6379, database 0);
    /// - `rediss://...`: the same over TLS (rustls, with the system's root certificates);
    /// - `redis+unix:///path/to/redis.sock[?db=N]`;
    /// - `redis+cluster://[user[:password]@]host:port,host:port,...`: Redis Cluster, from
    ///   any of its nodes (the others are discovered); `rediss+cluster://` over TLS.
    /// - `redis+sentinel://[user[:password]@]host[:port],host[:port],.../MASTER[?db=N]`:
    ///   the primary the Sentinels (default port 26379) name `MASTER`, followed across
    ///   failovers; the login and database are the data nodes' (the Sentinels are asked
    ///   without one). A node whose `ROLE` is not `master` is never written to.
    ///
    /// # Errors
    /// [`crate::RedisStoreError::InvalidUrl`] for a URL of another form;
    /// [`crate::RedisStoreError::InvalidOptions`] for [`RedisOptions::wait_replicas`] above
    /// 0 on a cluster; [`crate::RedisStoreError::Redis`] if the server cannot be reached or
    /// refuses the login, or no Sentinel names a reachable primary.
    pub async fn connect_with(url: &str, options: &RedisOptions) -> Result<Self> {
        let (conn, nodes) = match parse_url(url)? {
            Target::Single(url) => {
                let client = single_client(&url)?;
                let conn = connect_single(&client, options).await?;
                (Conn::Single(conn), Nodes::Single(Arc::new(client)))
            }
            Target::Cluster(nodes) => return Self::connect_cluster(&nodes, options).await,
            Target::Sentinel(target) => {
                let sentinel = SentinelConn::connect(&target, options).await?;
                (Conn::Sentinel(sentinel.clone()), Nodes::Sentinel(sentinel))
            }
        };
        let store = Self::from_conn(conn).with_events(nodes.clone());
        Ok(match options.wait_replicas {
            0 => store,
            _ => store.with_waiter(Waiter::new(nodes, options)),
        })
    }

    /// Connects to Redis Cluster from the URLs of some of its nodes (`redis://host:port` or
    /// `rediss://host:port`, with credentials if needed); the others are discovered.
    ///
    /// # Errors
    /// [`crate::RedisStoreError::InvalidUrl`] if `nodes` is empty;
    /// [`crate::RedisStoreError::InvalidOptions`] if [`RedisOptions::wait_replicas`] is
    /// above 0 (each record's `WAIT` would have to run on its slot's primary, after the
    /// write, on the same connection: not supported); [`crate::RedisStoreError::Redis`] if
    /// no node can be reached or the cluster cannot report its slots.
    pub async fn connect_cluster<S: AsRef<str>>(
        nodes: &[S],
        options: &RedisOptions,
    ) -> Result<Self> {
        if options.wait_replicas > 0 {
            return Err(RedisStoreError::InvalidOptions {
                reason: "wait_replicas needs one server or a redis+sentinel:// URL; on Redis \
                         Cluster set it to 0 (WAIT is not sent to each record's slot primary)"
                    .into(),
            });
        }
        let nodes: Vec<String> = nodes.iter().map(|n| n.as_ref().to_owned()).collect();
        Ok(Self::from_conn(Conn::Cluster(
            connect_cluster(&nodes, options).await?,
        )))
    }

    /// Checks a store URL without connecting: one of the forms of
    /// [`RedisStore::connect_with`], a cluster URL's node list, a Sentinel URL's hosts,
    /// master name and login.
    ///
    /// ```
    /// use idemgate_redis::{RedisStore, RedisStoreError};
    ///
    /// RedisStore::check_url("redis+cluster://10.0.0.1:7000,10.0.0.2:7000")?;
    /// let err = RedisStore::check_url("memcached://:secret@cache").unwrap_err();
    /// assert!(matches!(err, RedisStoreError::InvalidUrl { .. }));
    /// assert!(!err.to_string().contains("secret"));
    /// # Ok::<(), RedisStoreError>(())
    /// ```
    ///
    /// # Errors
    /// [`crate::RedisStoreError::InvalidUrl`], naming what is wrong but never repeating the
    /// URL (it may hold a password).
    pub fn check_url(url: &str) -> Result<()> {
        let nodes = match parse_url(url)? {
            Target::Single(url) => vec![url],
            Target::Cluster(nodes) => nodes,
            // the data nodes' login and database, checked on a stand-in host
            Target::Sentinel(target) => [target.sentinels, vec![target.node]].concat(),
        };
        for node in nodes {
            // The redis crate's own reading: port, database number, TLS and unix forms. Its
            // message names the part (never the password).
            node.as_str().into_connection_info().map_err(|e| {
                let detail = e.detail().unwrap_or_default();
                let detail = if detail.contains('@') { "" } else { detail };
                invalid(format!("the Redis client refuses it: {e} {detail}").trim_end())
            })?;
        }
        Ok(())
    }

    /// Connects to the server or cluster `url` names, with `options`: the same as
    /// [`RedisStore::connect_with`], under the name every store crate gives it.
    ///
    /// # Errors
    /// As [`RedisStore::connect_with`].
    pub async fn from_url(url: &str, options: &RedisOptions) -> Result<Self> {
        Self::connect_with(url, options).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RedisStoreError;

    #[test]
    fn urls_are_checked_without_connecting() {
        for url in [
            "redis://127.0.0.1:6379",
            "rediss://user:pw@cache.example:6380/2",
            "redis+unix:///run/redis.sock",
            "redis+cluster://a:7000,b:7001",
            "redis+sentinel://s1:26379,s2:26379/idemgate",
            "redis+sentinel://app:pw@s1,s2/idemgate?db=2",
        ] {
            RedisStore::check_url(url).unwrap();
        }
        for (url, says) in [
            ("http://:secret@x", "unknown scheme `http`"),
            ("127.0.0.1:6379", "expected redis://"),
            ("redis+cluster://:secret@a:1,,b:2", "empty host"),
            ("redis+cluster://:secret@a:1/0", "no database"),
            ("redis://:secret@h:6379/abc", "database"),
            ("redis://:secret@h:port", "Redis URL"),
            ("redis+cluster://:secret@a:1,b:x", "Redis URL"),
            ("redis+sentinel://:secret@s1:26379", "names the primary"),
            ("redis+sentinel://:secret@s1:x/m", "Redis URL"),
            ("redis+sentinel://:secret@s1/m?db=-1", "db must be"),
        ] {
            let err = RedisStore::check_url(url).unwrap_err();
            assert!(matches!(err, RedisStoreError::InvalidUrl { .. }), "{url}");
            let text = err.to_string();
            assert!(
                text.contains(says) && !text.contains("secret"),
                "{url}: {text}"
            );
        }
    }
}
