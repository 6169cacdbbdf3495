//! The Kubernetes manifests of a sharded run (deploy/k8s/render.sh), checked by
//! construction where a schema validator (interop/k8s.sh) cannot see: the shard command
//! is one the binary takes, one index per pod, the image is the one compose builds, the
//! plan's target is the fault-server's Service and port, both read the Secret's token, and
//! the ConfigMap holds plans/cluster.yaml, which is outage.yaml aimed at that Service.

mod common;

use std::process::Command;

use common::{harness, repo};
use serde::Deserialize;
use serde_yaml::Value;

fn render(n: u32) -> Vec<Value> {
    let out = Command::new("bash")
        .arg(repo().join("deploy/k8s/render.sh"))
        .args([n.to_string().as_str(), "2026-12-07T08:00:00Z"])
        .output()
        .expect("run render.sh");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("UTF-8");
    serde_yaml::Deserializer::from_str(&text)
        .map(|doc| Value::deserialize(doc).expect("YAML"))
        .collect()
}

fn kind<'a>(docs: &'a [Value], kind: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind}"))
}

fn words(v: &Value) -> Vec<String> {
    v.as_sequence()
        .expect("a list")
        .iter()
        .map(|w| w.as_str().expect("a string").to_owned())
        .collect()
}

#[test]
fn the_rendered_manifests_fit_the_binary_the_image_and_the_plan() {
    let docs = render(8);
    let job = kind(&docs, "Job");
    assert_eq!(job["spec"]["completionMode"], "Indexed");
    assert_eq!(job["spec"]["completions"].as_u64(), Some(8));
    assert_eq!(job["spec"]["parallelism"].as_u64(), Some(8));
    let shard = &job["spec"]["template"]["spec"]["containers"][0];
    let command = words(&shard["command"]);
    assert_eq!(command[..3], ["harness", "chaos", "/plan/cluster.yaml"]);
    let flag = |name: &str| {
        command
            .iter()
            .position(|w| w == name)
            .and_then(|i| command.get(i + 1))
            .cloned()
            .unwrap_or_else(|| panic!("no {name} in {command:?}"))
    };
    assert_eq!(flag("--shard"), "$(SHARD_INDEX)/8");
    assert_eq!(flag("--partial"), "-");
    harness::shard::parse_time(&flag("--start-at")).expect("a start time");
    // Every flag is the binary's, and the index comes from the Job.
    let help = harness().args(["chaos", "--help"]).output().expect("help");
    let help = String::from_utf8_lossy(&help.stdout);
    for w in command.iter().filter(|w| w.starts_with("--")) {
        assert!(
            help.contains(&format!("{w} ")),
            "`harness chaos --help` has no {w}"
        );
    }
    let env = |container: &Value, name: &str| -> Value {
        container["env"]
            .as_sequence()
            .and_then(|e| e.iter().find(|v| v["name"] == name))
            .cloned()
            .unwrap_or_else(|| panic!("no env {name}"))
    };
    assert_eq!(
        env(shard, "SHARD_INDEX")["valueFrom"]["fieldRef"]["fieldPath"],
        "metadata.annotations['batch.kubernetes.io/job-completion-index']"
    );
    // The shards and the server: one image, compose's; one Secret key; one port.
    let server = &kind(&docs, "Deployment")["spec"]["template"]["spec"]["containers"][0];
    let compose: Value = serde_yaml::from_str(
        &std::fs::read_to_string(repo().join("docker-compose.yml")).expect("compose"),
    )
    .expect("YAML");
    let image = &compose["services"]["fault-server"]["image"];
    assert_eq!(&shard["image"], image);
    assert_eq!(&server["image"], image);
    assert_eq!(
        kind(&docs, "Deployment")["spec"]["replicas"].as_u64(),
        Some(1)
    );
    let token = fault_server::wire::TOKEN_VARIABLE;
    assert_eq!(
        env(shard, token)["valueFrom"],
        env(server, token)["valueFrom"]
    );
    let port = server["ports"][0]["containerPort"]
        .as_u64()
        .expect("a port");
    assert_eq!(
        words(&server["command"]),
        ["fault-server", "--listen", &format!("0.0.0.0:{port}")]
    );
    let service = kind(&docs, "Service");
    assert_eq!(service["spec"]["ports"][0]["port"].as_u64(), Some(port));
    let plan_text = kind(&docs, "ConfigMap")["data"]["cluster.yaml"]
        .as_str()
        .expect("the plan")
        .to_owned();
    assert_eq!(
        plan_text,
        std::fs::read_to_string(repo().join("plans/cluster.yaml")).expect("cluster.yaml")
    );
    let plan =
        harness::plan::parse(std::path::Path::new("cluster.yaml"), &plan_text).expect("a plan");
    let name = service["metadata"]["name"].as_str().expect("a name");
    assert_eq!(
        plan.target.url(),
        Some(format!("http://{name}:{port}").as_str())
    );
    // The binaries are where the commands find them, and the pods run as the image's user.
    let dockerfile = std::fs::read_to_string(repo().join("Dockerfile")).expect("Dockerfile");
    assert!(dockerfile.contains("/out/harness /out/fault-server /usr/local/bin/"));
    assert!(dockerfile.contains("useradd --uid 1000"));
    for spec in [
        &job["spec"]["template"]["spec"],
        &kind(&docs, "Deployment")["spec"]["template"]["spec"],
    ] {
        assert_eq!(spec["securityContext"]["runAsUser"].as_u64(), Some(1000));
    }
}

#[test]
fn the_cluster_plan_is_outage_aimed_at_the_service() {
    let strip = |path: &str| -> Value {
        let mut plan: Value =
            serde_yaml::from_str(&std::fs::read_to_string(repo().join(path)).expect("plan"))
                .expect("YAML");
        let map = plan.as_mapping_mut().expect("a map");
        for key in ["name", "description", "target", "allow_remote"] {
            map.remove(key);
        }
        plan
    };
    assert!(
        strip("plans/cluster.yaml") == strip("plans/outage.yaml"),
        "plans/cluster.yaml differs from plans/outage.yaml beyond name, description, target and allow_remote: copy the change over"
    );
}

#[test]
fn render_refuses_a_bad_count() {
    for bad in ["0", "x", "2000"] {
        let out = Command::new("bash")
            .arg(repo().join("deploy/k8s/render.sh"))
            .arg(bad)
            .output()
            .expect("run render.sh");
        assert_eq!(out.status.code(), Some(2), "{bad}");
    }
}
