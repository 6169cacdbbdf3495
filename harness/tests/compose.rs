//! The docker compose stack, checked by construction (no Docker engine runs here): the
//! compose file parses and holds the four services, every image is pinned, the harness
//! and the fault-server share a loopback and the plan between them points at it, the
//! collector's config wires traces to Jaeger, the Dockerfile builds both binaries, the
//! justfile brings the stack up and down, and every flag the stack passes to a binary is
//! one that binary accepts.

mod common;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::repo;
use serde_yaml::Value;

const COMPOSE: &str = "docker-compose.yml";
const SERVICES: [&str; 4] = ["fault-server", "harness", "otel-collector", "jaeger"];

fn read(path: &str) -> String {
    std::fs::read_to_string(repo().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn yaml(path: &str) -> Value {
    serde_yaml::from_str(&read(path)).unwrap_or_else(|e| panic!("{path} is not YAML: {e}"))
}

fn compose() -> Value {
    yaml(COMPOSE)
}

fn service<'a>(compose: &'a Value, name: &str) -> &'a Value {
    compose["services"]
        .get(name)
        .unwrap_or_else(|| panic!("{COMPOSE}: no service `{name}`"))
}

fn string_list(value: &Value, what: &str) -> Vec<String> {
    value
        .as_sequence()
        .unwrap_or_else(|| panic!("{what} is not a list: {value:?}"))
        .iter()
        .map(|v| match v {
            Value::String(s) => s.clone(),
            Value::Number(n) => n.to_string(),
            other => panic!("{what}: {other:?} is not a string"),
        })
        .collect()
}

/// A service's command as words. Compose takes a list, or a string it splits like a shell;
/// a string here must need no quoting, so splitting on whitespace gives the same words.
fn command(compose: &Value, name: &str) -> Vec<String> {
    let what = format!("{COMPOSE}: the command of `{name}`");
    match &service(compose, name)["command"] {
        Value::String(line) => {
            assert!(
                !line.contains(['"', '\'', '\\', '$']),
                "{what} quotes or expands: write it as a list"
            );
            line.split_whitespace().map(str::to_owned).collect()
        }
        list @ Value::Sequence(_) => string_list(list, &what),
        other => panic!("{what} is missing ({other:?})"),
    }
}

/// The value of `--flag VALUE` or `--flag=VALUE` in a command.
fn flag(words: &[String], name: &str) -> Option<String> {
    let mut words = words.iter();
    while let Some(word) = words.next() {
        if word == name {
            return words.next().cloned();
        }
        if let Some(value) = word.strip_prefix(name).and_then(|w| w.strip_prefix('=')) {
            return Some(value.to_owned());
        }
    }
    None
}

/// The `--flags` of a command, without their values.
fn flags(words: &[String]) -> Vec<String> {
    words
        .iter()
        .filter(|w| w.starts_with("--"))
        .map(|w| w.split('=').next().unwrap_or(w).to_owned())
        .collect()
}

/// A service's environment, as a map or as `NAME=value` entries.
fn environment(compose: &Value, name: &str) -> Vec<(String, String)> {
    match &service(compose, name)["environment"] {
        Value::Null => Vec::new(),
        Value::Mapping(map) => map
            .iter()
            .map(|(k, v)| {
                let key = k.as_str().expect("an environment name").to_owned();
                let value = match v {
                    Value::String(s) => s.clone(),
                    Value::Number(n) => n.to_string(),
                    Value::Bool(b) => b.to_string(),
                    other => panic!("{COMPOSE}: `{name}` sets {key} to {other:?}"),
                };
                (key, value)
            })
            .collect(),
        list @ Value::Sequence(_) => {
            string_list(list, &format!("{COMPOSE}: the environment of `{name}`"))
                .into_iter()
                .map(|entry| match entry.split_once('=') {
                    Some((k, v)) => (k.to_owned(), v.to_owned()),
                    None => (entry, String::new()),
                })
                .collect()
        }
        other => panic!("{COMPOSE}: the environment of `{name}` is {other:?}"),
    }
}

