//! The test app: an axum service whose handlers count their side effects, behind the
//! layer (`route_layer`, principal from the `UserId` extension), served on a real port.

use std::collections::HashMap;
use std::fmt;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Extension, Request};
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use idemgate::limits::PrincipalLimits;
use idemgate::{IdempotencyLayer, IdempotencyStore, Policy, PrincipalSource, RoutePolicy};
use tokio::sync::Notify;

/// The caller, as the auth layer names it.
#[derive(Clone, Debug)]
pub(crate) struct UserId(pub(crate) String);

impl fmt::Display for UserId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What the handlers did, by name: `ran` after their side effect, `started` on entry.
#[derive(Clone, Default)]
pub(crate) struct Effects(Arc<Mutex<HashMap<String, u64>>>);

impl Effects {
    fn add(&self, what: &str) -> u64 {
        let mut map = self.0.lock().unwrap();
        let n = map.entry(what.to_owned()).or_default();
        *n += 1;
        *n
    }

    /// How many times `what` happened.
    pub(crate) fn get(&self, what: &str) -> u64 {
        self.0.lock().unwrap().get(what).copied().unwrap_or(0)
    }
}

/// The running app.
pub(crate) struct App<St> {
    pub(crate) base: String,
    pub(crate) effects: Effects,
    /// Lets a waiting `/slow` or `/limited` handler go on.
    pub(crate) gate: Arc<Notify>,
    pub(crate) store: Arc<St>,
    pub(crate) layer: IdempotencyLayer<St>,
    server: tokio::task::JoinHandle<()>,
}

impl<St> Drop for App<St> {
    fn drop(&mut self) {
        self.server.abort();
    }
}

/// The auth layer: `Authorization: Bearer <user>` names the user; anything else names none
/// (the layer then answers `401`).
async fn authenticate(mut req: Request, next: Next) -> Response {
    let auth = req.headers().get(header::AUTHORIZATION);
    let user = auth
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    if let Some(user) = user.map(str::to_owned) {
        req.extensions_mut().insert(UserId(user));
    }
    next.run(req).await
}

fn policy() -> Policy {
    let route = |f: fn(&mut RoutePolicy)| {
        let mut rp = RoutePolicy::default();
        f(&mut rp);
        rp
    };
    Policy::default()
        .with_principal(PrincipalSource::extension::<UserId>())
        .with_route("POST /payments", route(|r| r.max_body_bytes = 4096))
        .and_then(|p| p.with_route("POST /required", route(|r| r.key_required = true)))
        .and_then(|p| {
            p.with_route(
                "POST /short-ttl",
                // A record lives at least as long as its lease.
                route(|r| {
                    r.record_ttl = Duration::from_secs(1);
                    r.lease_ttl = Duration::from_millis(600);
                }),
            )
        })
        .and_then(|p| p.with_route("POST /big", route(|r| r.max_stored_response_bytes = 1024)))
        .and_then(|p| {
            p.with_route(
                "POST /limited",
                route(|r| {
                    r.limits = PrincipalLimits {
                        max_in_flight: NonZeroU32::new(1),
                        new_keys: None,
                    }
                }),
            )
        })
        .unwrap()
}

fn created(n: u64, what: &str) -> Response {
    let body = format!(r#"{{"n":{n},"what":"{what}"}}"#);
    let headers = [
        (header::CONTENT_TYPE, "application/json".to_owned()),
        (header::LOCATION, format!("/{what}/{n}")),
        (header::SET_COOKIE, format!("seen={n}")),
    ];
    (StatusCode::CREATED, headers, body).into_response()
}

fn routes(effects: &Effects, gate: &Arc<Notify>) -> Router {
    let e = effects.clone();
    let pay = move |Extension(user): Extension<UserId>| {
        let e = e.clone();
        async move { created(e.add("payments"), &user.0) }
    };
    let e = effects.clone();
    let uncovered = move || {
        let e = e.clone();
        async move { e.add("get").to_string() }
    };
    let simple = |what: &'static str, status: StatusCode, body: Vec<u8>| {
        let e = effects.clone();
        move || {
            let (e, body) = (e.clone(), body.clone());
            async move {
                e.add(what);
                (status, body).into_response()
            }
        }
    };
    let waits = |what: &'static str| {
        let (e, gate) = (effects.clone(), gate.clone());
        move || {
            let (e, gate) = (e.clone(), gate.clone());
            async move {
                e.add(&format!("{what}-started"));
                gate.notified().await;
                created(e.add(what), what)
            }
        }
    };
    let e = effects.clone();
    let panics = move || {
        let e = e.clone();
        async move {
            e.add("panic");
            if e.get("panic") > 0 {
                panic!("the handler panicked after its side effect");
            }
            StatusCode::CREATED
        }
    };
    Router::new()
        .route("/payments", post(pay.clone()).get(uncovered))
        .route("/required", post(pay.clone()))
        .route(
            "/short-ttl",
            post(simple("short-ttl", StatusCode::CREATED, b"ok".to_vec())),
        )
        .route(
            "/fail",
            post(simple(
                "fail",
                StatusCode::INTERNAL_SERVER_ERROR,
                b"broke".to_vec(),
            )),
        )
        .route(
            "/busy",
            post(simple("busy", StatusCode::SERVICE_UNAVAILABLE, Vec::new())),
        )
        .route(
            "/big",
            post(simple("big", StatusCode::CREATED, vec![b'x'; 2048])),
        )
        .route(
            "/not-modified",
            post(simple("not-modified", StatusCode::NOT_MODIFIED, Vec::new())),
        )
        .route("/accounts/{id}/payments", post(pay))
        .route("/slow", post(waits("slow")))
        .route("/limited", post(waits("limited")))
        .route("/panic", post(panics))
}

/// Serves the test app over `store` on a free port.
pub(crate) async fn start<St: IdempotencyStore>(store: St) -> App<St> {
    let store = Arc::new(store);
    let layer = IdempotencyLayer::from_arc(store.clone(), policy());
    let (effects, gate) = (Effects::default(), Arc::new(Notify::new()));
    let app = routes(&effects, &gate)
        .route_layer(layer.clone())
        .layer(middleware::from_fn(authenticate));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let server = tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    App {
        base,
        effects,
        gate,
        store,
        layer,
        server,
    }
}
