//! What the store can lose ([`Durability`]), for `serve` and `key-service`: read once the
//! store is open and again every `gauges_interval` ([`watch`]), logged in one line at
//! start-up and whenever its level, summary or refusal changes, exported as
//! `idempotency_store_durability{backend,level}`, and kept for `/readyz`
//! ([`DurabilityState`]), which answers `503` while the store refuses new keys.
//! `idemgate config check --connect` prints it ([`report`]).

use std::future::Future;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use idemgate_core::{Durability, DurabilityLevel, GaugedStore};

/// How often the durability is re-read when the store gauges are off (`gauges_interval =
/// "0s"`): `/readyz` depends on it.
pub const EVERY_WITHOUT_GAUGES: Duration = Duration::from_secs(15);

/// The last durability read, as `/readyz` needs it: why the store refuses new keys, if it
/// does. Nothing is refused before the first read.
#[derive(Debug, Default)]
pub struct DurabilityState {
    refusing_new_keys: Mutex<Option<String>>,
}

impl DurabilityState {
    /// Why new keys are refused (`503`, replays still served), per the last read.
    pub fn refusing_new_keys(&self) -> Option<String> {
        self.lock().clone()
    }

    /// Keeps what `read` says about new keys.
    pub fn set(&self, read: &Durability) {
        self.lock().clone_from(&read.refusing_new_keys);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<String>> {
        self.refusing_new_keys
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// The report in one line of words: the store's summary (which says what a failure costs the
/// keys) and why new keys are refused, if they are. The log line and `config check --connect` use it.
pub fn describe(backend: &str, read: &Durability) -> String {
    let mut line = format!(
        "the {backend} store is {}: {}",
        read.level.as_str(),
        read.summary
    );
    if let Some(why) = &read.refusing_new_keys {
        line = format!("{line}; new keys get 503 (replays are still served): {why}");
    }
    line
}

/// Logs `read` in one line: `INFO` when taking new keys at the most the store offers
/// (replicated, or a SQLite file: one host by design), `WARN` otherwise, so that the
/// default store does not warn at every start-up while a PostgreSQL or Redis store without
/// replication does.
pub fn log(backend: &'static str, read: &Durability) {
    let line = describe(backend, read);
    let level = read.level.as_str();
    let expected = match read.level {
        DurabilityLevel::Replicated => true,
        DurabilityLevel::Local => backend == "sqlite",
        _ => false,
    };
    if expected && read.refusing_new_keys.is_none() {
        tracing::info!(backend, level, "store durability: {line}");
    } else {
        tracing::warn!(backend, level, "store durability: {line}");
    }
}

/// Whether `new` says something `old` did not: its level, summary or refusal (the facts
/// alone, such as a standby's position, change all the time and are not logged).
pub fn changed(old: &Durability, new: &Durability) -> bool {
    old.level != new.level
        || old.summary != new.summary
        || old.refusing_new_keys != new.refusing_new_keys
}

/// Reads the store's durability at once and then every `every` (once only with `None`)
/// until `stop` resolves: each read is kept in `state` and exported when `export` (not for
/// a key service's store, which exports its own), and logged when it [`changed`]. A failed
/// read counts in `idempotency_store_gauges_errors_total` and is logged once until a read
/// succeeds again; the gateway keeps running on the last value.
pub async fn watch<S: GaugedStore>(
    store: &S,
    every: Option<Duration>,
    export: bool,
    state: &DurabilityState,
    stop: impl Future<Output = ()>,
) {
    let mut stop = std::pin::pin!(stop);
    let mut last: Option<Durability> = None;
    let mut failing = false;
    loop {
        let read = tokio::select! {
            d = store.durability() => d,
            _ = &mut stop => return,
        };
        match read {
            Ok(read) => {
                if export {
                    read.export(store.backend());
                }
                state.set(&read);
                if last.as_ref().is_none_or(|old| changed(old, &read)) {
                    log(store.backend(), &read);
                } else if failing {
                    tracing::info!("the store's durability can be read again");
                }
                failing = false;
                last = Some(read);
            }
            Err(e) => {
                metrics::counter!("idempotency_store_gauges_errors_total").increment(1);
                if !std::mem::replace(&mut failing, true) {
                    let e = crate::purge::error_text(&e);
                    tracing::warn!(error = %e, "cannot read what the store can lose (its durability); the gateway goes on");
                }
            }
        }
        let Some(every) = every else { return };
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = &mut stop => return,
        }
    }
}

/// `config check --connect`'s lines: [`describe`], then each fact as `name = "value"`.
pub fn report(backend: &str, read: &Durability) -> String {
    let mut text = format!("durability: {}\n", describe(backend, read));
    for (name, value) in &read.facts {
        text += &format!("  {name} = {value:?}\n");
    }
    text
}

#[cfg(test)]
mod tests;