/// Short-syntax port mappings (`"HOST:CONTAINER"`, with an optional IP and protocol) as
/// (published, container) pairs; the long syntax as its `published` and `target`.
fn ports(compose: &Value, name: &str) -> Vec<(Option<u16>, u16)> {
    let what = format!("{COMPOSE}: the ports of `{name}`");
    let Some(list) = service(compose, name)["ports"].as_sequence() else {
        return Vec::new();
    };
    let port = |s: &str| -> u16 {
        s.parse()
            .unwrap_or_else(|_| panic!("{what}: `{s}` is not one port"))
    };
    list.iter()
        .map(|entry| match entry {
            Value::String(s) => {
                let s = s.split('/').next().unwrap_or(s);
                let parts: Vec<&str> = s.split(':').collect();
                match parts.as_slice() {
                    [container] => (None, port(container)),
                    [.., host, container] => (Some(port(host)), port(container)),
                    [] => panic!("{what}: an empty entry"),
                }
            }
            Value::Number(n) => (None, port(&n.to_string())),
            Value::Mapping(_) => (
                entry["published"]
                    .as_u64()
                    .map(|p| u16::try_from(p).expect("a port")),
                u16::try_from(entry["target"].as_u64().expect("a target port")).expect("a port"),
            ),
            other => panic!("{what}: {other:?}"),
        })
        .collect()
}

/// Short-syntax volumes as (source, target).
fn volumes(compose: &Value, name: &str) -> Vec<(String, String)> {
    let what = format!("{COMPOSE}: the volumes of `{name}`");
    match &service(compose, name)["volumes"] {
        Value::Null => Vec::new(),
        list => string_list(list, &what)
            .into_iter()
            .map(|v| {
                let mut parts = v.split(':');
                let source = parts.next().unwrap_or_default().to_owned();
                let target = parts
                    .next()
                    .unwrap_or_else(|| panic!("{what}: `{v}` has no target"))
                    .to_owned();
                (source, target)
            })
            .collect(),
    }
}

/// A repository path from a compose-relative one (`./deploy/x.yaml`).
fn in_repo(path: &str) -> PathBuf {
    repo().join(path.trim_start_matches("./"))
}

/// `http://host:port/...` → (host, port).
fn host_port(url: &str) -> (String, u16) {
    let parsed = reqwest::Url::parse(url).unwrap_or_else(|e| panic!("`{url}` is not a URL: {e}"));
    (
        parsed.host_str().expect("a host").to_owned(),
        parsed.port_or_known_default().expect("a port"),
    )
}

/// Whether an image reference names one build: a digest, or a tag with an exact version:
/// major.minor.patch (`0.139.0`, `1.95.0-slim-bookworm`), or, for Debian, which numbers
/// its releases major.point, `12.12-slim`. No tag (which means `latest`), `latest`, a
/// codename (`bookworm-slim`) or a series (`1.95`, `2`) all move under you.
fn pinned(image: &str) -> Result<(), String> {
    if image.contains("@sha256:") {
        return Ok(());
    }
    // The tag follows the last `:` after the last `/` (a registry's port comes before).
    let (repository, tag) = match image.rsplit_once(':') {
        Some((repository, tag)) if !tag.contains('/') => (repository, tag),
        _ => return Err(format!("`{image}` has no tag, so it is `latest`")),
    };
    if tag == "latest" || tag.contains('$') {
        return Err(format!("`{image}`: `{tag}` moves"));
    }
    let version = tag.split('-').next().unwrap_or(tag);
    let version = version.strip_prefix('v').unwrap_or(version);
    let parts: Vec<&str> = version.split('.').collect();
    let numeric = parts
        .iter()
        .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
    let debian = ["debian", "library/debian", "docker.io/library/debian"].contains(&repository);
    if numeric && parts.len() >= if debian { 2 } else { 3 } {
        Ok(())
    } else {
        Err(format!(
            "`{image}`: `{tag}` is not an exact version (major.minor.patch{})",
            if debian {
                ", or major.point for Debian"
            } else {
                ""
            }
        ))
    }
}

