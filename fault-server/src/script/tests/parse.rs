//! Reading scripts: whole plans, empty documents, JSON, round trips, and every error
//! with its location or its phase and field.

use super::*;

#[test]
fn a_whole_plan_reads_as_a_script() {
    let script = script(PLAN);
    assert_eq!(script.phase_count(), 3);
    assert_eq!(script.phase_name(0), Some("outage"));
    assert_eq!(script.phase_name(2), Some("bad-input"));
    assert_eq!(script.seed(), Some(42));
    assert_eq!(script.last_fault_end(), Some(secs(20.0)));
    let capacity = script.capacity().expect("server block");
    assert_eq!(capacity.capacity.map(|c| c.get()), Some(300));
    assert_eq!(capacity.queue, 200);
    assert_eq!(capacity.reject_status, 503);
    assert_eq!(
        capacity.service_time,
        Distribution::Fixed(Duration::from_millis(5))
    );
}

#[test]
fn empty_text_and_empty_script_serve_everything() {
    for text in ["", "  \n", "faults: []", "name: x\nload: { rate: 5 }"] {
        let script = script(text);
        assert!(script.is_empty(), "{text:?}");
        assert_eq!(decide(&script, "GET", "/", &[], 0.0), None);
        assert_eq!(script.last_fault_end(), None);
    }
    assert!(Script::empty().capacity().is_none());
}

/// Parse errors: (script, expected line, needle in the message).
#[test]
fn serde_errors_carry_line_column_and_field() {
    let cases: &[(&str, usize, &str)] = &[
        (
            "faults:\n  - name: a\n    respnd: { status: 503 }\n",
            3,
            "unknown field `respnd`",
        ),
        (
            "faults:\n  - name: a\n    probability: 1.5\n    respond: { status: 503 }\n",
            3,
            "probability must be within [0, 1], got 1.5",
        ),
        (
            "faults:\n  - respond: { status: 503, wieght: 2 }\n",
            2,
            "unknown field `wieght`",
        ),
        (
            "faults:\n  - respond: { status: 99 }\n",
            2,
            "status must be within 200..=599",
        ),
        (
            "faults:\n  - respond: { status: 503, weight: -1 }\n",
            2,
            "weight must be a finite number >= 0",
        ),
        (
            "faults:\n  - attempts: [0]\n    respond: { status: 503 }\n",
            2,
            "attempt numbers start at 1",
        ),
        (
            "faults:\n  - from: 10\n    respond: { status: 503 }\n",
            2,
            "no unit",
        ),
        (
            "faults:\n  - respond: { fault: explode }\n",
            2,
            "unknown variant `explode`",
        ),
        (
            "faults:\n  - match: { path: payments }\n    respond: { status: 503 }\n",
            2,
            "must start with /",
        ),
        (
            "faults:\n  - match: { verb: GET }\n    respond: { status: 503 }\n",
            2,
            "unknown field `verb`",
        ),
        (
            "faults:\n  - respond:\n      - { fault: delay, delay: { uniform: [2s, 1s] } }\n",
            3,
            "above the high bound",
        ),
        ("server:\n  capacity: 0\n", 2, "nonzero"),
        (
            "server:\n  capacity: 5\n  qeue: 5\n",
            3,
            "unknown field `qeue`",
        ),
        ("faults:\n\t- name: a\n", 2, "cannot start any token"),
        ("faults:\n  - name: a\n", 2, "missing field `respond`"),
    ];
    for (text, line, needle) in cases {
        match Script::from_yaml_str(text) {
            Err(ScriptError::Parse {
                message,
                line: Some(got_line),
                column: Some(_),
            }) => {
                assert!(message.contains(needle), "{text:?}: {message}");
                assert_eq!(got_line, *line, "{text:?}: {message}");
                assert!(message.contains(&format!("line {line}")), "{message}");
            }
            other => panic!("{text:?}: expected a located parse error, got {other:?}"),
        }
    }
}

#[test]
fn the_field_path_is_in_the_message() {
    let error = Script::from_yaml_str(
        "faults:\n  - name: a\n    probability: 1.5\n    respond: { status: 503 }\n",
    )
    .expect_err("invalid");
    assert!(
        error.to_string().starts_with("faults[0].probability: "),
        "{error}"
    );
}

