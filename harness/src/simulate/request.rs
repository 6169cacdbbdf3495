//! What the modelled hops know of a request kind, and the headers a live attempt of it
//! carries, as a script's matchers see them.

use super::queue::Sent;
use crate::plan::{Numbers, RequestKind, fill_path};
use std::time::Duration;

use fault_server::script::{Decision, HeaderLookup, RequestFacts, Script};
use fault_server::wire;

/// What the server needs of a request kind, computed once.
pub(super) struct Kind {
    pub(super) method: String,
    /// The path as written, and what its `{n}` becomes.
    path: String,
    n: Numbers,
    pub(super) side_effect: bool,
    pub(super) keyed: bool,
    pub(super) body: String,
    pub(super) headers: Vec<(String, String)>,
}

impl Kind {
    pub(super) fn new(k: &RequestKind) -> Kind {
        Kind {
            side_effect: wire::has_side_effect(&k.method),
            method: k.method.clone(),
            path: k.path.clone(),
            n: k.n.clone(),
            keyed: k.idempotency_key,
            body: k.body.clone().unwrap_or_default(),
            headers: k
                .headers
                .iter()
                .map(|(n, v)| (n.clone(), v.clone()))
                .collect(),
        }
    }

    /// The path of the logical request whose draw is `n`, into `out`, as live.
    pub(super) fn write_path(&self, out: &mut String, n: u64) {
        fill_path(&self.path, &self.n, n, out);
    }
}

/// The headers a live attempt carries, as the script's matchers see them.
pub(super) struct Headers<'a> {
    pub(super) id: &'a str,
    pub(super) attempt: &'a str,
    pub(super) policy: &'a str,
    /// `x-chaos-upstream-attempts`, behind tiers.
    pub(super) upstream: Option<&'a str>,
    pub(super) kind: &'a Kind,
}

impl HeaderLookup for Headers<'_> {
    fn header(&self, name: &str) -> Option<&str> {
        let is = |n: &str| name.eq_ignore_ascii_case(n);
        if is(wire::REQUEST_ID) {
            Some(self.id)
        } else if is(wire::ATTEMPT) {
            Some(self.attempt)
        } else if is(wire::POLICY) {
            Some(self.policy)
        } else if is(wire::UPSTREAM_ATTEMPTS) {
            self.upstream
        } else if is(wire::IDEMPOTENCY_KEY) {
            self.kind.keyed.then_some(self.id)
        } else if is("content-type") && !self.kind.body.is_empty() {
            Some("application/json")
        } else {
            self.kind
                .headers
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.as_str())
        }
    }
}

/// What `script` decides for an attempt (`sent`) of request `id`, as a live hop asks it:
/// the method, the path (already written for the request's `{n}`), the attempt number,
/// the headers the attempt carries, and the sticky seed of the logical request.
#[allow(clippy::too_many_arguments)]
pub(super) fn decide<R: rand_core::Rng + ?Sized>(
    script: &Script,
    kind: &Kind,
    path: &str,
    id: &str,
    policy: &str,
    sent: &Sent,
    sticky_seed: Option<u64>,
    peer: Option<u32>,
    now: Duration,
    rng: &mut R,
) -> Decision {
    let mut digits = itoa_buf();
    let headers = Headers {
        id,
        attempt: format_u32(&mut digits, sent.attempt.get()),
        policy,
        upstream: sent.chain.as_deref(),
        kind,
    };
    script.select(
        &RequestFacts {
            method: &kind.method,
            path,
            attempt: Some(sent.attempt.get()),
            headers: &headers,
            sticky_seed,
            peer,
        },
        now,
        rng,
    )
}

pub(super) fn itoa_buf() -> [u8; 20] {
    [0; 20]
}

/// `n` in decimal, in `buf` ([`wire::decimal`]).
pub(super) fn format_u32(buf: &mut [u8; 20], n: u32) -> &str {
    let i = wire::decimal(buf, u64::from(n));
    std::str::from_utf8(&buf[i..]).expect("ASCII digits")
}

#[cfg(test)]
mod tests {
    #[test]
    fn attempt_numbers_are_written_in_decimal() {
        let mut buf = super::itoa_buf();
        assert_eq!(super::format_u32(&mut buf, 0), "0");
        let mut buf = super::itoa_buf();
        assert_eq!(super::format_u32(&mut buf, 4_294_967_295), "4294967295");
    }
}
