//! Body types and bounded buffering.

use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use futures_util::StreamExt;
use http_body::{Body, Frame, SizeHint};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, BodyStream, Full, StreamBody};
use idemgate_core::BoxError;

/// The body type of requests the layer forwards and of responses it returns: any body with
/// `Bytes` data, boxed.
pub struct BoxBody(UnsyncBoxBody<Bytes, BoxError>);

impl fmt::Debug for BoxBody {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BoxBody").finish_non_exhaustive()
    }
}

impl Body for BoxBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        Pin::new(&mut self.get_mut().0).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.0.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.0.size_hint()
    }
}

/// A body holding `bytes`.
pub fn full(bytes: Bytes) -> BoxBody {
    BoxBody(
        Full::new(bytes)
            .map_err(|never| match never {})
            .boxed_unsync(),
    )
}

/// Boxes any body with `Bytes` data.
pub fn boxed<B>(body: B) -> BoxBody
where
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    BoxBody(body.map_err(Into::into).boxed_unsync())
}

/// A body read up to a cap.
pub(crate) enum Buffered {
    /// The whole body, at most the cap.
    Complete(Bytes),
    /// More than the cap: what was read, and the rest still to stream.
    Exceeded {
        /// The bytes read so far (more than the cap).
        prefix: Bytes,
        /// The unread remainder.
        rest: BoxBody,
    },
    /// The body failed before its end.
    Failed(BoxError),
}

/// Reads `body` until its end or until more than `cap` bytes arrived. Trailers are dropped.
pub(crate) async fn buffer_up_to(mut body: BoxBody, cap: usize) -> Buffered {
    let mut buf = BytesMut::new();
    loop {
        match body.frame().await {
            None => return Buffered::Complete(buf.freeze()),
            Some(Err(e)) => return Buffered::Failed(e),
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data() {
                    buf.extend_from_slice(&data);
                    if buf.len() > cap {
                        return Buffered::Exceeded {
                            prefix: buf.freeze(),
                            rest: body,
                        };
                    }
                }
            }
        }
    }
}

/// `prefix` followed by the frames of `rest`.
pub(crate) fn chain(prefix: Bytes, rest: BoxBody) -> BoxBody {
    let head = futures_util::stream::once(async move { Ok::<_, BoxError>(Frame::data(prefix)) });
    BoxBody(StreamBody::new(head.chain(BodyStream::new(rest))).boxed_unsync())
}
