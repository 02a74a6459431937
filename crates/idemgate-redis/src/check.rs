//! [`RedisStore::check_server`]: the start-up check of the settings that determine what Redis
//! can lose, and [`ServerWarning`].

use std::fmt;

use redis::cluster_routing::{MultipleNodeRoutingInfo, RoutingInfo};
use redis::{ErrorKind, RedisError, Value};

use crate::conn::Conn;
use crate::error::Result;
use crate::record::bytes;
use crate::store::RedisStore;

/// A server setting under which Redis can lose records (see the crate docs). Each names
/// the node it was read from (`host:port`) on a cluster, `None` on a single server.
#[derive(Clone, PartialEq, Eq, Debug)]
#[non_exhaustive]
pub enum ServerWarning {
    /// `maxmemory-policy` is not `noeviction`: when memory is full Redis deletes keys, and
    /// every record key has a TTL, so even `volatile-*` policies evict records. A retry of
    /// an evicted key runs the operation again.
    Eviction {
        /// The node, on a cluster.
        node: Option<String>,
        /// The policy, e.g. `allkeys-lru`.
        policy: String,
    },
    /// `appendonly no`: a restart loses every record written since the last RDB snapshot
    /// (all of them when `save` is empty).
    NoAppendOnlyFile {
        /// The node, on a cluster.
        node: Option<String>,
        /// True when RDB snapshots are configured (`save` is not empty).
        snapshots: bool,
    },
    /// `appendfsync no`: the append-only file is flushed when the OS chooses (often 30 s),
    /// so a crash of the machine loses that much.
    AppendFsyncNo {
        /// The node, on a cluster.
        node: Option<String>,
    },
    /// `CONFIG GET` is refused (a managed Redis often disables it), so the settings above
    /// could not be checked: check them in the provider's console.
    ConfigUnavailable {
        /// The node, on a cluster, when known.
        node: Option<String>,
        /// The server's answer.
        detail: String,
    },
}

impl fmt::Display for ServerWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let on = |node: &Option<String>| {
            node.as_ref()
                .map(|n| format!(" on {n}"))
                .unwrap_or_default()
        };
        match self {
            Self::Eviction { node, policy } => write!(
                f,
                "maxmemory-policy is {policy}{}: Redis evicts idempotency records when memory is \
                 full (they all have TTLs), and a retry of an evicted key runs again; \
                 set maxmemory-policy noeviction",
                on(node)
            ),
            Self::NoAppendOnlyFile { node, snapshots } => write!(
                f,
                "appendonly is no{}: a restart loses the records written since {}; \
                 set appendonly yes",
                on(node),
                if *snapshots {
                    "the last RDB snapshot"
                } else {
                    "start-up (save is empty: no snapshots either)"
                }
            ),
            Self::AppendFsyncNo { node } => write!(
                f,
                "appendfsync is no{}: a machine crash loses the records the OS had not flushed; \
                 set appendfsync everysec (or always)",
                on(node)
            ),
            Self::ConfigUnavailable { node, detail } => write!(
                f,
                "CONFIG GET is refused{} ({detail}): check maxmemory-policy noeviction and \
                 appendonly yes with the provider",
                on(node)
            ),
        }
    }
}

/// The settings read from one node.
#[derive(Default, Debug)]
struct NodeConfig {
    maxmemory_policy: Option<String>,
    appendonly: Option<String>,
    appendfsync: Option<String>,
    save: Option<String>,
}

const PARAMS: [&str; 4] = ["maxmemory-policy", "appendonly", "appendfsync", "save"];

impl NodeConfig {
    fn warnings(&self, node: Option<String>, out: &mut Vec<ServerWarning>) {
        if let Some(policy) = &self.maxmemory_policy {
            if policy != "noeviction" {
                out.push(ServerWarning::Eviction {
                    node: node.clone(),
                    policy: policy.clone(),
                });
            }
        }
        match self.appendonly.as_deref() {
            Some("no") => out.push(ServerWarning::NoAppendOnlyFile {
                node: node.clone(),
                snapshots: self.save.as_deref().is_some_and(|s| !s.trim().is_empty()),
            }),
            Some(_) if self.appendfsync.as_deref() == Some("no") => {
                out.push(ServerWarning::AppendFsyncNo { node });
            }
            _ => {}
        }
    }
}

/// The value of a `CONFIG GET <param>` reply: `[param, value]` (RESP2) or a map (RESP3).
pub(crate) fn config_value(reply: Value) -> Option<String> {
    let value = match reply {
        Value::Array(mut items) if items.len() == 2 => items.pop()?,
        Value::Map(mut items) if items.len() == 1 => items.pop()?.1,
        _ => return None,
    };
    String::from_utf8(bytes(value).ok()?).ok()
}

/// True for errors of the server refusing the command (disabled, renamed, no permission),
/// as opposed to failing to reach it.
pub(crate) fn refused(e: &RedisError) -> bool {
    matches!(
        e.kind(),
        ErrorKind::ResponseError | ErrorKind::ExtensionError
    )
}

