//! The simulated upstream: the operation behind the gateway. It counts every execution
//! per key (marked or not by `Idempotent-Takeover`), is slow by seeded amounts, answers
//! "nothing done" (`503`, not run) or fails after running (`500`), and the answer of an
//! instance that crashed meanwhile never arrives.

use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use http::{Request, Response};
use idemgate_tower::body::{full, BoxBody};
use idemgate_tower::LeaseHandle;
use tower::util::BoxCloneService;

use crate::cluster::Cluster;
use crate::rng::Rng;

/// One call that reached the upstream.
#[derive(Clone, Debug)]
pub struct Call {
    /// The key's value.
    pub key: String,
    /// Marked `Idempotent-Takeover: true`.
    pub marked: bool,
    /// The lease's fence the layer forwarded under.
    pub fence: i64,
    /// `None`: "nothing done" (`503`, the operation did not run); else its execution id.
    pub ran: Option<u32>,
}

impl Call {
    /// What the upstream reads of a forwarded request (over the wire, no fence: 0).
    pub fn of<B>(req: &Request<B>) -> Self {
        let header = |name: &str| req.headers().get(name).and_then(|v| v.to_str().ok());
        Self {
            key: header("idempotency-key").unwrap_or_default().to_owned(),
            marked: header("idempotent-takeover") == Some("true"),
            fence: req
                .extensions()
                .get::<LeaseHandle>()
                .map_or(0, |h| h.lease().fence),
            ran: None,
        }
    }
}

/// Every call the upstream received, in order.
#[derive(Debug, Default)]
pub struct Upstream {
    calls: Mutex<Vec<Call>>,
}

/// A boxed HTTP service, as the layer wraps and the clients call.
pub type Svc = BoxCloneService<Request<BoxBody>, Response<BoxBody>, Infallible>;

impl Upstream {
    /// The calls so far.
    pub fn calls(&self) -> Vec<Call> {
        self.calls
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn record(&self, call: Call) -> u32 {
        let mut calls = self.calls.lock().unwrap_or_else(PoisonError::into_inner);
        calls.push(call);
        u32::try_from(calls.len()).unwrap_or(u32::MAX)
    }

    /// The upstream as instance `instance` reaches it: nothing comes back once `alive` is
    /// false.
    pub fn service(
        self: &Arc<Self>,
        cluster: Arc<Cluster>,
        rng: Rng,
        instance: u64,
        alive: Arc<AtomicBool>,
    ) -> Svc {
        let up = self.clone();
        BoxCloneService::new(tower::service_fn(move |req: Request<BoxBody>| {
            let (up, cluster, rng, alive) =
                (up.clone(), cluster.clone(), rng.clone(), alive.clone());
            let call = Call::of(&req);
            async move {
                let out = up.serve(&cluster, &rng, instance, call).await;
                if !alive.load(Ordering::Relaxed) {
                    std::future::pending::<()>().await;
                }
                Ok::<_, Infallible>(out)
            }
        }))
    }

    /// Runs (or not) the operation of `call` for `instance`: its answer.
    pub async fn serve(
        &self,
        cluster: &Cluster,
        rng: &Rng,
        instance: u64,
        mut call: Call,
    ) -> Response<BoxBody> {
        let marked = call.marked;
        if rng.chance(10) {
            cluster.fault("upstream answers nothing done");
            cluster.trace(format!("i{instance} upstream {} nothing done", call.key));
            self.record(call);
            return reply(503, "try again".into());
        }
        call.ran = Some(0);
        let name = call.key.clone();
        let id = self.record(call);
        self.set_id(id);
        cluster.trace(format!(
            "i{instance} upstream runs {name} as exec-{id} marked {marked}"
        ));
        let slow = rng.chance(30);
        if slow {
            cluster.fault("upstream slow");
        }
        tokio::time::sleep(rng.millis(0, if slow { 30_000 } else { 300 })).await;
        if rng.chance(10) {
            cluster.fault("upstream fails after running");
            return reply(500, format!("exec-{id} failed"));
        }
        reply(201, format!("exec-{id}"))
    }

    fn set_id(&self, id: u32) {
        let mut calls = self.calls.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(last) = calls.get_mut(id as usize - 1) {
            last.ran = Some(id);
        }
    }
}

fn reply(status: u16, body: String) -> Response<BoxBody> {
    let mut r = Response::new(full(body.into()));
    *r.status_mut() = http::StatusCode::from_u16(status).unwrap_or_default();
    r
}