#[test]
fn the_compose_file_holds_the_four_services() {
    let c = compose();
    let names: BTreeSet<&str> = c["services"]
        .as_mapping()
        .unwrap_or_else(|| panic!("{COMPOSE}: no `services` map"))
        .keys()
        .map(|k| k.as_str().expect("a service name"))
        .collect();
    assert_eq!(
        names,
        SERVICES.into_iter().collect::<BTreeSet<_>>(),
        "{COMPOSE}: the services"
    );
}

#[test]
fn every_image_is_pinned_to_an_exact_version() {
    let c = compose();
    for name in SERVICES {
        let s = service(&c, name);
        match s["image"].as_str() {
            Some(image) => {
                pinned(image).unwrap_or_else(|e| panic!("{COMPOSE}: `{name}`: {e}"));
            }
            // A service built here runs what the Dockerfile pins (checked below).
            None => assert!(
                s.get("build").is_some(),
                "{COMPOSE}: `{name}` has neither an image nor a build"
            ),
        }
    }
    // The check itself: what it must refuse.
    for moving in [
        "jaegertracing/jaeger",
        "jaegertracing/jaeger:latest",
        "debian:bookworm-slim",
        "rust:1.95-slim",
        "otel/opentelemetry-collector-contrib:0.139",
        "registry:5000/x",
    ] {
        assert!(pinned(moving).is_err(), "`{moving}` passed as pinned");
    }
}

#[test]
fn the_harness_and_the_fault_server_share_a_loopback_and_the_plan_targets_it() {
    let c = compose();
    let harness = service(&c, "harness");
    // The load stays on the fault-server container's loopback: no network in between,
    // and the fault-server needs no token (it refuses a non-loopback address without one).
    assert_eq!(
        harness["network_mode"].as_str(),
        Some("service:fault-server"),
        "{COMPOSE}: the harness must run in the fault-server's network namespace"
    );

    let server = command(&c, "fault-server");
    assert_eq!(
        server.first().map(String::as_str),
        Some("fault-server"),
        "{COMPOSE}: `fault-server` runs the fault-server binary"
    );
    let listen = flag(&server, "--listen")
        .unwrap_or_else(|| panic!("{COMPOSE}: the fault-server's command has no --listen"));
    let listen: SocketAddr = listen
        .parse()
        .unwrap_or_else(|e| panic!("{COMPOSE}: --listen `{listen}`: {e}"));
    assert!(
        listen.ip().is_loopback(),
        "{COMPOSE}: the fault-server listens on {listen}, not on loopback"
    );
    if let Some(script) = flag(&server, "--script") {
        assert!(
            in_repo(&script).is_file() && script.starts_with("plans/"),
            "{COMPOSE}: the fault-server's --script {script} is not a file under plans/ (the image has only plans/)"
        );
    }

    let words = command(&c, "harness");
    assert_eq!(
        words.get(..2).map(|w| w.join(" ")).as_deref(),
        Some("harness chaos"),
        "{COMPOSE}: the harness service runs `harness chaos PLAN`"
    );
    // The plan: the one positional word after `chaos`. Every `chaos` flag but --quiet
    // takes a value; whether the harness knows them is the last tests' business.
    let mut positional = Vec::new();
    let mut rest = words[2..].iter();
    while let Some(word) = rest.next() {
        if word.starts_with('-') {
            if !word.contains('=') && !["--quiet", "-q"].contains(&word.as_str()) {
                rest.next();
            }
        } else {
            positional.push(word.clone());
        }
    }
    let [plan_file] = positional.as_slice() else {
        panic!("{COMPOSE}: the harness command names one plan, not {positional:?}");
    };
    assert!(
        plan_file.starts_with("plans/") && in_repo(plan_file).is_file(),
        "{COMPOSE}: the harness runs {plan_file}, which is not a file under plans/ (the image has only plans/)"
    );
    let plan = harness::plan::load(&in_repo(plan_file)).unwrap_or_else(|e| panic!("{e}"));
    let harness::plan::Target::FaultServer { url, .. } = &plan.target else {
        panic!(
            "{plan_file}: the target is {:?}, not the compose stack's fault-server",
            plan.target
        );
    };
    let (host, port) = host_port(url);
    let at: SocketAddr = format!("{host}:{port}").parse().unwrap_or_else(|_| {
        panic!("{plan_file}: target {url}: name the address, as --listen does")
    });
    assert_eq!(
        at, listen,
        "{plan_file}: the target {url} is not where the fault-server listens ({listen})"
    );

    // The harness connects once, at its start: it waits for the fault-server to answer.
    assert_eq!(
        harness["depends_on"]["fault-server"]["condition"].as_str(),
        Some("service_healthy"),
        "{COMPOSE}: the harness must wait for a healthy fault-server"
    );
    assert!(
        service(&c, "fault-server")["healthcheck"]["test"].is_sequence(),
        "{COMPOSE}: the fault-server needs a healthcheck for the harness to wait on"
    );
    assert!(
        harness["depends_on"].get("otel-collector").is_some(),
        "{COMPOSE}: the harness starts after the collector"
    );

    // Reports: the harness writes reports/<plan>/<timestamp>/ under its working directory.
    let workdir = dockerfile_final_workdir();
    let wanted = format!("{}/reports", workdir.trim_end_matches('/'));
    assert!(
        volumes(&c, "harness")
            .iter()
            .any(|(source, target)| source == "./reports" && *target == wanted),
        "{COMPOSE}: the harness mounts ./reports at {wanted} (its working directory's reports/)"
    );
}

