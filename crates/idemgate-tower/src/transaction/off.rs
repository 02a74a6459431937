//! Without the `postgres` feature no lease completes inside a handler's transaction.

/// No store completes in a transaction in this build.
#[derive(Debug, Clone)]
pub(crate) enum TxStore {}

impl TxStore {
    /// Nothing to seal: no such store exists in this build.
    pub(crate) fn set_keyring(&mut self, _: Option<std::sync::Arc<idemgate_core::seal::Keyring>>) {
        match *self {}
    }
}
