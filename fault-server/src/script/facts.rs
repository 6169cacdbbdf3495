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

impl<T: HeaderLookup + ?Sized> HeaderLookup for &T {
    fn header(&self, name: &str) -> Option<&str> {
        (**self).header(name)
    }
}

/// Name-value pairs, e.g. `[(wire::REQUEST_ID, "r1")]`; names compare case-insensitively.
impl<K: AsRef<str>, V: AsRef<str>> HeaderLookup for [(K, V)] {
    fn header(&self, name: &str) -> Option<&str> {
        self.iter()
            .find(|(key, _)| key.as_ref().eq_ignore_ascii_case(name))
            .map(|(_, value)| value.as_ref())
    }
}

impl<K: AsRef<str>, V: AsRef<str>, const N: usize> HeaderLookup for [(K, V); N] {
    fn header(&self, name: &str) -> Option<&str> {
        self.as_slice().header(name)
    }
}

impl<K: AsRef<str>, V: AsRef<str>> HeaderLookup for Vec<(K, V)> {
    fn header(&self, name: &str) -> Option<&str> {
        self.as_slice().header(name)
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
    /// The peer (listening socket, numbered from 1) it arrived at; `None` at a server
    /// with one peer.
    pub peer: Option<u32>,
    /// A seed that is the same for every attempt of this logical request (the live server
    /// uses [`crate::seed::IdSeed`]`::new(seed, x-request-id).attempt(0)`); `sticky` phases draw from it. Without
    /// one, they draw from the per-attempt RNG like any other phase.
    pub sticky_seed: Option<u64>,
}

impl std::fmt::Debug for RequestFacts<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RequestFacts")
            .field("method", &self.method)
            .field("path", &self.path)
            .field("attempt", &self.attempt)
            .field("peer", &self.peer)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_header_list_looks_up_names_case_insensitively() {
        let array = [("X-Request-Id", "r1"), ("x-chaos-attempt", "2")];
        let slice: &[(&str, &str)] = &array;
        let owned = vec![("X-Request-Id".to_string(), "r1".to_string())];
        assert_eq!(array.header("x-request-id"), Some("r1"));
        assert_eq!(slice.header("X-CHAOS-ATTEMPT"), Some("2"));
        assert_eq!(owned.header("x-request-id"), Some("r1"));
        assert_eq!(owned.header("x-chaos-attempt"), None);
        assert_eq!(NoHeaders.header("x-request-id"), None);
    }
}
