//! A forwarded request runs on a task of its own, whatever its method, so that what the
//! upstream executed is counted whatever its caller did: a caller that hangs up, times
//! out, or loses its connection to another request's fault (a reset ends every HTTP/2
//! stream on it) drops its wait, not the exchange. Cancelling the exchange instead (as
//! nginx does by default) would leave the ledger guessing: the upstream may have done the
//! work already.
//!
//! What this costs is bounded: a task outlives its caller only until the upstream's
//! answer begins (the upstream timeout, `--upstream-timeout`) or the request body stops
//! (the body deadline); the answer's body is then dropped, and its connection with it.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// Whether the caller of a detached request is still waiting for its answer.
#[derive(Debug, Clone, Default)]
pub(crate) struct Caller(Arc<AtomicBool>);

impl Caller {
    /// Whether the caller stopped waiting before now.
    pub(crate) fn gone(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

/// Marks its caller gone when the wait is dropped before the task ended.
struct Waiting(Caller);

impl Drop for Waiting {
    fn drop(&mut self) {
        (self.0).0.store(true, Ordering::Release);
    }
}

/// Runs `task` on a task of its own and waits for it as `caller`; `None` if it panicked.
/// Dropping the wait leaves the task running, and `caller` says it is gone.
pub(crate) async fn detach<T: Send + 'static>(
    caller: Caller,
    task: impl Future<Output = T> + Send + 'static,
) -> Option<T> {
    let waiting = Waiting(caller);
    let ended = tokio::spawn(task).await.ok();
    // The task has ended: whatever `gone` says now, it read it before.
    drop(waiting);
    ended
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_dropped_wait_leaves_the_task_running_and_says_the_caller_went() {
        let caller = Caller::default();
        let (go, wait) = tokio::sync::oneshot::channel::<()>();
        let (seen, gone) = tokio::sync::oneshot::channel();
        let watch = caller.clone();
        let waiting = detach(caller, async move {
            let _ = wait.await;
            let _ = seen.send(watch.gone());
        });
        // Polled once (the task spawned), then dropped as a caller that left.
        let mut waiting = Box::pin(waiting);
        assert!(futures_poll_once(waiting.as_mut()).await.is_none());
        drop(waiting);
        let _ = go.send(());
        assert_eq!(
            gone.await,
            Ok(true),
            "the task ran on and saw its caller gone"
        );
    }

    #[tokio::test]
    async fn a_caller_that_waits_is_not_gone() {
        let caller = Caller::default();
        let watch = caller.clone();
        assert_eq!(
            detach(caller, async move { watch.gone() }).await,
            Some(false)
        );
    }

    async fn futures_poll_once<F: Future + Unpin>(mut future: F) -> Option<F::Output> {
        std::future::poll_fn(|cx| match std::pin::Pin::new(&mut future).poll(cx) {
            std::task::Poll::Ready(out) => std::task::Poll::Ready(Some(out)),
            std::task::Poll::Pending => std::task::Poll::Ready(None),
        })
        .await
    }
}
