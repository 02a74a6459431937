//! Without the `limits` feature no limit is enforced: every request is admitted, and a
//! route that sets [`PrincipalLimits`] is warned about once.

use std::sync::{Arc, Once};

use idemgate_core::lifecycle::Answer;

use super::PrincipalLimits;
use crate::rejection::IdempotencyRejection;

/// Admits everything.
#[derive(Debug, Default)]
pub(crate) struct Limiter;

impl Limiter {
    pub(crate) fn admit(
        self: &Arc<Self>,
        limits: &PrincipalLimits,
        _route: &str,
        _principal: &str,
    ) -> Result<Ticket, Limited> {
        static WARNED: Once = Once::new();
        if !limits.is_off() {
            WARNED.call_once(|| {
                tracing::warn!("per-principal limits are configured but idemgate-tower was built without its `limits` feature: they are not enforced");
            });
        }
        Ok(Ticket)
    }
}

/// Holds nothing.
#[derive(Debug)]
pub(crate) struct Ticket;

impl Ticket {
    pub(crate) fn settle(&mut self, _answer: &Answer) {}
}

/// No request is ever refused.
#[derive(Debug)]
pub(crate) enum Limited {}

impl From<Limited> for IdempotencyRejection {
    fn from(l: Limited) -> Self {
        match l {}
    }
}
