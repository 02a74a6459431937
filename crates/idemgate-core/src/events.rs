//! Key events: what a holder tells the duplicates that wait on its key
//! ([`RoutePlan::on_in_flight`](crate::lifecycle::RoutePlan::on_in_flight) `= "wait"`).
//!
//! An event only says "read this key again" ([`EventKind::Written`]: an outcome landed, an
//! operator resolved it) or "its holder released it" ([`EventKind::Released`], with the
//! answer the holder's client got). Waiters never learn an outcome from an event: they read
//! the record, and a release the record read after it contradicts (the released lease still
//! holds it) is ignored. So a lost `w` event delays an answer (until the waiters' next poll);
//! a released key is only run again on a release's event, never because its record vanished,
//! so a lost release event makes the waiters answer as for a vanished record (`409`), never
//! run it. A forged release of a lease that still holds its record changes no answer.
//!
//! Between processes an event travels as one line of text ([`KeyEvent::encode`]):
//! `w <key id>` or `r <key id> <lease id, hex> <status> <retry-after ms or ->`, the key id being
//! [`KeyId::of`] in 32 hex digits. It names no key, principal or route in the clear.

use std::fmt;
use std::sync::{Arc, Weak};

use sha2::{Digest, Sha256};

use crate::lifecycle::Waiters;
use crate::record::{Lease, LeaseToken, ScopedKey};

/// A record's identity in events: the first 16 bytes of SHA-256 over the principal, the
/// route and the key, each followed by a NUL byte.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct KeyId([u8; 16]);

impl KeyId {
    /// The id of `key`.
    pub fn of(key: &ScopedKey) -> Self {
        let mut h = Sha256::new();
        for part in [key.principal.as_str(), &key.route, key.key.as_str()] {
            h.update(part.as_bytes());
            h.update([0]);
        }
        let mut id = [0; 16];
        id.copy_from_slice(&h.finalize()[..16]);
        Self(id)
    }
}

impl fmt::Debug for KeyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&hex::encode(self.0))
    }
}

/// The statuses a release can carry: final ones (RFC 9110 §15: 1xx are interim).
pub const RELEASED_STATUSES: std::ops::RangeInclusive<u16> = 200..=599;
/// The longest `Retry-After` a release can carry, in ms (a day).
pub const MAX_RETRY_AFTER_MS: u64 = 86_400_000;

/// The answer a holder's client got when the holder released its key (an upstream status in
/// the route's `release_statuses`, a request never forwarded).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Released {
    /// Which lease was released: [`Released::lease_id`] (fences restart after a release, so
    /// they cannot tell two releases apart).
    pub lease: u64,
    /// The status the holder's client got (`503` when no response was forwarded).
    pub status: u16,
    /// Its `Retry-After`, in ms, if it had one: no waiter runs the key again before it.
    pub retry_after_ms: Option<u64>,
}

impl Released {
    /// The id of `lease` in events: the first 8 bytes of SHA-256 over its token and fence
    /// (never the token itself, which proves ownership).
    pub fn lease_id(lease: &Lease) -> u64 {
        Self::lease_id_of(lease.token, lease.fence)
    }

    /// [`Released::lease_id`] of the lease with `token` and `fence` (a record's).
    pub fn lease_id_of(token: LeaseToken, fence: i64) -> u64 {
        let mut h = Sha256::new();
        h.update(token.0.to_le_bytes());
        h.update(fence.to_le_bytes());
        let digest = h.finalize();
        u64::from_le_bytes(digest[..8].try_into().expect("8 bytes"))
    }
}

/// What happened to a key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    /// Its record changed (an outcome landed, an operator resolved it): read it again.
    Written,
    /// Its holder released it: nothing ran, and it may run again.
    Released(Released),
}

/// One event about one key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeyEvent {
    /// The key's id.
    pub key: KeyId,
    /// What happened.
    pub kind: EventKind,
}

impl KeyEvent {
    /// [`EventKind::Written`] for `key`: its record changed, read it again.
    pub fn written(key: &ScopedKey) -> Self {
        Self {
            key: KeyId::of(key),
            kind: EventKind::Written,
        }
    }

    /// The event as one line of ASCII text, at most 90 bytes (see the module).
    pub fn encode(&self) -> String {
        let id = hex::encode(self.key.0);
        match self.kind {
            EventKind::Written => format!("w {id}"),
            EventKind::Released(r) => {
                let after = r.retry_after_ms.map_or("-".into(), |ms| ms.to_string());
                format!("r {id} {:x} {} {after}", r.lease, r.status)
            }
        }
    }