#[test]
fn the_compose_plan_is_outage_aimed_at_the_compose_fault_server() {
    // plans/compose.yaml exists for its target alone: every other part is outage.yaml's,
    // so the stack shows the demo everyone knows.
    let strip = |path: &str| -> Value {
        let mut plan = yaml(path);
        let map = plan.as_mapping_mut().expect("a plan is a map");
        for key in ["name", "description", "target"] {
            map.remove(key);
        }
        plan
    };
    assert!(
        strip("plans/compose.yaml") == strip("plans/outage.yaml"),
        "plans/compose.yaml differs from plans/outage.yaml beyond name, description and target: copy the change over"
    );
    // The fault-server container starts with outage.yaml as its script; the harness
    // replaces a script it did not install only when it is the plan's own (or the plan
    // says `script: replace`), so the two must agree.
    let started = fault_server::Script::from_yaml_str(
        &std::fs::read_to_string(in_repo("plans/outage.yaml")).expect("outage.yaml"),
    )
    .expect("a script");
    let plan = harness::plan::load(&in_repo("plans/compose.yaml")).expect("the compose plan");
    assert_eq!(started.spec().faults, plan.script.faults);
    assert_eq!(started.spec().server, plan.script.server);
}

#[test]
fn telemetry_goes_to_the_collector_and_jaeger_shows_it() {
    let c = compose();
    let collector_ports = ports(&c, "otel-collector");
    for port in [4317, 4318] {
        assert!(
            collector_ports.contains(&(Some(port), port)),
            "{COMPOSE}: the collector publishes {port}: {collector_ports:?}"
        );
    }
    assert!(
        ports(&c, "jaeger").contains(&(Some(16686), 16686)),
        "{COMPOSE}: jaeger publishes its UI on 16686"
    );

    // Where both binaries send OTLP: the collector's service name and its OTLP/HTTP port
    // (the binaries speak http/protobuf only).
    let config = collector_config_path(&c);
    let receiver = &yaml(&config)["receivers"]["otlp"]["protocols"]["http"]["endpoint"];
    let receiver = receiver
        .as_str()
        .unwrap_or_else(|| panic!("{config}: no otlp http receiver endpoint"));
    for name in ["fault-server", "harness"] {
        let words = command(&c, name);
        let env = environment(&c, name);
        let mut endpoints: Vec<(String, String)> = Vec::new();
        if let Some(otlp) = flag(&words, "--otlp") {
            endpoints.push(("--otlp".to_owned(), otlp));
        }
        endpoints.extend(
            env.iter()
                .filter(|(k, _)| k.starts_with("OTEL_EXPORTER_OTLP") && k.ends_with("ENDPOINT"))
                .cloned(),
        );
        assert!(
            !endpoints.is_empty(),
            "{COMPOSE}: `{name}` exports nowhere (no --otlp, no OTEL_EXPORTER_OTLP_ENDPOINT)"
        );
        for (what, url) in endpoints {
            let (host, port) = host_port(&url);
            assert!(
                host == "otel-collector" && receiver.ends_with(&format!(":{port}")),
                "{COMPOSE}: `{name}` {what}={url} is not the collector's OTLP/HTTP receiver ({receiver})"
            );
        }
        // Only variables the binaries read, so a misspelt one cannot pass unnoticed.
        for (key, value) in &env {
            assert!(
                [
                    "OTEL_EXPORTER_OTLP_ENDPOINT",
                    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                    "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
                    "OTEL_EXPORTER_OTLP_PROTOCOL",
                    "OTEL_SERVICE_NAME",
                    "OTEL_RESOURCE_ATTRIBUTES",
                    "OTEL_TRACES_SAMPLER",
                    "OTEL_TRACES_SAMPLER_ARG",
                    "OTEL_METRIC_EXPORT_INTERVAL",
                    "OTEL_SDK_DISABLED",
                    "FAULT_SERVER_TOKEN",
                ]
                .contains(&key.as_str()),
                "{COMPOSE}: `{name}` sets {key}, which neither binary reads"
            );
            if key == "OTEL_TRACES_SAMPLER_ARG" {
                assert!(
                    value.parse::<f64>().is_ok_and(|r| (0.0..=1.0).contains(&r)),
                    "{COMPOSE}: `{name}` OTEL_TRACES_SAMPLER_ARG={value} is not a ratio"
                );
            }
        }
    }
    // docs/docker.md sends readers to this service in Jaeger.
    assert!(
        environment(&c, "harness")
            .contains(&("OTEL_SERVICE_NAME".to_owned(), "chaos-harness".to_owned())),
        "{COMPOSE}: the harness's traces are the `chaos-harness` service"
    );
}

