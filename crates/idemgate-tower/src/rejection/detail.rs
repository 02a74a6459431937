//! The `detail` of each answer: this occurrence, and what the client should do.

use super::{IdempotencyRejection, LimitKind};

impl IdempotencyRejection {
    /// The problem's `detail`: this occurrence, and what the client should do.
    pub fn detail(&self) -> String {
        match self {
            Self::MissingKey { header } => {
                format!("This operation requires an `{header}` header with a unique value (a UUID v4 is a good choice).")
            }
            Self::InvalidKey(e) => format!("{e}."),
            Self::MissingPrincipal => {
                "Idempotency keys are scoped to the caller; send credentials.".into()
            }
            Self::AmbiguousPrincipal { header } => format!("The `{header}` header names the caller, so it must appear once with one value in visible ASCII; this request carries it more than once, as a comma-separated list, or with other bytes (which parsers decode differently). Nothing was run."),
            Self::InvalidToken(e) => format!("{e}. Idempotency keys are scoped to the token's subject; send a valid token and retry with the same key."),
            Self::BodyTooLarge { limit } => format!("The request body exceeds {limit} bytes."),
            Self::BodyUnreadable => "The request body could not be read completely.".into(),
            Self::DecodedBodyTooLarge { limit } => format!("The request body decoded (Content-Encoding) exceeds {limit} bytes; decoding stopped there. Send a smaller body."),
            Self::RequestInFlight { .. } => "A request with this idempotency key is still being processed. Retry after the time in Retry-After.".into(),
            Self::FingerprintMismatch { .. } => "This idempotency key was already used with a different request (method, path, query or body). Use a new key for a new request.".into(),
            Self::PreviousAttemptFailed => "The first request with this idempotency key failed after it may have reached the server. It is not run again; use a new key.".into(),
            Self::PreviousAttemptReleased { status, .. } => format!("While this request waited, the first request with this idempotency key ended without running the operation (status {}), and it was not run again within the wait. Nothing was stored: retry with the same key, after the time in Retry-After if there is one.", status.as_u16()),
            Self::ResponseNotKept { original_status, detail: None } => format!("The operation with this idempotency key ran (status {original_status}), but its response streamed or was too large to keep. Do not retry with a new key: fetch the result instead."),
            Self::ResponseNotKept { original_status, detail: Some(note) } => format!("The operation with this idempotency key ran (status {original_status}); its response is not available. An operator recorded: \"{note}\". Do not retry with a new key."),
            Self::OutcomeUnknown => "The first attempt with this idempotency key was forwarded and its result was never recorded, so it may have run. Check the resource before retrying with a new key.".into(),
            Self::RecordCorrupt => "The stored result for this idempotency key is damaged and is not replayed. The operation ran before; check the resource instead of retrying with a new key.".into(),
            Self::StoreUnavailable => "The idempotency store is unreachable or too slow, so the request was not forwarded. Retry with the same key after the time in Retry-After.".into(),
            Self::UpstreamResponseFailed => "The upstream's response broke off after it began, so the operation may have run. The key is marked failed; check the operation's result before using a new key.".into(),
            Self::UpstreamUnreachable => "The API could not be reached; nothing was sent. Retry the request (with the same idempotency key, if it had one).".into(),
            Self::UpstreamFailed => "The connection to the API failed after the request was sent, so the operation may have run. The key is marked failed; check the result before using a new key.".into(),
            Self::UpstreamHeadTooLarge => "The API's response had more header fields than the gateway accepts (max_response_headers), so it was not delivered. The operation may have run: the key is marked failed; check the result before using a new key.".into(),
            Self::UpstreamTimeout => "The API did not answer in time. The operation may have run: the key is marked failed; check the result before using a new key.".into(),
            Self::OperationPanicked => "The operation with this idempotency key failed while it ran, so it may have partly run. The key is marked failed; check the result before using a new key.".into(),
            Self::Internal => "An internal error occurred. Retry with the same key.".into(),
            Self::PrincipalLimited { kind: LimitKind::InFlight, .. } => "Too many of your requests are in progress on this operation; nothing was stored or forwarded. Retry with the same key after the time in Retry-After.".into(),
            Self::PrincipalLimited { kind: LimitKind::NewKeys, .. } => "You are sending new idempotency keys faster than this operation allows; nothing was stored or forwarded. Retry with the same key after the time in Retry-After.".into(),
            Self::AmbiguousPath(why) => format!("The request path holds {why}, which servers read in different ways, so it is not clear which operation it names. Nothing was stored or forwarded. Send the path in its plain form (e.g. `/charges`, not `//charges`, `/./charges` or `/charges;x=1`)."),
            Self::AmbiguousRoute { route, sibling } => format!("The request path matches the route `{route}` as it is and the route `{sibling}` through letter case or a trailing slash, and servers disagree on which of the two runs. Nothing was stored or forwarded. Send the path exactly as the operation's route spells it."),
            Self::AmbiguousMethod { method } => format!("The method `{method}` is a method this API covers in another letter case; some servers run it as that method, others as another one, so it is not clear which operation, and which idempotency record, this request is. Nothing was stored or forwarded. Send the method in upper case (e.g. `POST`)."),
            Self::PathTooLong { limit } => format!("The request path is too long for an idempotency record: its method and path in normal form exceed {limit} bytes. Nothing was stored or forwarded. Send a shorter path (move long values into the body)."),
            Self::NoSuchRoute => "No route of this API matches the request's method and path, and requests outside its routes are refused. Nothing was forwarded. Check the path and its spelling.".into(),
            Self::AmbiguousRequest { header } => format!("The `{header}` header appears more than once or with differing values, so the API could read this request differently from the way idemgate recorded it. Nothing was stored or forwarded. Send the header once."),
            Self::OverrideHeader { header } => format!("The `{header}` header makes some servers run another path or method than the request line names (a path prefix stripped, a POST run as PATCH), so it is not clear which operation, and which idempotency record, this request is. Nothing was stored or forwarded. Send the request without it, with the method and path of the operation itself."),
        }
    }
}
