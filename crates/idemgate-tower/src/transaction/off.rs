//! Without the `postgres` feature no lease completes inside a handler's transaction.

/// No store completes in a transaction in this build.
#[derive(Debug, Clone)]
pub(crate) enum TxStore {}