/// The collector's config file in the repository: the source of the mount whose target is
/// the `--config` the collector runs with (or the contrib image's default path).
fn collector_config_path(c: &Value) -> String {
    let words = command(c, "otel-collector");
    let target =
        flag(&words, "--config").unwrap_or_else(|| "/etc/otelcol-contrib/config.yaml".to_owned());
    let mounts = volumes(c, "otel-collector");
    let (source, _) = mounts
        .iter()
        .find(|(_, t)| *t == target)
        .unwrap_or_else(|| {
            panic!("{COMPOSE}: the collector reads {target}, which no volume mounts: {mounts:?}")
        });
    assert!(
        source.starts_with("./") && in_repo(source).is_file(),
        "{COMPOSE}: the collector's config {source} is not a file in the repository"
    );
    source.trim_start_matches("./").to_owned()
}

#[test]
fn the_collector_pipelines_name_what_the_config_defines_and_traces_end_at_jaeger() {
    let c = compose();
    let path = collector_config_path(&c);
    let config = yaml(&path);
    let pipelines = config["service"]["pipelines"]
        .as_mapping()
        .unwrap_or_else(|| panic!("{path}: no service.pipelines"));
    for (name, pipeline) in pipelines {
        let name = name.as_str().expect("a pipeline name");
        for section in ["receivers", "processors", "exporters"] {
            let Some(list) = pipeline.get(section) else {
                assert_ne!(
                    section, "receivers",
                    "{path}: pipeline {name} has no receivers"
                );
                assert_ne!(
                    section, "exporters",
                    "{path}: pipeline {name} has no exporters"
                );
                continue;
            };
            for component in string_list(list, &format!("{path}: {name}.{section}")) {
                assert!(
                    config[section].get(component.as_str()).is_some(),
                    "{path}: pipeline {name} names {section} `{component}`, which the config does not define"
                );
            }
        }
    }
    for signal in ["traces", "metrics"] {
        assert!(
            pipelines.contains_key(signal),
            "{path}: no {signal} pipeline"
        );
    }

    // Other containers reach the receivers only off the collector's loopback.
    for protocol in ["grpc", "http"] {
        let endpoint = config["receivers"]["otlp"]["protocols"][protocol]["endpoint"].as_str();
        assert!(
            endpoint.is_some_and(|e| e.starts_with("0.0.0.0:")),
            "{path}: the otlp {protocol} receiver listens on {endpoint:?}, not 0.0.0.0 (the default, localhost, is unreachable from other containers)"
        );
    }

    // Every traces exporter is Jaeger's OTLP port: gRPC 4317 for `otlp`, HTTP 4318 for
    // `otlphttp`; plain text inside the stack.
    let traces = string_list(
        &config["service"]["pipelines"]["traces"]["exporters"],
        &format!("{path}: traces.exporters"),
    );
    for exporter in traces {
        let settings = &config["exporters"][exporter.as_str()];
        let kind = exporter.split('/').next().unwrap_or(&exporter);
        let endpoint = settings["endpoint"]
            .as_str()
            .unwrap_or_else(|| panic!("{path}: exporter {exporter} has no endpoint"));
        let url = if endpoint.contains("://") {
            endpoint.to_owned()
        } else {
            format!("http://{endpoint}")
        };
        let (host, port) = host_port(&url);
        let wanted = match kind {
            "otlp" => 4317,
            "otlphttp" => 4318,
            other => panic!("{path}: traces go to a `{other}` exporter, not Jaeger's OTLP"),
        };
        assert!(
            host == "jaeger" && port == wanted,
            "{path}: traces exporter {exporter} sends to {endpoint}, not jaeger:{wanted}"
        );
        let image = service(&c, &host)["image"].as_str().unwrap_or_default();
        assert!(
            image.starts_with("jaegertracing/jaeger:"),
            "{COMPOSE}: the `{host}` the traces go to runs {image}, not Jaeger"
        );
        if kind == "otlp" && !endpoint.starts_with("http://") {
            assert_eq!(
                settings["tls"]["insecure"].as_bool(),
                Some(true),
                "{path}: {exporter} speaks TLS by default; Jaeger here takes plain gRPC"
            );
        }
    }
}

