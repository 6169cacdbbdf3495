//! The wire contract between the hops: the load generator, each relay tier and the
//! fault-server, live or simulated.
//!
//! Why one module: every hop reads what the hop above wrote, and the simulator must see
//! what a live hop would. A header name, the request-id format or the seed of an attempt's
//! fault draw written in two places is a contract waiting to drift, so each is declared
//! here once and every hop (the fault-server's HTTP shell, the harness's engine, relay tier
//! and simulator) uses it. It is a crate of its own, depending on nothing, so that the
//! retry core, the fault-server and the harness can all read it and none of them depends
//! on another for it: the [`grpc`] code table, the [`seed`] mixers and streams, and the
//! rules every hop applies to what it reads ([`stated_attempt`], [`retry_after`],
//! [`deadline_ms`], [`fingerprint`], [`is_hop_by_hop`], [`parse_allowance`], [`Seen`]).
//!
//! What crosses a hop:
//! - [`REQUEST_ID`] names the logical request, the same at every hop and every attempt;
//! - [`ATTEMPT`] is the sending hop's own attempt number (1-based);
//! - [`UPSTREAM_ATTEMPTS`] the attempt numbers of the hops above the sender, outermost
//!   first, joined by `.` ([`chain_below`]);
//!   A chain names at most [`MAX_TIERS`] hops: a longer one is a loop ([`loops`]);
//! - [`DEADLINE_MS`] how long the sender waits for this attempt;
//! - [`POLICY`], [`IDEMPOTENCY_KEY`] and [`TRACEPARENT`] as the design says;
//! - [`VIA`] the forwarding hops it passed, each naming itself alone ([`ViaName`]): a
//!   hop that finds its own entry answers [`LOOP_DETECTED`] (508) and forwards nothing;
//! - in answers: [`NO_RETRY`] from a tier that gave up, [`GAVE_UP`] its reason, [`FAULT`]
//!   the phase that injected a fault, [`DUPLICATE`] a side effect run again, [`REPLAYED`]
//!   an answer replayed for an idempotency key.
//!
//! And on the control API, between the harness and a fault-server it did not start:
//! [`SERVER`] on `/healthz` says a fault-server answered; [`SCRIPT_BY`] on a script `PUT`
//! says who installs it; [`SCRIPT_ORIGIN`] on `GET /__chaos/script` says where the script
//! in force came from ([`ORIGIN_STARTUP`], [`ORIGIN_HARNESS`], [`ORIGIN_CONTROL`]).

use std::time::Duration;

use crate::seed::{IdSeed, fnv1a, splitmix64};

pub mod grpc;
pub mod path;
pub mod seed;
mod seen;
mod via;

pub use seen::{LOOP_DETECTED, Seen, status_forbids_retry};
pub use via::{HopKind, VIA, ViaName, forwards_to_itself};

/// The logical request's id, unchanged across attempts and hops.
pub const REQUEST_ID: &str = "x-request-id";
/// The sending hop's attempt number, 1-based.
pub const ATTEMPT: &str = "x-chaos-attempt";
/// The name of the client policy the logical request runs under.
pub const POLICY: &str = "x-chaos-policy";
/// Set by relay tiers: the attempt numbers of the hops above the sender (`2.1`).
pub const UPSTREAM_ATTEMPTS: &str = "x-chaos-upstream-attempts";
/// How long the sender waits for this attempt, in milliseconds.
pub const DEADLINE_MS: &str = "x-chaos-deadline-ms";
/// Marks the answer of a tier that gave up: "overloaded; don't retry" (SRE book, ch. 22).
pub const NO_RETRY: &str = "x-chaos-no-retry";
/// Why a tier gave up (a `GiveUp` reason's name).
pub const GAVE_UP: &str = "x-chaos-gave-up";
/// A chain that shares one retry budget (`share_budget`): the retries the hops below the
/// sender may still make for this logical request, taken from the client's budget.
pub const RETRY_ALLOWANCE: &str = "x-chaos-retry-allowance";
/// On a relay tier's answer: what is left of the allowance its request carried.
pub const RETRY_ALLOWANCE_LEFT: &str = "x-chaos-retry-allowance-left";

