//! Path and header-value patterns: a prefix, an exact value, or a `*` glob.
//!
//! Why hand-written: one wildcard is all a fault plan needs, and a linear, allocation-free
//! matcher keeps selection cheap on the hot path of every request.

/// A compiled pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Pattern {
    /// The text starts with this.
    Prefix(String),
    /// The text is exactly this.
    Exact(String),
    /// The whole text matches; `*` matches any run of characters (possibly empty).
    Glob(String),
}

impl Pattern {
    /// A path pattern: a glob if it contains `*`, a prefix otherwise; in normal form
    /// ([`crate::wire::path`]), as the paths it is matched against are (`/%7Ebob` is
    /// `/~bob`, `//x` is `/x`).
    pub(crate) fn path(text: &str) -> Pattern {
        let normal = crate::wire::path::normalise(text);
        let text = normal.as_deref().unwrap_or(text);
        if text.contains('*') {
            Pattern::Glob(text.to_string())
        } else {
            Pattern::Prefix(text.to_string())
        }
    }

    /// A header-value pattern: a glob if it contains `*`, an exact value otherwise.
    pub(crate) fn value(text: &str) -> Pattern {
        if text.contains('*') {
            Pattern::Glob(text.to_string())
        } else {
            Pattern::Exact(text.to_string())
        }
    }

    pub(crate) fn matches(&self, text: &str) -> bool {
        match self {
            Pattern::Prefix(prefix) => text.starts_with(prefix.as_str()),
            Pattern::Exact(exact) => text == exact,
            Pattern::Glob(glob) => glob_matches(glob.as_bytes(), text.as_bytes()),
        }
    }
}

/// Wildcard match with `*` only, by the classic greedy scan with one backtrack point:
/// O(len(pattern) · len(text)) in the worst case, no allocation, no recursion.
fn glob_matches(pattern: &[u8], text: &[u8]) -> bool {
    let (mut p, mut t) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        if p < pattern.len() && pattern[p] == b'*' {
            star = Some((p, t));
            p += 1;
        } else if p < pattern.len() && pattern[p] == text[t] {
            p += 1;
            t += 1;
        } else if let Some((star_p, star_t)) = star {
            p = star_p + 1;
            t = star_t + 1;
            star = Some((star_p, star_t + 1));
        } else {
            return false;
        }
    }
    pattern[p..].iter().all(|&b| b == b'*')
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn check(pattern: &str, text: &str, expected: bool) {
        assert_eq!(
            Pattern::path(pattern).matches(text),
            expected,
            "{pattern} vs {text}"
        );
    }

    #[test]
    fn path_patterns() {
        check("/payments", "/payments", true);
        check("/payments", "/payments/7", true);
        check("/payments", "/pay", false);
        check("/", "/anything", true);
        check("/items/*", "/items/7", true);
        check("/items/*", "/items/", true);
        check("/items/*", "/items", false);
        check("/items/*/price", "/items/7/price", true);
        check("/items/*/price", "/items/7/8/price", true);
        check("/items/*/price", "/items/7/cost", false);
        check("*", "/x", true);
        check("*.json", "/a/b.json", true);
        check("*.json", "/a/b.jsonx", false);
        check("/a*b*c", "/aXbYc", true);
        check("/a*b*c", "/aXcYb", false);
        check("/a**", "/a", true);
    }

    /// Written out of normal form, a pattern still meets the normalised paths it is
    /// matched against.
    #[test]
    fn path_patterns_are_read_in_normal_form() {
        check("/%7Ebob", "/~bob", true);
        check("//admin", "/admin", true);
        check("/a/./b/*", "/a/b/c", true);
    }

    #[test]
    fn value_patterns_are_exact_unless_globbed() {
        assert!(Pattern::value("blue").matches("blue"));
        assert!(!Pattern::value("blue").matches("blue-green"));
        assert!(Pattern::value("*").matches(""));
        assert!(Pattern::value("blue*").matches("blue-green"));
    }

    /// The reference semantics: a straightforward recursive matcher.
    fn reference(pattern: &[u8], text: &[u8]) -> bool {
        match pattern.split_first() {
            None => text.is_empty(),
            Some((b'*', rest)) => (0..=text.len()).any(|i| reference(rest, &text[i..])),
            Some((c, rest)) => text.first() == Some(c) && reference(rest, &text[1..]),
        }
    }

    proptest! {
        #[test]
        fn glob_agrees_with_the_reference(pattern in "[ab*/]{0,8}", text in "[ab/]{0,10}") {
            prop_assert_eq!(
                glob_matches(pattern.as_bytes(), text.as_bytes()),
                reference(pattern.as_bytes(), text.as_bytes())
            );
        }
    }
}
