//! The headers a reverse proxy rewrites: the hop-by-hop ones it removes both ways (RFC
//! 9110 §7.6.1), the ones it adds on the way up (`Host`, `X-Forwarded-For`, `Via`), and
//! the contract's `x-chaos-` ones it removes on the way down (the upstream does not speak
//! for this hop).

use axum::http::header::Entry;
use axum::http::header::{CONNECTION, EXPECT, HOST, VIA};
use axum::http::{HeaderMap, HeaderName, HeaderValue};

use crate::wire::{HOP_BY_HOP, ViaName, has_contract_prefix, hop_by_hop_index};

const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");

const HOPS: usize = HOP_BY_HOP.len();

/// Removes the hop-by-hop headers: those of [`HOP_BY_HOP`] and every header the
/// `Connection` header names (`Connection: x-foo` makes `x-foo` one). A message without
/// any costs one look at each of its header names; one whose `Connection` names only
/// `keep-alive` or `close` (nearly every HTTP/1.1 answer) allocates nothing.
pub(super) fn remove_hop_by_hop(headers: &mut HeaderMap) {
    let mut found = [false; HOPS];
    for name in headers.keys() {
        if let Some(at) = hop_by_hop(name) {
            found[at] = true;
        }
    }
    if found[0] {
        let mut named: Vec<HeaderName> = Vec::new();
        for value in headers.get_all(CONNECTION) {
            for token in value.as_bytes().split(|b| *b == b',') {
                let token = token.trim_ascii();
                if token.is_empty()
                    || token.eq_ignore_ascii_case(b"close")
                    || token.eq_ignore_ascii_case(b"keep-alive")
                {
                    continue;
                }
                if let Ok(name) = HeaderName::from_bytes(token) {
                    named.push(name);
                }
            }
        }
        for name in named {
            headers.remove(name);
        }
    }
    for (hop, found) in HOP_BY_HOP.iter().zip(found) {
        if found {
            headers.remove(*hop);
        }
    }
}

/// Where `name` is in [`HOP_BY_HOP`], if it is there ([`hop_by_hop_index`]).
fn hop_by_hop(name: &HeaderName) -> Option<usize> {
    hop_by_hop_index(name.as_str())
}

/// Rewrites a request's headers for the upstream, as a reverse proxy does:
/// - the hop-by-hop headers go ([`remove_hop_by_hop`]), and `Expect` too: this hop
///   answers `100 Continue` itself when it starts to read the body, and then sends it
///   whole;
/// - `Host` becomes the upstream's (`host:port` of `--upstream`), as nginx's `proxy_pass`
///   does by default (`$proxy_host`): the service sees the name it is reached by, as if
///   called directly;
/// - the client's address is appended to `X-Forwarded-For` (nginx's
///   `$proxy_add_x_forwarded_for`: one field, comma-separated), and this hop's own
///   entry (`via`: [`ViaName::entry`], unique to this server) to `Via`.
pub(super) fn for_upstream(
    headers: &mut HeaderMap,
    host: &HeaderValue,
    client: Option<HeaderValue>,
    via: &HeaderValue,
) {
    remove_hop_by_hop(headers);
    headers.remove(EXPECT);
    headers.insert(HOST, host.clone());
    if let Some(client) = client {
        append_to_list(headers, X_FORWARDED_FOR, client);
    }
    append_to_list(headers, VIA, via.clone());
}

/// Whether a request's `Via` holds this server's own entry: it has been forwarded by
/// this server before, and forwarding it again would go round the loop once more.
pub(super) fn came_back(headers: &HeaderMap, me: &ViaName) -> bool {
    me.is_in_any(headers.get_all(VIA).iter().map(HeaderValue::as_bytes))
}

/// Rewrites the upstream's answer for the client: the hop-by-hop headers go
/// ([`remove_hop_by_hop`]), and every `x-chaos-` header too ([`has_contract_prefix`]):
/// those are this hop's to say (`x-chaos-no-retry`, `x-chaos-fault`, …), and an upstream
/// that sent one could stop an `honor_no_retry` client's retries or forge a fault.
pub(super) fn for_client(headers: &mut HeaderMap) {
    remove_hop_by_hop(headers);
    let contract: Vec<HeaderName> = headers
        .keys()
        .filter(|name| has_contract_prefix(name.as_str()))
        .cloned()
        .collect();
    for name in contract {
        headers.remove(name);
    }
}

