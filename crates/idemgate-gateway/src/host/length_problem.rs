//! A problem+json body for hyper's answer to a request whose `Content-Length` values differ.
//!
//! hyper 1.x refuses such a request head itself (RFC 9112 §6.3: a message whose length is
//! ambiguous is how requests are smuggled): its HTTP/1 parser (`proto/h1/role.rs`) fails
//! with a parse error and its connection writes a fixed `400 Bad Request` with an empty
//! body. There is no hook for that answer: the request never reaches a service, and
//! neither `hyper::server::conn::http1::Builder` nor hyper-util's `auto::Builder` lets a
//! parse error be mapped to a response. So the connection is wrapped ([`LengthProblemIo`]):
//!
//! - reading, it looks at each request head as hyper reads it (the bytes read since the
//!   last response began, up to the blank line) and applies hyper's own rule to its
//!   `Content-Length` fields (values that differ, or a value that is not one plain number,
//!   like `7, 7` or `+7`, unless a `Transfer-Encoding` came first);
//! - writing, when that head had such values and hyper's next write is its bare `400` head,
//!   it writes the `ambiguous-request` problem (with hyper's `Date`, `Connection: close`)
//!   in its place: hyper closes the connection after it either way.
//!
//! Every other byte passes through untouched. The head of a pipelined request (read while
//! the previous response was being written) and HTTP/2 connections are not looked at, and
//! keep hyper's own answer.

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::{Buf, Bytes};
use futures_util::FutureExt;
use http_body_util::BodyExt;
use idemgate_tower::IdempotencyRejection;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

mod head;

use head::Head;

/// hyper's answer to a head it cannot parse: its status line, as it writes it.
const BARE_400: &[u8] = b"HTTP/1.1 400 Bad Request\r\n";

/// hyper's interim answer to `Expect: 100-continue`, written alone before the request's body
/// is read: not the response, so the bytes read next are that body, not a head.
const CONTINUE: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n";

/// The problem answer's status line, headers and body, without `Date` (hyper's is kept).
#[derive(Clone, Debug)]
pub(crate) struct LengthProblem {
    head: Bytes,
    body: Bytes,
}

impl LengthProblem {
    /// The `ambiguous-request` problem for `content-length`, its `type` under `type_base`.
    pub(crate) fn new(type_base: &str) -> Self {
        let rejection = IdempotencyRejection::AmbiguousRequest {
            header: "content-length".into(),
        };
        let response = rejection.into_response(type_base);
        let (parts, body) = response.into_parts();
        let body = match body.collect().now_or_never() {
            Some(Ok(collected)) => collected.to_bytes(),
            _ => Bytes::new(), // a full body is ready at once and never fails
        };
        let mut head = format!("HTTP/1.1 {}\r\n", parts.status).into_bytes();
        for (name, value) in &parts.headers {
            head.extend([name.as_str().as_bytes(), b": ", value.as_bytes(), b"\r\n"].concat());
        }
        head.extend_from_slice(format!("content-length: {}\r\n", body.len()).as_bytes());
        head.extend_from_slice(b"connection: close\r\n");
        Self {
            head: head.into(),
            body,
        }
    }

    /// The whole answer in place of hyper's `bare` head, keeping its `Date` line.
    fn replacing(&self, bare: &[u8]) -> Bytes {
        let date = bare
            .split(|&b| b == b'\n')
            .find(|line| line.len() > 5 && line[..5].eq_ignore_ascii_case(b"date:"));
        let mut out = Vec::with_capacity(self.head.len() + self.body.len() + 64);
        out.extend_from_slice(&self.head);
        if let Some(date) = date {
            out.extend_from_slice(date);
            out.push(b'\n');
        }
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(&self.body);
        out.into()
    }
}

/// A connection whose answer to a request head with differing `Content-Length` values is
/// [`LengthProblem`] (see the module documentation).
#[derive(Debug)]
pub(crate) struct LengthProblemIo<I> {
    io: I,
    head: Head,
    problem: LengthProblem,
    /// What is left to write of the problem answer, once it replaced hyper's.
    pending: Option<Bytes>,
}

impl<I> LengthProblemIo<I> {
    /// Wraps the connection `io`, answering with `problem`.
    pub(crate) fn new(io: I, problem: LengthProblem) -> Self {
        Self {
            io,
            head: Head::default(),
            problem,
            pending: None,
        }
    }
}

impl<I: AsyncWrite + Unpin> LengthProblemIo<I> {
    /// Writes what is left of the problem answer.
    fn poll_pending(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while let Some(pending) = &mut self.pending {
            if pending.is_empty() {
                self.pending = None;
                break;
            }
            let n = ready!(Pin::new(&mut self.io).poll_write(cx, pending))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            pending.advance(n);
        }
        Poll::Ready(Ok(()))
    }

    /// Whether `buf` (one whole write) is hyper's bare `400` answering a head with
    /// differing `Content-Length` values; if so, the problem answer goes out in its place
    /// (now or on the flush that follows), and this is the result of hyper's write: its head
    /// counts as written.
    fn replaced(&mut self, cx: &mut Context<'_>, buf: &[u8]) -> Option<Poll<io::Result<usize>>> {
        let bare = self.head.conflicting()
            && buf.starts_with(BARE_400)
            && buf.ends_with(b"\r\n\r\n")
            && buf
                .windows(b"content-length: 0\r\n".len())
                .any(|w| w.eq_ignore_ascii_case(b"content-length: 0\r\n"));
        if buf != CONTINUE {
            self.head.response_began();
        }
        if !bare {
            return None;
        }
        self.pending = Some(self.problem.replacing(buf));
        match self.poll_pending(cx) {
            Poll::Ready(Err(e)) => Some(Poll::Ready(Err(e))),
            _ => Some(Poll::Ready(Ok(buf.len()))),
        }
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for LengthProblemIo<I> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        ready!(Pin::new(&mut this.io).poll_read(cx, buf))?;
        this.head.read(&buf.filled()[before..]);
        Poll::Ready(Ok(()))
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for LengthProblemIo<I> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        ready!(this.poll_pending(cx))?;
        if let Some(written) = this.replaced(cx, buf) {
            return written;
        }
        Pin::new(&mut this.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        ready!(this.poll_pending(cx))?;
        // hyper's bare head is one slice; anything else is a response it is writing.
        let mut slices = bufs.iter().filter(|b| !b.is_empty());
        if let (Some(only), None) = (slices.next(), slices.next()) {
            if let Some(written) = this.replaced(cx, only) {
                return written;
            }
        } else {
            this.head.response_began();
        }
        Pin::new(&mut this.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_pending(cx))?;
        Pin::new(&mut this.io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_pending(cx))?;
        Pin::new(&mut this.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests;