/// Issue 50: a header that frames the response or manages its connection, scripted on a
/// fault's response, corrupted the next response on a kept-alive connection. Each is
/// refused at its own line and column, in any case, with the reason; others pass.
#[test]
fn a_fault_may_not_set_a_framing_header() {
    for name in FRAMING_HEADERS.iter().map(|n| n.to_string()).chain([
        "Content-Length".to_string(),
        "TRANSFER-ENCODING".to_string(),
    ]) {
        let text = format!(
            "faults:\n  - name: a\n    respond:\n      status: 200\n      headers:\n        x-why: drill\n        {name}: \"0\"\n"
        );
        match Script::from_yaml_str(&text) {
            Err(ScriptError::Parse {
                message,
                line: Some(7),
                column: Some(9),
            }) => {
                assert!(
                    message.contains(&format!("`{}`", name.to_ascii_lowercase())),
                    "{message}"
                );
                assert!(message.contains("desynchronise"), "{message}");
                assert!(message.starts_with("faults[0].respond"), "{message}");
            }
            other => panic!("{name}: expected a parse error at 7:9, got {other:?}"),
        }
    }
    let fine = script(
        "faults:\n  - respond: { status: 503, headers: { x-why: drill, retry-after-ms: '5', content-type: text/plain } }\n",
    );
    assert_eq!(fine.phase_count(), 1);
}

/// Cross-field errors: (script, phase, field, needle).
#[test]
fn cross_field_errors_name_the_phase_and_the_field() {
    let cases: &[(&str, &str, &str, &str)] = &[
        (
            "faults: [ { name: outage, from: 20s, until: 10s, respond: { status: 503 } } ]",
            "faults[0] \"outage\"",
            "until",
            "must be after `from`",
        ),
        (
            "faults: [ { respond: { status: 503 } }, { from: 5s, until: 5s, respond: { status: 503 } } ]",
            "faults[1]",
            "until",
            "would be empty",
        ),
        (
            "faults: [ { name: x, respond: { fault: reset, retry_after: 1s } } ]",
            "faults[0] \"x\"",
            "respond[0].retry_after",
            "does not apply to a reset fault",
        ),
        (
            "faults: [ { name: x, respond: [ { status: 503 }, { weight: 2 } ] } ]",
            "faults[0] \"x\"",
            "respond[1]",
            "needs `status: CODE`, `grpc: CODE` or `fault: KIND`",
        ),
        (
            "faults: [ { respond: { fault: delay } } ]",
            "faults[0]",
            "respond[0].delay",
            "is required",
        ),
        (
            "faults: [ { respond: { fault: status } } ]",
            "faults[0]",
            "respond[0].status",
            "is required",
        ),
        (
            "faults: [ { respond: { fault: delay, delay: 1s, processed: true } } ]",
            "faults[0]",
            "respond[0].processed",
            "does not apply to a delay",
        ),
        (
            "faults: [ { respond: { fault: close, delay: 1s } } ]",
            "faults[0]",
            "respond[0].delay",
            "does not apply to a close fault",
        ),
        (
            "faults: [ { respond: { fault: reset, hold: 1s } } ]",
            "faults[0]",
            "respond[0].hold",
            "only to timeout",
        ),
        (
            "faults: [ { respond: [ { status: 503, weight: 0 }, { fault: reset, weight: 0 } ] } ]",
            "faults[0]",
            "respond[].weight",
            "sum to zero",
        ),
        (
            "faults: [ { respond: [] } ]",
            "faults[0]",
            "respond",
            "is empty",
        ),
        (
            "faults: [ { attempts: [], respond: { status: 503 } } ]",
            "faults[0]",
            "attempts",
            "empty list",
        ),
        (
            "faults: [ { name: a, respond: { status: 503 } }, { name: a, respond: { status: 500 } } ]",
            "faults[1] \"a\"",
            "name",
            "already used by faults[0]",
        ),
        (
            "server: { queue: 5 }",
            "server",
            "queue",
            "needs `capacity`",
        ),
    ];
    for (text, phase, field, needle) in cases {
        match Script::from_yaml_str(text) {
            Err(ScriptError::Invalid {
                phase: got_phase,
                field: got_field,
                message,
            }) => {
                assert_eq!(&got_phase, phase, "{text}");
                assert_eq!(&got_field, field, "{text}");
                assert!(message.contains(needle), "{text}: {message}");
            }
            other => panic!("{text}: expected an invalid-script error, got {other:?}"),
        }
    }
}

