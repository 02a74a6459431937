//! What a connection's read deadline ([`TimedIo`](super::deadline::TimedIo)), its serving
//! loop and its requests share: how many requests are in flight, when it last went idle, and
//! whether it can be parked.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;

use futures_util::task::AtomicWaker;

/// What a connection's [`TimedIo`](super::deadline::TimedIo) and its requests share.
#[derive(Debug, Default)]
pub(crate) struct Conn {
    /// Requests whose response has not ended.
    pub(super) in_flight: AtomicUsize,
    /// Counts the times the last request in flight ended: the connection went idle.
    pub(super) idled: AtomicU64,
    /// The connection's task, woken when it goes idle so that its read deadline starts.
    pub(super) waker: AtomicWaker,
    /// Whether the body of the request in flight was read to its end.
    body_ended: AtomicBool,
    /// Whether hyper may let the connection go once the last request ends (its body read to
    /// the end, keep-alive on both sides): set by the request when it ends.
    reusable: AtomicBool,
    /// Set by [`TimedIo`](super::deadline::TimedIo) when hyper waits for the next request on
    /// an idle connection that is [`reusable`](Self::reusable): the connection can be parked.
    pub(super) park: AtomicBool,
    /// A park was asked for but hyper was not idle (a head it had begun to read, a
    /// response not yet flushed): hyper ends the connection itself, and no park is asked
    /// for again before it has.
    park_failed: AtomicBool,
}

impl Conn {
    /// A request begins; it is in flight until the guard is dropped.
    pub(crate) fn begin(self: &Arc<Self>) -> InFlight {
        self.reusable.store(false, SeqCst);
        self.body_ended.store(false, SeqCst);
        self.in_flight.fetch_add(1, SeqCst);
        InFlight(self.clone())
    }

    /// The body of the request in flight was read to its end.
    pub(crate) fn body_ended(&self) {
        self.body_ended.store(true, SeqCst);
    }

    /// Whether the last request left the connection ready for the next one.
    pub(crate) fn reusable(&self) -> bool {
        self.reusable.load(SeqCst)
    }

    /// Whether [`TimedIo`](super::deadline::TimedIo) asked for the connection to be parked
    /// since the last call.
    pub(crate) fn take_park(&self) -> bool {
        self.park.swap(false, SeqCst)
    }

    /// A new hyper connection serves the connection: parks may be asked for again.
    pub(crate) fn serving(&self) {
        self.park.store(false, SeqCst);
        self.park_failed.store(false, SeqCst);
    }

    /// hyper did not let the connection go when asked ([`Self::park_failed`]).
    pub(crate) fn set_park_failed(&self) {
        self.park_failed.store(true, SeqCst);
    }

    /// Whether a park failed on the hyper connection serving the connection now.
    pub(crate) fn park_failed(&self) -> bool {
        self.park_failed.load(SeqCst)
    }
}

/// A request in flight on its connection ([`Conn::begin`]), until dropped.
#[derive(Debug)]
pub(crate) struct InFlight(Arc<Conn>);

impl InFlight {
    /// The connection the request is in flight on.
    pub(crate) fn conn(&self) -> Arc<Conn> {
        self.0.clone()
    }

    /// The response was written to its end; with `keep_alive` (neither the request nor the
    /// response asked to close) and the request's body read to its end, the connection is
    /// left [`reusable`](Conn::reusable).
    pub(crate) fn finish(self, keep_alive: bool) {
        if keep_alive && self.0.body_ended.load(SeqCst) {
            self.0.reusable.store(true, SeqCst);
        }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if self.0.in_flight.fetch_sub(1, SeqCst) == 1 {
            self.0.idled.fetch_add(1, SeqCst);
            self.0.waker.wake();
        }
    }
}