/// A retry allowance header's value: a whole number, or `None` for anything else.
pub fn parse_allowance(value: &str) -> Option<u32> {
    value.trim().parse().ok()
}
/// Names the phase whose fault produced a response.
pub const FAULT: &str = "x-chaos-fault";
/// Marks a response whose side effect had already run for this `x-request-id`.
pub const DUPLICATE: &str = "x-chaos-duplicate";
/// The client's idempotency key (Stripe's and the IETF draft's name).
pub const IDEMPOTENCY_KEY: &str = "idempotency-key";
/// Marks a response replayed from an `Idempotency-Key` (Stripe's header name).
pub const REPLAYED: &str = "idempotent-replayed";
/// W3C trace context.
pub const TRACEPARENT: &str = "traceparent";

/// On `/healthz`: `fault-server/<version>`. What the harness recognises a fault-server by
/// before it sends anything else (a service of the user's own gets no script).
pub const SERVER: &str = "x-chaos-server";
/// On a script `PUT`: who installs it ([`ORIGIN_HARNESS`] for a harness run).
pub const SCRIPT_BY: &str = "x-chaos-script-by";
/// On `GET /__chaos/script`: where the script in force came from.
pub const SCRIPT_ORIGIN: &str = "x-chaos-script-origin";
/// The script the server started with (`--script`, or none).
pub const ORIGIN_STARTUP: &str = "startup";
/// A script a harness run installed.
pub const ORIGIN_HARNESS: &str = "harness";
/// A script someone else `PUT`.
pub const ORIGIN_CONTROL: &str = "control";
/// The environment variable the fault-server reads its control token from, and a harness
/// whose fault-server target has no `token:` too (one Kubernetes Secret serves both).
pub const TOKEN_VARIABLE: &str = "FAULT_SERVER_TOKEN";
/// On `POST /__chaos/reset`, a query parameter: start the run clock this many
/// milliseconds after the ledger is cleared (the common start of a sharded run).
pub const RESET_CLOCK_IN: &str = "clock_in_ms";

/// The value of [`SERVER`].
pub fn server_name() -> String {
    format!("fault-server/{}", env!("CARGO_PKG_VERSION"))
}

/// The request headers the hops set themselves. A plan's request kind may not set them:
/// one that did could rename the logical request, fake an attempt number or reseed the
/// fault-server's draws ([`UPSTREAM_ATTEMPTS`]).
pub const RESERVED: [&str; 8] = [
    REQUEST_ID,
    ATTEMPT,
    POLICY,
    UPSTREAM_ATTEMPTS,
    DEADLINE_MS,
    NO_RETRY,
    IDEMPOTENCY_KEY,
    TRACEPARENT,
];

/// Whether `name` is a header of this contract that only the hops may set: one of
/// [`RESERVED`], or any other `x-chaos-` name (the contract's own prefix).
pub fn is_reserved(name: &str) -> bool {
    RESERVED.iter().any(|r| r.eq_ignore_ascii_case(name)) || has_contract_prefix(name)
}

/// Whether `name` starts with `x-chaos-` (any case), the prefix of this contract's own
/// headers: what a proxying hop removes from its upstream's answers, which may not speak
/// for it.
pub fn has_contract_prefix(name: &str) -> bool {
    name.get(..8)
        .is_some_and(|p| p.eq_ignore_ascii_case("x-chaos-"))
}

/// Whether a request of `method` runs a side effect at the fault-server (and so can run
/// it twice): POST and PATCH, the methods HTTP does not make idempotent.
pub fn has_side_effect(method: &str) -> bool {
    method.eq_ignore_ascii_case("POST") || method.eq_ignore_ascii_case("PATCH")
}

/// The id of logical request `index` of `policy`: `{policy}-{index}`, the index
/// zero-padded to at least seven digits, written into `out` (cleared first).
pub fn write_request_id(out: &mut String, policy: &str, index: u64) {
    out.clear();
    out.push_str(policy);
    out.push('-');
    let mut digits = [b'0'; 20];
    let start = decimal(&mut digits, index).min(digits.len() - 7);
    out.push_str(std::str::from_utf8(&digits[start..]).expect("ASCII digits"));
}

