//! What every scenario works with: the operation under test (its URL, method, body and
//! headers), the request budget, fresh idempotency keys, and how an execution is told
//! apart (the resource id in the answer).

use http::{HeaderName, HeaderValue};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::Mutex;
use tokio::time::Instant;

use crate::http::{Answer, Exchange, Request, Target};
use crate::options::{Options, Profile};

/// The header that carries the key (draft-ietf-httpapi-idempotency-key-header-07 §2).
pub(crate) const KEY: HeaderName = HeaderName::from_static("idempotency-key");

/// What a redacted value reads as in a replay (`store_response = "redacted"`).
const REDACTED: &str = "[redacted]";

/// The operation under test and the state of one probe run.
#[derive(Debug)]
pub struct Probe {
    pub(crate) target: Target,
    pub(crate) opts: Options,
    /// Requests sent so far.
    sent: AtomicUsize,
    /// Keys made so far.
    keys: AtomicU64,
    /// This run's part of every key, so that two runs never share one.
    run: u64,
    /// The URL a relative `Location` is resolved against (RFC 9110 §10.2.2).
    base: Option<url::Url>,
    /// Every key whose first request ran, in the order run: retried at the end of the run
    /// to check its record was kept.
    firsts: Mutex<Vec<Ran>>,
}

/// A key whose first request (the operation's own, as the first principal) ran.
#[derive(Debug, Clone)]
pub struct Ran {
    /// The idempotency key.
    pub key: String,
    /// The id its first answer holds.
    pub id: String,
    /// When that answer came.
    pub at: Instant,
    /// The key lifetime the answer advertised (`Idempotency-Key-Lifetime`, seconds).
    pub lifetime: Option<u64>,
}

impl Probe {
    /// A probe of `opts`'s operation through `target`.
    pub fn new(target: Target, opts: Options) -> Self {
        Self {
            target,
            sent: AtomicUsize::new(0),
            keys: AtomicU64::new(0),
            run: rand::random(),
            base: url::Url::parse(&opts.url.to_string()).ok(),
            firsts: Mutex::default(),
            opts,
        }
    }

    /// The profile whose rules are checked.
    pub fn profile(&self) -> Profile {
        self.opts.profile
    }

    /// Requests sent so far.
    pub fn sent(&self) -> usize {
        self.sent.load(SeqCst)
    }

    /// Whether `cost` more requests stay within `--max-requests`.
    pub fn affords(&self, cost: usize) -> bool {
        self.sent() + cost <= self.opts.max_requests
    }

    /// A key no request of this or another run has used: `probe-<run>-<n>`, 27 characters.
    pub fn key(&self) -> String {
        let n = self.keys.fetch_add(1, SeqCst);
        format!("probe-{:016x}-{n:04}", self.run)
    }

    /// The operation's request as the first principal, with `key` as an RFC 8941
    /// `sf-string` (draft-07 §2), or without a key.
    pub fn request(&self, key: Option<&str>) -> Request {
        let mut headers = self.opts.headers.clone();
        if let Some(key) = key {
            headers.push((KEY, sf_string(key)));
        }
        Request {
            method: self.opts.method.clone(),
            path: self.opts.path.clone(),
            headers,
            body: self.opts.body.clone(),
        }
    }

    /// [`Self::request`] with the raw `Idempotency-Key` field values given (none, one
    /// malformed, two).
    pub fn request_with_keys(&self, values: &[&[u8]]) -> Request {
        let mut request = self.request(None);
        for v in values {
            let value = HeaderValue::from_bytes(v).expect("a probe key value is a header value");
            request.headers.push((KEY, value));
        }
        request
    }

    /// [`Self::request`] as the second principal (`--second-principal-header`), or `None`
    /// without one.
    pub fn as_second(&self, key: &str) -> Option<Request> {
        let second = self.opts.second_principal.as_ref()?;
        let mut request = self.request(Some(key));
        request
            .headers
            .retain(|(n, _)| !second.iter().any(|(m, _)| m == n));
        request.headers.splice(0..0, second.iter().cloned());
        Some(request)
    }

    /// Notes that `ran`'s key ran: [`Self::ran`] lists it.
    pub fn remember(&self, ran: Ran) {
        self.firsts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(ran);
    }

