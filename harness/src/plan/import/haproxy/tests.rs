use std::time::Duration;

use proptest::prelude::*;

use super::import;
use crate::plan::proxy::{Methods, NextPeer, ProxyModel, Source};

const STACK: &str = include_str!("../../../../../plans/stacks/haproxy.cfg");

fn model(text: &str) -> ProxyModel {
    import(text, None)
        .unwrap_or_else(|e| panic!("{e:?}\n{text}"))
        .model
}

/// `defaults` with `d`, then `backend app` with `b` and its servers.
fn conf(d: &str, b: &str) -> String {
    format!(
        "global\n    daemon\n\ndefaults\n    mode http\n{d}\nbackend app\n{b}    server s1 127.0.0.1:8081\n"
    )
}

fn error(text: &str, backend: Option<&str>) -> (usize, usize, String) {
    let e = import(text, backend).expect_err(text);
    (e.line, e.column, e.message)
}

#[test]
fn a_typical_config_reads_as_its_backend_says() {
    let imported = import(STACK, None).expect("imports");
    assert_eq!(imported.block, "app");
    let m = imported.model;
    let peers: Vec<(&str, bool)> = m
        .peers
        .iter()
        .map(|p| (p.name.as_str(), p.backup))
        .collect();
    assert_eq!(
        peers,
        [
            ("127.0.0.1:8081", false),
            ("127.0.0.1:8082", false),
            ("127.0.0.1:8083", true)
        ]
    );
    assert!(m.peers.iter().all(|p| p.max_fails == 0 && p.weight == 1));
    assert_eq!((m.tries, m.tries_source.line), (3, Some(40)));
    assert!(m.retry_on.connect && m.retry_on.lost && m.retry_on.timeout);
    assert_eq!(m.retry_on.statuses, [503]);
    assert_eq!(m.methods, Methods::Any);
    assert_eq!(m.next_peer, NextPeer::Redispatch { interval: -1 });
    // The backend's own `timeout server`, over the defaults'.
    assert_eq!(
        (m.try_timeout, m.try_timeout_source.line),
        (Duration::from_secs(5), Some(47))
    );
    // min(timeout connect 5000 (ms), 1s).
    assert_eq!(m.turnaround, Duration::from_secs(1));
    assert_eq!(m.overall, None);
    let why: Vec<(usize, &str)> = m
        .approximations
        .iter()
        .map(|a| (a.line, a.directive.as_str()))
        .collect();
    assert_eq!(
        why,
        [(50, "server app1 127.0.0.1:8081 check")],
        "health checks, once"
    );
    assert_eq!(import(STACK, Some("app")).expect("named").block, "app");
}

#[test]
fn what_the_config_does_not_say_is_haproxys_default() {
    let m = model(&conf(
        "    timeout server 30s\n    timeout connect 200ms\n",
        "",
    ));
    assert_eq!(
        (m.tries, m.tries_source.clone()),
        (4, Source::default("retries 3"))
    );
    assert!(
        m.retry_on.connect
            && !m.retry_on.lost
            && !m.retry_on.timeout
            && m.retry_on.statuses.is_empty()
    );
    assert_eq!(m.next_peer, NextPeer::Same);
    assert_eq!(m.turnaround, Duration::from_millis(200));
    assert_eq!(m.try_timeout, Duration::from_secs(30));
    assert_eq!(m.approximations, []);
    let forever = model(&conf("", ""));
    assert_eq!(forever.try_timeout, Duration::from_secs(24 * 3600));
    assert!(
        forever.approximations[0]
            .why
            .contains("no `timeout server`")
    );
}

#[test]
fn retries_redispatch_and_conditions() {
    let m = model(&conf(
        "    retries 1\n    option redispatch 2\n    timeout server 1s\n",
        "    retry-on all-retryable-errors 404\n",
    ));
    assert_eq!(m.tries, 2);
    assert_eq!(m.next_peer, NextPeer::Redispatch { interval: 2 });
    assert_eq!(m.next_peer_source.line, Some(7));
    assert_eq!(m.retry_on.statuses, [500, 502, 503, 504, 404]);
    assert!(m.retry_on.lost && m.retry_on.timeout);
    let undone = model(&conf(
        "    option redispatch\n    timeout server 1s\n",
        "    no option redispatch\n",
    ));
    assert_eq!(undone.next_peer, NextPeer::Same);
    let last = model(&conf(
        "    option redispatch -1\n    timeout server 1s\n",
        "",
    ));
    assert_eq!(last.next_peer, NextPeer::Redispatch { interval: -1 });
    let none = model(&conf("    timeout server 1s\n", "    retry-on none\n"));
    assert!(!none.retry_on.connect);
}

