//! Without the `metrics` feature the layer records nothing; the route labels stay, for the
//! access log.

use std::sync::Arc;

use tokio::time::Instant;

use super::{UNCOVERED, UNMATCHED};
use crate::policy::Policy;

/// The route label of a request (this build records no metrics).
#[derive(Debug)]
pub struct RouteMetrics {
    route: Arc<str>,
}

impl RouteMetrics {
    /// The label `route`.
    pub fn new(route: &str) -> Self {
        Self {
            route: route.into(),
        }
    }

    /// The route label.
    pub fn route(&self) -> &str {
        &self.route
    }

    /// Records nothing.
    pub fn count(&self, _outcome: &'static str) {}

    /// Records nothing.
    pub fn request_took(&self, _outcome: &'static str, _started: Instant) {}

    /// Records nothing.
    pub fn upstream(&self, _status: Option<http::StatusCode>, _started: Instant) {}
}

/// The route labels of one policy.
#[derive(Debug)]
pub(crate) struct Meters {
    unmatched: Arc<RouteMetrics>,
    uncovered: Arc<RouteMetrics>,
}

impl Meters {
    pub(crate) fn for_policy(_policy: &Policy, _backend: &'static str) -> Self {
        Self {
            unmatched: Arc::new(RouteMetrics::new(UNMATCHED)),
            uncovered: Arc::new(RouteMetrics::new(UNCOVERED)),
        }
    }

    pub(crate) fn route(&self, label: &str) -> Arc<RouteMetrics> {
        match label {
            UNMATCHED => self.unmatched.clone(),
            _ => Arc::new(RouteMetrics::new(label)),
        }
    }

    pub(crate) fn uncovered(&self) -> &Arc<RouteMetrics> {
        &self.uncovered
    }
}

#[cfg(feature = "limits")]
pub(crate) fn limited(_route: &str, _limit: &'static str) {}

#[cfg(feature = "limits")]
pub(crate) fn limit_table_full() {}
