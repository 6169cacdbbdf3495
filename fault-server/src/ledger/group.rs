//! Which logical request an attempt belongs to, and which attempt it is, for a client
//! that was not written for this server.
//!
//! Why: the harness names its logical requests (`x-request-id`) and numbers its attempts
//! (`x-chaos-attempt`), but a client under test (botocore, urllib3, `curl --retry`, a
//! service's own stub) does neither. Real clients already send most of what is needed:
//! AWS SDKs an invocation id that stays the same across the attempts of one call and an
//! attempt counter, Envoy an attempt count, gRPC the number of previous attempts, and a
//! client with idempotency keys resends its key. What none of them sends is guessed: an
//! identical request (method, path and query, body) within a window of the last attempt's
//! answer is taken for its retry, and counted as a guess.
//!
//! Pure: header lookups and arithmetic, no state (the window's bookkeeping is the
//! ledger's, in `retries`).

use serde::{Deserialize, Serialize};

use crate::script::HeaderLookup;
use crate::wire::{
    ATTEMPT, AWS_REQUEST, ENVOY_ATTEMPT_COUNT, IDEMPOTENCY_KEY, REQUEST_ID, StatedAttempt, grpc,
};

/// AWS SDKs: the same for every attempt of one call (a UUID).
pub const AWS_INVOCATION_ID: &str = "amz-sdk-invocation-id";

/// How a logical request was told apart: the report says how many were grouped each way,
/// so a run that had to guess says so.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GroupedBy {
    /// The header the plan named.
    Header,
    /// `x-request-id`.
    RequestId,
    /// `Idempotency-Key`: a key resent is the same operation retried.
    IdempotencyKey,
    /// AWS SDKs' `amz-sdk-invocation-id`.
    AwsInvocationId,
    /// Method, path and body, within the window: a guess.
    Guess,
    /// A side effect that repeated a failed call under a new key or request id: grouped
    /// into that call (never a logical request of its own).
    FreshKey,
}

impl GroupedBy {
    /// The name in reports (`request_id`, `guess`, ...).
    pub fn name(self) -> &'static str {
        match self {
            GroupedBy::Header => "header",
            GroupedBy::RequestId => "request_id",
            GroupedBy::IdempotencyKey => "idempotency_key",
            GroupedBy::AwsInvocationId => "aws_invocation_id",
            GroupedBy::Guess => "guess",
            GroupedBy::FreshKey => "fresh_key",
        }
    }

    /// A name a client gives one call and should resend with each of its attempts
    /// (`Idempotency-Key`, `x-request-id`): another name on an identical request after a
    /// failure is a fresh key. An SDK's invocation id, or a header the plan chose, names
    /// an invocation, and a new one is the application calling again.
    pub fn names_a_call(self) -> bool {
        matches!(self, GroupedBy::RequestId | GroupedBy::IdempotencyKey)
    }

    /// The prefix of the logical id made from a header's value, so that values of two
    /// headers never name the same request (`x-request-id`'s own value stays as it is:
    /// the harness's ids and the seeds drawn from them do not change).
    fn prefix(self) -> &'static str {
        match self {
            GroupedBy::Header => "header:",
            GroupedBy::RequestId | GroupedBy::Guess | GroupedBy::FreshKey => "",
            GroupedBy::IdempotencyKey => "idempotency-key:",
            GroupedBy::AwsInvocationId => "aws:",
        }
    }
}

/// What names an attempt's logical request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim<'a> {
    /// A header's value: the id is [`Claim::id`].
    Named(GroupedBy, &'a str),
    /// Nothing did: the request's fingerprint (method, path and query, body), for the
    /// window to decide.
    Unnamed(u64),
}

impl Claim<'_> {
    /// The logical id of a named claim: the header's value behind its prefix.
    pub fn id(&self) -> Option<String> {
        match self {
            Claim::Named(by, value) => Some(format!("{}{value}", by.prefix())),
            Claim::Unnamed(_) => None,
        }
    }
}