/// Writes `n` in decimal at the end of `buf`, the rest untouched, and returns where its
/// digits start. By hand: `write!` costs the simulator, which writes a number per event
/// (ids, attempt numbers), and the fault-server, one per answer, measurably.
pub fn decimal(buf: &mut [u8; 20], mut n: u64) -> usize {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return i;
        }
    }
}

/// [`write_request_id`] into a new string.
pub fn request_id(policy: &str, index: u64) -> String {
    let mut out = String::with_capacity(policy.len() + 8);
    write_request_id(&mut out, policy, index);
    out
}

/// The [`UPSTREAM_ATTEMPTS`] a tier sends below: the chain it received (`above`) and its
/// caller's attempt number, `2.1` for the second attempt of a hop whose own caller was on
/// its first. Empty when it knows neither.
pub fn chain_below(above: Option<&str>, attempt: Option<u32>) -> String {
    match (above, attempt) {
        (Some(above), Some(n)) => format!("{above}.{n}"),
        (None, Some(n)) => n.to_string(),
        (Some(above), None) => above.to_owned(),
        (None, None) => String::new(),
    }
}

/// The most relay tiers a call chain may have (a plan's `tiers:` holds at most this many).
/// Tier `k` of a chain (1-based) receives an [`UPSTREAM_ATTEMPTS`] of `k - 1` segments,
/// so a request that arrives with `MAX_TIERS` or more has passed more hops than any chain
/// has: it is going round a loop (a relay forwarding to itself, or two to each other),
/// and a tier answers it 508 Loop Detected rather than forward it again ([`loops`]).
pub const MAX_TIERS: usize = 16;

/// The number of hops an [`UPSTREAM_ATTEMPTS`] chain names: its `.`-separated segments,
/// 0 for none or an empty one.
pub fn chain_hops(chain: Option<&str>) -> usize {
    match chain.map(str::trim) {
        None | Some("") => 0,
        Some(chain) => chain.split('.').count(),
    }
}

/// Whether a request that arrives with this [`UPSTREAM_ATTEMPTS`] has passed more hops
/// than any chain of [`MAX_TIERS`] tiers can have.
pub fn loops(upstream: Option<&str>) -> bool {
    chain_hops(upstream) >= MAX_TIERS
}

/// The seed of the fault draw for one attempt of logical request `id` (its [`IdSeed`]) at
/// a hop, from the attempt number it carries and the chain of attempts above it. Behind
/// relay tiers the same attempt number arrives once per attempt of every hop above: the
/// chain keeps each such arrival's draw its own. The one definition for every hop that
/// draws faults, live and simulated.
pub fn attempt_seed(id: IdSeed, attempt: u32, upstream: Option<&str>) -> u64 {
    let seed = id.attempt(attempt);
    match upstream {
        Some(chain) => seed ^ splitmix64(fnv1a([chain.as_bytes()])),
        None => seed,
    }
}

/// The seed of the fault draw for a request without an `x-request-id` (another load tool
/// in front of the server): the `counter`-th such request gets draws of its own.
pub fn anonymous_seed(seed: u64, counter: u64) -> u64 {
    splitmix64(seed ^ counter)
}

/// The seeds of one request's fault draws at a hop: its attempt's stream, and the sticky
/// stream its logical request keeps across attempts. The one rule the fault-server's
/// handler, a relay tier and their simulations all seed by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DrawSeeds {
    /// The attempt's own stream ([`attempt_seed`], or [`anonymous_seed`] without an id).
    pub attempt: u64,
    /// The logical request's sticky stream (its [`IdSeed`]'s attempt 0); none without an id.
    pub sticky: Option<u64>,
}

impl DrawSeeds {
    /// The seeds of a request with `request_id` (or none: then `anonymous` is asked for
    /// the count of such requests so far, and only then), stating `attempt` (none: 0),
    /// below the chain `upstream`, under the run's `seed`.
    pub fn new(
        seed: u64,
        request_id: Option<&str>,
        attempt: Option<u32>,
        upstream: Option<&str>,
        anonymous: impl FnOnce() -> u64,
    ) -> DrawSeeds {
        match request_id {
            Some(id) => {
                let id = IdSeed::new(seed, id);
                DrawSeeds {
                    attempt: attempt_seed(id, attempt.unwrap_or(0), upstream),
                    sticky: Some(id.attempt(0)),
                }
            }
            None => DrawSeeds {
                attempt: anonymous_seed(seed, anonymous()),
                sticky: None,
            },
        }
    }
}

