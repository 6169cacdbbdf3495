//! The proxy core: what an nginx or HAProxy tier does with a request, pure and sans-IO,
//! as its imported [`ProxyModel`] says. The simulator drives it (`simulate/proxy.rs`); a
//! live run starts the real binary instead, and `just interop-stacks` holds the two to
//! the same attempts, peer by peer.
//!
//! Why not the relay tier's core ([`super::Tier`]): a proxy has no budget, breaker or
//! backoff. It tries peers in turn (nginx: each at most once; HAProxy: the same server
//! unless it redispatches), serially, each under a per-try timeout, while its retry
//! conditions, its method rule, its tries and its overall cap allow; and nginx ejects a
//! peer that failed `max_fails` times for `fail_timeout` (passive health), which is how
//! a burst of failures makes it answer 502 without sending anything.
//!
//! The balancer is the smooth weighted round robin of nginx's
//! `ngx_http_upstream_round_robin.c` (equal weights: plain rotation, as HAProxy's
//! `roundrobin` is): each choice adds every candidate's effective weight to its current
//! weight and takes the highest, which then gives back the total.

use std::sync::Arc;
use std::time::Duration;

use chaos_policy::{Method, Outcome, Reply, Request, Violation};

use super::counts::HopCounts;
use crate::plan::proxy::{Failure, Methods, NextPeer, ProxyKind, ProxyModel};

/// The most peers a proxy tier spreads over: the most a hop listens as
/// ([`fault_server::wire::MAX_PEERS`]); a plan refuses more servers.
pub const MAX_PEERS: usize = fault_server::wire::MAX_PEERS;

/// What the proxy answers when it sent nothing because every peer was out (nginx's "no
/// live upstreams"), and after a lost response or a connection failure (nginx).
pub const BAD_GATEWAY: u16 = 502;
/// What it answers after a per-try timeout.
pub const GATEWAY_TIMEOUT: u16 = 504;
/// What HAProxy answers when it could not connect to any server.
pub const UNAVAILABLE: u16 = 503;

/// A peer's balancer and health state.
#[derive(Debug, Clone, Default)]
struct PeerState {
    current: i64,
    effective: i64,
    fails: u32,
    /// When it last failed.
    accessed: Duration,
    /// When its failures were last checked: a failure, or a choice after `fail_timeout`.
    checked: Duration,
}

/// What one peer was sent and how it fared.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PeerCounts {
    pub sent: u64,
    /// Of which retries (the request had tried a peer before).
    pub retries: u64,
    /// Tries that failed by the proxy's rules (counted towards ejection).
    pub failed: u64,
}

/// What a proxy tier counted: the hop's counts as every tier's, per peer, and the
/// retries by the condition that caused them.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ProxyCounts {
    pub hop: HopCounts,
    pub peers: Vec<PeerCounts>,
    /// Requests answered 502 without being sent: every peer was out.
    pub no_live_peers: u64,
    /// Retries after a connection failure, a lost response, a per-try timeout, and a
    /// status (each with its count).
    pub retried_connect: u64,
    pub retried_lost: u64,
    pub retried_timeout: u64,
    pub retried_status: Vec<(u16, u64)>,
    /// Counted from outside ([`ProxyCounts::from_outside`]): a real proxy.
    #[serde(default)]
    pub from_outside: bool,
}

impl ProxyCounts {
    fn retried_on(&mut self, failure: Failure) {
        match failure {
            Failure::Connect => self.retried_connect += 1,
            Failure::Lost => self.retried_lost += 1,
            Failure::Timeout => self.retried_timeout += 1,
            Failure::Status(code) => match self.retried_status.iter_mut().find(|(c, _)| *c == code)
            {
                Some((_, n)) => *n += 1,
                None => {
                    self.retried_status.push((code, 1));
                    self.retried_status.sort_unstable();
                }
            },
        }
    }
}

