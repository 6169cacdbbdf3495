use std::time::Duration;

use proptest::prelude::*;

use super::import;
use crate::plan::proxy::{Methods, NextPeer, ProxyModel, Source};

const STACK: &str = include_str!("../../../../../plans/stacks/nginx.conf");

fn model(text: &str) -> ProxyModel {
    import(text, None)
        .unwrap_or_else(|e| panic!("{e:?}\n{text}"))
        .model
}

/// A minimal `http` block around `upstream` and the location's `directives`.
fn conf(servers: &str, directives: &str) -> String {
    format!(
        "events {{}}\nhttp {{\n  upstream app {{\n{servers}  }}\n  server {{\n    listen 80;\n    location / {{\n      proxy_pass http://app;\n{directives}    }}\n  }}\n}}\n"
    )
}

/// The line:column and message of an import's error.
fn error(text: &str, location: Option<&str>) -> (usize, usize, String) {
    let e = import(text, location).expect_err(text);
    (e.line, e.column, e.message)
}

#[test]
fn the_debian_layout_reads_as_the_api_location_says() {
    let imported = import(STACK, Some("/api")).expect("imports");
    assert_eq!(imported.block, "/api");
    let m = imported.model;
    assert_eq!(m.peers.len(), 3);
    assert_eq!(
        (
            m.peers[0].name.as_str(),
            m.peers[0].max_fails,
            m.peers[0].fail_timeout
        ),
        ("127.0.0.1:8081", 3, Duration::from_secs(30))
    );
    assert!(m.peers[2].backup && m.peers[2].max_fails == 1);
    assert!(m.retry_on.connect && m.retry_on.lost && m.retry_on.timeout);
    assert_eq!(m.retry_on.statuses, [502, 503]);
    assert_eq!(m.retry_on.source.line, Some(56));
    assert_eq!(m.methods, Methods::Idempotent);
    assert_eq!(m.tries, 3);
    // Inherited from the server block.
    assert_eq!(m.try_timeout, Duration::from_secs(5));
    assert_eq!(
        m.try_timeout_source,
        Source::at("proxy_read_timeout 5s", 47)
    );
    assert_eq!(m.overall, Some(Duration::from_secs(10)));
    assert_eq!(m.next_peer, NextPeer::Another);
    assert_eq!(m.turnaround, Duration::ZERO);
    assert_eq!(m.approximations, []);
    // The one location that proxies to an upstream: no need to name it.
    assert_eq!(import(STACK, None).expect("imports").block, "/api");
}

#[test]
fn what_the_config_does_not_say_is_nginxs_default() {
    let m = model(&conf("    server 10.0.0.1:80;\n", ""));
    assert!(m.retry_on.connect && m.retry_on.lost && m.retry_on.timeout);
    assert!(m.retry_on.statuses.is_empty());
    assert_eq!(
        m.retry_on.source,
        Source::default("proxy_next_upstream error timeout")
    );
    assert_eq!((m.methods, m.tries), (Methods::Idempotent, 1));
    assert_eq!(m.try_timeout, Duration::from_secs(60));
    assert_eq!(m.overall, None);
    let peer = &m.peers[0];
    assert_eq!(
        (peer.weight, peer.max_fails, peer.fail_timeout, peer.backup),
        (1, 1, Duration::from_secs(10), false)
    );
}

#[test]
fn tries_are_the_peers_limited_by_proxy_next_upstream_tries() {
    let three =
        "    server a:1 weight=5;\n    server b:1;\n    server c:1 down;\n    server d:1 backup;\n";
    let m = model(&conf(three, ""));
    // `down` is never chosen; a backup is (nginx counts it in the tries).
    assert_eq!((m.peers.len(), m.tries, m.peers[0].weight), (3, 3, 5));
    assert_eq!(m.tries_source.directive, "upstream app");
    let m = model(&conf(three, "      proxy_next_upstream_tries 2;\n"));
    assert_eq!((m.tries, m.tries_source.line), (2, Some(13)));
    assert_eq!(
        model(&conf(three, "      proxy_next_upstream_tries 0;\n")).tries,
        3
    );
    assert_eq!(
        model(&conf(three, "      proxy_next_upstream off;\n")).tries,
        1
    );
}

#[test]
fn explicit_conditions_and_methods() {
    let m = model(&conf(
        "    server a:1;\n",
        "      proxy_next_upstream timeout http_429 http_500 non_idempotent;\n",
    ));
    assert!(!m.retry_on.connect && !m.retry_on.lost && m.retry_on.timeout);
    assert_eq!(m.retry_on.statuses, [429, 500]);
    assert_eq!(m.methods, Methods::Any);
    let off = model(&conf(
        "    server a:1;\n",
        "      proxy_next_upstream error off;\n",
    ));
    assert!(!off.retry_on.connect && !off.retry_on.timeout);
}

