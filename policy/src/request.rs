//! What the core knows of a request: its method, whether it carries an idempotency key, and
//! which attempt is which.

use std::fmt;
use std::num::NonZeroU32;

/// An HTTP method, as far as retry safety cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Method {
    /// `GET`: idempotent, so retried whenever the policy allows.
    Get,
    /// `HEAD`: idempotent.
    Head,
    /// `PUT`: idempotent (the same state however often it runs).
    Put,
    /// `DELETE`: idempotent.
    Delete,
    /// `OPTIONS`: idempotent.
    Options,
    /// `POST`: not idempotent: retried only after a failure that proves it unsent, or
    /// with an `Idempotency-Key`.
    Post,
    /// `PATCH`: not idempotent, as `POST`.
    Patch,
    /// Any other method (TRACE, CONNECT, extensions): treated as not idempotent.
    Other,
}

impl Method {
    /// Parses a method name, case-insensitively; unknown names are [`Method::Other`].
    pub fn parse(name: &str) -> Method {
        const NAMES: [(&str, Method); 7] = [
            ("GET", Method::Get),
            ("HEAD", Method::Head),
            ("PUT", Method::Put),
            ("DELETE", Method::Delete),
            ("OPTIONS", Method::Options),
            ("POST", Method::Post),
            ("PATCH", Method::Patch),
        ];
        NAMES
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map_or(Method::Other, |&(_, m)| m)
    }

    /// RFC 9110 §9.2.2: GET, HEAD, PUT, DELETE and OPTIONS are idempotent (TRACE is too, but
    /// it has no place in load tests).
    pub fn is_idempotent(self) -> bool {
        matches!(
            self,
            Method::Get | Method::Head | Method::Put | Method::Delete | Method::Options
        )
    }
}

/// The facts about one logical request that decide whether retrying it is safe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    /// Its method, which says whether running it twice is safe.
    pub method: Method,
    /// The request carries an `Idempotency-Key`: the server deduplicates executions.
    pub idempotency_key: bool,
}

impl Request {
    /// A request without an idempotency key.
    pub fn new(method: Method) -> Request {
        Request {
            method,
            idempotency_key: false,
        }
    }

    /// The same request carrying an `Idempotency-Key`, which makes any method safe to
    /// retry.
    pub fn with_idempotency_key(self) -> Request {
        Request {
            idempotency_key: true,
            ..self
        }
    }

    /// Safe to execute twice: an idempotent method, or a key the server deduplicates by.
    pub fn is_idempotent(&self) -> bool {
        self.method.is_idempotent() || self.idempotency_key
    }
}

/// A 1-based attempt number: attempt 1 is the original send, every later one a retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Attempt(NonZeroU32);

impl Attempt {
    /// The original send, where every session starts.
    pub const FIRST: Attempt = Attempt(NonZeroU32::MIN);

    /// The number, for headers (`x-chaos-attempt`) and reports.
    pub fn get(self) -> u32 {
        self.0.get()
    }

    /// Any attempt after the first: what budgets limit and violations are judged on.
    pub fn is_retry(self) -> bool {
        self.get() > 1
    }

    pub(crate) fn next(self) -> Attempt {
        Attempt(self.0.saturating_add(1))
    }
}

impl fmt::Display for Attempt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}
