//! The wire contract has one home: no other crate's source writes one of its header names
//! as a literal (an `x-chaos-` name, or any name this crate declares), so a name cannot
//! drift between the hop that writes it and the hop that reads it.
//!
//! Test code may spell the names out (a test of what a client sends should read as the
//! client's bytes): what follows a file's first `#[cfg(test)]`, `tests.rs` files and
//! `tests/` directories are not read.

use std::fs;
use std::path::{Path, PathBuf};

/// The workspace's crates other than this one.
const OTHERS: [&str; 3] = ["policy", "fault-server", "harness"];

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the wire crate sits in the workspace")
        .to_path_buf()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).expect("a readable source directory") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            if path.file_name().is_some_and(|n| n != "tests") {
                rust_files(&path, out);
            }
        } else if path.extension().is_some_and(|e| e == "rs")
            && path.file_name().is_some_and(|n| n != "tests.rs")
        {
            out.push(path);
        }
    }
}

/// The non-test lines of a source file: those before its first `#[cfg(test)]`, without
/// comments.
fn code_lines(path: &Path) -> Vec<(usize, String)> {
    let text = fs::read_to_string(path).expect("a readable source file");
    text.lines()
        .enumerate()
        .take_while(|(_, line)| line.trim() != "#[cfg(test)]")
        .filter(|(_, line)| !line.trim_start().starts_with("//"))
        .map(|(i, line)| (i + 1, line.to_owned()))
        .collect()
}

/// The header names this crate declares: every `pub const NAME: &str = "a-b"` of its
/// sources whose value has a `-`, as header names do.
fn declared_names() -> Vec<String> {
    let mut files = Vec::new();
    rust_files(&workspace().join("wire/src"), &mut files);
    let mut names = Vec::new();
    for file in files {
        for (_, line) in code_lines(&file) {
            let Some(rest) = line.trim().strip_prefix("pub const ") else {
                continue;
            };
            let Some((_, value)) = rest.split_once(": &str = \"") else {
                continue;
            };
            let value = value.trim_end_matches("\";");
            if value.contains('-') {
                names.push(value.to_owned());
            }
        }
    }
    names
}

/// Where a source outside this crate writes a contract name as a literal.
fn literals_elsewhere(names: &[String]) -> Vec<String> {
    let mut found = Vec::new();
    for krate in OTHERS {
        let mut files = Vec::new();
        rust_files(&workspace().join(krate).join("src"), &mut files);
        for file in files {
            for (n, line) in code_lines(&file) {
                let contract = line.contains("\"x-chaos-")
                    || names
                        .iter()
                        .any(|name| line.contains(&format!("\"{name}\"")));
                if contract {
                    found.push(format!("{}:{n}: {}", file.display(), line.trim()));
                }
            }
        }
    }
    found
}

#[test]
fn the_contract_is_declared_here_and_named_elsewhere_only_by_its_constants() {
    let names = declared_names();
    for expected in [
        "x-request-id",
        "x-chaos-attempt",
        "grpc-status",
        "amz-sdk-request",
    ] {
        assert!(
            names.iter().any(|n| n == expected),
            "the scan of wire/src should find `{expected}` among {names:?}"
        );
    }
    let found = literals_elsewhere(&names);
    assert!(
        found.is_empty(),
        "contract header names written as literals outside the wire crate (use the \
         chaos_wire constant instead):\n{}",
        found.join("\n")
    );
}

/// The scan finds a literal where one is: a file written for the purpose.
#[test]
fn the_scan_finds_a_literal_where_one_is() {
    let dir = std::env::temp_dir().join(format!("one-home-{}", std::process::id()));
    fs::create_dir_all(&dir).expect("a temporary directory");
    let file = dir.join("planted.rs");
    fs::write(
        &file,
        "// \"x-chaos-attempt\" in a comment is fine\nconst A: &str = \"x-chaos-attempt\";\n#[cfg(test)]\nconst B: &str = \"x-request-id\";\n",
    )
    .expect("a planted file");
    let lines = code_lines(&file);
    let hits: Vec<_> = lines
        .iter()
        .filter(|(_, l)| l.contains("\"x-chaos-") || l.contains("\"x-request-id\""))
        .map(|(n, _)| *n)
        .collect();
    fs::remove_dir_all(&dir).ok();
    assert_eq!(hits, [2], "only the non-test, non-comment line");
}
