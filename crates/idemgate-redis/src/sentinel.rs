//! `redis+sentinel://` stores: [`SentinelTarget`] (the URL) and [`SentinelConn`], the
//! connection to the primary the Sentinels name, which follows it across failovers.
//!
//! The primary is looked up by asking every Sentinel at once (`SENTINEL
//! GET-MASTER-ADDR-BY-NAME`, each with the store's connection and response timeouts, so a
//! hung Sentinel delays nothing), connecting to each address named and keeping the first
//! whose `ROLE` is `master`: a node that is not a primary is never written to. A
//! connection error, a timeout or a `READONLY` reply drops the connection; the next call
//! asks the Sentinels again, so calls fail (answered `503`) while a failover runs and
//! succeed on the new primary once the Sentinels name it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use futures_util::future::{select_ok, BoxFuture};
use futures_util::FutureExt;
use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::{
    AsyncConnectionConfig, Client, Cmd, ConnectionAddr, ConnectionInfo, ErrorKind,
    IntoConnectionInfo, Pipeline, RedisConnectionInfo, RedisError, RedisFuture, RedisResult, Role,
    Value,
};

use crate::error::Result;
use crate::options::{async_config, invalid, RedisOptions};

/// The port a Sentinel listens on unless the URL names another.
const SENTINEL_PORT: u16 = 26379;

/// A parsed `redis+sentinel://[user[:password]@]host[:port],...[/]MASTER[?db=N]`.
#[derive(Clone, PartialEq, Eq, Debug)]
pub(crate) struct SentinelTarget {
    /// One `redis://host:port` URL per Sentinel (no credentials: they are the data nodes').
    pub(crate) sentinels: Vec<String>,
    /// The name the Sentinels monitor the primary under.
    pub(crate) master: String,
    /// `redis://[user[:password]@]primary/db`: the login and database of the data nodes,
    /// whose host is replaced by the address the Sentinels give.
    pub(crate) node: String,
}

impl SentinelTarget {
    /// Parses what follows `redis+sentinel://`.
    pub(crate) fn parse(rest: &str) -> Result<Self> {
        let (main, query) = rest.split_once('?').unwrap_or((rest, ""));
        let (authority, master) = main.split_once('/').unwrap_or((main, ""));
        let master = master.strip_suffix('/').unwrap_or(master);
        if master.is_empty() || master.contains(['/', '#']) {
            return Err(invalid(
                "a Sentinel URL names the primary after the hosts: \
                 redis+sentinel://host:port,host:port/MASTER",
            ));
        }
        let (userinfo, hosts) = match authority.rsplit_once('@') {
            Some((user, hosts)) => (format!("{user}@"), hosts),
            None => (String::new(), authority),
        };
        let sentinels = hosts
            .split(',')
            .map(|host| match host.trim() {
                "" => Err(invalid("empty host in the Sentinel list")),
                h if h.contains(':') => Ok(format!("redis://{h}")),
                h => Ok(format!("redis://{h}:{SENTINEL_PORT}")),
            })
            .collect::<Result<Vec<_>>>()?;
        let mut db = 0_u32;
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            match pair.split_once('=') {
                Some(("db", n)) => {
                    db = n.parse().map_err(|_| invalid("db must be a number"))?;
                }
                _ => return Err(invalid("a Sentinel URL takes only ?db=N")),
            }
        }
        Ok(Self {
            sentinels,
            master: master.to_owned(),
            node: format!("redis://{userinfo}primary/{db}"),
        })
    }

    /// The login and database of the data nodes.
    pub(crate) fn node_info(&self) -> RedisResult<RedisConnectionInfo> {
        Ok(self.node.as_str().into_connection_info()?.redis)
    }
}

/// The primary in use: its connection, a client for more connections to it, and the
/// generation (how many primaries this store has found), so that a connection error
/// drops this primary and not one found since.
#[derive(Clone)]
pub(crate) struct Primary {
    /// The shared (multiplexed) connection.
    pub(crate) conn: MultiplexedConnection,
    /// Opens other connections to the same node.
    pub(crate) client: Arc<Client>,
    /// Which primary this is, counting from 1.
    pub(crate) generation: u64,
}

