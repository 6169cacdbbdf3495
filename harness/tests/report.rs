//! The renderers on a fixed report model: report.md and junit.xml as insta snapshots, and
//! report.html checked for being self-contained and carrying its charts.

#![recursion_limit = "256"]

use harness::report::{self, Report};

fn fixture() -> Report {
    let series: Vec<serde_json::Value> = (0..6)
        .map(|t| {
            serde_json::json!({
                "t": t, "offered": if t == 3 { 150 } else { 100 }, "dropped": if t == 3 { 50 } else { 0 },
                "attempts": if (2..4).contains(&t) { 340 } else { 100 },
                "succeeded": if (2..4).contains(&t) { 20 } else { 100 },
                "failed": if (2..4).contains(&t) { 80 } else { 0 },
                "retries": if (2..4).contains(&t) { 240 } else { 0 },
                "budget_tokens": null, "breaker_open": false
            })
        })
        .collect();
    let json = serde_json::json!({
        "schema": "chaos-report/v1",
        "verdict": "fail",
        "aborted": false,
        "generated_at": "2026-12-02T12:00:00Z",
        "plan": {
            "name": "fixture", "file": "plans/fixture.yaml", "description": "a fixed report",
            "seed": 42, "duration_s": 6.0, "target": "embedded", "ledger": true,
            "faults": ["outage"], "fault_window_s": [2.0, 4.0]
        },
        "policies": [{
            "name": "naive", "summary": "4 attempts, fixed 200ms, no budget",
            "offered": 650, "logical": 600, "succeeded": 440, "failed": 160, "dropped": 50, "unfinished": 0,
            "attempts": 1080, "retries": 480, "cut": 2, "success_rate": 0.6769,
            "amplification": { "client": 1.8, "server": 1.8, "peak_1s": 3.4, "budget_bound": null },
            "give_ups": { "max_attempts": 150, "permanent": 10, "budget_exhausted": 0, "breaker_open": 0, "deadline": 0, "non_idempotent": 0 },
            "violations": { "retried_permanent": 12, "retried_non_idempotent": 0, "duplicate_side_effects": 0 },
            "violation_examples": { "retried_permanent": ["naive-0000017", "naive-0000230"], "retried_non_idempotent": [], "duplicate_side_effects": [] },
            "latency_ms": { "p50": 1.2, "p90": 400.5, "p99": 1610.0, "p999": 1800.0, "max": 1900.0 },
            "offered_latency_ms": { "p50": 1.3, "p90": 1500.0, "p99": null, "p999": null },
            "attempt_latency_ms": { "p50": 0.4, "p90": 0.9, "p99": 1000.0, "p999": 1001.0, "max": 1002.0 },
            "arrival_lag_ms": { "p50": 0.1, "p90": 0.2, "p99": 0.5, "p999": 1.0, "max": 2.0 },
            "recovery_s": 0.0,
            "outcomes": { "200": 440, "503": 600, "400": 40 },
            "breaker_trips": 0,
            "ledger": { "attempts": 1080, "logical": 600, "side_effects": 0, "duplicate_side_effects": 0, "idempotent_replays": 0, "client_unsent": 0, "client_abandoned": 0, "client_reached": 600, "reconciled": true, "by_outcome": { "served": 440 } },
            "series": series,
            "gates": [
                { "name": "no_retry_of_permanent", "pass": false, "measured": 12.0, "limit": 0.0, "detail": "12 retries after a permanent outcome (4xx other than 408/429, or 501); e.g. naive-0000017, naive-0000230" },
                { "name": "client_server_agree", "pass": true, "measured": 1080.0, "limit": 1080.0, "detail": "server saw 1080 attempts" }
            ]
        }]
    });
    let mut report: Report =
        serde_json::from_value(json).expect("the fixture matches the report model");
    // The fault window (2 s to 4 s) in 50 ms buckets: a wave every half second.
    let naive = &mut report.policies[0];
    // From text, as report.json is read: `json!` would sort the keys.
    naive.resolved = Some(
        serde_json::from_str(
            r#"{
                "max_attempts": 4, "attempt_timeout": "none", "deadline": "none", "retry_on": ["any"],
                "backoff": { "fixed": "200ms", "jitter": "none" }, "honor_retry_after": false,
                "retry_non_idempotent": false, "budget": "none", "breaker": "none", "honor_no_retry": false,
                "tiers": { "api": "same", "backend": { "max_attempts": 1, "deadline": "<1s>" } }
            }"#,
        )
        .expect("a resolved policy"),
    );
    naive.waves_50ms = (0..40).map(|i| if i % 10 == 0 { 42 } else { 6 }).collect();
    naive.synchrony = Some(42.0 * 40.0 / (4.0 * 42.0 + 36.0 * 6.0));
    report.ranking = report::rank(&report.policies);
    report
}