#[test]
fn an_inner_block_overrides_an_outer_one() {
    let text = "http {\n  proxy_read_timeout 1m;\n  proxy_next_upstream error;\n  server {\n    proxy_read_timeout 30s;\n    location /a {\n      proxy_read_timeout 1500ms;\n      proxy_pass http://127.0.0.1:9000;\n    }\n    location /b { proxy_pass http://127.0.0.1:9001; }\n  }\n}\n";
    let a = import(text, Some("/a")).expect("a").model;
    assert_eq!(a.try_timeout, Duration::from_millis(1500));
    assert_eq!(a.retry_on.source.line, Some(3));
    assert!(!a.retry_on.timeout);
    let b = import(text, Some("/b")).expect("b").model;
    assert_eq!(b.try_timeout, Duration::from_secs(30));
    // A literal address is a one-peer upstream.
    assert_eq!(
        (b.peers.len(), b.peers[0].name.as_str(), b.tries),
        (1, "127.0.0.1:9001", 1)
    );
    let e = error(text, None);
    assert_eq!((e.0, e.1), (10, 5), "{}", e.2);
    assert!(e.2.contains("several locations"), "{}", e.2);
}

#[test]
fn what_the_model_does_not_carry_is_named_at_its_line() {
    let m = model(&conf(
        "    least_conn;\n    keepalive 16;\n    server a:1 max_conns=10;\n",
        "      proxy_buffering off;\n      proxy_request_buffering on;\n      proxy_connect_timeout 2s;\n",
    ));
    let named: Vec<(usize, &str)> = m
        .approximations
        .iter()
        .map(|a| (a.line, a.directive.as_str()))
        .collect();
    assert_eq!(
        named,
        [
            (4, "least_conn"),
            (5, "keepalive 16"),
            (6, "server a:1 max_conns=10"),
            (12, "proxy_buffering off"),
            (14, "proxy_connect_timeout 2s"),
        ]
    );
    let hosted = model("http { server { location / { proxy_pass http://app.internal:80/; } } }");
    assert_eq!(
        hosted.approximations.len(),
        1,
        "a name resolves to several peers"
    );
}

#[test]
fn errors_name_their_line_and_column_and_what_to_do() {
    let e = import(
        &conf("    server a:1;\n", "").replace("http://app", "http://apq"),
        None,
    )
    .expect_err("unknown");
    assert_eq!((e.line, e.column), (9, 18));
    assert_eq!(
        e.message,
        "`proxy_pass` names `apq`, which no `upstream` block defines"
    );
    assert_eq!(e.hint.as_deref(), Some("did you mean `app`?"));
    let bad_time = conf("    server a:1;\n", "      proxy_read_timeout 5x;\n");
    assert_eq!(
        error(&bad_time, None),
        (10, 26, "`5x` is not an nginx time".to_owned())
    );
    assert_eq!(error(&conf("    server a:1 wieght=2;\n", ""), None).0, 4);
    assert_eq!(
        error(
            &conf("    server a:1;\n", "      proxy_next_upstream http_418;\n"),
            None
        )
        .1,
        27
    );
    assert_eq!(
        error("http {\n  server {\n", None),
        (2, 3, "the block of `server` is never closed".to_owned())
    );
    assert_eq!(
        error(STACK, Some("/nope")).2,
        "the config has no `location /nope`"
    );
    assert_eq!(
        error("events {}\n", None).2,
        "the config has no `http` block"
    );
    let no_proxy = "http { server { location / { root /srv; } } }";
    assert!(error(no_proxy, Some("/")).2.contains("has no `proxy_pass`"));
    let down = conf("    server a:1 down;\n", "");
    assert!(
        error(&down, None)
            .2
            .contains("no server that is not `down`")
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, failure_persistence: None, ..ProptestConfig::default() })]

    /// Whatever the text, an import answers: a model or a located error, never a panic.
    #[test]
    fn any_text_imports_or_is_refused_at_a_place(
        cut in 0usize..2000,
        noise in prop::collection::vec(prop::sample::select(vec!["{", "}", ";", "\"", "'", "#", "\n", " ", "$", "\\", "http", "upstream", "server", "location", "proxy_pass", "http://app", "x=1", "weight=0", "9999999999999s", "1m30s"]), 0..40),
        at in 0usize..2000,
    ) {
        let mut text: String = STACK.chars().take(cut.max(1) * 2).collect();
        let at = text.char_indices().nth(at % text.chars().count().max(1)).map_or(0, |(i, _)| i);
        text.insert_str(at, &noise.concat());
        if let Err(e) = import(&text, None) {
            prop_assert!(e.line >= 1 && e.column >= 1);
        }
    }
}