impl RedisStore {
    /// Reads the server settings that determine what Redis can lose (`maxmemory-policy`,
    /// `appendonly`, `appendfsync`, `save`) from the server, or from every primary of a
    /// cluster, and returns a warning for each risky one: an eviction policy other than
    /// `noeviction`, the append-only file off, `appendfsync no`. Where `CONFIG GET` is
    /// refused (managed Redis), the answer is one [`ServerWarning::ConfigUnavailable`].
    /// An empty list means the recommended settings are in place. Meant for start-up logs;
    /// it changes nothing.
    ///
    /// # Errors
    /// [`crate::RedisStoreError::Redis`] if the server cannot be reached.
    pub async fn check_server(&self) -> Result<Vec<ServerWarning>> {
        let mut configs: Vec<(Option<String>, NodeConfig)> = Vec::new();
        for param in PARAMS {
            let mut cmd = redis::cmd("CONFIG");
            cmd.arg("GET").arg(param);
            let replies = match self.config_get(&cmd).await {
                Ok(replies) => replies,
                Err(e) if refused(&e) => {
                    return Ok(vec![ServerWarning::ConfigUnavailable {
                        node: None,
                        detail: e.to_string(),
                    }])
                }
                Err(e) => return Err(e.into()),
            };
            for (node, reply) in replies {
                let i = match configs.iter().position(|(n, _)| *n == node) {
                    Some(i) => i,
                    None => {
                        configs.push((node, NodeConfig::default()));
                        configs.len() - 1
                    }
                };
                let value = config_value(reply);
                let config = &mut configs[i].1;
                match param {
                    "maxmemory-policy" => config.maxmemory_policy = value,
                    "appendonly" => config.appendonly = value,
                    "appendfsync" => config.appendfsync = value,
                    _ => config.save = value,
                }
            }
        }
        let mut warnings = Vec::new();
        for (node, config) in configs {
            config.warnings(node, &mut warnings);
        }
        Ok(warnings)
    }

    /// Runs `cmd` on the server (the primary, through Sentinel), or on every cluster
    /// primary: (node, reply) pairs, the node `None` off a cluster.
    pub(crate) async fn config_get(
        &self,
        cmd: &redis::Cmd,
    ) -> redis::RedisResult<Vec<(Option<String>, Value)>> {
        match self.conn() {
            Conn::Cluster(mut c) => {
                let routing = RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllMasters, None));
                match c.route_command(cmd, routing).await? {
                    Value::Map(per_node) => Ok(per_node
                        .into_iter()
                        .map(|(node, reply)| {
                            let node = bytes(node).ok().and_then(|b| String::from_utf8(b).ok());
                            (node, reply)
                        })
                        .collect()),
                    other => Ok(vec![(None, other)]),
                }
            }
            mut c => Ok(vec![(None, cmd.query_async(&mut c).await?)]),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(policy: &str, aof: &str, fsync: &str, save: &str) -> Vec<ServerWarning> {
        let c = NodeConfig {
            maxmemory_policy: Some(policy.into()),
            appendonly: Some(aof.into()),
            appendfsync: Some(fsync.into()),
            save: Some(save.into()),
        };
        let mut out = Vec::new();
        c.warnings(None, &mut out);
        out
    }

    #[test]
    fn recommended_settings_give_no_warning() {
        assert!(config("noeviction", "yes", "always", "").is_empty());
        assert!(config("noeviction", "yes", "everysec", "3600 1").is_empty());
    }

    #[test]
    fn risky_settings_warn() {
        for policy in [
            "volatile-lru",
            "volatile-ttl",
            "allkeys-lfu",
            "allkeys-random",
        ] {
            assert!(matches!(
                config(policy, "yes", "everysec", "")[..],
                [ServerWarning::Eviction { .. }]
            ));
        }
        assert_eq!(
            config("noeviction", "no", "everysec", ""),
            vec![ServerWarning::NoAppendOnlyFile {
                node: None,
                snapshots: false
            }]
        );
        assert_eq!(
            config("noeviction", "no", "everysec", "3600 1 300 100"),
            vec![ServerWarning::NoAppendOnlyFile {
                node: None,
                snapshots: true
            }]
        );
        assert_eq!(
            config("noeviction", "yes", "no", ""),
            vec![ServerWarning::AppendFsyncNo { node: None }]
        );
    }

    #[test]
    fn config_replies_in_both_protocols() {
        let resp2 = Value::Array(vec![
            Value::BulkString(b"appendonly".to_vec()),
            Value::BulkString(b"no".to_vec()),
        ]);
        assert_eq!(config_value(resp2).as_deref(), Some("no"));
        let resp3 = Value::Map(vec![(
            Value::BulkString(b"appendonly".to_vec()),
            Value::BulkString(b"yes".to_vec()),
        )]);
        assert_eq!(config_value(resp3).as_deref(), Some("yes"));
        assert_eq!(config_value(Value::Array(vec![])), None);
    }
}
