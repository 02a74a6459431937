//! What a failure can lose on this store ([`Durability`]), read from the server (the
//! primary, through Sentinel; every primary of a cluster): `appendonly`, `appendfsync` and
//! `min-replicas-to-write` (`CONFIG GET`, or `INFO persistence` where `CONFIG` is refused),
//! the replicas (`INFO replication`), and the store's own `WAIT` setting.

use idemgate_core::durability::{Durability, DurabilityLevel};
use idemgate_core::StoreError;
use redis::{FromRedisValue, Value};

use crate::check::{config_value, refused};
use crate::error::classify;
use crate::store::RedisStore;

/// A replica counts as acknowledging while its last acknowledgement is at most this many
/// seconds old (`lag` in `INFO replication`; replicas acknowledge every second).
const MAX_ACK_LAG_SECS: u64 = 2;

/// The settings read from one primary; `None` where they could not be read.
#[derive(Default, Debug)]
struct NodeFacts {
    appendonly: Option<String>,
    appendfsync: Option<String>,
    min_replicas: Option<String>,
    /// `connected_slaves`.
    replicas: Option<u32>,
    /// Replicas `online` whose `lag` is at most [`MAX_ACK_LAG_SECS`].
    acknowledging: Option<u32>,
    /// The server's answer when `CONFIG GET` is refused.
    config_refused: Option<String>,
}

/// The store's `WAIT` setting: replicas, timeout in ms.
type Wait = Option<(u32, u64)>;

impl NodeFacts {
    /// Reads `INFO replication` or `INFO persistence` text (`key:value` lines).
    fn read_info(&mut self, text: &str) {
        let (mut acknowledging, mut listed) = (0, false);
        for line in text.lines() {
            let Some((key, value)) = line.trim_end().split_once(':') else {
                continue;
            };
            match key {
                "connected_slaves" => self.replicas = value.parse().ok(),
                "aof_enabled" if self.appendonly.is_none() => {
                    self.appendonly = Some(if value == "1" { "yes" } else { "no" }.into());
                }
                k if k.starts_with("slave") && k[5..].parse::<u32>().is_ok() => {
                    listed = true;
                    let field = |name: &str| {
                        value
                            .split(',')
                            .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
                    };
                    let lag = field("lag").and_then(|l| l.parse::<u64>().ok());
                    if field("state") == Some("online")
                        && lag.is_some_and(|l| l <= MAX_ACK_LAG_SECS)
                    {
                        acknowledging += 1;
                    }
                }
                _ => {}
            }
        }
        if listed || self.replicas.is_some() {
            self.acknowledging = Some(acknowledging);
        }
    }

    /// What a restart or a crash of this primary loses: the level and the words.
    fn persistence(&self) -> (DurabilityLevel, String) {
        let volatile = |why: String| (DurabilityLevel::Volatile, why);
        match (self.appendonly.as_deref(), self.appendfsync.as_deref()) {
            (Some("yes"), Some("always")) => (
                DurabilityLevel::Local,
                "each write is on the primary's disk before it is acknowledged \
                 (appendonly yes, appendfsync always)"
                    .into(),
            ),
            (Some("yes"), Some("everysec")) => volatile(
                "writes are acknowledged before they reach disk (appendfsync everysec): a crash \
                 of the host loses up to about a second of records"
                    .into(),
            ),
            (Some("yes"), Some(fsync)) => volatile(format!(
                "writes are acknowledged before they reach disk (appendfsync {fsync}): a crash \
                 of the host loses what the OS had not flushed (often 30 s of records)"
            )),
            (Some("yes"), None) => volatile(
                "writes may be acknowledged before they reach disk (appendonly yes, appendfsync \
                 unknown): a crash of the host may lose the last records"
                    .into(),
            ),
            (Some(aof), _) => volatile(format!(
                "writes are acknowledged before they reach disk (appendonly {aof}): a restart \
                 loses records"
            )),
            (None, _) => volatile(
                "the persistence settings could not be read: counted as acknowledged before \
                 disk, so a restart may lose records"
                    .into(),
            ),
        }
    }

    /// The level, the summary, and why new keys are refused, given the store's `WAIT`.
    fn judge(&self, wait: Wait) -> (DurabilityLevel, String, Option<String>) {
        let (level, on_disk) = self.persistence();
        let acknowledging = self.acknowledging.unwrap_or(0);
        let lagging = "a failover to a lagging replica loses the records it lacks";
        match wait {
            Some((n, ms)) if acknowledging >= n => (
                DurabilityLevel::Replicated,
                format!(
                    "each write waits for {n} replica acknowledgement{} (WAIT, up to {ms} ms): \
                     {acknowledging} of {} replicas acknowledging, but WAIT does not make Redis \
                     strongly consistent: a failover can still choose a replica that missed a \
                     write; on the primary, {on_disk}",
                    if n == 1 { "" } else { "s" },
                    self.replicas.unwrap_or(acknowledging),
                ),
                None,
            ),
            Some((n, _)) => {
                let refusing = format!(
                    "each write waits for {n} replica acknowledgement(s) (WAIT) but \
                     {acknowledging} replicas acknowledge: new keys are answered 503 until \
                     enough replicas are back"
                );
                (
                    level,
                    format!("{on_disk}, and {lagging}; {refusing}"),
                    Some(refusing),
                )
            }
            None => (level, format!("{on_disk}, and {lagging}"), None),
        }
    }