#[test]
fn one_server_or_three_and_their_parameters() {
    let three = "    default-server weight 2\n    server a 10.0.0.1:80 weight 3 maxconn 100\n    server b 10.0.0.2:80\n    server c 10.0.0.3:80 disabled\n    timeout server 1s\n    balance leastconn\n";
    let m = model(&format!("defaults\n    mode http\nbackend app\n{three}"));
    let weights: Vec<u32> = m.peers.iter().map(|p| p.weight).collect();
    assert_eq!(
        weights,
        [3, 2],
        "`disabled` takes nothing; default-server under each"
    );
    let why: Vec<usize> = m.approximations.iter().map(|a| a.line).collect();
    assert_eq!(why, [5, 6, 9], "maxconn, weights that differ, balance");
    assert_eq!(model(&conf("    timeout server 1s\n", "")).peers.len(), 1);
}

#[test]
fn a_status_haproxy_2_6_refuses_is_an_error_at_its_column() {
    let text = conf(
        "    timeout server 1s\n",
        "    retry-on conn-failure 429 503\n",
    );
    let e = import(&text, None).expect_err("429");
    assert_eq!((e.line, e.column), (9, 27));
    assert!(
        e.message
            .contains("HAProxy 2.6 does not retry on status 429"),
        "{}",
        e.message
    );
    assert!(
        e.hint
            .as_deref()
            .is_some_and(|h| h.contains("401, 403, 404, 408, 425"))
    );
}

#[test]
fn errors_name_their_line_and_column() {
    assert_eq!(
        error(&conf("    timeout server 5q\n", ""), None),
        (6, 20, "`5q` is not an HAProxy time".to_owned())
    );
    assert_eq!(error(&conf("", "    retries x\n"), None).0, 8);
    assert_eq!(error(&conf("", "    retry-on conn-fail\n"), None).1, 14);
    assert_eq!(
        error(&conf("", ""), Some("web")).2,
        "the config has no `backend web` (nor `listen web`)"
    );
    let two = format!("{}backend other\n    server x 1.2.3.4:80\n", conf("", ""));
    let (line, _, message) = error(&two, None);
    assert_eq!(
        (line, message.as_str()),
        (9, "several backends have servers")
    );
    assert_eq!(import(&two, Some("other")).expect("named").block, "other");
    assert_eq!(
        error("    retries 3\n", None),
        (1, 5, "`retries` is outside any section".to_owned())
    );
    assert_eq!(
        error("backend app\n    server a \"10.0.0.1\n", None),
        (
            2,
            14,
            "the quote \" opened here is not closed on its line".to_owned()
        )
    );
    assert_eq!(
        error("backend app from nope\n    server a b\n", None).2,
        "no `defaults nope` above this backend"
    );
}

#[test]
fn a_named_defaults_section_is_the_one_a_backend_names() {
    let text = "defaults web\n    retries 1\n    timeout server 1s\ndefaults\n    retries 5\nbackend app from web\n    server a b\nbackend plain\n    server a b\n";
    assert_eq!(import(text, Some("app")).expect("app").model.tries, 2);
    assert_eq!(import(text, Some("plain")).expect("plain").model.tries, 6);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, failure_persistence: None, ..ProptestConfig::default() })]

    /// Whatever the text, an import answers: a model or a located error, never a panic.
    #[test]
    fn any_text_imports_or_is_refused_at_a_place(
        noise in prop::collection::vec(prop::sample::select(vec!["\n", " ", "\"", "'", "\\", "#", "backend app", "defaults", "server", "retries", "-1", "99999999999", "retry-on", "429", "option redispatch", "timeout server", "from", "weight", "é"]), 0..40),
        at in 0usize..4000,
    ) {
        let mut text = STACK.to_owned();
        let at = text.char_indices().nth(at % text.chars().count()).map_or(0, |(i, _)| i);
        text.insert_str(at, &noise.join(" "));
        if let Err(e) = import(&text, None) {
            prop_assert!(e.line >= 1 && e.column >= 1);
        }
    }
}
