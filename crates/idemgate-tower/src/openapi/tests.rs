use super::*;
use crate::policy::RoutePolicy;

fn policy() -> Policy {
    Policy::default()
        .with_route(
            "POST /payments",
            RoutePolicy {
                key_required: true,
                record_ttl_header: true,
                ..Default::default()
            },
        )
        .unwrap()
        .with_route("POST /refunds/{id}", RoutePolicy::default())
        .unwrap()
}

fn json(doc: &Doc) -> serde_json::Value {
    serde_json::to_value(doc).unwrap()
}

#[test]
fn fragment_describes_every_route() {
    let policy = policy();
    let doc = json(&Contract::new(&policy).fragment());
    assert_eq!(doc["openapi"], "3.1.0");
    let op = &doc["paths"]["/payments"]["post"];
    assert_eq!(op["parameters"][0]["name"], "Idempotency-Key");
    assert_eq!(op["parameters"][0]["required"], true);
    assert_eq!(op["parameters"][0]["schema"]["minLength"], 8);
    assert_eq!(op["x-idempotency"]["recordTtlSeconds"], 86400);
    assert_eq!(op["x-idempotency"]["keyLifetime"], "PT86400S");
    assert_eq!(
        op["x-idempotency"]["lifetimeHeader"],
        "Idempotency-Key-Lifetime"
    );
    assert!(op["responses"]["409"]["headers"]["Retry-After"].is_object());
    assert!(op["responses"]["503"]["headers"]["Retry-After"].is_object());
    assert!(op["responses"]["default"]["headers"]["Idempotency-Key-Lifetime"].is_object());
    let types = &op["responses"]["500"]["content"]["application/problem+json"]["schema"]["allOf"]
        [1]["properties"]["type"]["enum"];
    assert!(types
        .as_array()
        .unwrap()
        .contains(&"urn:idemgate:problem:outcome-unknown".into()));
    let refunds = &doc["paths"]["/refunds/{id}"]["post"];
    assert_eq!(refunds["parameters"][0]["required"], false);
    assert_eq!(refunds["parameters"][1]["name"], "id");
    assert!(refunds["responses"]["default"]["headers"]["Idempotency-Key-Lifetime"].is_null());
    assert!(doc["components"]["schemas"]["IdemgateProblem"].is_object());
}

#[test]
fn a_route_whose_duplicates_wait_says_so() {
    let waiting = RoutePolicy::default()
        .with_on_in_flight(idemgate_core::lifecycle::InFlightPolicy::Wait)
        .with_max_wait(std::time::Duration::from_secs(5));
    let policy = policy().with_route("POST /orders", waiting).unwrap();
    let doc = json(&Contract::new(&policy).fragment());
    let released = serde_json::Value::from("urn:idemgate:problem:previous-attempt-released");
    let types = |op: &serde_json::Value| {
        op["responses"]["503"]["content"]["application/problem+json"]["schema"]["allOf"][1]
            ["properties"]["type"]["enum"]
            .clone()
    };
    let orders = &doc["paths"]["/orders"]["post"];
    assert_eq!(orders["x-idempotency"]["onInFlight"], "wait");
    assert_eq!(orders["x-idempotency"]["maxWaitSeconds"], 5.0);
    assert!(types(orders).as_array().unwrap().contains(&released));
    assert!(orders["responses"]["409"]["description"]
        .as_str()
        .unwrap()
        .contains("maxWaitSeconds"));
    let payments = &doc["paths"]["/payments"]["post"];
    assert_eq!(payments["x-idempotency"]["onInFlight"], "conflict");
    assert!(payments["x-idempotency"]["maxWaitSeconds"].is_null());
    assert!(!types(payments).as_array().unwrap().contains(&released));
}

#[test]
fn merge_keeps_the_rest_and_reports_unmatched_routes() {
    let policy = policy();
    let mut doc: Doc = serde_json::from_str(
        r##"{
        "openapi": "3.0.3",
        "info": {"title": "Payments", "version": "1"},
        "servers": [{"url": "https://api.example.com/"}],
        "paths": {
            "/payments": {
                "get": {"responses": {"200": {"description": "list"}}},
                "post": {"responses": {
                    "201": {"description": "created"},
                    "400": {"description": "bad", "content": {"application/json": {"schema": {"type": "object"}}}}
                }}
            },
            "/other": {"patch": {"responses": {"200": {"$ref": "#/components/responses/Ok"}}}}
        }
    }"##,
    )
    .unwrap();
    let report = Contract::new(&policy).merge_into(&mut doc).unwrap();
    assert_eq!(
        report.unmatched_routes,
        vec!["POST /refunds/{id}".to_owned()]
    );
    assert_eq!(
        report.operations,
        vec![
            (
                "POST /payments".to_owned(),
                Some("POST /payments".to_owned())
            ),
            ("PATCH /other".to_owned(), None)
        ]
    );
    let v = json(&doc);
    assert!(
        v["paths"]["/payments"]["get"]["parameters"].is_null(),
        "GET untouched"
    );
    let post = &v["paths"]["/payments"]["post"];
    assert!(post["responses"]["201"]["headers"]["Idempotent-Replayed"].is_object());
    assert!(post["responses"]["400"]["content"]["application/json"].is_object());
    assert!(post["responses"]["400"]["content"]["application/problem+json"].is_object());
    assert_eq!(
        v["paths"]["/other"]["patch"]["responses"]["200"],
        serde_json::json!({"$ref": "#/components/responses/Ok"})
    );
    let keys: Vec<_> = doc.as_object().unwrap().keys().cloned().collect();
    assert_eq!(keys, ["openapi", "info", "servers", "paths", "components"]);
}