/// What is known of a real proxy's hop from outside it: what the hop above sent it, and
/// what the next hop saw of it. Request ids pass through a proxy, so the next hop tells a
/// resend (the same stated attempt again) from a new request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Outside {
    /// Attempts the hop above sent it that reached it, and of those first attempts.
    pub received: u64,
    pub logical: u64,
    /// What the next hop received from it, and of that, resends.
    pub next_received: u64,
    pub next_repeats: u64,
    /// Resends of a non-idempotent request (POST, PATCH), and resends after a 4xx.
    pub repeated_non_idempotent: u64,
    pub repeated_after_4xx: u64,
    /// What each of its peers received (in the order of its config's servers).
    pub per_peer: Vec<u64>,
}

impl ProxyCounts {
    /// A real proxy's counts, from outside: its resends are its retries, and what it
    /// received but never sent (a first attempt the next hop never saw) it answered on
    /// its own: every peer ejected (nginx), or its caller gone before it connected.
    pub fn from_outside(o: &Outside) -> ProxyCounts {
        let first_sends = o.next_received.saturating_sub(o.next_repeats);
        let mut hop = HopCounts {
            received: o.received,
            logical: o.logical,
            sent: o.next_received,
            retries: o.next_repeats,
            faulted: o.received.saturating_sub(first_sends),
            ..HopCounts::default()
        };
        hop.violations.retried_non_idempotent.count = o.repeated_non_idempotent;
        hop.violations.retried_permanent.count = o.repeated_after_4xx;
        ProxyCounts {
            peers: o
                .per_peer
                .iter()
                .map(|sent| PeerCounts {
                    sent: *sent,
                    ..PeerCounts::default()
                })
                .collect(),
            no_live_peers: hop.faulted,
            hop,
            from_outside: true,
            ..ProxyCounts::default()
        }
    }
}

/// One request at the proxy, from its arrival to its answer.
#[derive(Debug, Clone)]
pub struct ProxyRequest {
    request: Request,
    /// POST, LOCK or PATCH: the methods nginx does not resend once sent (without
    /// `non_idempotent`), whatever key they carry.
    unsafe_method: bool,
    received: Duration,
    /// Peers this request tried (nginx never tries one twice).
    tried: u64,
    /// Tries sent so far.
    tries: u32,
    /// The peer of the try in flight.
    peer: usize,
    /// The failure that ended the last try and how it ended, when it is retried.
    failure: Option<(Failure, Outcome)>,
}

impl ProxyRequest {
    /// The peer of the last [`ProxyStep::Send`] (0-based).
    pub fn peer(&self) -> usize {
        self.peer
    }

    /// The tries sent so far.
    pub fn tries(&self) -> u32 {
        self.tries
    }
}

/// What the shell does next for a request.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ProxyStep {
    /// Send the request, as it came, to `peer` (0-based), waiting at most `timeout`.
    Send { peer: usize, timeout: Duration },
    /// Call [`Proxy::on_timer`] at `until` (HAProxy's turn-around).
    Wait { until: Duration },
    /// Answer the hop above; the request is over.
    Answer(Reply),
}

/// One proxy tier's state: its model, its balancer and its peers' health, its counts.
#[derive(Debug)]
pub struct Proxy {
    model: Arc<ProxyModel>,
    peers: Vec<PeerState>,
    /// HAProxy's round robin: the server whose turn is next.
    cursor: usize,
    counts: ProxyCounts,
}

impl Proxy {
    pub fn new(model: Arc<ProxyModel>) -> Proxy {
        let peers = model
            .peers
            .iter()
            .take(MAX_PEERS)
            .map(|p| PeerState {
                effective: i64::from(p.weight),
                ..PeerState::default()
            })
            .collect::<Vec<_>>();
        let counts = ProxyCounts {
            peers: vec![PeerCounts::default(); peers.len()],
            ..ProxyCounts::default()
        };
        Proxy {
            model,
            peers,
            cursor: 0,
            counts,
        }
    }

    pub fn model(&self) -> &ProxyModel {
        &self.model
    }

