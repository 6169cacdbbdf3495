//! One logical request at the load generator, from its arrival to its verdict: the client
//! core that the live engine's request task (`engine/request.rs`) and the simulated world
//! (`simulate/world.rs`) both drive, as the relay tier and its simulation drive the hop
//! core ([`crate::hop`]).
//!
//! It holds the request's [`Session`] with its policy's [`Client`] and the attempt it has
//! out, and it is the one place that says what the [`Recorder`] hears of the request: its
//! arrival, each attempt sent and answered (and whether it waited for a connection), an
//! attempt cut before it left the process or abandoned on the wire when the run stopped,
//! whether any attempt reached the server, and its verdict or its end unfinished. The
//! shells only carry out the policy's [`Action`]s (a send on a socket or an event in
//! virtual time) and choose when to lock what: the live engine reads its clock and its
//! client under a lock, the simulator owns both.
//!
//! Pure: no IO, no clock; time is an argument.

use std::time::Duration;

use chaos_policy::{Action, Attempt, Client, Outcome, Reply, Session, Verdict};
use rand_core::Rng;

use crate::plan::RequestKind;
use crate::schedule::Arrival;
use crate::stats::{Reached, Recorder};

/// One logical request in progress at the load generator.
#[derive(Debug)]
pub struct LogicalRequest {
    arrival: Arrival,
    session: Session,
    /// The attempt out (on the wire, or waiting for a connection): when it was sent.
    sent: Option<(Duration, Attempt)>,
    reached: Reached,
}

/// How long an attempt waited for a connection under the plan's cap, and whether its
/// timeout ran out first (it then never left the process).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionWait {
    /// From when it was sent to when a connection was its, or its timeout ran out.
    pub waited: Duration,
    /// Its timeout ran out before a connection came free.
    pub timed_out: bool,
}

impl LogicalRequest {
    /// An arrival the load generator could start, `lag` after its scheduled time (the live
    /// dispatch lag; none simulated): counted, then the client's first decision at `now`.
    /// `share` is the most retries a variant that shares its budget with its tiers takes
    /// for the request's whole chain ([`crate::plan::start_request`]).
    pub fn start(
        client: &mut Client,
        share: Option<u32>,
        kind: &RequestKind,
        arrival: Arrival,
        now: Duration,
    ) -> (LogicalRequest, Action) {
        let (session, action) =
            crate::plan::start_request(client, share, kind.policy_request(), now);
        let request = LogicalRequest {
            arrival,
            session,
            sent: None,
            reached: Reached::No,
        };
        (request, action)
    }

    /// Counts an arrival that started `lag` after its scheduled time. Apart from
    /// [`LogicalRequest::start`], since the live engine counts it outside its client's lock.
    pub fn arrived(recorder: &mut Recorder, arrival: &Arrival, lag: Duration) {
        recorder.arrived(arrival.at, lag);
    }

    /// The arrival this request came from.
    pub fn arrival(&self) -> &Arrival {
        &self.arrival
    }

    /// The policy's session of this request (its violations, its allowance, its last wait).
    pub fn session(&self) -> &Session {
        &self.session
    }

    /// The attempt out, and when it was sent.
    pub fn out(&self) -> Option<(Duration, Attempt)> {
        self.sent
    }

    /// An attempt leaves for the first hop (or starts waiting for a connection) at `now`.
    pub fn sending(&mut self, attempt: Attempt, now: Duration) {
        self.sent = Some((now, attempt));
    }

    /// The attempt out was answered at `now` (or failed, or timed out): what the recorder
    /// hears of it, the wait for a connection first. `id` names the request in a
    /// violation's examples. Returns the attempt, or `None` when none was out (a stale
    /// answer).
    pub fn answered(
        &mut self,
        recorder: &mut Recorder,
        now: Duration,
        outcome: Outcome,
        wait: Option<ConnectionWait>,
        id: &str,
    ) -> Option<Attempt> {
        let (sent, attempt) = self.sent.take()?;
        self.reached = self.reached.after(outcome);
        if let Some(wait) = wait {
            recorder.waited(wait.waited, wait.timed_out);
        }
        self.record_sent(recorder, sent, attempt, id);
        recorder.attempt_done(outcome, now.saturating_sub(sent), attempt.is_retry());
        Some(attempt)
    }

    /// The client's decision on the answer of the attempt [`LogicalRequest::answered`]
    /// counted.
    pub fn decide_reply<R: Rng + ?Sized>(
        &mut self,
        client: &mut Client,
        now: Duration,
        reply: Reply,
        rng: &mut R,
    ) -> Action {
        client.on_reply(&mut self.session, now, reply, rng)
    }

    /// The client's decision once the wait before a retry is over.
    pub fn decide_timer(&mut self, client: &mut Client, now: Duration) -> Action {
        client.on_timer(&mut self.session, now)
    }

    /// The run stopped with an attempt out: one that had left the process (it may have
    /// reached the server) is counted sent and abandoned; one that had not (waiting for a
    /// connection, or still connecting) was never an attempt, and is counted cut.
    pub fn stopped(&mut self, recorder: &mut Recorder, left_process: bool, id: &str) {
        let Some((sent, attempt)) = self.sent.take() else {
            return;
        };
        if left_process {
            self.record_sent(recorder, sent, attempt, id);
            recorder.abandoned += 1;
            self.reached = self.reached.max(Reached::Maybe);
        } else {
            recorder.cut();
        }
    }

