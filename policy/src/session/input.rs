//! What a shell tells a session: how a request starts ([`Start`], with the retry allowance
//! it shares, [`Share`]) and what an answer to one of its attempts said ([`Reply`]). The
//! counterpart of `action.rs`, what a session tells its shell.

use std::time::Duration;

use crate::outcome::Outcome;

/// What limits a request and what it shares, given to [`Client::start`](crate::Client::start).
/// `Start::default()` is a request on its own: the policy's deadline alone, its retries paid
/// from its client's budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Start {
    /// A deadline the caller propagates, counted from the start: the request must be over
    /// within the nearer of it and the policy's own `deadline`. `None`: the policy's alone.
    pub deadline: Option<Duration>,
    /// Where the request's retries are paid from.
    pub share: Share,
}

/// Where a request's retries are paid from: its client's own budget, or one allowance
/// that all the hops of its call chain spend from (`share_budget`), so a chain retries
/// within one budget instead of multiplying each hop's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Share {
    /// Each retry is paid from the client's own budget (if it has one); nothing is shared
    /// with the hops below.
    #[default]
    None,
    /// The request heads a chain that draws from this client's budget: up to this many
    /// retries are taken out of it at the start, to be spent by this client and by the
    /// hops below it ([`Session::allowance`](crate::Session::allowance) goes down with
    /// each attempt), and what is left goes back when the request ends. A budget that
    /// cannot share ([`Budget::can_share`](crate::Budget::can_share)) grants none.
    Reserve(u32),
    /// The request is at a hop whose caller shared this allowance with it
    /// (`x-chaos-retry-allowance`): its retries are paid from it, not from the client's
    /// budget, and what is left goes back up with its answer.
    Allowance(u32),
}

/// What an attempt came back with, as the policy hears it: the outcome, and what the
/// answer said beyond it. Given to [`Client::on_reply`](crate::Client::on_reply); an
/// attempt that got no answer (a timeout, a reset) is [`Reply::bare`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reply {
    /// How the attempt ended.
    pub outcome: Outcome,
    /// The server's `Retry-After` or gRPC pushback (`grpc-retry-pushback-ms`), parsed:
    /// how long it asked the client to wait, which the policy's `retry_after` weighs
    /// against its backoff.
    pub retry_after: Option<Duration>,
    /// The tier behind gave up (`x-chaos-no-retry`): a policy with `honor_no_retry` gives
    /// up too, rather than multiply the load of a call chain.
    pub no_retry: bool,
    /// The server said not to retry: a negative or malformed gRPC pushback (gRFC A6).
    /// Heeded by a policy that reads the server's hints (`retry_after` other than
    /// `ignore`).
    pub stop: bool,
    /// What the hops below left of the shared retry allowance the attempt carried
    /// (`x-chaos-retry-allowance-left`); `None` when the answer did not say (the leaf
    /// spends none) or none came. Heeded only by a session that shares one.
    pub allowance_left: Option<u32>,
}

impl Reply {
    /// An answer with nothing but its outcome: no hint came with it, or no answer came
    /// at all.
    pub fn bare(outcome: Outcome) -> Reply {
        Reply {
            outcome,
            retry_after: None,
            no_retry: false,
            stop: false,
            allowance_left: None,
        }
    }
}
