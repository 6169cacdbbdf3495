//! Policies named after the systems that ship them, so a user can test the policy their
//! service actually runs before rolling it out.
//!
//! Each default below cites where its number comes from; `docs/research/presets.md` keeps
//! the quotes. Where a system's semantics cannot be expressed exactly, the preset says so
//! in [`Preset::caveat`] and approximates on the side the source's own docs describe.

use std::time::Duration;

use crate::backoff::{Backoff, Jitter};
use crate::breaker::BreakerConfig;
use crate::budget::{BudgetConfig, QuotaCosts};
use crate::error::ConfigError;
use crate::outcome::{RetryCondition as C, RetryOn};
use crate::policy::{PolicyConfig, RetryAfter};

/// A named policy of a real system.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Preset {
    /// gRFC A6's example retry policy and throttling, with its pushback honoured.
    Grpc,
    /// An Envoy route's retry policy and its cluster's concurrency retry budget.
    Envoy,
    /// Finagle's default retry budget and decorrelated backoff.
    Finagle,
    /// A Linkerd ServiceProfile's retry budget: immediate retries bounded by the budget.
    Linkerd,
    /// tower's default budget and exponential backoff.
    Tower,
    /// The AWS SDKs' standard retry mode as botocore ran it up to 1.43.
    AwsStandard,
    /// The AWS SDKs' updated standard retry behaviour (the 2026 defaults).
    AwsStandard2026,
    /// Polly v8's default retry strategy: fixed waits, no budget.
    Polly,
    /// resilience4j's default retry and circuit breaker.
    Resilience4j,
    /// The Google SRE book's advice: a 10% budget, and one tier of a chain retries.
    Sre,
}

const fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

const fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

fn exponential(base: Duration, multiplier: f64, cap: Duration, jitter: Jitter) -> Backoff {
    Backoff::exponential(base, multiplier, cap)
        .and_then(|b| b.with_jitter(jitter))
        .expect("preset backoffs are valid constants")
}

/// What a client that raises on any 5xx and on transport errors retries: the assumption for
/// libraries whose default is "every exception" (Polly, resilience4j).
fn every_exception() -> RetryOn {
    RetryOn::new([C::Transient, C::ServerError])
}

impl Preset {
    /// Every preset, in the order help texts and error messages list them.
    pub const ALL: [Preset; 10] = [
        Preset::Grpc,
        Preset::Envoy,
        Preset::Finagle,
        Preset::Linkerd,
        Preset::Tower,
        Preset::AwsStandard,
        Preset::AwsStandard2026,
        Preset::Polly,
        Preset::Resilience4j,
        Preset::Sre,
    ];