    pub fn counts(&self) -> &ProxyCounts {
        &self.counts
    }

    /// A request arrives at `now` (its method, whether it carries an idempotency key, and
    /// the attempt number its caller stated).
    pub fn receive(
        &mut self,
        now: Duration,
        method: &str,
        idempotency_key: bool,
        attempt: Option<u32>,
    ) -> ProxyRequest {
        self.counts.hop.received += 1;
        if attempt.is_none_or(|a| a <= 1) {
            self.counts.hop.logical += 1;
        }
        ProxyRequest {
            request: Request {
                method: Method::parse(method),
                idempotency_key,
            },
            unsafe_method: ["POST", "LOCK", "PATCH"]
                .iter()
                .any(|m| m.eq_ignore_ascii_case(method)),
            received: now,
            tried: 0,
            tries: 0,
            peer: 0,
            failure: None,
        }
    }

    /// Sends the request's first try, or answers 502 when every peer is out.
    pub fn start(&mut self, r: &mut ProxyRequest, now: Duration) -> ProxyStep {
        match self.choose(r, now, None) {
            Some(peer) => self.send(r, now, peer),
            None => self.no_live(),
        }
    }

    /// A try of `r` came back (or timed out: `Outcome::AttemptTimeout`) at `now`.
    pub fn on_answer(
        &mut self,
        r: &mut ProxyRequest,
        now: Duration,
        reply: Reply,
        id: &str,
    ) -> ProxyStep {
        if reply.outcome.proves_unsent() {
            self.counts.hop.unsent += 1;
        }
        if reply.no_retry {
            self.counts.hop.no_retry_received += 1;
        }
        let failure = failure_of(reply.outcome);
        let retry =
            failure.filter(|f| self.model.retry_on.covers(*f) && self.may_retry(r, now, *f));
        let counts_as_failed = failure.is_some_and(|f| self.fails(f, retry.is_some()));
        self.free(r.peer, now, counts_as_failed);
        let Some(failure) = retry else {
            return self.answer(reply, failure);
        };
        r.failure = Some((failure, reply.outcome));
        if failure == Failure::Connect && !self.model.turnaround.is_zero() && self.stays() {
            return ProxyStep::Wait {
                until: now + self.model.turnaround,
            };
        }
        self.retry(r, now, id)
    }

    /// A turn-around of `r` is over at `now`.
    pub fn on_timer(&mut self, r: &mut ProxyRequest, now: Duration, id: &str) -> ProxyStep {
        self.retry(r, now, id)
    }

    /// The next try: to the same peer or the balancer's next; 502 when every other peer
    /// is out, whatever the last try ended with (nginx's "no live upstreams" mid-request).
    fn retry(&mut self, r: &mut ProxyRequest, now: Duration, id: &str) -> ProxyStep {
        let peer = if self.stays() {
            Some(r.peer)
        } else {
            let avoid = r.peer;
            self.choose(r, now, Some(avoid))
        };
        match peer {
            Some(peer) => {
                if let Some((failure, outcome)) = r.failure {
                    for violation in Violation::of_retry(r.request, outcome) {
                        self.counts.hop.violations.add(violation, id);
                    }
                    self.counts.retried_on(failure);
                }
                self.send(r, now, peer)
            }
            None => {
                self.counts.hop.gave_up += 1;
                ProxyStep::Answer(Reply::bare(Outcome::Status(BAD_GATEWAY)))
            }
        }
    }

    /// Whether the retry about to go out stays on the peer just tried. HAProxy's
    /// `option redispatch` under round robin with more than one server moves every retry,
    /// whatever its interval (measured on 2.6.12: `stream_choose_redispatch`); the
    /// interval counts only for other balancers, which the importer approximates as round
    /// robin.
    fn stays(&self) -> bool {
        match self.model.next_peer {
            NextPeer::Another => false,
            NextPeer::Same => true,
            NextPeer::Redispatch { .. } => self.peers.len() <= 1,
        }
    }