/// The logical request an attempt claims to belong to, by the first header that names
/// one: the plan's own `header` (lower case), `x-request-id`, `Idempotency-Key`,
/// `amz-sdk-invocation-id`; else its `fingerprint`. An empty value names nothing.
pub fn claim<'h>(
    headers: &'h dyn HeaderLookup,
    header: Option<&str>,
    fingerprint: impl FnOnce() -> u64,
) -> Claim<'h> {
    let named = [
        (GroupedBy::Header, header),
        (GroupedBy::RequestId, Some(REQUEST_ID)),
        (GroupedBy::IdempotencyKey, Some(IDEMPOTENCY_KEY)),
        (GroupedBy::AwsInvocationId, Some(AWS_INVOCATION_ID)),
    ];
    for (by, name) in named {
        if let Some(value) = name
            .and_then(|name| headers.header(name))
            .map(str::trim)
            .filter(|v| !v.is_empty())
        {
            return Claim::Named(by, value);
        }
    }
    Claim::Unnamed(fingerprint())
}

/// The attempt number the client says this is, 1-based, by the one rule the server's
/// fault draws read too ([`StatedAttempt::number`]). `None` when no header says (the
/// ledger then counts the attempts it saw).
pub fn stated_attempt(headers: &dyn HeaderLookup) -> Option<u32> {
    StatedAttempt {
        chaos: headers.header(ATTEMPT),
        aws: headers.header(AWS_REQUEST),
        envoy: headers.header(ENVOY_ATTEMPT_COUNT),
        grpc_previous: headers.header(grpc::PREVIOUS_ATTEMPTS),
        grpc_call: headers
            .header("content-type")
            .is_some_and(|c| grpc::is_grpc(c.as_bytes())),
    }
    .number()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim_of(pairs: &[(&str, &str)], header: Option<&str>) -> Claim<'static> {
        let owned: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let leaked: &'static Vec<(String, String)> = Box::leak(Box::new(owned));
        claim(leaked, header, || 42)
    }

    #[test]
    fn the_first_header_that_names_a_request_wins() {
        let all = [
            ("x-trace", "t1"),
            ("x-request-id", "r1"),
            ("idempotency-key", "k1"),
            ("amz-sdk-invocation-id", "a1"),
        ];
        assert_eq!(
            claim_of(&all, Some("x-trace")),
            Claim::Named(GroupedBy::Header, "t1")
        );
        assert_eq!(
            claim_of(&all, None),
            Claim::Named(GroupedBy::RequestId, "r1")
        );
        assert_eq!(
            claim_of(&all[2..], Some("x-trace")),
            Claim::Named(GroupedBy::IdempotencyKey, "k1")
        );
        assert_eq!(
            claim_of(&all[3..], None),
            Claim::Named(GroupedBy::AwsInvocationId, "a1")
        );
        assert_eq!(
            claim_of(&[("x-request-id", "  ")], None),
            Claim::Unnamed(42),
            "an empty value names nothing"
        );
    }

    #[test]
    fn ids_of_two_headers_never_meet() {
        let key = claim_of(&[("idempotency-key", "same")], None).id();
        let aws = claim_of(&[("amz-sdk-invocation-id", "same")], None).id();
        let id = claim_of(&[("x-request-id", "same")], None).id();
        assert_eq!(key.as_deref(), Some("idempotency-key:same"));
        assert_eq!(aws.as_deref(), Some("aws:same"));
        assert_eq!(id.as_deref(), Some("same"));
        assert_eq!(Claim::Unnamed(1).id(), None);
    }

    #[test]
    fn the_attempt_number_comes_from_what_real_clients_send() {
        let of = |pairs: &[(&str, &str)]| stated_attempt(&pairs.to_vec());
        assert_eq!(of(&[("x-chaos-attempt", "3")]), Some(3));
        assert_eq!(of(&[("amz-sdk-request", "attempt=2; max=3")]), Some(2));
        assert_eq!(
            of(&[("amz-sdk-request", "ttl=20250101T000000Z; attempt=4; max=5")]),
            Some(4)
        );
        assert_eq!(of(&[("x-envoy-attempt-count", "2")]), Some(2));
        assert_eq!(of(&[("grpc-previous-rpc-attempts", "0")]), Some(1));
        assert_eq!(of(&[("x-chaos-attempt", "0")]), None, "attempts start at 1");
        assert_eq!(of(&[("amz-sdk-request", "max=3")]), None);
        assert_eq!(of(&[]), None);
    }
}