/// The Dockerfile's logical lines: continuations joined, comments dropped.
fn dockerfile() -> Vec<String> {
    let text = read("Dockerfile");
    let mut lines = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with('#') || (trimmed.is_empty() && current.is_empty()) {
            continue;
        }
        match trimmed.strip_suffix('\\') {
            Some(part) => {
                current.push_str(part);
                current.push(' ');
            }
            None => {
                current.push_str(trimmed);
                if !current.trim().is_empty() {
                    lines.push(current.trim().to_owned());
                }
                current.clear();
            }
        }
    }
    lines
}

/// The instruction's arguments, when `line` is that instruction.
fn instruction<'a>(line: &'a str, name: &str) -> Option<&'a str> {
    let (word, rest) = line.split_once(char::is_whitespace)?;
    word.eq_ignore_ascii_case(name).then(|| rest.trim())
}

fn dockerfile_final_workdir() -> String {
    let lines = dockerfile();
    let last_from = lines
        .iter()
        .rposition(|l| instruction(l, "FROM").is_some())
        .expect("Dockerfile: no FROM");
    lines[last_from..]
        .iter()
        .filter_map(|l| instruction(l, "WORKDIR"))
        .next_back()
        .unwrap_or_else(|| panic!("Dockerfile: the final stage sets no WORKDIR"))
        .to_owned()
}