    /// Whether a covered failure of `r` may be retried at `now`: tries left, a peer left
    /// (nginx), the method rule and the overall cap.
    fn may_retry(&self, r: &ProxyRequest, now: Duration, failure: Failure) -> bool {
        let sent = failure != Failure::Connect;
        if r.tries >= self.model.tries {
            return false;
        }
        if sent && self.model.methods == Methods::Idempotent && r.unsafe_method {
            return false;
        }
        if self
            .model
            .overall
            .is_some_and(|cap| now.saturating_sub(r.received) >= cap)
        {
            return false;
        }
        true
    }

    /// Whether a failure counts against the peer's health: nginx counts connection
    /// failures, lost responses and timeouts always, a status only when it made a retry
    /// (a listed status on the last try is passed on and counts as a success), and never a
    /// 403 or 404. HAProxy ejects nothing without health checks.
    fn fails(&self, failure: Failure, retried: bool) -> bool {
        match self.model.kind {
            ProxyKind::Haproxy => false,
            ProxyKind::Nginx => match failure {
                Failure::Connect | Failure::Lost | Failure::Timeout => true,
                Failure::Status(403 | 404) => false,
                Failure::Status(_) => retried,
            },
        }
    }

    /// The end of a try on `peer`, failed or not (nginx's `free_peer`).
    fn free(&mut self, peer: usize, now: Duration, failed: bool) {
        let single = self.peers.len() == 1;
        let conf = &self.model.peers[peer];
        let state = &mut self.peers[peer];
        if single {
            return;
        }
        if failed {
            self.counts.peers[peer].failed += 1;
            state.fails += 1;
            state.accessed = now;
            state.checked = now;
            if let Some(step) = conf.weight.checked_div(conf.max_fails) {
                state.effective -= i64::from(step);
            }
            state.effective = state.effective.max(0);
        } else if state.accessed < state.checked {
            state.fails = 0;
        }
    }

    /// The balancer's choice among the peers `r` has not tried (nginx) or any but `avoid`
    /// (HAProxy's redispatch), skipping ejected ones; the backups only when no other is
    /// left. `None`: every peer is out.
    fn choose(&mut self, r: &ProxyRequest, now: Duration, avoid: Option<usize>) -> Option<usize> {
        if self.peers.len() == 1 {
            return Some(0);
        }
        if self.model.kind == ProxyKind::Haproxy {
            return self.rotate(avoid);
        }
        let candidate = |i: usize, backup: bool, this: &Proxy| {
            let conf = &this.model.peers[i];
            let state = &this.peers[i];
            conf.backup == backup
                && r.tried & (1 << i) == 0
                && !(conf.max_fails > 0
                    && state.fails >= conf.max_fails
                    && now.saturating_sub(state.checked) <= conf.fail_timeout)
        };
        for backup in [false, true] {
            let (mut best, mut total) = (None::<usize>, 0i64);
            for i in 0..self.peers.len() {
                if !candidate(i, backup, self) {
                    continue;
                }
                let weight = i64::from(self.model.peers[i].weight);
                let state = &mut self.peers[i];
                state.current += state.effective;
                total += state.effective;
                if state.effective < weight {
                    state.effective += 1;
                }
                let current = state.current;
                if best.is_none_or(|b| current > self.peers[b].current) {
                    best = Some(i);
                }
            }
            if let Some(b) = best {
                let fail_timeout = self.model.peers[b].fail_timeout;
                let state = &mut self.peers[b];
                state.current -= total;
                if now.saturating_sub(state.checked) > fail_timeout {
                    state.checked = now;
                }
                return Some(b);
            }
        }
        None
    }

