//! One rejection of each kind, for documentation and its tests.

use http::StatusCode;
use idemgate_core::KeyError;

use super::TokenError;
use super::{IdempotencyRejection, LimitKind};
use crate::path::PathAmbiguity;

impl IdempotencyRejection {
    /// One rejection of every kind (and of each [`LimitKind`]), with example fields: the
    /// catalogue of answers idemgate gives itself. Every anchor in it has its section in
    /// `docs/errors.md`, which a test checks.
    pub fn catalogue() -> Vec<IdempotencyRejection> {
        vec![
            Self::MissingKey {
                header: "idempotency-key".into(),
            },
            Self::InvalidKey(KeyError::Empty),
            Self::MissingPrincipal,
            Self::AmbiguousPrincipal {
                header: "x-user-id".into(),
            },
            Self::InvalidToken(TokenError::NotBearer),
            Self::BodyTooLarge { limit: 1 << 20 },
            Self::BodyUnreadable,
            Self::DecodedBodyTooLarge { limit: 4 << 20 },
            Self::RequestInFlight {
                retry_after_secs: 1,
            },
            Self::FingerprintMismatch {
                status: StatusCode::UNPROCESSABLE_ENTITY,
            },
            Self::PreviousAttemptFailed,
            Self::PreviousAttemptReleased {
                status: StatusCode::SERVICE_UNAVAILABLE,
                retry_after_secs: Some(2),
            },
            Self::ResponseNotKept {
                original_status: 201,
                detail: None,
            },
            Self::OutcomeUnknown,
            Self::RecordCorrupt,
            Self::StoreUnavailable,
            Self::UpstreamResponseFailed,
            Self::UpstreamUnreachable,
            Self::UpstreamFailed,
            Self::UpstreamHeadTooLarge,
            Self::UpstreamTimeout,
            Self::OperationPanicked,
            Self::Internal,
            Self::PrincipalLimited {
                kind: LimitKind::InFlight,
                retry_after_secs: 1,
            },
            Self::PrincipalLimited {
                kind: LimitKind::NewKeys,
                retry_after_secs: 2,
            },
            Self::AmbiguousPath(PathAmbiguity::EmptySegment),
            Self::AmbiguousRoute {
                route: "POST /api/{resource}".into(),
                sibling: "POST /api/pay".into(),
            },
            Self::AmbiguousMethod {
                method: "post".into(),
            },
            Self::PathTooLong { limit: 1024 },
            Self::NoSuchRoute,
            Self::AmbiguousRequest {
                header: "content-type".into(),
            },
            Self::OverrideHeader {
                header: "x-http-method-override".into(),
            },
        ]
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    #[test]
    fn the_catalogue_holds_each_kind_once_with_a_distinct_answer() {
        let all = IdempotencyRejection::catalogue();
        let kinds: HashSet<_> = all.iter().map(std::mem::discriminant).collect();
        assert_eq!(kinds.len(), 31, "every variant");
        let answers: HashSet<_> = all.iter().map(|r| (r.anchor(), r.detail())).collect();
        assert_eq!(answers.len(), all.len(), "no two entries say the same");
        for r in &all {
            let shown = r.to_string();
            assert!(
                shown.starts_with(&r.status().as_u16().to_string()),
                "{shown}"
            );
            assert!(shown.contains(r.title()), "{shown}");
        }
    }
}
