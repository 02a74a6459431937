//! Redis store URLs: [`RedisStore::from_url`] and [`RedisStore::check_url`].

use crate::error::Result;
use redis::IntoConnectionInfo;

use crate::options::{invalid, parse_url, RedisOptions, Target};
use crate::store::RedisStore;

impl RedisStore {
    /// Checks a store URL without connecting: one of the forms of
    /// [`RedisStore::connect_with`], and a cluster URL's node list.
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