struct Shared {
    sentinels: Vec<Client>,
    master: String,
    node: RedisConnectionInfo,
    config: AsyncConnectionConfig,
    current: Mutex<Option<Primary>>,
    /// Held while the Sentinels are asked, so a failover is looked up once, not per call.
    looking: futures_util::lock::Mutex<()>,
    generations: AtomicU64,
}

/// The connection to the primary of a Sentinel-monitored group. Cloning is cheap: clones
/// share the primary.
#[derive(Clone)]
pub(crate) struct SentinelConn(Arc<Shared>);

/// True after an error that may mean the primary changed or is gone.
pub(crate) fn primary_lost(e: &RedisError) -> bool {
    e.is_io_error()
        || e.is_connection_dropped()
        || e.is_unrecoverable_error()
        || e.is_timeout()
        || matches!(e.kind(), ErrorKind::ReadOnly | ErrorKind::MasterDown)
}

/// Refuses a node whose `ROLE` is not `master`.
pub(crate) async fn check_primary(conn: &mut MultiplexedConnection) -> RedisResult<()> {
    match redis::cmd("ROLE").query_async::<Role>(conn).await? {
        Role::Primary { .. } => Ok(()),
        Role::Replica { .. } => Err(not_primary("replica")),
        Role::Sentinel { .. } => Err(not_primary("sentinel")),
    }
}

fn not_primary(role: &str) -> RedisError {
    RedisError::from((
        ErrorKind::ReadOnly,
        "the node is not a primary; not writing to it",
        format!("ROLE says {role}"),
    ))
}

impl SentinelConn {
    /// Asks the Sentinels of `target` for the primary and connects to it.
    ///
    /// # Errors
    /// [`crate::RedisStoreError::Redis`] if no Sentinel names a reachable primary.
    pub(crate) async fn connect(target: &SentinelTarget, opts: &RedisOptions) -> Result<Self> {
        let sentinels = target
            .sentinels
            .iter()
            .map(|url| Client::open(url.as_str()))
            .collect::<RedisResult<Vec<_>>>()?;
        let conn = Self(Arc::new(Shared {
            sentinels,
            master: target.master.clone(),
            node: target.node_info()?,
            config: async_config(opts, opts.response_timeout),
            current: Mutex::new(None),
            looking: futures_util::lock::Mutex::new(()),
            generations: AtomicU64::new(0),
        }));
        conn.primary().await?;
        Ok(conn)
    }

    fn current(&self) -> Option<Primary> {
        let current = self
            .0
            .current
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        current.clone()
    }

    /// The primary in use, asking the Sentinels first when there is none.
    ///
    /// # Errors
    /// The last error met when no Sentinel names a reachable primary.
    pub(crate) async fn primary(&self) -> RedisResult<Primary> {
        if let Some(p) = self.current() {
            return Ok(p);
        }
        let _looking = self.0.looking.lock().await;
        if let Some(p) = self.current() {
            return Ok(p); // found while this call waited
        }
        let (conn, client) = self.find().await?;
        let primary = Primary {
            conn,
            client: Arc::new(client),
            generation: self.0.generations.fetch_add(1, Ordering::Relaxed) + 1,
        };
        tracing::info!(
            master = %self.0.master,
            primary = %primary.client.get_connection_info().addr,
            "the Sentinels name this Redis primary; its ROLE is master"
        );
        *self
            .0
            .current
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(primary.clone());
        Ok(primary)
    }

    /// Drops primary `generation` after an error that may mean it changed: the next call
    /// asks the Sentinels again.
    pub(crate) fn lost(&self, generation: u64, e: &RedisError) {
        let mut current = self
            .0
            .current
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if current.as_ref().is_some_and(|p| p.generation == generation) {
            *current = None;
            tracing::warn!(
                error = %e,
                master = %self.0.master,
                "lost the Redis primary; asking the Sentinels again"
            );
        }
    }

