//! A layer registers every counter series it can emit when it wraps a service, before any
//! request: the lifecycle's, per configured route, `(unmatched)` and `(uncovered)`, so each
//! is exported at 0 and an `increase(...)` alert sees a process's first event.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use http::{Request, Response};
use idemgate_core::{BoxError, MemoryStore};
use idemgate_tower::body::{full, BoxBody};
use idemgate_tower::metrics::{series, UNMATCHED};
use idemgate_tower::{IdempotencyLayer, Policy};
use metrics::{Counter, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit};
use tower::{service_fn, Layer};

/// A counter series: its name and labels.
type SeriesKey = (String, BTreeSet<(String, String)>);

/// A recorder that keeps the name and labels of every counter registered with it.
#[derive(Default)]
struct Registered(Mutex<BTreeSet<SeriesKey>>);

impl Recorder for Registered {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        let labels = key.labels();
        let labels = labels.map(|l| (l.key().to_owned(), l.value().to_owned()));
        let entry = (key.name().to_owned(), labels.collect());
        self.0.lock().unwrap().insert(entry);
        Counter::noop()
    }

    fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::noop()
    }

    fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::noop()
    }
}

#[test]
fn wrapping_a_service_registers_every_counter_series() {
    let policy = Policy::default()
        .with_route("POST /payments/{id}", Default::default())
        .unwrap();
    let expected = series(&policy, "memory");
    let layer = IdempotencyLayer::new(Arc::new(MemoryStore::new()), policy);
    let recorder = Registered::default();
    let _svc = metrics::with_local_recorder(&recorder, || {
        layer.layer(service_fn(|_req: Request<BoxBody>| async {
            Ok::<_, BoxError>(Response::new(full("{}".into())))
        }))
    });
    let registered = recorder.0.into_inner().unwrap();
    for s in &expected {
        let labels = s.labels.iter().map(|(k, v)| (k.to_string(), v.clone()));
        let key = (s.name.to_owned(), labels.collect());
        assert!(registered.contains(&key), "{s:?} not registered");
    }
    let unmatched = ("route".to_owned(), UNMATCHED.to_owned());
    let outcome_unknown = (
        "idempotency_requests_total".to_owned(),
        BTreeSet::from([unmatched, ("outcome".into(), "outcome_unknown".into())]),
    );
    assert!(registered.contains(&outcome_unknown));
    let corrupt = registered
        .iter()
        .find(|(name, _)| name == "idempotency_record_corrupt_total");
    let backend = ("backend".to_owned(), "memory".to_owned());
    assert!(corrupt.is_some_and(|(_, labels)| labels.contains(&backend)));
}