#[test]
fn the_dockerfile_builds_both_binaries_in_pinned_stages() {
    let lines = dockerfile();
    // FROM [--platform=...] IMAGE [AS NAME]; a FROM naming an earlier stage is not an image.
    let mut stages: Vec<String> = Vec::new();
    let mut images = Vec::new();
    for line in &lines {
        let Some(args) = instruction(line, "FROM") else {
            continue;
        };
        let words: Vec<&str> = args
            .split_whitespace()
            .filter(|w| !w.starts_with("--"))
            .collect();
        let image = words
            .first()
            .expect("Dockerfile: FROM names an image")
            .to_string();
        if !stages.contains(&image) {
            pinned(&image).unwrap_or_else(|e| panic!("Dockerfile: FROM {e}"));
            images.push(image);
        }
        if let [_, as_, name] = words.as_slice()
            && as_.eq_ignore_ascii_case("as")
        {
            stages.push((*name).to_owned());
        }
    }
    assert!(
        images.len() >= 2,
        "Dockerfile: a build stage and a runtime stage, not {images:?}"
    );

    let build = lines
        .iter()
        .filter_map(|l| instruction(l, "RUN"))
        .find(|r| r.contains("cargo build"))
        .expect("Dockerfile: no RUN cargo build");
    let words: Vec<&str> = build.split_whitespace().collect();
    for needed in ["--release", "--locked"] {
        assert!(
            words.contains(&needed),
            "Dockerfile: cargo build without {needed}"
        );
    }
    for package in ["harness", "fault-server"] {
        assert!(
            words.windows(2).any(|w| w == ["-p", package]),
            "Dockerfile: cargo build does not build -p {package}"
        );
    }

    let last_from = lines
        .iter()
        .rposition(|l| instruction(l, "FROM").is_some())
        .expect("a FROM");
    let runtime = &lines[last_from..];
    let copies: Vec<&str> = runtime
        .iter()
        .filter_map(|l| instruction(l, "COPY"))
        .collect();
    for binary in ["harness", "fault-server"] {
        assert!(
            copies.iter().any(|c| c.starts_with("--from=")
                && c.split_whitespace()
                    .any(|w| w.ends_with(&format!("/{binary}")))
                && c.split_whitespace().last().is_some_and(|dest| {
                    dest == "/usr/local/bin/" || dest == format!("/usr/local/bin/{binary}")
                })),
            "Dockerfile: the runtime stage does not copy {binary} from the builder into /usr/local/bin: {copies:?}"
        );
    }
    // Plans are read relative to the working directory, as the compose commands name them.
    let workdir = dockerfile_final_workdir();
    assert_eq!(workdir, "/app", "Dockerfile: the runtime's WORKDIR");
    assert!(
        copies.iter().any(|c| {
            let w: Vec<&str> = c.split_whitespace().collect();
            w.len() == 2
                && w[0].trim_end_matches('/') == "plans"
                && w[1].trim_end_matches('/') == "/app/plans"
        }),
        "Dockerfile: the runtime stage does not copy plans/ to /app/plans: {copies:?}"
    );
    let user = runtime
        .iter()
        .filter_map(|l| instruction(l, "USER"))
        .next_back()
        .expect("Dockerfile: the runtime stage sets no USER, so it runs as root");
    assert!(
        !["root", "0", "0:0", "root:root"].contains(&user),
        "Dockerfile: the runtime runs as {user}"
    );

    // Both services build this Dockerfile from the repository's root.
    let c = compose();
    for name in ["fault-server", "harness"] {
        let build = &service(&c, name)["build"];
        let (context, file) = match build {
            Value::String(context) => (context.as_str(), "Dockerfile"),
            _ => (
                build["context"].as_str().unwrap_or("."),
                build["dockerfile"].as_str().unwrap_or("Dockerfile"),
            ),
        };
        assert!(
            context.trim_end_matches('/') == "." && file == "Dockerfile",
            "{COMPOSE}: `{name}` builds {context}/{file}, not ./Dockerfile"
        );
    }
}

#[test]
fn the_dockerignore_keeps_out_the_bulk_and_keeps_in_what_the_build_reads() {
    let patterns: Vec<String> = read(".dockerignore")
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| l.trim_end_matches('/').to_owned())
        .collect();
    // Docker matches from the context's root; `dir` also covers everything inside it.
    let excluded = |path: &str| {
        let mut out = false;
        for pattern in &patterns {
            let (negated, pattern) = match pattern.strip_prefix('!') {
                Some(p) => (true, p),
                None => (false, pattern.as_str()),
            };
            let hit = pattern == "*"
                || pattern == "**"
                || path == pattern
                || path.starts_with(&format!("{pattern}/"));
            if hit {
                out = !negated;
            }
        }
        out
    };
    for bulk in ["target", ".git"] {
        assert!(
            excluded(bulk),
            ".dockerignore: {bulk}/ is sent to the builder"
        );
    }
    // The workspace, the lockfile, the plans, and the reference plan the harness embeds
    // (include_str! of docs/plan-reference.yaml).
    for needed in [
        "Cargo.toml",
        "Cargo.lock",
        "policy",
        "fault-server",
        "harness",
        "plans",
        "docs/plan-reference.yaml",
    ] {
        assert!(
            repo().join(needed).exists(),
            "{needed} is gone: update this test and the Dockerfile"
        );
        assert!(
            !excluded(needed),
            ".dockerignore leaves out {needed}, which the image build needs"
        );
    }
}

