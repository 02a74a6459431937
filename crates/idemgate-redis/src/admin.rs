//! [`AdminStore`] for [`RedisStore`]. A key with both route and principal is one point
//! read; otherwise the records are found with `SCAN` over the key prefix, on the server or
//! on every cluster primary, reading each page's scopes (or, for stats, the few counted
//! fields) in one pipeline to the node that holds them. The exact delete is
//! `scripts/admin_delete.lua`, a compare-and-delete on the record's one key.

use idemgate_core::admin::{AdminStore, KeyFilter, Listing};
use idemgate_core::{RawRecord, ScopedKey, StoreError, UnixMillis};
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use redis::{Cmd, Pipeline, Value};

use crate::conn::Conn;
use crate::error::{classify, unexpected, Result};
use crate::record::{array, bytes, int};
use crate::scripts::SCRIPTS;
use crate::store::RedisStore;

/// Keys asked for per `SCAN` call.
const SCAN_COUNT: usize = 500;

/// One node to scan: `None` for a single server, else a cluster primary's (host, port).
type Node = Option<(String, u16)>;

/// Where a `SCAN` over the nodes is: the nodes left (the current one last) and its cursor.
pub(crate) struct Scan {
    pattern: String,
    nodes: Vec<Node>,
    cursor: String,
}

/// `s` with the glob characters of `SCAN MATCH` escaped.
fn glob_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// The primaries of a cluster, from `CLUSTER NODES` (`<id> <host:port@cport> <flags> ...`).
fn primaries(nodes: &str) -> Vec<(String, u16)> {
    nodes
        .lines()
        .filter_map(|line| {
            let mut parts = line.split_whitespace();
            let addr = parts.nth(1)?;
            let flags = parts.next()?;
            let is_primary = flags.split(',').any(|f| f == "master")
                && !flags.split(',').any(|f| f == "fail" || f == "noaddr");
            let hostport = addr.split(['@', ',']).next()?;
            let (host, port) = hostport.rsplit_once(':')?;
            let port = port.parse().ok()?;
            (is_primary && !host.is_empty()).then(|| (host.to_owned(), port))
        })
        .collect()
}

/// The route to a cluster node by its (host, port).
fn by_address((host, port): &(String, u16)) -> SingleNodeRoutingInfo {
    SingleNodeRoutingInfo::ByAddress {
        host: host.clone(),
        port: *port,
    }
}

impl RedisStore {
    /// The nodes to scan.
    async fn nodes(&self) -> Result<Vec<Node>, StoreError> {
        match self.conn() {
            Conn::Cluster(mut c) => {
                let reply: String = redis::cmd("CLUSTER")
                    .arg("NODES")
                    .query_async(&mut c)
                    .await
                    .map_err(classify)?;
                Ok(primaries(&reply).into_iter().map(Some).collect())
            }
            Conn::Single(_) | Conn::Sentinel(_) => Ok(vec![None]),
        }
    }

    async fn on_node(&self, node: &Node, cmd: &Cmd) -> Result<Value, StoreError> {
        match (self.conn(), node) {
            (Conn::Cluster(mut c), Some(addr)) => {
                let route = RoutingInfo::SingleNode(by_address(addr));
                c.route_command(cmd, route).await
            }
            (mut c, _) => cmd.query_async(&mut c).await,
        }
        .map_err(classify)
    }

    async fn pipe_on_node(&self, node: &Node, pipe: &Pipeline) -> Result<Vec<Value>, StoreError> {
        match (self.conn(), node) {
            (Conn::Cluster(mut c), Some(addr)) => {
                c.route_pipeline(pipe, 0, pipe.len(), by_address(addr))
                    .await
            }
            (mut c, _) => pipe.query_async(&mut c).await,
        }
        .map_err(classify)
    }

    /// A scan of every record key under the prefix, node by node.
    pub(crate) async fn start_scan(&self) -> Result<Scan, StoreError> {
        Ok(Scan {
            pattern: format!("{}{{*}}", glob_escape(self.key_prefix())),
            nodes: self.nodes().await?,
            cursor: "0".to_owned(),
        })
    }

    /// The next non-empty page of `scan`: the node and the keys it holds; `None` at the end.
    pub(crate) async fn next_page(
        &self,
        scan: &mut Scan,
    ) -> Result<Option<(Node, Vec<Vec<u8>>)>, StoreError> {
        while let Some(node) = scan.nodes.last().cloned() {
            let mut cmd = redis::cmd("SCAN");
            cmd.arg(&scan.cursor).arg("MATCH").arg(&scan.pattern);
            cmd.arg("COUNT").arg(SCAN_COUNT);
            let mut reply = array(self.on_node(&node, &cmd).await?)?;
            let (Some(keys), Some(next), true) = (reply.pop(), reply.pop(), reply.is_empty())
            else {
                return Err(unexpected("SCAN: a reply has 2 items").into());
            };
            let keys = array(keys)?
                .into_iter()
                .map(bytes)
                .collect::<Result<Vec<_>>>()?;
            scan.cursor = String::from_utf8(bytes(next)?).unwrap_or_default();
            if scan.cursor == "0" || scan.cursor.is_empty() {
                scan.nodes.pop();
                scan.cursor = "0".to_owned();
            }
            if !keys.is_empty() {
                return Ok(Some((node, keys)));
            }
        }
        Ok(None)
    }