    /// HAProxy's `roundrobin`: the next server in turn, the one to avoid skipped (it is
    /// not passed over for good: the turn after goes on from the one taken), backups only
    /// when there is no other. Measured on 2.6.12: with B failing and every retry
    /// redispatched, A, B→C, A, B→C: each server a third of the attempts.
    fn rotate(&mut self, avoid: Option<usize>) -> Option<usize> {
        let n = self.peers.len();
        for backup in [false, true] {
            let eligible = |i: usize| self.model.peers[i].backup == backup;
            let count = (0..n).filter(|i| eligible(*i)).count();
            let pick = (0..n)
                .map(|k| (self.cursor + k) % n)
                .find(|i| eligible(*i) && (count < 2 || avoid != Some(*i)));
            if let Some(i) = pick {
                self.cursor = (i + 1) % n;
                return Some(i);
            }
        }
        None
    }

    fn send(&mut self, r: &mut ProxyRequest, now: Duration, peer: usize) -> ProxyStep {
        let retry = r.tries > 0;
        r.tries += 1;
        r.peer = peer;
        r.tried |= 1 << peer;
        self.counts.hop.sent_at(now, retry);
        let counts = &mut self.counts.peers[peer];
        counts.sent += 1;
        counts.retries += u64::from(retry);
        ProxyStep::Send {
            peer,
            timeout: self.model.try_timeout,
        }
    }

    /// Every peer is out: 502, nothing sent.
    fn no_live(&mut self) -> ProxyStep {
        self.counts.no_live_peers += 1;
        self.counts.hop.faulted += 1;
        self.counts.hop.gave_up += 1;
        ProxyStep::Answer(Reply::bare(Outcome::Status(BAD_GATEWAY)))
    }

    /// The answer upward: a status passed on as it came (with its hints), or the proxy's
    /// own for a failure that is not a status.
    fn answer(&mut self, reply: Reply, failure: Option<Failure>) -> ProxyStep {
        let outcome = match failure {
            None | Some(Failure::Status(_)) => reply.outcome,
            Some(Failure::Timeout) => Outcome::Status(GATEWAY_TIMEOUT),
            Some(Failure::Connect) if self.model.kind == ProxyKind::Haproxy => {
                Outcome::Status(UNAVAILABLE)
            }
            Some(Failure::Connect | Failure::Lost) => Outcome::Status(BAD_GATEWAY),
        };
        if matches!(outcome, Outcome::Status(s) if s < 400) {
            self.counts.hop.succeeded += 1;
        } else {
            self.counts.hop.gave_up += 1;
        }
        let passed = outcome == reply.outcome;
        ProxyStep::Answer(Reply {
            outcome,
            retry_after: reply.retry_after.filter(|_| passed),
            no_retry: reply.no_retry && passed,
            stop: false,
            allowance_left: None,
        })
    }
}

