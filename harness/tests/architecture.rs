//! The harness's module graph, read from its source: its top-level modules
//! (`harness/src/<module>`) import one another without a cycle, and the simulator
//! (`simulate/`, all of it) reaches none of the live side, not even through another module.
//!
//! An edge is a `use crate::module...` or a `crate::module::` path anywhere in a module's
//! files. Comments and string literals are not code, and test code is left out: an item
//! under `#[cfg(test)]` (a `mod tests { .. }`, or a `mod tests;` with its file), as
//! tests may reach across layers the code itself may not. `super::` paths are not
//! followed (none leaves its top-level module today).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::{Path, PathBuf};

mod source;

use source::{code_only, is_ident};

/// The modules that do IO (sockets, the real clock, the OS) or drive those that do: the
/// simulator is pure and reaches none of them.
const LIVE: [&str; 9] = [
    "engine",
    "run",
    "attempt",
    "relay",
    "pool",
    "control",
    "client",
    "telemetry",
    "cli",
];

/// From a module, to a module, by the files (relative to `src/`) that make the edge.
type Graph = BTreeMap<String, BTreeMap<String, BTreeSet<String>>>;

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

#[test]
fn the_modules_import_one_another_without_a_cycle() {
    let graph = graph_of(&src());
    // A scanner that saw nothing would pass: it must see edges that are surely there.
    for (from, to) in [("engine", "schedule"), ("simulate", "plan"), ("cli", "run")] {
        assert!(
            graph.get(from).is_some_and(|t| t.contains_key(to)),
            "the scanner misses {from} -> {to}: {graph:#?}"
        );
    }
    let cycles = cycles(&graph);
    assert!(
        cycles.is_empty(),
        "the harness's modules import one another in a cycle; move the type that ties them to the lower module:\n{}",
        cycles.join("\n")
    );
}

#[test]
fn the_simulator_reaches_no_live_module() {
    let graph = graph_of(&src());
    let reached = paths_from(&graph, "simulate");
    assert!(
        reached.contains_key("plan"),
        "the scanner misses simulate -> plan"
    );
    let live: Vec<_> = LIVE
        .iter()
        .filter_map(|m| reached.get(*m))
        .cloned()
        .collect();
    assert!(
        live.is_empty(),
        "the simulator reaches the live side; move what it needs to a pure module both call:\n{}",
        live.join("\n")
    );
}

/// The graph of the top-level modules under `src`, test code left out.
fn graph_of(src: &Path) -> Graph {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let modules: BTreeSet<String> = files
        .iter()
        .map(|f| top_level(src, f))
        .filter(|m| m != "lib" && m != "main")
        .collect();
    let mut code = BTreeMap::new();
    let mut test_only = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{file:?}: {e}"));
        let (kept, test_mods) = without_tests(&code_only(&text));
        for name in test_mods {
            test_only.push(child_dir(file).join(name));
        }
        code.insert(file.clone(), kept);
    }
    let mut graph = Graph::new();
    for (file, code) in &code {
        let top = top_level(src, file);
        let is_test = test_only
            .iter()
            .any(|t| file == &t.with_extension("rs") || file.starts_with(t));
        if is_test || !modules.contains(&top) {
            continue;
        }
        let rel = file
            .strip_prefix(src)
            .expect("under src")
            .display()
            .to_string();
        for to in references(code) {
            if to != top && modules.contains(&to) {
                graph
                    .entry(top.clone())
                    .or_default()
                    .entry(to)
                    .or_default()
                    .insert(rel.clone());
            }
        }
    }
    graph
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{dir:?}: {e}"));
    for entry in entries {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// `engine` for `src/engine.rs` and `src/engine/request.rs`.
fn top_level(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).expect("under src");
    let first = rel.components().next().expect("a file");
    let first = first.as_os_str().to_string_lossy();
    first.strip_suffix(".rs").unwrap_or(&first).to_owned()
}