    /// Every key whose first request ran ([`Self::remember`]), oldest first.
    pub fn ran(&self) -> Vec<Ran> {
        self.firsts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// `text` with every value of `--header` and `--second-principal-header` (4 bytes or
    /// more, other than `Content-Type`), and each word of such a value of 8 bytes or more,
    /// replaced: a server that echoes a credential into
    /// its answer never gets it printed.
    pub fn scrub(&self, mut text: String) -> String {
        let fields = self.opts.headers.iter();
        let fields = fields.chain(self.opts.second_principal.iter().flatten());
        for (name, value) in fields.filter(|(n, _)| *n != http::header::CONTENT_TYPE) {
            let value = crate::http::shown(value.as_bytes());
            // The whole value, and its words of 8 bytes or more (a bearer token alone).
            let words = value.split(' ').filter(|w| w.len() >= 8 && *w != value);
            for secret in std::iter::once(value.as_str()).chain(words) {
                if secret.len() < 4 {
                    continue;
                }
                for form in spellings(secret) {
                    if text.contains(&form) {
                        text = text.replace(&form, &format!("({name} value, not shown)"));
                    }
                }
            }
        }
        text
    }

    /// Sends `request`, counted against the budget.
    pub async fn send(&self, request: Request) -> Exchange {
        self.sent.fetch_add(1, SeqCst);
        self.target.send(request).await
    }

    /// Sends `request` as a client that leaves ([`Target::abandon`]): the exchange holds
    /// the answer the server still wrote, if any.
    ///
    /// # Errors
    /// The request could not be sent.
    pub async fn abandon(&self, request: Request) -> anyhow::Result<Exchange> {
        self.sent.fetch_add(1, SeqCst);
        self.target.abandon(request).await
    }

    /// The resource id of an answer: at `--id-pointer` in its JSON body, else its
    /// `Location` field (not a redirect's: 301, 302, 307, 308); `None` when it has neither.
    pub fn id(&self, e: &Exchange) -> Option<String> {
        let a = e.answer.as_ref().ok()?;
        // An error answer never made a resource, whatever its body holds.
        if a.status >= 400 {
            return None;
        }
        if let Some(pointer) = &self.opts.id_pointer {
            // The value's text as written: a number past 2^53 is not rounded.
            let raw = at_pointer(&a.body, pointer)?;
            let text = raw.get();
            if text == "null" {
                return None;
            }
            let Ok(s) = serde_json::from_str::<String>(text) else {
                return Some(crate::http::shown(text.as_bytes()));
            };
            // A replay whose stored form redacted the id holds no id of its own. Shown on a
            // terminal: control characters escaped.
            return match s == REDACTED && stored_form_changed(a) {
                true => None,
                false => Some(crate::http::shown(s.as_bytes())),
            };
        }
        // A redirect's Location names where to ask again, not a resource that was made.
        if matches!(a.status, 301 | 302 | 307 | 308) {
            return None;
        }
        let location = a.header("location");
        (!location.is_empty()).then(|| self.resolved(location))
    }

    /// `location` resolved against the target URL (RFC 3986 §5), so that `/v1/charges/7`
    /// and `http://host/v1/charges/7` are one id; as written when it does not resolve.
    pub fn resolved(&self, location: &str) -> String {
        let joined = self.base.as_ref().and_then(|b| b.join(location).ok());
        joined.map_or_else(|| location.to_owned(), String::from)
    }

    /// The id `e` answers with, where `first_id` is the key's first answer's: its own id,
    /// or `first_id` for a replay whose stored form left the id out (a `2xx` marked
    /// `Idempotent-Redacted` or `Idempotent-Body-Omitted`).
    pub fn replay_id(&self, e: &Exchange, first_id: &str) -> Option<String> {
        self.id(e)
            .or_else(|| stored_form_replay(e).then(|| first_id.to_owned()))
    }

    /// Where a failure to find an id is explained: the option that sets it.
    pub fn id_source(&self) -> String {
        match &self.opts.id_pointer {
            Some(p) => format!("the JSON body at {p} (--id-pointer)"),
            None => "a Location field (or --id-pointer)".to_owned(),
        }
    }
}

/// `secret` as a server may echo it: as given, in upper and lower case, percent-encoded
/// (RFC 3986 §2.1, in either case of hex digit) and in base64 (RFC 4648 §4 and §5, with and
/// without padding).
fn spellings(secret: &str) -> Vec<String> {
    use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
    use base64::Engine as _;
    let unreserved = |b: u8| b.is_ascii_alphanumeric() || b"-._~".contains(&b);
    let pct = |upper: bool| -> String {
        (secret.bytes())
            .map(|b| match (unreserved(b), upper) {
                (true, _) => (b as char).to_string(),
                (false, true) => format!("%{b:02X}"),
                (false, false) => format!("%{b:02x}"),
            })
            .collect()
    };
    let bytes = secret.as_bytes();
    let mut forms = vec![
        secret.to_owned(),
        secret.to_ascii_uppercase(),
        secret.to_ascii_lowercase(),
        pct(true),
        pct(false),
    ];
    for engine in [STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD] {
        forms.push(engine.encode(bytes));
    }
    forms.sort_by_key(|f| std::cmp::Reverse(f.len()));
    forms.dedup();
    forms
}

/// The JSON value at `pointer` (RFC 6901) in `body`, its text as written.
fn at_pointer(body: &[u8], pointer: &str) -> Option<Box<serde_json::value::RawValue>> {
    use serde_json::value::RawValue;
    let mut at: Box<RawValue> = serde_json::from_slice(body).ok()?;
    for token in pointer.split('/').skip(1) {
        let token = token.replace("~1", "/").replace("~0", "~");
        at = match serde_json::from_str::<std::collections::HashMap<String, Box<RawValue>>>(
            at.get(),
        ) {
            Ok(mut members) => members.remove(&token)?,
            Err(_) => {
                let items: Vec<Box<RawValue>> = serde_json::from_str(at.get()).ok()?;
                items.into_iter().nth(token.parse().ok()?)?
            }
        };
    }
    Some(at)
}

/// `key` as an RFC 8941 `sf-string`.
pub(crate) fn sf_string(key: &str) -> HeaderValue {
    let escaped = key.replace('\\', "\\\\").replace('"', "\\\"");
    HeaderValue::from_str(&format!("\"{escaped}\"")).expect("probe keys are visible ASCII")
}

/// Whether `a` is marked as a replay (`Idempotent-Replayed: true`).
pub(crate) fn replayed(a: &Answer) -> bool {
    a.header("idempotent-replayed").eq_ignore_ascii_case("true")
}

/// Whether `a`'s body was changed on purpose by the server's stored form
/// (`Idempotent-Redacted` or `Idempotent-Body-Omitted`): such a replay conforms.
pub(crate) fn stored_form_changed(a: &Answer) -> bool {
    a.header("idempotent-redacted").eq_ignore_ascii_case("true")
        || a.header("idempotent-body-omitted")
            .eq_ignore_ascii_case("true")
}

/// Whether `e` is a `2xx` replay in a stored form ([`stored_form_changed`]).
pub(crate) fn stored_form_replay(e: &Exchange) -> bool {
    e.answer
        .as_ref()
        .is_ok_and(|a| success(a.status) && stored_form_changed(a))
}

/// Whether `status` is `2xx`.
pub(crate) fn success(status: u16) -> bool {
    (200..300).contains(&status)
}

#[cfg(test)]
mod tests {
    use super::at_pointer;

    #[test]
    fn a_pointer_keeps_the_value_as_written() {
        // 2^53 + 1: an f64 would read it as 2^53, and two ids as one.
        let body = br#"{"id": 9007199254740993, "b": {"c/d": [0, {"~e": "v"}]}}"#;
        let text = |p: &str| at_pointer(body, p).map(|v| v.get().to_owned());
        assert_eq!(text("/id").as_deref(), Some("9007199254740993"));
        assert_eq!(text("/b/c~1d/1/~0e").as_deref(), Some("\"v\""));
        assert_eq!(text("/b/c~1d/2"), None);
        assert_eq!(text("/missing"), None);
        assert!(at_pointer(b"not json", "/id").is_none());
    }
}