/// How a proxy reads a try's outcome: `None` for a response it passes on as it is (a
/// success, or a body cut short after the headers went upward).
pub fn failure_of(outcome: Outcome) -> Option<Failure> {
    match outcome {
        Outcome::Status(code) if code < 400 => None,
        Outcome::Status(code) => Some(Failure::Status(code)),
        Outcome::ConnectRefused | Outcome::ConnectTimeout | Outcome::Unprocessed(_) => {
            Some(Failure::Connect)
        }
        Outcome::Reset(_) | Outcome::Closed => Some(Failure::Lost),
        Outcome::AttemptTimeout => Some(Failure::Timeout),
        Outcome::TruncatedBody | Outcome::Grpc(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use crate::plan::proxy::{Peer, RetryOn, Source};

    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn peer(i: usize, max_fails: u32) -> Peer {
        Peer {
            name: format!("10.0.0.{i}:80"),
            weight: 1,
            max_fails,
            fail_timeout: Duration::from_secs(10),
            backup: false,
            line: i,
        }
    }

    /// nginx's defaults over `n` peers: `proxy_next_upstream error timeout`, tries = peers,
    /// `max_fails=1 fail_timeout=10s`, a 1 s read timeout.
    fn nginx(n: usize) -> ProxyModel {
        ProxyModel {
            kind: ProxyKind::Nginx,
            peers: (1..=n).map(|i| peer(i, 1)).collect(),
            retry_on: RetryOn {
                connect: true,
                lost: true,
                timeout: true,
                statuses: vec![],
                source: Source::default("proxy_next_upstream error timeout"),
            },
            methods: Methods::Idempotent,
            methods_source: Source::default("proxy_next_upstream error timeout"),
            tries: n as u32,
            tries_source: Source::default("proxy_next_upstream_tries 0"),
            try_timeout: Duration::from_secs(1),
            try_timeout_source: Source::default("proxy_read_timeout 60s"),
            overall: None,
            next_peer: NextPeer::Another,
            next_peer_source: Source::default("upstream round robin"),
            turnaround: Duration::ZERO,
            approximations: vec![],
        }
    }

    /// HAProxy's defaults over `n` peers, but `retry-on all-retryable-errors`.
    fn haproxy(n: usize) -> ProxyModel {
        ProxyModel {
            kind: ProxyKind::Haproxy,
            peers: (1..=n).map(|i| peer(i, 0)).collect(),
            retry_on: RetryOn {
                connect: true,
                lost: true,
                timeout: true,
                statuses: vec![500, 502, 503, 504],
                source: Source::at("retry-on all-retryable-errors", 9),
            },
            methods: Methods::Any,
            tries: 4,
            next_peer: NextPeer::Same,
            turnaround: Duration::ZERO,
            ..nginx(n)
        }
    }

    /// Drives one request, each try answered by `answer(peer, try)`, 1 ms later; gives the
    /// peers tried and the answer.
    fn drive(
        p: &mut Proxy,
        now: Duration,
        method: &str,
        answer: impl Fn(usize, u32) -> Outcome,
    ) -> (Vec<usize>, Outcome, Duration) {
        let mut r = p.receive(now, method, false, Some(1));
        let mut step = p.start(&mut r, now);
        let mut now = now;
        let mut peers = vec![];
        loop {
            step = match step {
                ProxyStep::Send { peer, .. } => {
                    peers.push(peer);
                    now += ms(1);
                    let reply = Reply::bare(answer(peer, r.tries()));
                    p.on_answer(&mut r, now, reply, "id")
                }
                ProxyStep::Wait { until } => {
                    now = until;
                    p.on_timer(&mut r, now, "id")
                }
                ProxyStep::Answer(reply) => return (peers, reply.outcome, now),
            };
        }
    }

    #[test]
    fn nginx_retries_a_lost_get_once_per_peer_and_answers_502() {
        let mut p = Proxy::new(Arc::new(nginx(3)));
        let (peers, answer, _) = drive(&mut p, ms(0), "GET", |_, _| Outcome::Closed);
        assert_eq!((peers, answer), (vec![0, 1, 2], Outcome::Status(502)));
        let c = p.counts();
        assert_eq!((c.hop.sent, c.hop.retries, c.retried_lost), (3, 2, 2));
        // Every peer failed once: with max_fails=1, each is out for 10 s, and the next
        // request is answered 502 without being sent.
        let (peers, answer, _) = drive(&mut p, ms(100), "GET", |_, _| Outcome::Status(200));
        assert_eq!((peers, answer), (vec![], Outcome::Status(502)));
        assert_eq!(p.counts().no_live_peers, 1);
        // After fail_timeout, they are chosen again, and a success clears their failures.
        let (peers, answer, _) = drive(&mut p, ms(10_200), "GET", |_, _| Outcome::Status(200));
        assert_eq!((peers.len(), answer), (1, Outcome::Status(200)));
    }

    #[test]
    fn nginx_times_out_serially_and_answers_504() {
        let mut p = Proxy::new(Arc::new(nginx(3)));
        let (peers, answer, _) = drive(&mut p, ms(0), "PUT", |_, _| Outcome::AttemptTimeout);
        assert_eq!((peers.len(), answer), (3, Outcome::Status(504)));
        assert_eq!(p.counts().retried_timeout, 2);
    }

    #[test]
    fn nginx_never_resends_a_post_once_sent_but_does_after_a_refused_connection() {
        let mut p = Proxy::new(Arc::new(nginx(3)));
        let (peers, answer, _) = drive(&mut p, ms(0), "POST", |_, _| {
            Outcome::Reset(chaos_policy::ResetPhase::AfterWrite)
        });
        assert_eq!((peers.len(), answer), (1, Outcome::Status(502)));
        let (peers, answer, _) = drive(&mut p, ms(0), "POST", |_, t| match t {
            1 => Outcome::ConnectRefused,
            _ => Outcome::Status(201),
        });
        assert_eq!((peers.len(), answer), (2, Outcome::Status(201)));
        assert_eq!(p.counts().hop.violations.total(), 0);
    }

    #[test]
    fn nginx_passes_a_503_on_unless_told_to_retry_it_and_then_the_last_one() {
        let mut p = Proxy::new(Arc::new(nginx(3)));
        let (peers, answer, _) = drive(&mut p, ms(0), "GET", |_, _| Outcome::Status(503));
        assert_eq!((peers.len(), answer), (1, Outcome::Status(503)));
        let mut model = nginx(3);
        model.retry_on.statuses = vec![503];
        let mut p = Proxy::new(Arc::new(model));
        let (peers, answer, _) = drive(&mut p, ms(0), "GET", |_, _| Outcome::Status(503));
        assert_eq!((peers, answer), (vec![0, 1, 2], Outcome::Status(503)));
    }

    #[test]
    fn a_one_server_nginx_upstream_never_retries_nor_ejects() {
        let mut p = Proxy::new(Arc::new(nginx(1)));
        for at in 0..5 {
            let (peers, answer, _) = drive(&mut p, ms(at), "GET", |_, _| Outcome::Closed);
            assert_eq!((peers, answer), (vec![0], Outcome::Status(502)));
        }
        assert_eq!(p.counts().no_live_peers, 0);
    }

    #[test]
    fn nginx_round_robin_rotates_and_skips_an_ejected_peer() {
        let mut model = nginx(3);
        for peer in &mut model.peers {
            peer.max_fails = 0;
        }
        let mut p = Proxy::new(Arc::new(model));
        let firsts: Vec<usize> = (0..6)
            .map(|i| drive(&mut p, ms(i), "GET", |_, _| Outcome::Status(200)).0[0])
            .collect();
        assert_eq!(firsts, [0, 1, 2, 0, 1, 2]);
        // With the default max_fails=1, the one bad peer is out after its first failure.
        let mut p = Proxy::new(Arc::new(nginx(3)));
        let bad = |peer: usize, _| match peer {
            1 => Outcome::Closed,
            _ => Outcome::Status(200),
        };
        let tried: Vec<Vec<usize>> = (0..4).map(|i| drive(&mut p, ms(i), "GET", bad).0).collect();
        assert_eq!(tried, [vec![0], vec![1, 2], vec![2], vec![0]]);
    }

    #[test]
    fn the_overall_cap_stops_retrying() {
        let mut model = nginx(3);
        model.overall = Some(ms(1));
        let mut p = Proxy::new(Arc::new(model));
        let (peers, _, _) = drive(&mut p, ms(0), "GET", |_, _| Outcome::Closed);
        assert_eq!(peers.len(), 1);
    }

    #[test]
    fn haproxy_retries_on_the_same_server_and_resends_a_post() {
        let mut p = Proxy::new(Arc::new(haproxy(3)));
        let (peers, answer, _) = drive(&mut p, ms(0), "POST", |_, _| Outcome::Status(503));
        assert_eq!((peers, answer), (vec![0, 0, 0, 0], Outcome::Status(503)));
        let v = &p.counts().hop.violations;
        assert_eq!(
            (v.retried_non_idempotent.count, v.retried_permanent.count),
            (3, 0)
        );
        // 429 is not a condition HAProxy 2.6 has.
        let (peers, answer, _) = drive(&mut p, ms(5), "GET", |_, _| Outcome::Status(429));
        assert_eq!((peers, answer), (vec![1], Outcome::Status(429)));
    }

    #[test]
    fn haproxy_redispatches_every_retry_under_round_robin_whatever_the_interval() {
        let mut model = haproxy(3);
        model.next_peer = NextPeer::Redispatch { interval: -1 };
        let mut p = Proxy::new(Arc::new(model));
        let (peers, answer, _) = drive(&mut p, ms(0), "GET", |_, _| Outcome::Closed);
        assert_eq!((peers, answer), (vec![0, 1, 2, 0], Outcome::Status(502)));
    }

    #[test]
    fn haproxy_turns_around_before_reconnecting_to_the_same_server() {
        let mut model = haproxy(2);
        model.turnaround = Duration::from_secs(1);
        let mut p = Proxy::new(Arc::new(model));
        let (peers, answer, end) = drive(&mut p, ms(0), "GET", |_, _| Outcome::ConnectRefused);
        assert_eq!((peers.len(), answer), (4, Outcome::Status(503)));
        assert_eq!(
            end,
            ms(3_004),
            "three turn-arounds of 1 s and four tries of 1 ms"
        );
    }

    /// The sequences measured on nginx 1.22.1 (docs/stacks.md), peer by peer: retries move
    /// the same round robin as new requests.
    #[test]
    fn the_round_robin_follows_the_sequences_measured_on_nginx() {
        let never_ejected = || {
            let mut model = nginx(3);
            for peer in &mut model.peers {
                peer.max_fails = 0;
            }
            model
        };
        let names =
            |tried: Vec<usize>| -> String { tried.iter().map(|p| ["A", "B", "C"][*p]).collect() };
        let mut model = never_ejected();
        model.retry_on.statuses = vec![503];
        let mut p = Proxy::new(Arc::new(model));
        let a_fails = |peer: usize, _| match peer {
            0 => Outcome::Status(503),
            _ => Outcome::Status(200),
        };
        let seen: Vec<String> = (0..7)
            .map(|i| names(drive(&mut p, ms(i), "GET", a_fails).0))
            .collect();
        assert_eq!(seen, ["AB", "C", "B", "C", "AB", "C", "B"]);
        let mut p = Proxy::new(Arc::new(never_ejected()));
        let a_b_reset = |peer: usize, _| match peer {
            2 => Outcome::Status(200),
            _ => Outcome::Reset(chaos_policy::ResetPhase::AfterWrite),
        };
        let seen: Vec<String> = (0..6)
            .map(|i| names(drive(&mut p, ms(i), "GET", a_b_reset).0))
            .collect();
        assert_eq!(seen, ["ABC", "C", "BC", "AC", "BC", "AC"]);
        let mut model = never_ejected();
        model.peers[0].weight = 3;
        let mut p = Proxy::new(Arc::new(model));
        let seen: String = (0..10)
            .map(|i| names(drive(&mut p, ms(i), "GET", |_, _| Outcome::Status(200)).0))
            .collect();
        assert_eq!(seen, "ABACAABACA");
    }

    /// HAProxy's round robin as measured on 2.6.12 (docs/stacks.md): a redispatched retry
    /// takes the next server in turn, and the turn goes on from there.
    #[test]
    fn haproxy_rotation_follows_the_sequence_measured() {
        let mut model = haproxy(3);
        model.retry_on.statuses = vec![503];
        model.next_peer = NextPeer::Redispatch { interval: -1 };
        let mut p = Proxy::new(Arc::new(model));
        let a_fails = |peer: usize, _| match peer {
            0 => Outcome::Status(503),
            _ => Outcome::Status(200),
        };
        let seen: Vec<Vec<usize>> = (0..3)
            .map(|i| drive(&mut p, ms(i), "GET", a_fails).0)
            .collect();
        assert_eq!(seen, [vec![0, 1], vec![2], vec![0, 1]]);
    }
}
