//! `chaos-policy`: the pure retry-policy core.
//!
//! Every decision a retrying client makes (retry or give up, how long to wait, whether the
//! budget or the breaker allows another attempt) lives here, as plain deterministic code.
//! The core is pure so that any shell can drive it and make the same decisions for the same
//! events: the harness's live engine, its relay tiers (through the hop core) and its
//! virtual-time simulator all do, and the property tests drive it through an event
//! simulation of their own.
//!
//! The core does no IO and reads no clock. Time is an argument: a [`Duration`] offset from the
//! start of the run. Randomness comes from a seeded [`rand_core::Rng`] the caller owns. The
//! driving loop is "feed an event, act on the [`Action`] that comes out":
//!
//! ```
//! use std::time::Duration;
//! use chaos_policy::{Action, Client, Method, Outcome, Policy, Reply, Request, Start};
//! use rand_chacha::ChaCha8Rng;
//! use rand_core::SeedableRng;
//!
//! let mut rng = ChaCha8Rng::seed_from_u64(42);
//! let mut client = Client::new(Policy::default());
//! let now = Duration::ZERO;
//! let (mut session, action) = client.start(Request::new(Method::Get), now, Start::default());
//! assert!(matches!(action, Action::Send { attempt, .. } if attempt.get() == 1));
//! // The first attempt came back 503: the default policy waits, then tries again.
//! let reply = Reply::bare(Outcome::Status(503));
//! let action = client.on_reply(&mut session, now, reply, &mut rng);
//! let Action::Wait { until } = action else { panic!("expected a backoff") };
//! let action = client.on_timer(&mut session, until);
//! assert!(matches!(action, Action::Send { attempt, .. } if attempt.get() == 2));
//! ```
//!
//! [`Duration`]: std::time::Duration

#![warn(missing_docs)]

mod backoff;
mod breaker;
mod budget;
mod error;
mod outcome;
mod policy;
mod preset;
mod random;
mod request;
mod session;
mod window;

pub use backoff::{Backoff, BackoffShape, Jitter};
pub use breaker::{Breaker, BreakerConfig, BreakerState, Permit};
pub use budget::{
    Budget, BudgetConfig, Concurrency, Grant, GrpcThrottle, QuotaCosts, RetryBudget, RetryQuota,
    RunCounts, TokenBucket, TtlWindow,
};
pub use error::ConfigError;
pub use outcome::{
    Class, Outcome, ResetPhase, RetryCondition, RetryOn, Unprocessed, Violation, grpc,
};
pub use policy::{Policy, PolicyConfig, RetryAfter};
pub use preset::Preset;
pub use random::unit_f64;
pub use request::{Attempt, Method, Request};
pub use session::{
    Action, Client, GiveUp, Reply, RetryAfterUse, Session, Share, Start, Verdict, Wait,
};
