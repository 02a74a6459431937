//! Without the `jwt` feature there is no [`JwtVerifier`] to build, so no route can take its
//! principal from a bearer token ([`crate::PrincipalSource::Jwt`] cannot be made).

pub use crate::rejection::TokenError;

/// A JWT verifier; this build has none (enable the `jwt` feature).
#[derive(Debug, PartialEq, Eq)]
pub enum JwtVerifier {}

impl JwtVerifier {
    /// Never called: no value of this type exists.
    ///
    /// # Errors
    /// None: there is no verifier.
    pub fn principal(&self, _token: &str, _claim: &str) -> Result<String, TokenError> {
        match *self {}
    }
}
