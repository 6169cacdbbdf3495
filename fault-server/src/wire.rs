//! The wire contract between the hops: the load generator, each relay tier and the
//! fault-server, live or simulated.
//!
//! Why one module: every hop reads what the hop above wrote, and the simulator must see
//! what a live hop would. A header name, the request-id format or the seed of an attempt's
//! fault draw written in two places is a contract waiting to drift, so each is declared
//! here once and every hop (this crate's HTTP shell, the harness's engine, relay tier and
//! simulator) uses it. It lives in the fault-server because every hop depends on it.
//!
//! What crosses a hop:
//! - [`REQUEST_ID`] names the logical request, the same at every hop and every attempt;
//! - [`ATTEMPT`] is the sending hop's own attempt number (1-based);
//! - [`UPSTREAM_ATTEMPTS`] the attempt numbers of the hops above the sender, outermost
//!   first, joined by `.` ([`chain_below`]);
//!   A chain names at most [`MAX_TIERS`] hops: a longer one is a loop ([`loops`]);
//! - [`DEADLINE_MS`] how long the sender waits for this attempt;
//! - [`POLICY`], [`IDEMPOTENCY_KEY`] and [`TRACEPARENT`] as the design says;
//! - in answers: [`NO_RETRY`] from a tier that gave up, [`GAVE_UP`] its reason, [`FAULT`]
//!   the phase that injected a fault, [`DUPLICATE`] a side effect run again, [`REPLAYED`]
//!   an answer replayed for an idempotency key.
//!
//! And on the control API, between the harness and a fault-server it did not start:
//! [`SERVER`] on `/healthz` says a fault-server answered; [`SCRIPT_BY`] on a script `PUT`
//! says who installs it; [`SCRIPT_ORIGIN`] on `GET /__chaos/script` says where the script
//! in force came from ([`ORIGIN_STARTUP`], [`ORIGIN_HARNESS`], [`ORIGIN_CONTROL`]).

use crate::seed::{IdSeed, fnv1a, splitmix64};

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
    RESERVED.iter().any(|r| r.eq_ignore_ascii_case(name))
        || name
            .get(..8)
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
    // By hand: `write!` costs the simulator, which writes an id per event, measurably.
    let mut digits = [b'0'; 20];
    let mut i = digits.len();
    let mut n = index;
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    let start = i.min(digits.len() - 7);
    out.push_str(std::str::from_utf8(&digits[start..]).expect("ASCII digits"));
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
            crate::seed::request_seed(42, "req-1", 1)
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
}

/// gRPC over HTTP/2 (grpc `doc/PROTOCOL-HTTP2.md`): the names a unary call and its answer
/// carry, and the status codes (`google/rpc/code.proto`). The retry core keeps its own
/// copy of the code table (`chaos_policy::grpc`): it may depend on no crate of ours.
pub mod grpc {
    /// The content type that makes a request a gRPC call (`application/grpc+proto` too).
    pub const CONTENT_TYPE: &str = "application/grpc";
    /// The call's status, in the trailers (or the headers of a Trailers-Only answer).
    pub const STATUS: &str = "grpc-status";
    /// The status's message, percent-encoded.
    pub const MESSAGE: &str = "grpc-message";
    /// gRFC A6's server pushback: wait this many milliseconds before a retry; a negative or
    /// malformed value means "do not retry".
    pub const PUSHBACK: &str = "grpc-retry-pushback-ms";
    /// gRFC A6: how many attempts of this call came before this one.
    pub const PREVIOUS_ATTEMPTS: &str = "grpc-previous-rpc-attempts";

    /// Each code's name as `code.proto` spells it, indexed by its number.
    pub const NAMES: [&str; 17] = [
        "OK",
        "CANCELLED",
        "UNKNOWN",
        "INVALID_ARGUMENT",
        "DEADLINE_EXCEEDED",
        "NOT_FOUND",
        "ALREADY_EXISTS",
        "PERMISSION_DENIED",
        "RESOURCE_EXHAUSTED",
        "FAILED_PRECONDITION",
        "ABORTED",
        "OUT_OF_RANGE",
        "UNIMPLEMENTED",
        "INTERNAL",
        "UNAVAILABLE",
        "DATA_LOSS",
        "UNAUTHENTICATED",
    ];

    /// Whether a request's `content-type` makes it a gRPC call.
    pub fn is_grpc(content_type: &[u8]) -> bool {
        content_type
            .get(..CONTENT_TYPE.len())
            .is_some_and(|head| head.eq_ignore_ascii_case(CONTENT_TYPE.as_bytes()))
            && matches!(
                content_type.get(CONTENT_TYPE.len()),
                None | Some(b'+' | b';')
            )
    }

