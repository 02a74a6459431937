//! The store gauges of `serve` and `key-service`: the store's count
//! ([`idemgate_core::GaugedStore::gauges`], as `idemgate stats` prints it) read every
//! `gauges_interval` and set on `/metrics` ([`idemgate_core::StoreCount::export`]), whether
//! or not a purge runs.

use std::future::Future;
use std::time::Duration;

use idemgate_core::GaugedStore;

/// Exports the store's gauges at once, then every `every`, until `stop` resolves. A failed
/// read counts in `idempotency_store_gauges_errors_total` and is logged once until a read
/// succeeds again; the gauges keep their last values meanwhile.
pub async fn refresh<S: GaugedStore>(store: &S, every: Duration, stop: impl Future<Output = ()>) {
    let mut stop = std::pin::pin!(stop);
    let mut failing = false;
    loop {
        let read = tokio::select! {
            g = store.gauges() => g,
            _ = &mut stop => return,
        };
        match read {
            Ok(g) => {
                g.export(store.backend());
                if std::mem::take(&mut failing) {
                    tracing::info!("store gauges can be read again");
                }
            }
            Err(e) => {
                metrics::counter!("idempotency_store_gauges_errors_total").increment(1);
                if !std::mem::replace(&mut failing, true) {
                    let e = crate::purge::error_text(&e);
                    tracing::warn!(error = %e, "cannot read the store gauges");
                }
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = &mut stop => return,
        }
    }
}
