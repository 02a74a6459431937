//! `GET /v1/openapi.json`: the OpenAPI 3.1 document of the API, generated from the handlers
//! and wire types (utoipa).

use idemgate_client::store_wire::*;
use idemgate_client::wire::*;
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa::{Modify, OpenApi};

#[derive(OpenApi)]
#[openapi(
    info(
        title = "idemgate key service",
        description = "Acquire an idempotency key before a business operation, then complete, fail or release it. Errors are RFC 9457 problems whose `type` anchors are the sections of docs/errors.md.",
        license(name = "MIT OR Apache-2.0")
    ),
    paths(
        crate::api::acquire, crate::outcome::renew, crate::outcome::complete,
        crate::outcome::fail, crate::outcome::release, crate::records::records,
        crate::store_api::doc_insert, crate::store_api::doc_take_over,
        crate::store_api::doc_renew, crate::store_api::doc_complete,
        crate::store_api::doc_fail, crate::store_api::doc_release,
        crate::store_api::doc_get, crate::store_api::doc_purge, crate::store_api::ping,
        crate::events::wait, crate::events::announce,
    ),
    components(schemas(
        AcquireRequest, AcquireResponse, RequestParts, LeaseExpired, LeaseInfo, LeaseRef,
        ResponseParts, RenewRequest, RenewResponse, LeaseRequest, ReleaseRequest, CompleteRequest,
        OutcomeResponse, RecordView, StoredView, Problem, StoreKey, StoreFingerprint,
        StoreLease, StoreResponse, StoreRecord, InsertBody, InsertAnswer, TakeOverBody,
        TakeOverAnswer, RenewBody, RenewAnswer, CompleteBody, LeaseBody, GetBody, GetAnswer,
        PurgeBody, PurgeAnswer, Done, AnnounceBody, WaitBody, WaitAnswer
    )),
    modifiers(&Bearer),
    tags(
        (name = "keys", description = "The calls around one business operation"),
        (name = "store", description = "Store primitives for gateways and layers (store = \"idemgate://...\")")
    )
)]
struct ApiDoc;

struct Bearer;

impl Modify for Bearer {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(Http::new(HttpAuthScheme::Bearer)),
        );
    }
}

/// The document, as JSON.
pub fn document() -> serde_json::Value {
    serde_json::to_value(ApiDoc::openapi()).unwrap_or_default()
}