/// Appends `item` to a comma-separated list header, merging the fields already there
/// into one (a service that reads only the first field still sees the whole list).
fn append_to_list(headers: &mut HeaderMap, name: HeaderName, item: HeaderValue) {
    let mut entry = match headers.entry(name) {
        Entry::Vacant(vacant) => {
            vacant.insert(item);
            return;
        }
        Entry::Occupied(entry) => entry,
    };
    let mut list = Vec::new();
    for value in entry.iter() {
        list.extend_from_slice(value.as_bytes());
        list.extend_from_slice(b", ");
    }
    list.extend_from_slice(item.as_bytes());
    if let Ok(value) = HeaderValue::from_bytes(&list) {
        entry.insert(value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(
                HeaderName::from_bytes(name.as_bytes()).expect("a name"),
                HeaderValue::from_str(value).expect("a value"),
            );
        }
        map
    }

    fn names(map: &HeaderMap) -> Vec<&str> {
        let mut names: Vec<&str> = map.keys().map(HeaderName::as_str).collect();
        names.sort_unstable();
        names
    }

    #[test]
    fn hop_by_hop_headers_and_those_connection_names_are_removed() {
        let mut map = headers(&[
            ("Connection", "keep-alive, X-Foo"),
            ("Connection", "x-bar"),
            ("Keep-Alive", "timeout=5"),
            ("Proxy-Authenticate", "Basic"),
            ("Proxy-Authorization", "Basic eA=="),
            ("TE", "trailers"),
            ("Trailer", "x-sum"),
            ("Transfer-Encoding", "chunked"),
            ("Upgrade", "websocket"),
            ("Proxy-Connection", "keep-alive"),
            ("x-foo", "1"),
            ("x-bar", "2"),
            ("x-kept", "3"),
            ("content-length", "4"),
        ]);
        remove_hop_by_hop(&mut map);
        assert_eq!(names(&map), ["content-length", "x-kept"]);
    }

    #[test]
    fn the_match_finds_each_hop_by_hop_header_where_the_list_has_it() {
        for (at, name) in HOP_BY_HOP.iter().enumerate() {
            assert_eq!(
                hop_by_hop(&HeaderName::from_static(name)),
                Some(at),
                "{name}"
            );
        }
        assert_eq!(hop_by_hop(&HeaderName::from_static("x-te")), None);
    }

    #[test]
    fn a_message_without_hop_by_hop_headers_is_left_alone() {
        let mut map = headers(&[("x-foo", "1"), ("accept", "*/*")]);
        let before = map.clone();
        remove_hop_by_hop(&mut map);
        assert_eq!(map, before);
    }

    #[test]
    fn the_upstreams_contract_headers_never_reach_the_client() {
        let mut map = headers(&[
            ("X-Chaos-No-Retry", "1"),
            ("x-chaos-fault", "forged"),
            ("x-chaos-gave-up", "budget_exhausted"),
            ("transfer-encoding", "chunked"),
            ("x-chaosmonkey", "kept"),
            ("x-request-id", "a-1"),
            ("retry-after", "1"),
        ]);
        for_client(&mut map);
        assert_eq!(
            names(&map),
            ["retry-after", "x-chaosmonkey", "x-request-id"]
        );
    }

    #[test]
    fn a_request_carrying_this_servers_entry_came_back() {
        let me = ViaName::with_id(crate::wire::HopKind::FaultServer, 7);
        let other = ViaName::with_id(crate::wire::HopKind::FaultServer, 8);
        let mut map = headers(&[("via", "1.0 edge")]);
        assert!(!came_back(&map, &me));
        for_upstream(
            &mut map,
            &HeaderValue::from_static("h:1"),
            None,
            &HeaderValue::from_str(other.entry()).expect("a value"),
        );
        assert!(!came_back(&map, &me));
        map.append("via", HeaderValue::from_str(me.entry()).expect("a value"));
        assert!(came_back(&map, &me));
    }

    #[test]
    fn the_upstream_gets_its_host_and_the_forwarding_headers() {
        let via = HeaderValue::from_static("1.1 fault-server-0000000000000007");
        let host = HeaderValue::from_static("127.0.0.1:9000");
        let ip = || Some(HeaderValue::from_static("127.0.0.7"));
        let mut map = headers(&[("host", "proxy:80"), ("expect", "100-continue")]);
        for_upstream(&mut map, &host, ip(), &via);
        assert_eq!(map["host"], "127.0.0.1:9000");
        assert_eq!(map["x-forwarded-for"], "127.0.0.7");
        assert_eq!(map["via"], "1.1 fault-server-0000000000000007");
        assert!(map.get("expect").is_none());

        let mut map = headers(&[
            ("x-forwarded-for", "10.0.0.1"),
            ("x-forwarded-for", "10.0.0.2"),
            ("via", "1.0 edge"),
        ]);
        for_upstream(&mut map, &host, ip(), &via);
        let all: Vec<_> = map.get_all("x-forwarded-for").iter().collect();
        assert_eq!(all, ["10.0.0.1, 10.0.0.2, 127.0.0.7"]);
        assert_eq!(map["via"], "1.0 edge, 1.1 fault-server-0000000000000007");
    }
}