    /// Asks every Sentinel at once; the first address that is a primary wins.
    async fn find(&self) -> RedisResult<(MultiplexedConnection, Client)> {
        let asks: Vec<BoxFuture<'_, RedisResult<_>>> = self
            .0
            .sentinels
            .iter()
            .map(|sentinel| self.ask(sentinel).boxed())
            .collect();
        if asks.is_empty() {
            return Err(RedisError::from((
                ErrorKind::InvalidClientConfig,
                "no Sentinel to ask",
            )));
        }
        Ok(select_ok(asks).await?.0)
    }

    /// One Sentinel's primary, connected and checked.
    async fn ask(&self, sentinel: &Client) -> RedisResult<(MultiplexedConnection, Client)> {
        let s = &self.0;
        let mut conn = sentinel
            .get_multiplexed_async_connection_with_config(&s.config)
            .await?;
        let addr: Option<(String, u16)> = redis::cmd("SENTINEL")
            .arg("GET-MASTER-ADDR-BY-NAME")
            .arg(&s.master)
            .query_async(&mut conn)
            .await?;
        let Some((host, port)) = addr else {
            return Err(RedisError::from((
                ErrorKind::MasterNameNotFoundBySentinel,
                "the Sentinel does not monitor this master name",
            )));
        };
        let client = Client::open(ConnectionInfo {
            addr: ConnectionAddr::Tcp(host, port),
            redis: s.node.clone(),
        })?;
        let mut conn = client
            .get_multiplexed_async_connection_with_config(&s.config)
            .await?;
        check_primary(&mut conn).await?;
        Ok((conn, client))
    }

    /// Drops primary `generation` if `out` is an error that may mean it changed.
    fn settle<T>(&self, generation: u64, out: RedisResult<T>) -> RedisResult<T> {
        if let Err(e) = &out {
            if primary_lost(e) {
                self.lost(generation, e);
            }
        }
        out
    }
}

impl ConnectionLike for SentinelConn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let mut primary = self.primary().await?;
            let out = primary.conn.req_packed_command(cmd).await;
            self.settle(primary.generation, out)
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            let mut primary = self.primary().await?;
            let out = primary.conn.req_packed_commands(cmd, offset, count).await;
            self.settle(primary.generation, out)
        })
    }

    fn get_db(&self) -> i64 {
        self.0.node.db
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sentinel_urls_name_hosts_master_login_and_db() {
        let t = SentinelTarget::parse("app:p%40ss@s1:26380,s2/mymaster?db=3").unwrap();
        assert_eq!(t.sentinels, ["redis://s1:26380", "redis://s2:26379"]);
        assert_eq!(t.master, "mymaster");
        let node = t.node_info().unwrap();
        assert_eq!(node.db, 3);
        assert_eq!(node.username.as_deref(), Some("app"));
        assert_eq!(node.password.as_deref(), Some("p@ss"));
        let plain = SentinelTarget::parse("127.0.0.1:1,127.0.0.1:2/idemgate/").unwrap();
        assert_eq!(plain.master, "idemgate");
        assert_eq!(plain.node_info().unwrap().db, 0);
    }

    #[test]
    fn bad_sentinel_urls_are_refused() {
        for rest in [
            "s1:26379",
            "s1:26379/",
            "s1,,s2/m",
            "s1/m/x",
            "s1/m?db=x",
            "s1/m?timeout=1",
        ] {
            assert!(SentinelTarget::parse(rest).is_err(), "{rest}");
        }
    }

    #[test]
    fn only_a_primary_is_written_to() {
        let e = not_primary("replica");
        assert!(
            primary_lost(&e),
            "a demoted node sends the store back to the Sentinels"
        );
        assert!(e.to_string().contains("not a primary"), "{e}");
    }
}
