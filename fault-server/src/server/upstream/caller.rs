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
//! And in number: at most [`MAX_ORPHANS`] run on without their callers at once (each
//! holds an upstream connection, a descriptor the connection budget does not count);
//! past that, a caller that leaves cancels its exchange, as before forwards were detached,
//! and the request is counted `abandoned`. Callers that reset HTTP/2 streams as fast as
//! they open them cannot pile up exchanges without end.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};

/// The most exchanges running on after their callers left, in this process.
pub(crate) const MAX_ORPHANS: usize = 1024;

/// Exchanges running on after their callers left, now.
static ORPHANS: AtomicUsize = AtomicUsize::new(0);

/// Where a detached exchange is: its caller waiting, gone (counted in [`ORPHANS`]),
/// finished, or cancelled as one too many.
const WAITED: u8 = 0;
const ORPHANED: u8 = 1;
const FINISHED: u8 = 2;
const CANCELLED: u8 = 3;

/// Whether the caller of a detached request is still waiting for its answer.
#[derive(Debug, Clone, Default)]
pub(crate) struct Caller(Arc<AtomicBool>);

impl Caller {
    /// Whether the caller stopped waiting before now.
    pub(crate) fn gone(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

/// Marks its caller gone when the wait is dropped before the task ended, and counts the
/// task as an orphan, or cancels it when there are [`MAX_ORPHANS`] already.
struct Waiting {
    caller: Caller,
    state: Arc<AtomicU8>,
    abort: Option<tokio::task::AbortHandle>,
}

impl Drop for Waiting {
    fn drop(&mut self) {
        self.caller.0.store(true, Ordering::Release);
        let orphaned = self
            .state
            .compare_exchange(WAITED, ORPHANED, Ordering::AcqRel, Ordering::Acquire)
            .is_ok();
        if !orphaned || ORPHANS.fetch_add(1, Ordering::AcqRel) < MAX_ORPHANS {
            return;
        }
        // One too many: cancelled, unless it finished meanwhile (then it uncounted
        // itself, and this must not).
        if self
            .state
            .compare_exchange(ORPHANED, CANCELLED, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            ORPHANS.fetch_sub(1, Ordering::AcqRel);
            if let Some(abort) = &self.abort {
                abort.abort();
            }
        }
    }
}

/// Orphans running on now.
#[cfg(test)]
fn orphans() -> usize {
    ORPHANS.load(Ordering::Acquire)
}

/// Runs `task` on a task of its own and waits for it as `caller`; `None` if it panicked
/// or was cancelled. Dropping the wait leaves the task running, and `caller` says it is
/// gone (past [`MAX_ORPHANS`], the task is cancelled instead).
pub(crate) async fn detach<T: Send + 'static>(
    caller: Caller,
    task: impl Future<Output = T> + Send + 'static,
) -> Option<T> {
    let state = Arc::new(AtomicU8::new(WAITED));
    let ends = Arc::clone(&state);
    let handle = tokio::spawn(async move {
        let out = task.await;
        if ends.swap(FINISHED, Ordering::AcqRel) == ORPHANED {
            ORPHANS.fetch_sub(1, Ordering::AcqRel);
        }
        out
    });
    let mut waiting = Waiting {
        caller,
        state,
        abort: Some(handle.abort_handle()),
    };
    let ended = handle.await.ok();
    // The task has ended: whatever `gone` says now, it read it before.
    waiting.abort = None;
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

    /// Callers that all leave at once: at most [`MAX_ORPHANS`] exchanges run on, the
    /// rest are cancelled (and counted `abandoned` by their handlers, as before).
    #[tokio::test]
    async fn past_the_cap_a_caller_that_leaves_cancels_its_exchange() {
        struct Cancelled(Option<tokio::sync::mpsc::UnboundedSender<()>>);
        impl Cancelled {
            fn disarm(&mut self) {
                self.0 = None;
            }
        }
        impl Drop for Cancelled {
            fn drop(&mut self) {
                if let Some(tell) = self.0.take() {
                    let _ = tell.send(());
                }
            }
        }
        let extra = 10;
        let (tell, mut cancelled) = tokio::sync::mpsc::unbounded_channel();
        let (release, released) = tokio::sync::watch::channel(false);
        for _ in 0..MAX_ORPHANS + extra {
            let mut guard = Cancelled(Some(tell.clone()));
            let mut released = released.clone();
            let waiting = detach(Caller::default(), async move {
                let _ = released.wait_for(|r| *r).await;
                guard.disarm();
            });
            let mut waiting = Box::pin(waiting);
            assert!(futures_poll_once(waiting.as_mut()).await.is_none());
            drop(waiting);
        }
        drop(tell);
        assert!(orphans() <= MAX_ORPHANS);
        // Each cancelled exchange says so as its future is dropped.
        let mut count = 0;
        while count < extra {
            // A bound that turns the lack of a cap into a failure, not a hang.
            let one = tokio::time::timeout(std::time::Duration::from_secs(30), cancelled.recv());
            one.await
                .expect("exchanges past the cap are cancelled")
                .expect("a cancelled exchange");
            count += 1;
        }
        let _ = release.send(true);
        // The others finish and say nothing: the channel closes once all are gone. (An
        // orphan of another test in this process at the same moment takes a place.)
        while cancelled.recv().await.is_some() {
            count += 1;
        }
        assert!((extra..extra + 4).contains(&count), "{count} cancelled");
    }

    async fn futures_poll_once<F: Future + Unpin>(mut future: F) -> Option<F::Output> {
        std::future::poll_fn(|cx| match std::pin::Pin::new(&mut future).poll(cx) {
            std::task::Poll::Ready(out) => std::task::Poll::Ready(Some(out)),
            std::task::Poll::Pending => std::task::Poll::Ready(None),
        })
        .await
    }
}