#[test]
fn json_is_accepted_too() {
    let s = script(r#"{"faults": [{"name": "j", "respond": {"status": 502}}]}"#);
    assert_eq!(
        decide(&s, "GET", "/", &[], 0.0),
        Some((0, FaultKind::Status))
    );
}

#[test]
fn specs_round_trip_through_yaml() {
    let original = script(PLAN);
    let text = serde_yaml::to_string(original.spec()).expect("serialises");
    let again = script(&text);
    assert_eq!(original, again);
}

#[test]
fn size_and_depth_are_refused_before_parsing() {
    let mut big = String::from("faults: []\n#");
    big.push_str(&"x".repeat(MAX_SCRIPT_BYTES));
    let Err(ScriptError::Parse { message, line, .. }) = Script::from_yaml_str(&big) else {
        panic!("a script over the limit is refused");
    };
    assert!(
        message.contains(&format!("at most {MAX_SCRIPT_BYTES}")),
        "{message}"
    );
    assert_eq!(line, None);

    let deep = format!("faults: {}", "[".repeat(100_000));
    let Err(ScriptError::Parse {
        message,
        line,
        column,
    }) = Script::from_yaml_str(&deep)
    else {
        panic!("a deep script is refused");
    };
    assert_eq!((line, column), (Some(1), Some(73)));
    assert!(
        message.contains("nested 65 levels deep at line 1 column 73"),
        "{message}"
    );
}

#[test]
fn grpc_faults_are_scripted_by_code_name() {
    let script = Script::from_yaml_str(
        "faults:\n  - name: down\n    respond:\n      - { grpc: unavailable }\n      - { grpc: RESOURCE_EXHAUSTED, pushback: 200ms }\n      - { grpc: 8, pushback: stop, status: 500 }\n",
    )
    .expect("a gRPC script");
    let responses: Vec<_> = (0..3)
        .map(|i| match &script.phases[0].entries[i].action {
            crate::script::FaultAction::Status(r) => (r.status, r.grpc),
            other => panic!("entry {i}: {other:?}"),
        })
        .collect();
    use crate::script::{GrpcStatus, Pushback};
    assert_eq!(
        responses,
        [
            (
                503,
                Some(GrpcStatus {
                    code: 14,
                    pushback: None
                })
            ),
            (
                429,
                Some(GrpcStatus {
                    code: 8,
                    pushback: Some(Pushback::After(std::time::Duration::from_millis(200)))
                })
            ),
            (
                500,
                Some(GrpcStatus {
                    code: 8,
                    pushback: Some(Pushback::Stop)
                })
            ),
        ],
        "the HTTP status a non-gRPC client gets defaults to code.proto's mapping"
    );
}

#[test]
fn a_misspelt_grpc_code_or_a_stray_pushback_is_refused() {
    let err = Script::from_yaml_str("faults: [ { respond: { grpc: unavailible } } ]")
        .expect_err("a misspelt code");
    let text = err.to_string();
    assert!(text.contains("unavailible"), "{text}");
    assert!(
        text.contains("one of cancelled"),
        "the names are listed: {text}"
    );
    for (yaml, needle) in [
        (
            "faults: [ { respond: { status: 503, pushback: 1s } } ]",
            "pushback",
        ),
        (
            "faults: [ { respond: { fault: reset, grpc: unavailable } } ]",
            "grpc",
        ),
        ("faults: [ { respond: { grpc: 17 } } ]", "17"),
    ] {
        let text = Script::from_yaml_str(yaml).expect_err(yaml).to_string();
        assert!(text.contains(needle), "{yaml}: {text}");
    }
}
