//! The async runtime a command runs on, how many worker threads a live run gets, and the
//! signals that interrupt it.

use tokio_util::sync::CancellationToken;

use crate::plan::Plan;

/// Attempts a second that one worker thread sends with room to spare. On the bench
/// machine (docs/benchmarks.md) one worker held arrival lag p99 near 1 ms up to 35,000
/// req/s and fell behind at 40,000, while below that a second worker cost a quarter more
/// CPU per request (threads waking to take work from each other) and took a core the
/// target, on loopback, needs.
const PER_WORKER: f64 = 15_000.0;

/// The worker threads a live run of `plan` gets unless `--threads` says: one when the
/// target is a process of its own and the plan's peak rate of attempts (its highest
/// arrival rate times the most attempts a policy makes of a request) is within what one
/// worker sends with room to spare; else `None`, one per core. An embedded fault-server
/// and relay tiers run on the same runtime, so they keep every core.
pub(super) fn workers(plan: &Plan) -> Option<usize> {
    if plan.target.is_embedded() || !plan.tiers.is_empty() {
        return None;
    }
    let peak_rate = plan
        .load
        .profile
        .iter()
        .map(|segment| segment.from.max(segment.to))
        .fold(0.0, f64::max);
    let attempts = plan
        .policies
        .iter()
        .map(|p| p.policy.config().max_attempts)
        .max()
        .unwrap_or(1);
    (peak_rate * f64::from(attempts) <= PER_WORKER).then_some(1)
}

/// Takes all the file descriptors the OS allows: the embedded fault-server and the
/// client's sockets share this process's. Says so on stderr when that is still little.
pub(super) fn raise_fd_limit() {
    if let Ok(limit) = fault_server::fd_limit::raise()
        && limit < fault_server::fd_limit::LOW
    {
        eprintln!(
            "warning: only {limit} file descriptors (the hard limit); a run with many connections may fail to open more; raise it with `ulimit -Hn`"
        );
    }
}

/// The async runtime, with `threads` workers (default: tokio's, one per core), or why it
/// cannot start (said on stderr).
pub(super) fn runtime(threads: Option<usize>) -> Option<tokio::runtime::Runtime> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if let Some(threads) = threads {
        builder.worker_threads(threads);
    }
    match builder.enable_all().build() {
        Ok(rt) => Some(rt),
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            None
        }
    }
}

/// The signals that interrupt a run, registered with the OS when made (tokio's
/// `ctrl_c()` registers only when first polled, which leaves the default action, death
/// without a report, in place until then): Ctrl-C, SIGTERM (a CI runner's cancel) and
/// SIGHUP (the terminal went away: a dropped ssh session). The one home of what
/// interrupts `chaos`, `simulate` (its sweeps too) and a `relay`.
pub(super) struct Interrupts {
    #[cfg(unix)]
    interrupt: tokio::signal::unix::Signal,
    #[cfg(unix)]
    terminate: tokio::signal::unix::Signal,
    #[cfg(unix)]
    hang_up: tokio::signal::unix::Signal,
}

/// Listening for interrupts on a thread of its own; dropping it stops listening.
#[derive(Debug)]
pub(super) struct Listening {
    done: CancellationToken,
}

impl Drop for Listening {
    fn drop(&mut self) {
        self.done.cancel();
    }
}

impl Interrupts {
    /// Must be called inside the runtime.
    pub(super) fn install() -> std::io::Result<Interrupts> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            Ok(Interrupts {
                interrupt: signal(SignalKind::interrupt())?,
                terminate: signal(SignalKind::terminate())?,
                hang_up: signal(SignalKind::hangup())?,
            })
        }
        #[cfg(not(unix))]
        Ok(Interrupts {})
    }

    /// Registers the signals now and cancels `abort` when one comes, on a thread of its
    /// own: the run's runtime is sized by the plan, which is read after the signals are
    /// registered, so that an interrupt however early still ends in an aborted report.
    pub(super) fn listen(abort: CancellationToken) -> std::io::Result<Listening> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let interrupts = {
            let _entered = runtime.enter();
            Interrupts::install()?
        };
        let done = CancellationToken::new();
        let stop = done.clone();
        std::thread::Builder::new()
            .name("interrupts".into())
            .spawn(move || {
                runtime.block_on(async {
                    tokio::select! {
                        () = interrupts.wait(abort) => {}
                        () = stop.cancelled() => {}
                    }
                });
            })?;
        Ok(Listening { done })
    }

    /// [`Interrupts::listen`] for a command: when the signals cannot be registered it
    /// says so on stderr and gives the exit code, since a run that could not be
    /// interrupted cleanly should not start.
    pub(super) fn listen_or_exit(abort: CancellationToken) -> Result<Listening, u8> {
        Interrupts::listen(abort).map_err(|e| {
            eprintln!("error: cannot listen for Ctrl-C: {e}");
            super::EXIT_CANNOT_RUN
        })
    }

    /// Resolves on Ctrl-C, SIGTERM or SIGHUP.
    pub(super) async fn received(mut self) {
        #[cfg(unix)]
        tokio::select! {
            _ = self.interrupt.recv() => {}
            _ = self.terminate.recv() => {}
            _ = self.hang_up.recv() => {}
        }
        #[cfg(not(unix))]
        let _ = tokio::signal::ctrl_c().await;
    }

    /// Resolves when the user interrupts (Ctrl-C, SIGTERM from a CI runner, SIGHUP from
    /// a terminal that went away) and cancels the run.
    pub(super) async fn wait(self, abort: CancellationToken) {
        use std::io::Write as _;
        self.received().await;
        // The run stops first: after a hang-up the terminal may refuse the line, and
        // `eprintln!` would panic there.
        abort.cancel();
        let _ = writeln!(
            std::io::stderr(),
            "interrupted: stopping, the report will be written and marked aborted"
        );
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::workers;

    fn plan(target: &str, load: &str, policies: &str) -> crate::plan::Plan {
        // A plan of stages takes its length from them.
        let duration = if load.contains("stages") {
            ""
        } else {
            "duration: 10s\n"
        };
        let text = format!(
            "name: t\n{duration}{target}load:\n  {load}\n  requests: [ {{ name: r, path: /r }} ]\npolicies: {policies}\n"
        );
        crate::plan::parse(Path::new("t.yaml"), &text).expect("a plan")
    }

    const REMOTE: &str = "target: { url: \"http://127.0.0.1:9\" }\n";

    #[test]
    fn one_worker_while_the_peak_attempt_rate_is_within_one_workers_reach() {
        let once = "[ { name: a, max_attempts: 1 } ]";
        let thrice = "[ { name: a, max_attempts: 1 }, { name: b, max_attempts: 3 } ]";
        assert_eq!(workers(&plan(REMOTE, "rate: 5000", once)), Some(1));
        assert_eq!(workers(&plan(REMOTE, "rate: 5000", thrice)), Some(1));
        assert_eq!(workers(&plan(REMOTE, "rate: 6000", thrice)), None);
        assert_eq!(workers(&plan(REMOTE, "rate: 20000", once)), None);
        // A ramp is judged by its peak.
        let ramp = "stages: [ { to: 20000, over: 5s }, { to: 100, over: 5s } ]";
        assert_eq!(workers(&plan(REMOTE, ramp, once)), None);
    }

    #[test]
    fn an_embedded_fault_server_keeps_every_core() {
        assert_eq!(
            workers(&plan("", "rate: 100", "[ { name: a, max_attempts: 1 } ]")),
            None
        );
    }
}