#[test]
fn merge_refuses_what_is_not_openapi_3() {
    let policy = policy();
    let c = Contract::new(&policy);
    let mut swagger = Doc::from(serde_json::json!({"swagger": "2.0"}));
    assert_eq!(c.merge_into(&mut swagger), Err(MergeError::NotOpenApi));
    let mut v4 = Doc::from(serde_json::json!({"openapi": "4.0.0"}));
    assert!(matches!(
        c.merge_into(&mut v4),
        Err(MergeError::UnsupportedVersion(_))
    ));
    let mut bad = Doc::from(serde_json::json!({"openapi": "3.1.0", "paths": []}));
    assert!(matches!(
        c.merge_into(&mut bad),
        Err(MergeError::NotAnObject(_))
    ));
}

#[test]
fn merge_under_a_server_path() {
    let policy = Policy::default()
        .with_route("POST /v1/payments", RoutePolicy::default())
        .unwrap();
    let mut doc = Doc::from(serde_json::json!({
        "openapi": "3.1.0", "info": {"title": "t", "version": "1"},
        "servers": [{"url": "https://api.example.com/v1/"}],
        "paths": {"/payments": {"post": {"responses": {"201": {"description": "ok"}}}}}
    }));
    let report = Contract::new(&policy).merge_into(&mut doc).unwrap();
    assert!(report.unmatched_routes.is_empty());
}

#[test]
fn a_utoipa_document_keeps_every_part_of_the_contract() {
    use ::utoipa::openapi::path::{HttpMethod, OperationBuilder, PathItem, PathsBuilder};
    use ::utoipa::openapi::{OpenApiBuilder, ResponseBuilder};

    let op = OperationBuilder::new()
        .response("201", ResponseBuilder::new().description("created"))
        .build();
    let mut api = OpenApiBuilder::new()
        .paths(PathsBuilder::new().path("/payments", PathItem::new(HttpMethod::Post, op)))
        .build();
    let policy = policy();
    let report = Contract::new(&policy).extend_utoipa(&mut api).unwrap();
    assert_eq!(
        report.unmatched_routes,
        vec!["POST /refunds/{id}".to_owned()]
    );
    // What the utoipa types kept, compared with the same merge on the plain document.
    let mut plain = Doc::from(
        serde_json::to_value(
            OpenApiBuilder::new()
                .paths(
                    PathsBuilder::new().path(
                        "/payments",
                        PathItem::new(
                            HttpMethod::Post,
                            OperationBuilder::new()
                                .response("201", ResponseBuilder::new().description("created"))
                                .build(),
                        ),
                    ),
                )
                .build(),
        )
        .unwrap(),
    );
    Contract::new(&policy).merge_into(&mut plain).unwrap();
    let kept = serde_json::to_value(&api).unwrap();
    let want = json(&plain);
    let post = &kept["paths"]["/payments"]["post"];
    for pointer in [
        "/parameters/0",
        "/responses/409",
        "/responses/500",
        "/responses/503",
        "/responses/201/headers",
        "/x-idempotency",
    ] {
        assert_eq!(
            post.pointer(pointer),
            want["paths"]["/payments"]["post"].pointer(pointer),
            "{pointer}"
        );
    }
    assert_eq!(
        kept["components"]["schemas"]["IdemgateProblem"],
        want["components"]["schemas"]["IdemgateProblem"]
    );
    assert!(kept["components"]["headers"]["IdemgateRetryAfter"]["schema"].is_object());
}

#[test]
fn merging_a_merged_description_changes_nothing() {
    let policy = policy();
    let c = Contract::new(&policy);
    let mut once: Doc = serde_json::from_str(
        r#"{"openapi": "3.1.0", "info": {"title": "t", "version": "1"},
            "paths": {"/payments": {"post": {"responses": {
                "201": {"description": "created"},
                "409": {"description": "already paid", "content": {"application/problem+json": {"schema": {"type": "object"}}}}
            }}}}}"#,
    )
    .unwrap();
    c.merge_into(&mut once).unwrap();
    let mut twice = once.clone();
    c.merge_into(&mut twice).unwrap();
    assert_eq!(json(&once), json(&twice));
    let post = &json(&once)["paths"]["/payments"]["post"];
    assert!(
        post["responses"]["400"]["headers"].is_null(),
        "idemgate's own answers are never replayed"
    );
    let any = &post["responses"]["409"]["content"]["application/problem+json"]["schema"]["anyOf"];
    assert_eq!(
        any[0],
        serde_json::json!({"type": "object"}),
        "the API's own 409 stays"
    );
}