/// How one arrival of a request stands among the others of its stated attempt at a hop:
/// the peer (listening socket, numbered from 1 as a proxy's `server` lines are) it came
/// in at, and how many times the hop had already seen the same stated attempt (the same
/// id, [`ATTEMPT`] and [`UPSTREAM_ATTEMPTS`] chain): a proxy resends a request unchanged
/// to another peer, or the same one, and each resend must draw its faults anew.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Arrival {
    /// The peer it arrived at; `None` at a hop with one peer.
    pub peer: Option<u32>,
    /// 0 for the first arrival of its stated attempt, 1 for the first resend, ….
    pub repeat: u32,
}

impl DrawSeeds {
    /// These seeds for the attempt's `arrival`. A first arrival at a hop with one peer
    /// keeps them as they are, so a run without peers or resends draws what it always
    /// drew; any other arrival gets an attempt stream of its own. The sticky stream stays:
    /// it is the logical request's, wherever and however often it arrives.
    pub fn at(self, arrival: Arrival) -> DrawSeeds {
        if arrival == Arrival::default() {
            return self;
        }
        let peer = arrival.peer.unwrap_or(0).to_le_bytes();
        let repeat = arrival.repeat.to_le_bytes();
        DrawSeeds {
            attempt: self.attempt ^ splitmix64(fnv1a([&b"arrival"[..], &peer, &repeat])),
            sticky: self.sticky,
        }
    }
}

/// The most peers a hop listens as (the fault-server's `--peers`, a relay tier's): what
/// a ledger counts per peer is an array of this many, and a peer number above it is
/// refused where it is given.
pub const MAX_PEERS: usize = 16;

/// AWS SDKs: `amz-sdk-request: attempt=2; max=3` states the attempt number.
pub const AWS_REQUEST: &str = "amz-sdk-request";
/// Envoy: the attempt number of a request it routes (`x-envoy-attempt-count: 2`).
pub const ENVOY_ATTEMPT_COUNT: &str = "x-envoy-attempt-count";

/// What a request's headers say of its attempt number: each header a client may state it
/// in, as text, and whether the request is a gRPC call. [`StatedAttempt::number`] is the
/// one rule that reads them, for the fault draw's seed, the ledger and its judge alike.
#[derive(Debug, Clone, Copy, Default)]
pub struct StatedAttempt<'a> {
    /// [`ATTEMPT`], the harness's own.
    pub chaos: Option<&'a str>,
    /// [`AWS_REQUEST`].
    pub aws: Option<&'a str>,
    /// [`ENVOY_ATTEMPT_COUNT`].
    pub envoy: Option<&'a str>,
    /// [`grpc::PREVIOUS_ATTEMPTS`]: the attempts before this one.
    pub grpc_previous: Option<&'a str>,
    /// The content type makes the request a gRPC call ([`grpc::is_grpc`]).
    pub grpc_call: bool,
}

impl StatedAttempt<'_> {
    /// The attempt number, 1-based, from the first header that states one: [`ATTEMPT`],
    /// `attempt=N` in [`AWS_REQUEST`], [`ENVOY_ATTEMPT_COUNT`], [`grpc::PREVIOUS_ATTEMPTS`]
    /// plus one (whatever the content type: only gRPC clients send it). A gRPC call that
    /// states none is a first attempt: a gRPC client leaves the header out of it. `None`
    /// when nothing says; `0` is no attempt number, attempts count from 1.
    pub fn number(&self) -> Option<u32> {
        let number = |v: &str| v.trim().parse::<u32>().ok().filter(|n| *n >= 1);
        self.chaos
            .and_then(number)
            .or_else(|| {
                self.aws.and_then(|v| {
                    v.split(';')
                        .filter_map(|part| part.trim().strip_prefix("attempt="))
                        .find_map(number)
                })
            })
            .or_else(|| self.envoy.and_then(number))
            .or_else(|| {
                self.grpc_previous
                    .and_then(|v| v.trim().parse::<u32>().ok())
                    .map(|n| n.saturating_add(1))
            })
            .or(self.grpc_call.then_some(1))
    }
}