    /// The request's verdict at `now`, with its latency from its scheduled time.
    pub fn finished(&self, recorder: &mut Recorder, now: Duration, verdict: &Verdict) {
        let at = self.arrival.at;
        recorder.finished(at, now.saturating_sub(at), verdict);
    }

    /// The request never reached a verdict: it ran until `now`, a lower bound of its
    /// latency.
    pub fn unfinished(&self, recorder: &mut Recorder, now: Duration) {
        let at = self.arrival.at;
        recorder.unfinished(at, now.saturating_sub(at));
    }

    /// Whether any attempt reached the server, for the ledger to agree with: counted once,
    /// when the request is over, whichever way.
    pub fn count_reached(&self, recorder: &mut Recorder) {
        recorder.reached(self.reached);
    }

    fn record_sent(&self, recorder: &mut Recorder, sent: Duration, attempt: Attempt, id: &str) {
        recorder.sent(
            sent,
            self.arrival.at,
            attempt.is_retry(),
            id,
            self.session.violations(),
        );
    }
}

/// The deadline an attempt sent with `timeout` tells the hop below (`x-chaos-deadline-ms`),
/// as that hop reads it: only behind relay tiers, which have a hop below to tell.
pub fn deadline_below(timeout: Option<Duration>, behind_tiers: bool) -> Option<Duration> {
    timeout
        .filter(|_| behind_tiers)
        .map(chaos_wire::deadline_sent)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chaos_policy::Policy;
    use rand_chacha::ChaCha8Rng;
    use rand_core::SeedableRng;

    fn kind() -> RequestKind {
        crate::plan::parse(
            std::path::Path::new("t.yaml"),
            "name: t\nduration: 1s\nload: { rate: 1, requests: [{ name: r, method: GET, path: / }] }\npolicies: [{ name: p }]\n",
        )
        .expect("a minimal plan")
        .load
        .requests
        .remove(0)
    }

    fn arrival(at: Duration) -> Arrival {
        Arrival {
            index: 0,
            at,
            kind: 0,
            n: 0,
        }
    }

    const MS: fn(u64) -> Duration = Duration::from_millis;

    #[test]
    fn an_answered_request_is_counted_once_each_way() {
        let mut client = Client::new(Policy::default());
        let mut recorder = Recorder::new(None);
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let arrival = arrival(MS(10));
        LogicalRequest::arrived(&mut recorder, &arrival, MS(1));
        let (mut request, action) =
            LogicalRequest::start(&mut client, None, &kind(), arrival, MS(11));
        let Action::Send { attempt, .. } = action else {
            panic!("the first decision sends");
        };
        request.sending(attempt, MS(11));
        assert_eq!(request.out(), Some((MS(11), attempt)));
        let answered = request.answered(&mut recorder, MS(15), Outcome::Status(200), None, "id");
        assert_eq!(answered, Some(attempt));
        assert_eq!(
            request.answered(&mut recorder, MS(16), Outcome::Status(200), None, "id"),
            None,
            "a second answer to the same attempt is stale"
        );
        let action = request.decide_reply(
            &mut client,
            MS(15),
            Reply::bare(Outcome::Status(200)),
            &mut rng,
        );
        let Action::Done(verdict) = action else {
            panic!("a 200 ends the request");
        };
        request.finished(&mut recorder, MS(15), &verdict);
        request.count_reached(&mut recorder);
        assert_eq!(recorder.logical, 1);
        assert_eq!(recorder.succeeded, 1);
        assert_eq!(recorder.reached, (1, 0));
    }

    #[test]
    fn a_stop_cuts_what_never_left_and_abandons_what_did() {
        let mut client = Client::new(Policy::default());
        let mut recorder = Recorder::new(None);
        let (mut request, action) =
            LogicalRequest::start(&mut client, None, &kind(), arrival(MS(0)), MS(0));
        let Action::Send { attempt, .. } = action else {
            panic!("the first decision sends");
        };
        request.sending(attempt, MS(0));
        request.stopped(&mut recorder, false, "id");
        assert_eq!((recorder.cut, recorder.abandoned), (1, 0));
        request.sending(attempt, MS(5));
        request.stopped(&mut recorder, true, "id");
        assert_eq!((recorder.cut, recorder.abandoned), (1, 1));
        request.unfinished(&mut recorder, MS(30));
        request.count_reached(&mut recorder);
        assert_eq!(recorder.unfinished, 1);
        assert_eq!(
            recorder.reached,
            (0, 1),
            "abandoned on the wire: maybe reached"
        );
    }

    #[test]
    fn the_deadline_below_is_told_only_behind_tiers_in_whole_milliseconds() {
        assert_eq!(
            deadline_below(Some(Duration::from_micros(2500)), true),
            Some(MS(2))
        );
        assert_eq!(deadline_below(Some(MS(250)), false), None);
        assert_eq!(deadline_below(None, true), None);
    }
}