    /// The record at the Redis key `rkey` as stored, with the server clock; `None` when it
    /// is gone or its scope is not one `filter` selects.
    async fn read_raw(
        &self,
        rkey: &[u8],
        filter: &KeyFilter,
    ) -> Result<Option<(RawRecord, UnixMillis)>, StoreError> {
        let (now, fields) = self.read_fields(rkey).await?;
        let text = |name| fields.get(name).and_then(|v| std::str::from_utf8(v).ok());
        let (Some(principal), Some(route), Some(key)) = (text("p"), text("r"), text("k")) else {
            return Ok(None);
        };
        let scope = ScopedKey {
            principal: principal.to_owned(),
            route: route.to_owned(),
            key: filter.key.clone(),
        };
        if key != filter.key.as_str() || !filter.matches(&scope) {
            return Ok(None);
        }
        Ok(Some((fields.into_raw(&scope)?, now)))
    }

    /// The Redis keys of the records `filter` selects, by a scan of the prefix.
    async fn scan_for(&self, filter: &KeyFilter) -> Result<Vec<Vec<u8>>, StoreError> {
        let mut found = Vec::new();
        let mut scan = self.start_scan().await?;
        while let Some((node, keys)) = self.next_page(&mut scan).await? {
            let mut pipe = redis::pipe();
            for k in &keys {
                pipe.cmd("HMGET").arg(k).arg("k").arg("r").arg("p");
            }
            let replies = self.pipe_on_node(&node, &pipe).await?;
            for (k, reply) in keys.into_iter().zip(replies) {
                let f = array(reply)?;
                let text = |i: usize| match f.get(i) {
                    Some(Value::BulkString(b)) => std::str::from_utf8(b).ok(),
                    _ => None,
                };
                let selected = text(0) == Some(filter.key.as_str())
                    && filter.route.as_deref().is_none_or(|r| text(1) == Some(r))
                    && filter
                        .principal
                        .as_deref()
                        .is_none_or(|p| text(2) == Some(p));
                if selected {
                    found.push(k);
                }
            }
        }
        Ok(found)
    }

    /// The server clock, in ms since the epoch.
    pub(crate) async fn server_now(&self) -> Result<UnixMillis, StoreError> {
        let (secs, micros): (i64, i64) = redis::cmd("TIME")
            .query_async(&mut self.conn())
            .await
            .map_err(classify)?;
        Ok(secs * 1000 + micros / 1000)
    }
}

impl AdminStore for RedisStore {
    async fn list_key(&self, filter: &KeyFilter) -> Result<Listing, StoreError> {
        let keys = match filter.exact() {
            Some(scope) => vec![self.record_key(&scope).into_bytes()],
            None => self.scan_for(filter).await?,
        };
        let mut listing = Listing {
            now: self.server_now().await?,
            records: Vec::new(),
        };
        for k in keys {
            if let Some((raw, now)) = self.read_raw(&k, filter).await? {
                listing.now = listing.now.max(now);
                listing.records.push(raw);
            }
        }
        listing.records.sort_by(|a, b| {
            (&a.key.route, &a.key.principal).cmp(&(&b.key.route, &b.key.principal))
        });
        Ok(listing)
    }

    async fn delete_exact(&self, seen: &RawRecord) -> Result<bool, StoreError> {
        let decimal = |n: Option<i64>| n.map(|n| n.to_string()).unwrap_or_default();
        let mut inv = SCRIPTS.admin_delete.key(self.record_key(&seen.key));
        inv.arg(&seen.key.principal)
            .arg(&seen.key.route)
            .arg(seen.key.key.as_str())
            .arg(seen.state.as_deref().unwrap_or(""))
            .arg(decimal(seen.fence))
            .arg(decimal(seen.lease_token))
            .arg(decimal(seen.lease_expires_at))
            .arg(decimal(seen.created_at))
            .arg(decimal(seen.expires_at));
        let reply = inv
            .invoke_async::<Value>(&mut self.conn())
            .await
            .map_err(classify)?;
        Ok(int(&reply)? == 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_nodes_give_the_live_primaries() {
        let nodes = "\
a1 127.0.0.1:7000@17000 myself,master - 0 0 1 connected 0-5460
b2 127.0.0.1:7001@17001,host-b master - 0 0 2 connected 5461-10922
c3 127.0.0.1:7002@17002 slave a1 0 0 1 connected
d4 127.0.0.1:7003@17003 master,fail - 0 0 3 connected
e5 :0@0 master,noaddr - 0 0 4 disconnected";
        assert_eq!(
            primaries(nodes),
            vec![("127.0.0.1".into(), 7000), ("127.0.0.1".into(), 7001)]
        );
    }

    #[test]
    fn glob_characters_are_escaped() {
        assert_eq!(glob_escape("app:*?[x]\\"), "app:\\*\\?\\[x\\]\\\\");
        // Moved from the gauges' own pattern, which this scan replaced.
        assert_eq!(glob_escape("a*b?[c]\\"), "a\\*b\\?\\[c\\]\\\\");
    }
}