/// `Retry-After` in delay-seconds (RFC 9110 §10.2.3). An HTTP-date is not honoured: its
/// meaning depends on the clocks of two machines.
pub fn retry_after(value: &str) -> Option<Duration> {
    value.trim().parse::<u64>().ok().map(Duration::from_secs)
}

/// The waits in milliseconds some services send beside `Retry-After`: Microsoft's
/// `retry-after-ms`, and AWS's `x-amz-retry-after` (botocore reads only this one since its
/// 2026 retry behaviour). The clients that know them prefer them.
pub const RETRY_AFTER_MS: [&str; 2] = ["retry-after-ms", "x-amz-retry-after"];

/// A [`RETRY_AFTER_MS`] value: a whole number of milliseconds.
pub fn retry_after_ms(value: &str) -> Option<Duration> {
    value.trim().parse::<u64>().ok().map(Duration::from_millis)
}

/// The [`DEADLINE_MS`] a hop sends for an attempt it waits `timeout` for: whole
/// milliseconds, at least 1 (a deadline of 0 would read as "already over").
pub fn deadline_ms(timeout: Duration) -> u64 {
    u64::try_from(timeout.as_millis().max(1)).unwrap_or(u64::MAX)
}

/// The deadline the hop below reads of a `timeout` sent as [`deadline_ms`]: what a
/// simulated hop passes down, so it sees what a live one would.
pub fn deadline_sent(timeout: Duration) -> Duration {
    Duration::from_millis(deadline_ms(timeout))
}

/// A [`DEADLINE_MS`] value as the hop below reads it.
pub fn parse_deadline(value: &str) -> Option<Duration> {
    value.trim().parse::<u64>().ok().map(Duration::from_millis)
}

/// FNV-1a over method, path and query, and body: "the same request" for idempotency keys.
/// A key sent again with another fingerprint is a client's bug the server answers 422.
pub fn fingerprint(method: &str, path_and_query: &str, body: &[u8]) -> u64 {
    fnv1a([method.as_bytes(), b" ", path_and_query.as_bytes(), body])
}

/// The hop-by-hop headers (RFC 9110 §7.6.1, and the `proxy-connection` of old clients):
/// they belong to one connection, and no proxy or tier passes them on.
pub const HOP_BY_HOP: [&str; 9] = [
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "proxy-connection",
];

/// Where a lower-case header name stands in [`HOP_BY_HOP`], if it is there: one match on
/// the name's text, where comparing it with each of them took a tenth of a microsecond a
/// message in the fault proxy.
pub fn hop_by_hop_index(name: &str) -> Option<usize> {
    Some(match name {
        "connection" => 0,
        "keep-alive" => 1,
        "proxy-authenticate" => 2,
        "proxy-authorization" => 3,
        "te" => 4,
        "trailer" => 5,
        "transfer-encoding" => 6,
        "upgrade" => 7,
        "proxy-connection" => 8,
        _ => return None,
    })
}

/// Whether a lower-case header name is hop-by-hop ([`HOP_BY_HOP`]).
pub fn is_hop_by_hop(name: &str) -> bool {
    hop_by_hop_index(name).is_some()
}

