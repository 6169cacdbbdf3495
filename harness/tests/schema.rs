//! The plan's JSON Schema: `harness plan-schema --json` is what `docs/plan.schema.json`
//! holds, and every shipped plan names it in its first line, so an editor running
//! yaml-language-server completes and checks it. Validating the plans against it is the
//! job of a validator nobody here wrote (interop/schema.sh, python-jsonschema, in CI).

mod common;

use std::path::PathBuf;

use common::{harness, repo, stderr};

#[test]
fn the_committed_schema_is_what_plan_schema_json_prints() {
    let out = harness()
        .args(["plan-schema", "--json"])
        .output()
        .expect("run harness");
    assert!(out.status.success(), "{}", stderr(&out));
    let printed = String::from_utf8(out.stdout).expect("utf-8");
    let committed = std::fs::read_to_string(repo().join("docs/plan.schema.json"))
        .expect("docs/plan.schema.json");
    assert!(
        printed == committed,
        "docs/plan.schema.json is not what the plan's types say: run `cargo run -p harness -- plan-schema --json > docs/plan.schema.json` and commit it"
    );
    let schema: serde_json::Value = serde_json::from_str(&printed).expect("JSON");
    assert_eq!(schema["$schema"], "http://json-schema.org/draft-07/schema#");
    // Strict as the plan is: an unknown key is an error in the editor too.
    assert_eq!(schema["additionalProperties"], false, "{schema:#}");
    for key in ["load", "policies", "faults", "gates", "target", "server"] {
        assert!(
            schema["properties"][key].is_object(),
            "no `{key}` in the schema"
        );
    }
    let policy = &schema["definitions"]["PolicySpec"];
    assert_eq!(policy["additionalProperties"], false);
    assert!(
        policy["properties"]["max_attempts"].is_object(),
        "{policy:#}"
    );
}

#[test]
fn every_shipped_plan_starts_with_the_schema_modeline() {
    let mut plans: Vec<PathBuf> = Vec::new();
    for dir in ["plans", "plans/science"] {
        plans.extend(
            std::fs::read_dir(repo().join(dir))
                .expect("plans")
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "yaml")),
        );
    }
    assert!(plans.len() > 10);
    for plan in plans {
        let text = std::fs::read_to_string(&plan).expect("plan");
        let first = text.lines().next().unwrap_or_default();
        let schema = first
            .strip_prefix("# yaml-language-server: $schema=")
            .unwrap_or_else(|| {
                panic!(
                    "{}: the first line is not the modeline: {first}",
                    plan.display()
                )
            });
        let at = plan.parent().expect("dir").join(schema);
        assert!(
            at.canonicalize().ok() == repo().join("docs/plan.schema.json").canonicalize().ok(),
            "{}: the modeline names {}, not docs/plan.schema.json",
            plan.display(),
            at.display()
        );
    }
}