#[test]
fn report_md_reads_as_a_page_of_tables() {
    insta::assert_snapshot!(report::markdown(&fixture()));
}

#[test]
fn junit_has_a_case_per_gate_per_policy() {
    insta::assert_snapshot!(report::junit(&fixture()));
}

#[test]
fn report_json_round_trips_through_the_model() {
    let report = fixture();
    let again: Report = serde_json::from_str(&report::json(&report)).expect("valid json");
    assert_eq!(again, report);
}

#[test]
fn report_html_is_self_contained_with_inline_charts() {
    let html = report::html(&fixture());
    assert!(html.starts_with("<!doctype html>"));
    assert!(
        html.matches("<svg").count() >= 2,
        "the storm chart and the policy chart"
    );
    for external in ["src=\"http", "href=\"http", "<script", "@import", "url("] {
        assert!(
            !html.contains(external),
            "no network and no script: found {external}"
        );
    }
    assert!(
        html.contains("naive-0000017"),
        "failing gates name example ids"
    );
    assert!(html.contains("FAIL"));
}

/// Issue 27: each policy's every field, as a definition list a reader can scan, with
/// what an absent limit means.
#[test]
fn report_html_lists_every_field_of_each_policy_as_it_resolved() {
    let html = report::html(&fixture());
    for part in [
        "<dl class=\"policy\"><dt>max_attempts</dt><dd><code>4</code></dd>",
        "<dt>deadline</dt><dd><code>none</code> <span class=\"meta\">no limit on the whole request",
        "<dt>backoff</dt><dd><code>{ fixed: 200ms, jitter: none }</code></dd>",
        "<dt>tiers</dt><dd><dl class=\"policy\"><dt>api</dt><dd><code>same</code></dd><dt>backend</dt><dd><dl class=\"policy\"><dt>max_attempts</dt><dd><code>1</code> <span class=\"meta\">never retries</span></dd>",
        // A value from a hand-edited report.json is text, never markup.
        "<dt>deadline</dt><dd><code>&quot;&lt;1s&gt;&quot;</code></dd>",
    ] {
        assert!(html.contains(part), "{part}");
    }
}

#[test]
fn report_html_charts_the_waves_of_the_fault_window() {
    let html = report::html(&fixture());
    let at = html.find("id=\"waves\"").expect("a waves chart");
    let chart = &html[at..];
    let svg = &chart[..chart.find("</figure>").expect("a whole figure")];
    assert!(svg.contains("<svg"), "inline SVG");
    let line = svg.split("<polyline").nth(1).expect("a line per policy");
    let points = line
        .split("points=\"")
        .nth(1)
        .and_then(|p| p.split('"').next());
    assert_eq!(
        points.map(|p| p.split(' ').count()),
        Some(40),
        "a point per 50 ms of the 2 s window"
    );
    assert!(
        svg.contains("naive (synchrony 4.38)"),
        "named with its figure"
    );
    assert!(
        html.contains("recommended: none (no policy passes every gate: naive fails 1 of 2 gates)"),
        "the ranking's line"
    );
}

#[test]
fn an_incomplete_run_says_what_failed_in_every_renderer() {
    let mut report = fixture();
    report.error = Some("the target at http://127.0.0.1:9 refused every connection".into());
    report.warnings = vec!["policy `naive` dropped 50 of its 650 arrivals".into()];
    report.policies[0].partial = true;
    assert_eq!(report.verdict_label(), "INCOMPLETE");
    let md = report::markdown(&report);
    for said in [
        "Verdict: **INCOMPLETE**",
        "> **Error:** the target at http://127.0.0.1:9 refused every connection",
        "> **Warning:** policy `naive` dropped 50",
        "## Policy `naive` (partial: stopped early)",
    ] {
        assert!(md.contains(said), "report.md lacks {said:?}");
    }
    let junit = report::junit(&report);
    assert!(junit.contains("errors=\"1\""), "{junit}");
    assert!(junit.contains("<error message=\"the target at"), "{junit}");
    let html = report::html(&report);
    assert!(html.contains("verdict incomplete"));
    assert!(html.contains("<b>Error:</b> the target"));
    assert!(html.contains("(partial: stopped early)"));
}