    /// The name a plan's `preset:` uses.
    pub fn name(self) -> &'static str {
        match self {
            Preset::Grpc => "grpc",
            Preset::Envoy => "envoy",
            Preset::Finagle => "finagle",
            Preset::Linkerd => "linkerd",
            Preset::Tower => "tower",
            Preset::AwsStandard => "aws-standard",
            Preset::AwsStandard2026 => "aws-standard-2026",
            Preset::Polly => "polly",
            Preset::Resilience4j => "resilience4j",
            Preset::Sre => "sre",
        }
    }

    /// The preset a plan names, in any case; an unknown name's error lists the known ones.
    pub fn parse(name: &str) -> Result<Preset, ConfigError> {
        Preset::ALL
            .into_iter()
            .find(|p| p.name().eq_ignore_ascii_case(name.trim()))
            .ok_or_else(|| ConfigError::UnknownPreset {
                name: name.to_owned(),
                known: Preset::ALL.map(Preset::name).join(", "),
            })
    }

    /// Where the numbers come from.
    pub fn source(self) -> &'static str {
        match self {
            Preset::Grpc => "gRFC A6 (client retries): example retryPolicy and retryThrottling",
            Preset::Envoy => {
                "Envoy route RetryPolicy defaults and cluster circuit_breakers.retry_budget defaults"
            }
            Preset::Finagle => "Finagle RetryBudget() defaults and RetryPolicy.tries backoff",
            Preset::Linkerd => "Linkerd ServiceProfile retryBudget defaults and route timeout",
            Preset::Tower => "tower TpsBudget::default() and ExponentialBackoffMaker::default()",
            Preset::AwsStandard => "AWS SDKs standard retry mode (botocore standard.py, quota.py)",
            Preset::AwsStandard2026 => {
                "AWS SDKs updated standard retry behaviour (AWS_NEW_RETRIES_2026, botocore 2.1; the \
                 default from botocore 1.44)"
            }
            Preset::Polly => "Polly v8 RetryStrategyOptions defaults",
            Preset::Resilience4j => "resilience4j RetryConfig and CircuitBreakerConfig defaults",
            Preset::Sre => "Google SRE book ch. 21 (Handling Overload) and ch. 22",
        }
    }

    /// Where the preset differs from the system it is named after.
    pub fn caveat(self) -> &'static str {
        match self {
            Preset::Grpc => {
                "gRPC has no default retry policy; these are A6's example values. gRPC statuses \
                 map to HTTP as UNAVAILABLE = 429/502/503/504 and transport failures. Pushback \
                 (Retry-After here) has no ceiling in A6; it is capped at 60 s. The backoff is \
                 A6's since its 2024 amendment (grpc/proposal#452): the capped delay times \
                 U(0.8, 1.2), so up to 1.2 s. The original A6 text drew U(0, capped delay), \
                 full jitter, which grpc-node still drew in 2025 (grpc/grpc-node#2959)."
            }
            Preset::Envoy => {
                "Envoy's budget limits concurrent retries, so it implies no amplification bound; \
                 gate an envoy policy with `{ metric: amplification, max: X }`. Envoy retries \
                 nothing unless configured; retry_on here is the common `5xx`."
            }
            Preset::Finagle => {
                "Finagle's default application policy is RetryPolicy.Never and requeues only \
                 rejected writes; this preset applies its budget and RetryPolicy.tries backoff \
                 to transient failures, with 3 attempts."
            }
            Preset::Linkerd => {
                "Linkerd ServiceProfiles bound retries by the budget only and document no \
                 backoff; this preset retries at once, with 10 attempts as a safety cap. The \
                 2.16+ annotation retries (limit 1, no budget) are not this preset."
            }
            Preset::Tower => {
                "tower has no default attempt limit (the Policy decides): 3 here. Its backoff has \
                 no practical cap (u64::MAX ms): 1 h here. The budget applies the configured \
                 ratio exactly, without tower#857's truncation."
            }
            Preset::AwsStandard => {
                "Throttling errors are recognised by HTTP 429 only. This is botocore's standard \
                 mode up to 1.43 (measured: docs/research/presets.md, section 11); from 1.44 \
                 botocore, and the JS SDK v3 already, follow aws-standard-2026."
            }
            Preset::AwsStandard2026 => {
                "Throttling errors (HTTP 429 here) keep a 1 s base backoff in the SDKs; this \
                 preset uses the 50 ms base for every error. DynamoDB's 25 ms / 4 attempts are \
                 not modelled. Retry-After is honoured as the JS SDK v3 does; botocore reads \
                 only x-amz-retry-after (milliseconds) and ignores Retry-After (measured: \
                 docs/research/presets.md, section 11)."
            }
            Preset::Polly => {
                "Polly handles every exception by default; this preset assumes a client that \
                 raises on 5xx and on transport errors."
            }
            Preset::Resilience4j => {
                "resilience4j's breaker window counts the last 100 calls; this one is a 10 s time \
                 window with the same minimum of 100 calls."
            }
            Preset::Sre => {
                "The book gives no window for the 10% per-client budget (2 min, as its adaptive \
                 throttling keeps, is used) and no backoff numbers (100 ms x2 to 10 s, full \
                 jitter, is used). Adaptive throttling of first attempts is not modelled."
            }
        }
    }

    /// The preset's policy fields; a plan may override any of them.
    pub fn config(self) -> PolicyConfig {
        let base = PolicyConfig::default();
        match self {
            Preset::Grpc => PolicyConfig {
                // A6 example: "maxAttempts": 4 (client-side maximum 5).
                max_attempts: 4,
                // A6 as amended in 2024 (grpc/proposal#452): the n-th retry after
                // min(initialBackoff*multiplier^(n-1), maxBackoff) * random(0.8, 1.2);
                // example initialBackoff .1s, multiplier 2, maxBackoff 1s.
                backoff: exponential(ms(100), 2.0, secs(1), Jitter::Proportional(0.2)),
                // A6 example retryableStatusCodes: ["UNAVAILABLE"]: the code itself, and
                // what a gRPC client reads as UNAVAILABLE without a `grpc-status` (an
                // intermediary's 429/502/503/504, a transport failure, a refused stream).
                retry_on: RetryOn::new([
                    C::Grpc(crate::grpc::UNAVAILABLE),
                    C::GatewayError,
                    C::Status(429),
                    C::ConnectFailure,
                    C::Reset,
                    C::RefusedStream,
                ]),
                // A6: grpc-retry-pushback-ms replaces the backoff.
                retry_after: RetryAfter::Honor { max: secs(60) },
                // A6 example retryThrottling: maxTokens 10, tokenRatio 0.1.
                budget: Some(BudgetConfig::GrpcThrottle {
                    max_tokens: 10.0,
                    token_ratio: 0.1,
                }),
                ..base
            },
            Preset::Envoy => PolicyConfig {
                // RetryPolicy.num_retries: "optional and defaults to 1".
                max_attempts: 2,
                // Route timeout (default 15 s) includes all retries; per_try_timeout unset.
                deadline: Some(secs(15)),
                // retry_back_off: base 25 ms, max "10 times the base interval"; "fully
                // jittered": the k-th retry in [0, (2^k - 1) · base).
                backoff: Backoff::envoy(ms(25), ms(250))
                    .and_then(|b| b.with_jitter(Jitter::Full))
                    .expect("preset backoffs are valid constants"),
                // retry_on "5xx": any 5xx, or no response (disconnect/reset/read timeout),
                // connect-failure included.
                retry_on: RetryOn::new([C::ServerError, C::Reset, C::ConnectFailure, C::Timeout]),
                // retry_budget: budget_percent 20%, min_retry_concurrency 3.
                budget: Some(BudgetConfig::Concurrency {
                    percent: 20.0,
                    min_concurrency: 3,
                }),
                ..base
            },
            Preset::Finagle => PolicyConfig {
                max_attempts: 3,
                // RetryPolicy.tries: Backoff.decorrelatedJittered(5.millis, 200.millis).
                backoff: exponential(ms(5), 2.0, ms(200), Jitter::Decorrelated),
                // RetryBudget(): ttl 10 s, minRetriesPerSec 10, percentCanRetry 0.2.
                budget: Some(BudgetConfig::TtlWindow {
                    ratio: 0.2,
                    min_per_sec: 10.0,
                    ttl: secs(10),
                }),
                ..base
            },
            Preset::Linkerd => PolicyConfig {
                max_attempts: 10,
                // ServiceProfile route timeout: "If unspecified, the default timeout is 10s".
                deadline: Some(secs(10)),
                backoff: Backoff::none(),
                // isRetryable routes retry failed (5xx) responses.
                retry_on: RetryOn::new([C::ServerError, C::ConnectFailure, C::Reset]),
                // retryBudget: retryRatio 0.2, minRetriesPerSecond 10, ttl 10s.
                budget: Some(BudgetConfig::TtlWindow {
                    ratio: 0.2,
                    min_per_sec: 10.0,
                    ttl: secs(10),
                }),
                ..base
            },
            Preset::Tower => PolicyConfig {
                max_attempts: 3,
                // ExponentialBackoffMaker::default(): min 50 ms, doubling, jitter 0.99 added
                // on top ([base, base · 1.99]).
                backoff: exponential(ms(50), 2.0, secs(3600), Jitter::Additive(0.99)),
                // TpsBudget::default(): ttl 10 s, min_per_sec 10, retry_percent 0.2.
                budget: Some(BudgetConfig::TtlWindow {
                    ratio: 0.2,
                    min_per_sec: 10.0,
                    ttl: secs(10),
                }),
                ..base
            },
            Preset::AwsStandard => PolicyConfig {
                // DEFAULT_MAX_ATTEMPTS = 3.
                max_attempts: 3,
                // t_i = rand(0, 1) * min(2 ** (attempt - 1), MAX_BACKOFF = 20) seconds.
                backoff: exponential(secs(1), 2.0, secs(20), Jitter::Full),
                // _TRANSIENT_STATUS_CODES = [500, 502, 503, 504], throttling errors,
                // connection errors and timeouts.
                retry_on: RetryOn::new([C::Transient, C::Status(500)]),
                // quota.py INITIAL_CAPACITY 500; _RETRY_COST 5; _TIMEOUT_RETRY_REQUEST 10;
                // _NO_RETRY_INCREMENT 1.
                budget: Some(BudgetConfig::RetryQuota {
                    capacity: 500.0,
                    costs: QuotaCosts {
                        retry: 5.0,
                        timeout: 10.0,
                        throttling: 5.0,
                    },
                    success_refill: 1.0,
                }),
                ..base
            },
            Preset::AwsStandard2026 => PolicyConfig {
                max_attempts: 3,
                // _NON_THROTTLING_BASE_SCALE = 0.05 s, base 2, MAX_BACKOFF 20 s applied
                // before the jitter.
                backoff: exponential(ms(50), 2.0, secs(20), Jitter::Full),
                retry_on: RetryOn::new([C::Transient, C::Status(500)]),
                // x-amz-retry-after: clamped between the backoff and 5 s above it.
                retry_after: RetryAfter::Clamp { max_extra: secs(5) },
                // _RETRY_COST_V2 14; _THROTTLING_RETRY_COST 5; timeouts no longer special.
                budget: Some(BudgetConfig::RetryQuota {
                    capacity: 500.0,
                    costs: QuotaCosts {
                        retry: 14.0,
                        timeout: 14.0,
                        throttling: 5.0,
                    },
                    success_refill: 1.0,
                }),
                ..base
            },
            Preset::Polly => PolicyConfig {
                // MaxRetryAttempts 3, "in addition to the original call".
                max_attempts: 4,
                // Delay 2 s, BackoffType Constant, UseJitter false.
                backoff: Backoff::fixed(secs(2)),
                retry_on: every_exception(),
                ..base
            },
            Preset::Resilience4j => PolicyConfig {
                // DEFAULT_MAX_ATTEMPTS = 3; DEFAULT_WAIT_DURATION = 500 ms, fixed.
                max_attempts: 3,
                backoff: Backoff::fixed(ms(500)),
                retry_on: every_exception(),
                // failureRateThreshold 50; minimumNumberOfCalls 100; waitDurationInOpenState
                // 60 s; permittedNumberOfCallsInHalfOpenState 10.
                breaker: Some(BreakerConfig {
                    failure_ratio: 0.5,
                    min_requests: 100,
                    window: secs(10),
                    open_for: secs(60),
                    half_open_probes: 10,
                }),
                ..base
            },
            Preset::Sre => PolicyConfig {
                // "a per-request retry budget of up to three attempts".
                max_attempts: 3,
                backoff: exponential(ms(100), 2.0, secs(10), Jitter::Full),
                // "A request will only be retried as long as this ratio is below 10%."
                budget: Some(BudgetConfig::TtlWindow {
                    ratio: 0.1,
                    min_per_sec: 0.0,
                    ttl: secs(120),
                }),
                // "If a backend has given up retrying, it should reply 'overloaded; don't
                // retry'": retry at one tier only.
                honor_no_retry: true,
                ..base
            },
        }
    }
}
