//! Planted bugs for the deterministic simulation (`crates/idemgate-sim`), which must find
//! each one. Without the `planted-bugs` feature (every production build) the switches do
//! not exist and the check below is a constant `false`; with it, each switch is off unless
//! a simulation turns it on, for its own thread only.

#[cfg(feature = "planted-bugs")]
thread_local! {
    static TAKEOVER_RELEASE_DELETES: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Turns on (or off), for the calling thread, the bug the protocol model found: a
/// take-over whose forward did nothing releases (deletes) the record instead of leaving it
/// to lapse ([`super::Finished::LeftToLapse`]).
#[cfg(feature = "planted-bugs")]
pub fn plant_takeover_release_deletes(on: bool) {
    TAKEOVER_RELEASE_DELETES.with(|c| c.set(on));
}

/// Whether the planted take-over release is on in this thread (always false without the
/// `planted-bugs` feature).
pub(crate) fn takeover_release_deletes() -> bool {
    #[cfg(feature = "planted-bugs")]
    {
        TAKEOVER_RELEASE_DELETES.with(std::cell::Cell::get)
    }
    #[cfg(not(feature = "planted-bugs"))]
    {
        false
    }
}
