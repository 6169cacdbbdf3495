//! What the script sees of a request: method, path, attempt, headers, and the seed of its
//! sticky draws.

/// Looks up a request header by its lower-case name.
pub trait HeaderLookup {
    /// The header's value, if present (and valid UTF-8).
    fn header(&self, name: &str) -> Option<&str>;
}

/// A request without headers.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoHeaders;

impl HeaderLookup for NoHeaders {
    fn header(&self, _name: &str) -> Option<&str> {
        None
    }
}

impl HeaderLookup for &[(&str, &str)] {
    fn header(&self, name: &str) -> Option<&str> {
        self.iter()
            .find(|(key, _)| key.eq_ignore_ascii_case(name))
            .map(|(_, value)| *value)
    }
}

impl<const N: usize> HeaderLookup for [(&str, &str); N] {
    fn header(&self, name: &str) -> Option<&str> {
        self.iter()
            .find(|(key, _)| key.eq_ignore_ascii_case(name))
            .map(|(_, value)| *value)
    }
}

impl HeaderLookup for Vec<(String, String)> {
    fn header(&self, name: &str) -> Option<&str> {
        self.iter()
            .find(|(key, _)| key.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.as_str())
    }
}

/// What the script sees of a request.
#[derive(Clone, Copy)]
pub struct RequestFacts<'a> {
    /// The method, e.g. `POST`.
    pub method: &'a str,
    /// The path, without the query string.
    pub path: &'a str,
    /// The attempt number from `x-chaos-attempt`, if the request carried one.
    pub attempt: Option<u32>,
    /// The request's headers.
    pub headers: &'a dyn HeaderLookup,
    /// A seed that is the same for every attempt of this logical request (the live server
    /// uses [`crate::seed::request_seed`]`(seed, x-request-id, 0)`); `sticky` phases draw from it. Without
    /// one, they draw from the per-attempt RNG like any other phase.
    pub sticky_seed: Option<u64>,
}

impl std::fmt::Debug for RequestFacts<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RequestFacts")
            .field("method", &self.method)
            .field("path", &self.path)
            .field("attempt", &self.attempt)
            .finish_non_exhaustive()
    }
}