/// Where the files of a module's `mod child;` declarations live.
fn child_dir(file: &Path) -> PathBuf {
    let dir = file.parent().expect("a file has a directory");
    match file.file_stem().and_then(|s| s.to_str()) {
        Some("mod" | "lib" | "main") | None => dir.to_owned(),
        Some(stem) => dir.join(stem),
    }
}

/// The code with every `#[cfg(test)]` item blanked, and the names of the `mod name;`
/// items among them (their files are test code too).
fn without_tests(code: &str) -> (String, Vec<String>) {
    const MARK: &str = "#[cfg(test)]";
    let b = code.as_bytes();
    let mut out = b.to_vec();
    let mut test_mods = Vec::new();
    let mut from = 0;
    while let Some(n) = code[from..].find(MARK) {
        let start = from + n;
        let mut i = start + MARK.len();
        // The item: up to its `;`, or to the brace that closes its first `{`.
        let mut depth = 0usize;
        let mut end = b.len();
        while i < b.len() {
            match b[i] {
                b'[' | b'(' => depth += 1,
                b']' | b')' => depth = depth.saturating_sub(1),
                b';' if depth == 0 => {
                    end = i + 1;
                    break;
                }
                b'{' if depth == 0 => {
                    let mut braces = 0usize;
                    while i < b.len() {
                        match b[i] {
                            b'{' => braces += 1,
                            b'}' => {
                                braces -= 1;
                                if braces == 0 {
                                    break;
                                }
                            }
                            _ => {}
                        }
                        i += 1;
                    }
                    end = (i + 1).min(b.len());
                    break;
                }
                _ => {}
            }
            i += 1;
        }
        let item = &code[start + MARK.len()..end];
        if item.ends_with(';') {
            let words: Vec<_> = item.trim_end_matches(';').split_whitespace().collect();
            if let [.., "mod", name] = words.as_slice() {
                test_mods.push((*name).to_owned());
            }
        }
        for c in &mut out[start..end] {
            if *c != b'\n' {
                *c = b' ';
            }
        }
        from = end;
    }
    let kept = String::from_utf8(out).expect("only ASCII bytes were written");
    (kept, test_mods)
}

/// The first segment of every `crate::` path: `a` of `crate::a::b`, `a` and `c` of
/// `use crate::{a::b, c}`.
fn references(code: &str) -> BTreeSet<String> {
    let b = code.as_bytes();
    let ident_at = |mut i: usize| {
        while i < b.len() && b[i].is_ascii_whitespace() {
            i += 1;
        }
        let start = i;
        while i < b.len() && is_ident(b[i]) {
            i += 1;
        }
        (code[start..i].to_owned(), i)
    };
    let mut found = BTreeSet::new();
    let mut from = 0;
    while let Some(n) = code[from..].find("crate::") {
        let at = from + n;
        from = at + "crate::".len();
        if at > 0 && is_ident(b[at - 1]) {
            continue;
        }
        let (name, next) = ident_at(from);
        if !name.is_empty() {
            found.insert(name);
            continue;
        }
        if b.get(next) != Some(&b'{') {
            continue;
        }
        // A group: the first name of each entry at its top level.
        let (mut depth, mut i, mut entry_start) = (0usize, next, true);
        while i < b.len() {
            match b[i] {
                b'{' => {
                    depth += 1;
                    entry_start = depth == 1;
                }
                b'}' => {
                    depth -= 1;
                    if depth == 0 {
                        break;
                    }
                }
                b',' if depth == 1 => entry_start = true,
                c if entry_start && is_ident(c) => {
                    let (name, end) = ident_at(i);
                    found.insert(name);
                    entry_start = false;
                    i = end;
                    continue;
                }
                _ => {}
            }
            i += 1;
        }
    }
    found
}

/// Each cycle, one per strongly connected component of more than one module, as
/// `a -> b (files) -> ... -> a`.
fn cycles(graph: &Graph) -> Vec<String> {
    let mut seen = BTreeSet::new();
    let mut found = Vec::new();
    for start in graph.keys() {
        if seen.contains(start) {
            continue;
        }
        // The shortest way from `start` back to itself, if there is one.
        let Some(cycle) = paths_from(graph, start).remove(start) else {
            continue;
        };
        // The rest of its component is named by this one cycle.
        for module in graph.keys() {
            if reaches(graph, start, module) && reaches(graph, module, start) {
                seen.insert(module.clone());
            }
        }
        found.push(cycle);
    }
    found
}