/// The headers of this contract a tier sets itself for the hop below (or reads from the
/// one below), so it never copies them across.
pub const PER_HOP: [&str; 7] = [
    ATTEMPT,
    UPSTREAM_ATTEMPTS,
    DEADLINE_MS,
    NO_RETRY,
    GAVE_UP,
    RETRY_ALLOWANCE,
    RETRY_ALLOWANCE_LEFT,
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_ids_pad_to_seven_digits_and_grow_past_them() {
        assert_eq!(request_id("naive", 0), "naive-0000000");
        assert_eq!(request_id("naive", 42), "naive-0000042");
        assert_eq!(request_id("p", 12_345_678), "p-12345678");
        assert_eq!(request_id("p", u64::MAX), format!("p-{}", u64::MAX));
        for index in [0, 9, 10, 999_999, 1_000_000, 10_000_000, 123_456_789_012] {
            assert_eq!(request_id("a-b", index), format!("a-b-{index:07}"));
        }
    }

    #[test]
    fn every_contract_header_is_reserved_and_ordinary_ones_are_not() {
        for name in RESERVED
            .iter()
            .chain(&[GAVE_UP, FAULT, DUPLICATE, "X-Chaos-Anything"])
        {
            assert!(is_reserved(name), "{name}");
            assert!(is_reserved(&name.to_ascii_uppercase()), "{name}");
        }
        for name in ["accept", "x-chaos", "x-tenant", "content-type", REPLAYED] {
            assert!(!is_reserved(name), "{name}");
        }
    }

    #[test]
    fn the_chain_below_appends_the_callers_attempt() {
        assert_eq!(chain_below(None, Some(2)), "2");
        assert_eq!(chain_below(Some("3"), Some(1)), "3.1");
        assert_eq!(chain_below(Some("3.1"), None), "3.1");
        assert_eq!(chain_below(None, None), "");
    }

    #[test]
    fn a_chain_counts_its_hops_and_one_longer_than_any_plan_loops() {
        assert_eq!(chain_hops(None), 0);
        assert_eq!(chain_hops(Some("")), 0);
        assert_eq!(chain_hops(Some("2")), 1);
        assert_eq!(chain_hops(Some("2.1.3")), 3);
        // The deepest tier of the longest chain receives MAX_TIERS - 1 segments.
        let mut chain: Option<String> = None;
        for tier in 1..=MAX_TIERS {
            assert!(!loops(chain.as_deref()), "tier {tier}");
            chain = Some(chain_below(chain.as_deref(), Some(1)));
        }
        let chain = chain.expect("a chain");
        assert_eq!(chain_hops(Some(&chain)), MAX_TIERS);
        assert!(loops(Some(&chain)));
    }

    #[test]
    fn attempt_seeds_are_pinned_and_the_chain_separates_them() {
        let id = IdSeed::new(42, "req-1");
        // Without a chain, the seed the fault-server has always used (seed.rs pins it).
        assert_eq!(
            attempt_seed(id, 1, None),
            IdSeed::new(42, "req-1").attempt(1)
        );
        assert_eq!(attempt_seed(id, 1, None), 0xe873_e003_c314_0b39);
        assert_ne!(
            attempt_seed(id, 1, Some("1")),
            attempt_seed(id, 1, Some("2"))
        );
        assert_ne!(attempt_seed(id, 1, Some("1")), attempt_seed(id, 1, None));
    }

    #[test]
    fn side_effects_are_posts_and_patches() {
        for m in ["POST", "PATCH", "post"] {
            assert!(has_side_effect(m));
        }
        for m in ["GET", "PUT", "DELETE", "HEAD", "OPTIONS"] {
            assert!(!has_side_effect(m));
        }
    }

    /// The drift issue 46 found: the server's seed read `x-chaos-attempt: 0` as attempt 0
    /// (the sticky seed) while its ledger read it as none, and only one of them counted
    /// `grpc-previous-rpc-attempts` without a gRPC content type.
    #[test]
    fn one_rule_states_the_attempt_number() {
        let chaos = |v| StatedAttempt {
            chaos: Some(v),
            ..StatedAttempt::default()
        };
        assert_eq!(chaos(" 3 ").number(), Some(3));
        assert_eq!(chaos("0").number(), None, "attempts count from 1");
        assert_eq!(chaos("three").number(), None);
        let aws = |v| StatedAttempt {
            aws: Some(v),
            ..StatedAttempt::default()
        };
        assert_eq!(aws("attempt=2; max=3").number(), Some(2));
        assert_eq!(
            aws("ttl=20250101T000000Z; attempt=4; max=5").number(),
            Some(4)
        );
        assert_eq!(aws("max=3").number(), None);
        let envoy = StatedAttempt {
            envoy: Some("2"),
            ..StatedAttempt::default()
        };
        assert_eq!(envoy.number(), Some(2));
        let previous = StatedAttempt {
            grpc_previous: Some("2"),
            ..StatedAttempt::default()
        };
        assert_eq!(previous.number(), Some(3), "whatever the content type");
        let first_call = StatedAttempt {
            grpc_call: true,
            ..StatedAttempt::default()
        };
        assert_eq!(first_call.number(), Some(1));
        assert_eq!(StatedAttempt::default().number(), None);
        let both = StatedAttempt {
            chaos: Some("7"),
            grpc_previous: Some("2"),
            grpc_call: true,
            ..StatedAttempt::default()
        };
        assert_eq!(both.number(), Some(7), "the harness's own header first");
    }

    #[test]
    fn decimal_writes_digits_at_the_end() {
        let mut buf = [b'x'; 20];
        let at = decimal(&mut buf, 0);
        assert_eq!((&buf[at..], at), (&b"0"[..], 19));
        assert_eq!(buf[18], b'x', "the rest untouched");
        let at = decimal(&mut buf, u64::MAX);
        assert_eq!(&buf[at..], u64::MAX.to_string().as_bytes());
    }

    #[test]
    fn deadlines_are_whole_milliseconds_of_at_least_one() {
        assert_eq!(deadline_ms(Duration::from_micros(1500)), 1);
        assert_eq!(deadline_ms(Duration::ZERO), 1);
        assert_eq!(deadline_ms(Duration::from_millis(250)), 250);
        assert_eq!(
            deadline_sent(Duration::from_micros(2999)),
            Duration::from_millis(2)
        );
        assert_eq!(parse_deadline(" 250 "), Some(Duration::from_millis(250)));
        assert_eq!(parse_deadline("soon"), None);
    }

    #[test]
    fn retry_after_takes_delay_seconds_and_the_millisecond_headers_milliseconds() {
        assert_eq!(retry_after("2"), Some(Duration::from_secs(2)));
        assert_eq!(retry_after(" 0 "), Some(Duration::ZERO));
        for bad in ["-1", "1.5", "Wed, 21 Oct 2015 07:28:00 GMT", ""] {
            assert_eq!(retry_after(bad), None, "{bad}");
        }
        assert_eq!(retry_after_ms("1500"), Some(Duration::from_millis(1500)));
    }

    #[test]
    fn the_fingerprint_is_method_path_and_body() {
        let a = fingerprint("POST", "/payments?x=1", b"{}");
        assert_eq!(a, fnv1a([&b"POST /payments?x=1{}"[..]]));
        assert_ne!(a, fingerprint("POST", "/payments?x=2", b"{}"));
        assert_ne!(a, fingerprint("PUT", "/payments?x=1", b"{}"));
    }

    #[test]
    fn hop_by_hop_names_are_found_where_they_stand() {
        for (i, name) in HOP_BY_HOP.iter().enumerate() {
            assert_eq!(hop_by_hop_index(name), Some(i));
        }
        assert!(!is_hop_by_hop("content-type"));
        assert!(PER_HOP.iter().all(|h| is_reserved(h) || *h == GAVE_UP));
    }

    #[test]
    fn draw_seeds_are_the_attempts_and_the_logical_requests_or_a_counters() {
        let id = IdSeed::new(42, "p-0000001");
        let named = DrawSeeds::new(42, Some("p-0000001"), Some(2), Some("1"), || {
            panic!("a request with an id asks for no counter")
        });
        assert_eq!(named.attempt, attempt_seed(id, 2, Some("1")));
        assert_eq!(named.sticky, Some(id.attempt(0)));
        let unnumbered = DrawSeeds::new(42, Some("p-0000001"), None, None, || 0);
        assert_eq!(unnumbered.attempt, id.attempt(0));
        let anonymous = DrawSeeds::new(42, None, Some(2), None, || 7);
        assert_eq!(anonymous.attempt, anonymous_seed(42, 7));
        assert_eq!(anonymous.sticky, None);
    }

    #[test]
    fn an_arrival_at_another_peer_or_a_resend_draws_anew_and_a_first_one_does_not() {
        let seeds = DrawSeeds::new(42, Some("p-0000001"), Some(2), None, || 0);
        assert_eq!(seeds.at(Arrival::default()), seeds);
        let peer = |peer, repeat| seeds.at(Arrival { peer, repeat });
        let all = [
            peer(Some(1), 0),
            peer(Some(2), 0),
            peer(None, 1),
            peer(Some(1), 1),
        ];
        for (i, a) in all.iter().enumerate() {
            assert_ne!(a.attempt, seeds.attempt);
            assert_eq!(a.sticky, seeds.sticky, "the logical request's stream stays");
            assert!(all[..i].iter().all(|b| b.attempt != a.attempt));
        }
    }
}
