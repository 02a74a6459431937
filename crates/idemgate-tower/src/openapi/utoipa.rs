//! The contract added to a [`utoipa`] OpenAPI document.

use utoipa::openapi::OpenApi;

use super::{Contract, Doc, MergeError, MergeReport};

/// Why a utoipa document could not be extended.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum UtoipaError {
    /// The document is not OpenAPI 3.0/3.1 or has a malformed part.
    #[error(transparent)]
    Merge(#[from] MergeError),
    /// The document could not pass through JSON and back.
    #[error("the utoipa document could not be converted: {0}")]
    Convert(#[from] serde_json::Error),
}

impl Contract<'_> {
    /// Adds the contract to the covered operations of a utoipa document, as
    /// [`Contract::merge_into`] does to a JSON/YAML description: the key parameter, the
    /// problem responses, the replay headers and the `x-idempotency` extension (with the
    /// record TTL), and the `Idemgate*` components.
    ///
    /// ```
    /// use idemgate_tower::openapi::Contract;
    /// use idemgate_tower::{Policy, RoutePolicy};
    /// use utoipa::openapi::path::{HttpMethod, OperationBuilder, PathItem, PathsBuilder};
    /// use utoipa::openapi::{OpenApiBuilder, RefOr, ResponseBuilder};
    ///
    /// let op = OperationBuilder::new()
    ///     .response("201", ResponseBuilder::new().description("created"))
    ///     .build();
    /// let mut api = OpenApiBuilder::new()
    ///     .paths(PathsBuilder::new().path("/payments", PathItem::new(HttpMethod::Post, op)))
    ///     .build();
    /// let policy = Policy::default()
    ///     .with_route("POST /payments", RoutePolicy::default().with_key_required(true))
    ///     .unwrap();
    /// let report = Contract::new(&policy).extend_utoipa(&mut api).unwrap();
    /// assert!(report.unmatched_routes.is_empty());
    /// let post = api.paths.paths["/payments"].post.as_ref().unwrap();
    /// let key = match &post.parameters.as_ref().unwrap()[0] {
    ///     RefOr::T(p) => p,
    ///     RefOr::Ref(_) => unreachable!("inline"),
    /// };
    /// assert_eq!(key.name, "Idempotency-Key");
    /// assert!(post.responses.responses.contains_key("409"));
    /// let ext = post.extensions.as_ref().unwrap();
    /// assert_eq!(ext["x-idempotency"]["recordTtlSeconds"], 86400);
    /// ```
    ///
    /// # Errors
    /// [`UtoipaError`] when the document is not OpenAPI 3.0/3.1 or cannot be converted.
    pub fn extend_utoipa(&self, openapi: &mut OpenApi) -> Result<MergeReport, UtoipaError> {
        let mut doc = Doc::from(serde_json::to_value(&*openapi)?);
        let report = self.merge_into(&mut doc)?;
        *openapi = serde_json::from_value(serde_json::to_value(&doc)?)?;
        Ok(report)
    }
}