    /// A code by name in any case, with `_` or `-`, or by number.
    pub fn code_by_name(name: &str) -> Option<u8> {
        let name = name.trim().to_ascii_uppercase().replace('-', "_");
        match name.parse::<u8>() {
            Ok(n) if usize::from(n) < NAMES.len() => Some(n),
            Ok(_) => None,
            Err(_) => NAMES.iter().position(|n| *n == name).map(|i| i as u8),
        }
    }

    /// The ledger's and the metrics' name of a code: `unavailable`.
    pub fn label(code: u8) -> String {
        NAMES
            .get(usize::from(code))
            .map_or_else(|| format!("code_{code}"), |n| n.to_ascii_lowercase())
    }

    /// A `grpc-retry-pushback-ms` value as gRFC A6 reads it: a non-negative whole number of
    /// milliseconds is how long to wait before the retry; anything else (negative,
    /// malformed) means "do not retry" (`None`).
    pub fn pushback(value: &[u8]) -> Option<std::time::Duration> {
        let text = std::str::from_utf8(value).ok()?;
        text.trim()
            .parse::<u64>()
            .ok()
            .map(std::time::Duration::from_millis)
    }

    /// The code a gRPC client makes of an HTTP answer without `grpc-status` (grpc
    /// `doc/http-grpc-status-mapping.md`): what a gRPC call answered by an HTTP error
    /// (over capacity, a bad body) is told.
    pub fn code_of_http_status(status: u16) -> u8 {
        match status {
            200 => 0,
            400 => 13,
            401 => 16,
            403 => 7,
            404 => 12,
            429 | 502 | 503 | 504 => 14,
            _ => 2,
        }
    }

    /// The HTTP status `code.proto` maps a code to ("HTTP Mapping: 503 Service
    /// Unavailable"): what a gRPC fault answers a client that is not speaking gRPC.
    pub fn http_status(code: u8) -> u16 {
        match code {
            0 => 200,
            1 => 499,
            3 | 9 | 11 => 400,
            4 => 504,
            5 => 404,
            6 | 10 => 409,
            7 => 403,
            8 => 429,
            12 => 501,
            14 => 503,
            16 => 401,
            _ => 500,
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;
        use std::time::Duration;

        #[test]
        fn grpc_content_types_and_only_those() {
            for ct in [
                "application/grpc",
                "application/grpc+proto",
                "Application/GRPC;x=1",
            ] {
                assert!(is_grpc(ct.as_bytes()), "{ct}");
            }
            for ct in [
                "application/grpc-web",
                "application/json",
                "application/grp",
                "",
            ] {
                assert!(!is_grpc(ct.as_bytes()), "{ct}");
            }
        }

        #[test]
        fn pushback_is_a_whole_number_of_milliseconds_or_do_not_retry() {
            assert_eq!(pushback(b"0"), Some(Duration::ZERO));
            assert_eq!(pushback(b"300"), Some(Duration::from_millis(300)));
            assert_eq!(pushback(b" 7 "), Some(Duration::from_millis(7)));
            for stop in [&b"-1"[..], b"1.5", b"soon", b"", b"\xff"] {
                assert_eq!(pushback(stop), None, "{stop:?}");
            }
        }

        #[test]
        fn codes_by_name_number_and_label_round_trip() {
            for (n, name) in NAMES.iter().enumerate() {
                let code = n as u8;
                assert_eq!(code_by_name(name), Some(code));
                assert_eq!(
                    code_by_name(&name.to_ascii_lowercase().replace('_', "-")),
                    Some(code)
                );
                assert_eq!(code_by_name(&n.to_string()), Some(code));
                assert_eq!(label(code), name.to_ascii_lowercase());
            }
            assert_eq!(code_by_name("17"), None);
            assert_eq!(code_by_name("unavailabl"), None);
            assert_eq!(label(99), "code_99");
        }

        #[test]
        fn http_statuses_map_as_grpc_documents_them() {
            assert_eq!(code_of_http_status(503), 14);
            assert_eq!(code_of_http_status(429), 14);
            assert_eq!(code_of_http_status(404), 12);
            assert_eq!(code_of_http_status(500), 2);
            assert_eq!(http_status(14), 503);
            assert_eq!(http_status(8), 429);
            assert_eq!(http_status(0), 200);
        }
    }
}