/// Issue 49: the summary and the ranking name the gates that failed, `—` for none.
#[test]
fn the_summary_and_the_ranking_name_the_failed_gates() {
    let mut report = fixture();
    let mut passing = report.policies[0].clone();
    passing.name = "calm".into();
    for g in &mut passing.gates {
        g.pass = true;
    }
    report.policies.push(passing);
    report.ranking = report::rank(&report.policies);
    let md = report::markdown(&report);
    let summary = &md[md.find("## Summary").expect("a summary")..];
    let summary = &summary[..summary.find("## Ranking").expect("then the ranking")];
    assert!(summary.contains("failed gates"), "{summary}");
    let naive = summary
        .lines()
        .find(|l| l.starts_with("naive"))
        .expect("naive's row");
    assert!(naive.contains("no_retry_of_permanent"), "{naive}");
    let calm = summary
        .lines()
        .find(|l| l.starts_with("calm"))
        .expect("calm's row");
    assert!(
        calm.contains('—') && !calm.contains("no_retry_of_permanent"),
        "{calm}"
    );
    let ranking = &md[md.find("## Ranking").expect("a ranking")..];
    assert!(ranking.contains("| gates | failed gates |"), "{ranking}");
    assert!(
        ranking.contains("| 1/2 | no_retry_of_permanent |"),
        "{ranking}"
    );
    assert!(ranking.contains("| 2/2 | — |"), "{ranking}");
    let html = report::html(&report);
    assert!(html.contains("<th>failed gates</th>"), "html header");
    assert!(html.contains("<td>no_retry_of_permanent</td>"), "html cell");
    let json: serde_json::Value = serde_json::from_str(&report::json(&report)).expect("valid json");
    assert_eq!(
        json["ranking"]["rows"][1]["failed_gates"],
        serde_json::json!(["no_retry_of_permanent"])
    );

    // A counterexample: which failures it expected, and why it did not pass.
    let naive = &mut report.policies[0];
    naive.expect = Some(report::Expectation {
        fail: vec!["no_retry_of_permanent".into(), "client_server_agree".into()],
        met: false,
        detail: "expected `client_server_agree` to fail".into(),
    });
    assert_eq!(
        naive.failed_gates_text(),
        "no_retry_of_permanent (expected), client_server_agree passed (expected to fail)"
    );
    naive.expect = Some(report::Expectation {
        fail: Vec::new(),
        met: true,
        detail: "caught".into(),
    });
    assert_eq!(
        naive.failed_gates_text(),
        "no_retry_of_permanent (expected)"
    );
}

/// Issue 49: in front of a real service, what reached it and what it answered, apart
/// from the faults the fault-server injected, in report.md and report.html.
#[test]
fn the_services_own_answers_are_shown_apart_from_injected_ones() {
    let mut report = fixture();
    report.plan.target = "embedded, in front of http://127.0.0.1:8000".into();
    let ledger = report.policies[0].ledger.as_mut().expect("a ledger");
    ledger.by_outcome = [
        ("upstream_200", 440),
        ("upstream_404", 30),
        ("upstream_501", 10),
        ("status_503", 600),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    let md = report::markdown(&report);
    for said in [
        "The service behind the fault-server (upstream): 480 requests reached it, 480 answered by it (200 × 440, 404 × 30, 501 × 10)",
        "The fault-server answered 600 attempts itself, never forwarded (status_503 × 600)",
        "| the service (upstream) | 501 | 10 |",
        "| the fault-server (not forwarded) | status_503 | 600 |",
    ] {
        assert!(md.contains(said), "report.md lacks {said:?}:\n{md}");
    }
    let html = report::html(&report);
    assert!(html.contains("480 requests reached it"), "report.html");
    assert!(html.contains("<td>the fault-server (not forwarded)</td>"));

    // In front of a service that nothing reached: said, as 0.
    let ledger = report.policies[0].ledger.as_mut().expect("a ledger");
    ledger.by_outcome = [("status_503".to_owned(), 600)].into_iter().collect();
    assert!(report::markdown(&report).contains("0 requests reached it"));
    // Not in front of one: nothing said.
    report.plan.target = "embedded".into();
    assert!(!report::markdown(&report).contains("reached it"));
}
