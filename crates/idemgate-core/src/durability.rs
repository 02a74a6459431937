//! What a store can lose: [`Durability`], read by each store from its own server (PostgreSQL's
//! replication settings and standbys, Redis's persistence and replicas, SQLite's
//! `synchronous`), logged in words at start-up and whenever it changes, exported as
//! `idempotency_store_durability{backend,level}` and printed by `idemgate config check
//! --connect`.
//!
//! "At most once" holds only for records the store still has after a failure: a record lost
//! with a crashed host or a failed-over primary lets its key run again. [`DurabilityLevel`]
//! says which failure loses acknowledged records.

/// Which failure can lose a record the store has acknowledged, from the most to the least
/// durable. `as_str` is the gauge's `level` label.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DurabilityLevel {
    /// Every write waits until at least one replica has it (PostgreSQL synchronous
    /// replication; Redis `WAIT` acknowledged): a failover to that replica loses nothing.
    Replicated,
    /// Writes are on the store host's disk when acknowledged, and on no replica: the host's
    /// crash loses nothing, a failover to a replica that lags loses the records it lacks.
    Local,
    /// Writes are acknowledged before they reach disk (PostgreSQL `fsync = off` or
    /// `synchronous_commit = off`, Redis without `appendfsync always`, SQLite
    /// `synchronous = OFF`, the in-memory store): a crash of the store's process or host
    /// can lose the last records.
    Volatile,
    /// The store cannot tell (a key service's store: the key service reports its own).
    Unknown,
}

impl DurabilityLevel {
    /// Every level, in the order of the enum.
    pub const ALL: [DurabilityLevel; 4] = [
        DurabilityLevel::Replicated,
        DurabilityLevel::Local,
        DurabilityLevel::Volatile,
        DurabilityLevel::Unknown,
    ];

    /// The gauge label: `replicated`, `local`, `volatile` or `unknown`.
    pub fn as_str(self) -> &'static str {
        match self {
            DurabilityLevel::Replicated => "replicated",
            DurabilityLevel::Local => "local",
            DurabilityLevel::Volatile => "volatile",
            DurabilityLevel::Unknown => "unknown",
        }
    }
}

/// What a store can lose, as it read it from its server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Durability {
    /// The failure that loses acknowledged records.
    pub level: DurabilityLevel,
    /// One sentence in words for the log and `config check --connect`, e.g. "commits wait
    /// for 1 synchronous standby (remote_apply)".
    pub summary: String,
    /// The settings read, as `(name, value)` pairs in the server's own terms (e.g.
    /// `("synchronous_commit", "on")`), printed under the summary.
    pub facts: Vec<(String, String)>,
    /// Why new keys are refused (`503`, replays still served), when the store requires
    /// more durability than it has now (PostgreSQL's `require_synchronous_replication`
    /// with no synchronous standby): `/readyz` says it.
    pub refusing_new_keys: Option<String>,
}

impl Durability {
    /// A report with no facts.
    pub fn new(level: DurabilityLevel, summary: impl Into<String>) -> Self {
        Durability {
            level,
            summary: summary.into(),
            facts: Vec::new(),
            refusing_new_keys: None,
        }
    }

    /// Adds the fact `name = value`.
    pub fn with_fact(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.facts.push((name.into(), value.into()));
        self
    }

    /// Sets `idempotency_store_durability{backend,level}`: 1 for this report's level, 0 for
    /// the others, so an alert can match `level!="replicated"`.
    pub fn export(&self, backend: &'static str) {
        for level in DurabilityLevel::ALL {
            metrics::gauge!("idempotency_store_durability", "backend" => backend, "level" => level.as_str())
                .set(f64::from(u8::from(level == self.level)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_order_from_most_to_least_durable() {
        let mut sorted = DurabilityLevel::ALL;
        sorted.sort();
        assert_eq!(sorted, DurabilityLevel::ALL);
        assert_eq!(
            DurabilityLevel::ALL.map(DurabilityLevel::as_str),
            ["replicated", "local", "volatile", "unknown"]
        );
    }

    #[test]
    fn facts_keep_their_order() {
        let d = Durability::new(DurabilityLevel::Local, "commits stay on this host")
            .with_fact("synchronous_commit", "on")
            .with_fact("synchronous_standby_names", "");
        assert_eq!(d.facts[0].0, "synchronous_commit");
        assert_eq!(d.facts[1], ("synchronous_standby_names".into(), "".into()));
    }
}