    /// The facts, as `(name, value)`, each name prefixed with `node` on a cluster.
    fn facts(&self, node: &Option<String>, out: &mut Vec<(String, String)>) {
        let unknown = || "unknown".to_owned();
        let number = |n: Option<u32>| n.map_or_else(unknown, |n| n.to_string());
        let mut fact = |name: &str, value: String| {
            let name = match node {
                Some(node) => format!("{node} {name}"),
                None => name.to_owned(),
            };
            out.push((name, value));
        };
        fact(
            "appendonly",
            self.appendonly.clone().unwrap_or_else(unknown),
        );
        fact(
            "appendfsync",
            self.appendfsync.clone().unwrap_or_else(unknown),
        );
        fact(
            "min-replicas-to-write",
            self.min_replicas.clone().unwrap_or_else(unknown),
        );
        fact("connected_slaves", number(self.replicas));
        fact("replicas acknowledging", number(self.acknowledging));
        if let Some(detail) = &self.config_refused {
            fact(
                "CONFIG GET",
                format!("refused ({detail}): settings read from INFO"),
            );
        }
    }
}

/// The facts of `node`, added when first met.
fn entry(nodes: &mut Vec<(Option<String>, NodeFacts)>, node: Option<String>) -> &mut NodeFacts {
    let i = match nodes.iter().position(|(n, _)| *n == node) {
        Some(i) => i,
        None => {
            nodes.push((node, NodeFacts::default()));
            nodes.len() - 1
        }
    };
    &mut nodes[i].1
}

/// The text of an `INFO` reply.
fn info_text(reply: &Value) -> String {
    String::from_redis_value(reply).unwrap_or_default()
}

impl RedisStore {
    /// The facts of every primary (one off a cluster), by node (`None` off a cluster).
    async fn node_facts(&self) -> Result<Vec<(Option<String>, NodeFacts)>, StoreError> {
        let mut nodes: Vec<(Option<String>, NodeFacts)> = Vec::new();
        let mut refused_with = None;
        for param in ["appendonly", "appendfsync", "min-replicas-to-write"] {
            let mut cmd = redis::cmd("CONFIG");
            cmd.arg("GET").arg(param);
            let replies = match self.config_get(&cmd).await {
                Ok(replies) => replies,
                Err(e) if refused(&e) => {
                    refused_with = Some(e.to_string());
                    break;
                }
                Err(e) => return Err(classify(e)),
            };
            for (node, reply) in replies {
                let facts = entry(&mut nodes, node);
                let value = config_value(reply);
                match param {
                    "appendonly" => facts.appendonly = value,
                    "appendfsync" => facts.appendfsync = value,
                    _ => facts.min_replicas = value,
                }
            }
        }
        let sections: &[&str] = match refused_with {
            Some(_) => &["replication", "persistence"],
            None => &["replication"],
        };
        for section in sections {
            let replies = self
                .config_get(redis::cmd("INFO").arg(*section))
                .await
                .map_err(classify)?;
            for (node, reply) in replies {
                let facts = entry(&mut nodes, node);
                facts.read_info(&info_text(&reply));
                facts.config_refused.clone_from(&refused_with);
            }
        }
        Ok(nodes)
    }

    /// Reads what a failure can lose (see [`idemgate_core::gauges::GaugedStore::durability`]).
    pub(crate) async fn read_durability(&self) -> Result<Durability, StoreError> {
        let wait = self.wait_timeout().map(|t| {
            let ms = u64::try_from(t.as_millis()).unwrap_or(u64::MAX);
            (self.wait_replicas(), ms)
        });
        let nodes = self.node_facts().await?;
        let mut worst: Option<(DurabilityLevel, String, Option<String>)> = None;
        let mut facts = Vec::new();
        for (node, n) in &nodes {
            let (level, summary, refusing) = n.judge(wait);
            let summary = match node {
                Some(node) => format!("{node}: {summary}"),
                None => summary,
            };
            if worst.as_ref().is_none_or(|(w, _, _)| level > *w) {
                worst = Some((level, summary, refusing));
            }
            n.facts(node, &mut facts);
        }
        let Some((level, summary, refusing)) = worst else {
            return Ok(Durability::new(
                DurabilityLevel::Unknown,
                "no primary answered",
            ));
        };
        let mut d = Durability::new(level, summary);
        d.facts = facts;
        d.facts
            .push(("wait_replicas".into(), self.wait_replicas().to_string()));
        if let Some((_, ms)) = wait {
            d.facts.push(("wait_timeout_ms".into(), ms.to_string()));
        }
        d.refusing_new_keys = refusing;
        Ok(d)
    }
}

#[cfg(test)]
mod tests;