#[test]
fn the_justfile_brings_the_stack_up_and_down() {
    let text = read("justfile");
    let recipe = |name: &str| -> String {
        let header = format!("{name}:");
        let mut lines = text.lines().skip_while(|l| l.trim_end() != header);
        assert!(lines.next().is_some(), "justfile: no `{name}:` recipe");
        lines
            .take_while(|l| l.starts_with(' ') || l.starts_with('\t'))
            .collect::<Vec<_>>()
            .join("\n")
    };
    let up = recipe("up");
    assert!(
        up.contains("docker compose up --build"),
        "justfile: `up` does not run `docker compose up --build`: {up}"
    );
    assert!(
        up.contains("CHAOS_UID") && up.contains("CHAOS_GID"),
        "justfile: `up` does not pass your uid and gid, so the reports are not yours: {up}"
    );
    let down = recipe("down");
    assert!(
        down.contains("docker compose down"),
        "justfile: `down` does not run `docker compose down`: {down}"
    );
    // The compose file reads what `up` passes.
    let user = service(&compose(), "harness")["user"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        user.contains("${CHAOS_UID") && user.contains("${CHAOS_GID"),
        "{COMPOSE}: the harness's user `{user}` ignores CHAOS_UID and CHAOS_GID"
    );
}

/// `BINARY [SUBCOMMAND] --help`.
fn help(binary: &Path, subcommand: Option<&str>) -> String {
    let out = Command::new(binary)
        .args(subcommand)
        .arg("--help")
        .output()
        .unwrap_or_else(|e| panic!("run {}: {e}", binary.display()));
    assert!(
        out.status.success(),
        "{} --help: {}",
        binary.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The flags of `words` that `help` does not list, a flag counting only as a whole word.
fn missing(words: &[String], help: &str) -> Vec<String> {
    flags(words)
        .into_iter()
        .filter(|f| {
            !help.match_indices(f.as_str()).any(|(at, _)| {
                let before = help[..at].chars().next_back();
                let after = help[at + f.len()..].chars().next();
                before.is_none_or(|c| c.is_whitespace() || c == ',')
                    && after.is_none_or(|c| !(c.is_alphanumeric() || c == '-' || c == '_'))
            })
        })
        .collect()
}

#[test]
fn every_flag_the_stack_passes_the_harness_is_in_its_help() {
    let words = command(&compose(), "harness");
    let subcommand = words.get(1).map(String::as_str);
    let help = help(Path::new(env!("CARGO_BIN_EXE_harness")), subcommand);
    let missing = missing(&words, &help);
    assert!(
        missing.is_empty(),
        "{COMPOSE}: the harness command passes {missing:?}, which `harness {} --help` does not list",
        subcommand.unwrap_or_default()
    );
}

#[test]
fn every_flag_the_stack_passes_the_fault_server_is_in_its_help() {
    // Another crate's binary: cargo builds it for this test only when the workspace is
    // built (`cargo test --workspace`), next to the harness's.
    let binary = Path::new(env!("CARGO_BIN_EXE_harness"))
        .with_file_name(format!("fault-server{}", std::env::consts::EXE_SUFFIX));
    if !binary.is_file() {
        eprintln!(
            "skipped: {} is not built; `cargo build -p fault-server` (or `cargo test --workspace`) first to check the fault-server's flags",
            binary.display()
        );
        return;
    }
    let words = command(&compose(), "fault-server");
    let missing = missing(&words, &help(&binary, None));
    assert!(
        missing.is_empty(),
        "{COMPOSE}: the fault-server command passes {missing:?}, which `fault-server --help` does not list"
    );
}