    /// Parses [`KeyEvent::encode`]'s text; `None` for anything else.
    pub fn decode(text: &str) -> Option<Self> {
        let mut parts = text.split(' ');
        let kind = parts.next()?;
        let mut id = [0; 16];
        hex::decode_to_slice(parts.next()?, &mut id).ok()?;
        let kind = match kind {
            "w" => EventKind::Written,
            "r" => EventKind::Released(Released {
                lease: u64::from_str_radix(parts.next()?, 16).ok()?,
                status: number(parts.next()?).filter(|s| RELEASED_STATUSES.contains(s))?,
                retry_after_ms: match parts.next()? {
                    "-" => None,
                    ms => Some(number(ms).filter(|ms| *ms <= MAX_RETRY_AFTER_MS)?),
                },
            }),
            _ => return None,
        };
        parts.next().is_none().then_some(Self {
            key: KeyId(id),
            kind,
        })
    }
}

/// Plain decimal digits, no sign and no leading zero (as [`KeyEvent::encode`] writes them).
fn number<T: std::str::FromStr>(text: &str) -> Option<T> {
    let digits = !text.is_empty()
        && text.bytes().all(|b| b.is_ascii_digit())
        && (text == "0" || !text.starts_with('0'));
    digits.then(|| text.parse().ok()).flatten()
}

/// Where a store's listener ([`IdempotencyStore::listen`](crate::IdempotencyStore::listen))
/// hands the events it receives from other processes: the waiters of one lifecycle.
#[derive(Clone, Debug)]
pub struct EventSink(Weak<Waiters>);

impl EventSink {
    pub(crate) fn new(waiters: &Arc<Waiters>) -> Self {
        Self(Arc::downgrade(waiters))
    }

    /// Hands `event` to the waiters of its key. False once the lifecycle is gone: the
    /// listener should then stop.
    pub fn deliver(&self, event: KeyEvent) -> bool {
        self.0.upgrade().map(|w| w.deliver(event)).is_some()
    }

    /// Says that events may have been missed (the listener's connection broke and came
    /// back): every waited key is read again. False once the lifecycle is gone.
    pub fn missed(&self) -> bool {
        self.0.upgrade().map(|w| w.missed()).is_some()
    }

    /// True while the lifecycle lives.
    pub fn is_live(&self) -> bool {
        self.0.strong_count() > 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::unique_key;

    #[test]
    fn events_survive_their_text() {
        let key = KeyId::of(&unique_key("alice"));
        let released = Released {
            lease: u64::MAX - 7,
            status: 503,
            retry_after_ms: Some(2000),
        };
        for kind in [
            EventKind::Written,
            EventKind::Released(released),
            EventKind::Released(Released {
                retry_after_ms: None,
                ..released
            }),
        ] {
            let event = KeyEvent { key, kind };
            let text = event.encode();
            assert!(text.len() <= 90, "{text}");
            assert_eq!(KeyEvent::decode(&text), Some(event), "{text}");
        }
        let written = KeyEvent::written(&unique_key("alice"));
        assert_eq!(written.kind, EventKind::Written);
        assert_ne!(written.key, key, "another key");
    }

    #[test]
    fn other_text_is_no_event() {
        let id = "0123456789abcdef0123456789abcdef";
        for text in [
            "",
            "w",
            "w 0123",
            &format!("w {id} extra"),
            &format!("x {id}"),
            &format!("r {id} 7 503"),
            &format!("r {id} 7 503 soon"),
            &format!("r {id} -1 503 -"),
            &format!("r {id} 7 99999 -"),
            &format!("r {id} 7 101 -"),
            &format!("r {id} 7 600 -"),
            &format!("r {id} 7 +503 -"),
            &format!("r {id} 7 503 86400001"),
            &format!("r {id} 7 503 +5"),
            &format!("r {id} 7 0503 -"),
            &format!("r {id} 7 503 01"),
        ] {
            assert_eq!(KeyEvent::decode(text), None, "{text:?}");
        }
    }

    #[test]
    fn ids_differ_by_every_part() {
        let a = unique_key("alice");
        let mut b = a.clone();
        b.route.push('x');
        let mut c = a.clone();
        c.principal = "bob".into();
        let ids = [KeyId::of(&a), KeyId::of(&b), KeyId::of(&c)];
        assert_ne!(ids[0], ids[1]);
        assert_ne!(ids[0], ids[2]);
        assert_eq!(KeyId::of(&a), ids[0]);
    }
}
