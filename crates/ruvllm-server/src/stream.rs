//! What every dialect does with a generation, whatever its wire format: a channel whose
//! receiving end is the response body, the next chunk of a generation (or `None` once the
//! client has gone, which cancels it) or its parsed events, and a whole generation for
//! non-streaming requests.

use futures::{Stream, StreamExt};
use ruvllm_runtime::{Generation, RuntimeError, TextStream, ToolEvent, ToolParser};

use crate::error::{ApiError, ApiResult};

/// A channel whose receiving end is a [`Stream`] (the response body) and whose sending
/// end can tell when the client has gone ([`tokio::sync::mpsc::Sender::closed`]).
pub(crate) fn channel<T: Send + 'static>(
) -> (tokio::sync::mpsc::Sender<T>, impl Stream<Item = T> + Send) {
    let (tx, rx) = tokio::sync::mpsc::channel::<T>(64);
    let s = futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|x| (x, rx)) });
    (tx, s)
}

/// The next chunk of a generation; `None` at its end or when the client went away
/// (then dropping the [`TextStream`] cancels the generation).
pub(crate) async fn next_chunk<T>(
    s: &mut TextStream,
    tx: &tokio::sync::mpsc::Sender<T>,
) -> Option<Result<String, RuntimeError>> {
    tokio::select! {
        x = StreamExt::next(s) => x,
        _ = tx.closed() => None,
    }
}

/// Reads a whole generation (non-streaming requests).
pub(crate) async fn collect(mut s: TextStream) -> ApiResult<Generation> {
    while let Some(c) = StreamExt::next(&mut s).await {
        c.map_err(|e| ApiError::from_runtime(&e, ""))?;
    }
    match s.outcome() {
        Some(Ok(g)) => Ok(g),
        Some(Err(e)) => Err(ApiError::from_runtime(&e, "")),
        None => Err(ApiError::from_runtime(
            &RuntimeError::Model("the generation ended without a result".into()),
            "",
        )),
    }
}

/// The parser's events for the next chunk of a generation, and whether the generation
/// has ended (then the events are what the parser held back); `Err` when it failed.
pub(crate) async fn next_events<T>(
    s: &mut TextStream,
    tx: &tokio::sync::mpsc::Sender<T>,
    parser: &mut ToolParser,
) -> Result<(Vec<ToolEvent>, bool), RuntimeError> {
    match next_chunk(s, tx).await {
        Some(Ok(t)) => Ok((parser.push(&t), false)),
        Some(Err(e)) => Err(e),
        None => Ok((parser.finish(), true)),
    }
}