fn reaches(graph: &Graph, from: &str, to: &str) -> bool {
    paths_from(graph, from).contains_key(to)
}

/// Every module reachable from `from` in one step or more, with the shortest path to it,
/// each edge followed by the files that make it.
fn paths_from(graph: &Graph, from: &str) -> BTreeMap<String, String> {
    let mut paths: BTreeMap<String, String> = BTreeMap::new();
    let mut queue = VecDeque::from([(from.to_owned(), from.to_owned())]);
    while let Some((at, path)) = queue.pop_front() {
        for (next, files) in graph.get(&at).into_iter().flatten() {
            if paths.contains_key(next) {
                continue;
            }
            let files: Vec<_> = files.iter().map(String::as_str).collect();
            let path = format!("{path} -> {next} ({})", files.join(", "));
            paths.insert(next.clone(), path.clone());
            queue.push_back((next.clone(), path));
        }
    }
    paths
}

/// The scanner itself, on text made to trip it.
mod scanner {
    use super::{Graph, code_only, cycles, references, without_tests};

    fn refs(text: &str) -> Vec<String> {
        let (code, _) = without_tests(&code_only(text));
        references(&code).into_iter().collect()
    }

    #[test]
    fn reads_paths_and_groups() {
        assert_eq!(
            refs("use crate::plan::Plan;\nlet x = crate::stats::quantile_ms(h, 0.5);"),
            ["plan", "stats"]
        );
        assert_eq!(
            refs("use crate::{\n    hop::{self, Tier},\n    report::{Report},\n    stats,\n};"),
            ["hop", "report", "stats"]
        );
        assert_eq!(refs("use my_crate::engine; $crate::hop::x"), ["hop"]);
    }

    #[test]
    fn ignores_comments_strings_and_characters() {
        let text = r##"
            // crate::engine in a line comment
            /// [`x`]: crate::engine::x
            /* crate::run /* nested */ crate::run */
            let s = "crate::relay \" crate::pool";
            let r = r#"crate::control "quoted" "#;
            let c = '"'; let q = '\''; let l: &'static str = "";
            let t = crate::plan::X;
        "##;
        assert_eq!(refs(text), ["plan"]);
    }

    #[test]
    fn leaves_test_items_out() {
        let text = "
            use crate::plan::Plan;
            #[cfg(test)]
            use crate::engine::PolicyRun;
            #[cfg(test)]
            #[allow(dead_code)]
            mod tests {
                use crate::run::select;
                fn f() { if true { crate::relay::x(); } }
            }
            fn g() { crate::stats::x(); }
        ";
        assert_eq!(refs(text), ["plan", "stats"]);
        let (_, mods) =
            without_tests("#[cfg(test)]\nmod tests;\n#[cfg(test)]\npub(crate) mod proptests;");
        assert_eq!(mods, ["tests", "proptests"]);
    }

    #[test]
    fn names_each_cycle_with_its_files() {
        let mut graph = Graph::new();
        let mut edge = |from: &str, to: &str, file: &str| {
            graph
                .entry(from.to_owned())
                .or_default()
                .entry(to.to_owned())
                .or_default()
                .insert(file.to_owned());
        };
        edge("a", "b", "a.rs");
        edge("b", "c", "b/x.rs");
        edge("c", "a", "c.rs");
        edge("c", "d", "c.rs");
        edge("d", "e", "d.rs");
        edge("e", "d", "e.rs");
        assert_eq!(
            cycles(&graph),
            [
                "a -> b (a.rs) -> c (b/x.rs) -> a (c.rs)",
                "d -> e (d.rs) -> d (e.rs)"
            ]
        );
        graph.get_mut("c").expect("c").remove("a");
        graph.get_mut("e").expect("e").remove("d");
        assert_eq!(cycles(&graph), Vec::<String>::new());
    }
}
