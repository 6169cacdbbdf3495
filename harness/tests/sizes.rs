//! Issue 46: no function over 100 lines outside a data table, and no file over 650 lines
//! before its tests, in any crate of the workspace. A long function is several steps under
//! one name; split along the steps, each a helper that says what it is. A long file is
//! several concepts under one name; split it into modules named after them.
//!
//! The sizes are read from each crate's `src/`, test code left out: a file's non-test part
//! is everything before its first line that is exactly `#[cfg(test)]`, and files named
//! `tests.rs` and directories named `tests` are not read. A function is an `fn` item with a
//! body, from the line of its `fn` to the line of its closing brace; its braces are matched
//! on the code alone (comments and the contents of string and character literals blanked).

use std::fmt;
use std::path::{Path, PathBuf};

mod source;

use source::{code_only, is_ident};

/// The most lines a function may take, from its `fn` to its closing brace.
const MAX_FN_LINES: usize = 100;

/// The most lines a file may have before its tests.
const MAX_FILE_LINES: usize = 650;

/// The source directories read, relative to the workspace root: every crate's.
const SOURCES: [&str; 4] = ["wire/src", "policy/src", "fault-server/src", "harness/src"];

/// A function, or a file's length, the limits do not hold to, with the reason.
#[derive(Debug)]
struct Exempt {
    /// Relative to the workspace root.
    file: &'static str,
    /// The function, or `None` for the file's length.
    function: Option<&'static str>,
    why: &'static str,
}

/// Functions that are data tables: a row per entry, read down, not steps to follow. Split,
/// a table is only harder to read.
const DATA_TABLES: &[Exempt] = &[Exempt {
    file: "policy/src/preset.rs",
    function: Some("config"),
    why: "a table of real systems' defaults, each number commented with its source",
}];

#[test]
fn no_function_or_file_is_over_its_limit() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = Vec::new();
    for dir in SOURCES {
        sources(&root.join(dir), &mut files);
    }
    let mut offences = Vec::new();
    let mut functions = 0;
    for path in &files {
        let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
        let rel = path
            .strip_prefix(&root)
            .expect("under the root")
            .to_string_lossy()
            .replace('\\', "/");
        let scan = scan(&rel, &text);
        functions += scan.functions;
        offences.extend(scan.offences);
    }
    // A scanner that saw nothing would pass: it must see what is surely there.
    assert!(
        files.len() > 100 && functions > 1000,
        "the scanner saw {} files and {functions} functions",
        files.len()
    );
    assert!(
        offences
            .iter()
            .any(|o| o.file == "policy/src/preset.rs" && o.function.as_deref() == Some("config")),
        "the scanner misses policy/src/preset.rs's `config`, a table of over {MAX_FN_LINES} lines"
    );

    let exempt = |e: &Exempt, o: &Offence| e.file == o.file && e.function == o.function.as_deref();
    let known = |o: &Offence| DATA_TABLES.iter().any(|e| exempt(e, o));
    let over: Vec<String> = offences
        .iter()
        .filter(|o| !known(o))
        .map(Offence::to_string)
        .collect();
    assert!(
        over.is_empty(),
        "over the limits of issue 46 (split a long function along its steps, a long file into \
         modules named after its concepts):\n{}",
        over.join("\n")
    );
    let stale: Vec<String> = DATA_TABLES
        .iter()
        .filter(|e| !offences.iter().any(|o| exempt(e, o)))
        .map(|e| format!("{} {:?}: {}", e.file, e.function, e.why))
        .collect();
    assert!(
        stale.is_empty(),
        "exempt but within the limits (or gone); remove from the list:\n{}",
        stale.join("\n")
    );
}

/// Every `.rs` file under `dir`, but for `tests.rs` files and `tests` directories.
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{dir:?}: {e}"));
    let mut paths: Vec<PathBuf> = entries
        .map(|e| e.expect("a directory entry").path())
        .collect();
    paths.sort();
    for path in paths {
        let name = path.file_name().expect("an entry has a name");
        if path.is_dir() {
            if name != "tests" {
                sources(&path, out);
            }
        } else if path.extension().is_some_and(|e| e == "rs") && name != "tests.rs" {
            out.push(path);
        }
    }
}

/// A function or a file over its limit.
#[derive(Debug, PartialEq, Eq)]
struct Offence {
    file: String,
    /// Where the function starts, or the file's first line past the limit.
    line: usize,
    /// The function, or `None` for the file's length.
    function: Option<String>,
    lines: usize,
}

impl fmt::Display for Offence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Offence {
            file, line, lines, ..
        } = self;
        match &self.function {
            Some(name) => write!(
                f,
                "{file}:{line}: fn {name} is {lines} lines, over {MAX_FN_LINES}"
            ),
            None => write!(
                f,
                "{file}:{line}: {lines} lines before its tests, over {MAX_FILE_LINES}"
            ),
        }
    }
}

/// What one file holds: how many functions, and which offend.
struct Scan {
    functions: usize,
    offences: Vec<Offence>,
}

/// The file `file` (its name, for the offences), of text `text`.
fn scan(file: &str, text: &str) -> Scan {
    let part = non_test_part(text);
    let mut offences = Vec::new();
    let file_lines = part.lines().count();
    if file_lines > MAX_FILE_LINES {
        offences.push(Offence {
            file: file.to_owned(),
            line: MAX_FILE_LINES + 1,
            function: None,
            lines: file_lines,
        });
    }
    let functions = functions(&code_only(part))
        .unwrap_or_else(|line| panic!("{file}:{line}: the scanner cannot match this brace"));
    for f in &functions {
        if f.lines > MAX_FN_LINES {
            offences.push(Offence {
                file: file.to_owned(),
                line: f.line,
                function: Some(f.name.clone()),
                lines: f.lines,
            });
        }
    }
    Scan {
        functions: functions.len(),
        offences,
    }
}

/// Everything before the first line that is exactly `#[cfg(test)]`.
fn non_test_part(text: &str) -> &str {
    let mut at = 0;
    for line in text.split_inclusive('\n') {
        if line.trim_end_matches(['\n', '\r']) == "#[cfg(test)]" {
            return &text[..at];
        }
        at += line.len();
    }
    text
}

/// A function with a body.
#[derive(Debug, PartialEq, Eq)]
struct Function {
    name: String,
    /// The line of its `fn`, 1-based.
    line: usize,
    /// From its `fn` to its closing brace.
    lines: usize,
}

/// Every function with a body in `code` (comments and literals already blanked), nested
/// ones too, in the order they start; or the line of a brace that has no match.
fn functions(code: &str) -> Result<Vec<Function>, usize> {
    let b = code.as_bytes();
    let line_of = |at: usize| 1 + b[..at].iter().filter(|&&c| c == b'\n').count();
    let mut found = Vec::new();
    let mut from = 0;
    while let Some(n) = code[from..].find("fn") {
        let at = from + n;
        from = at + 2;
        // The keyword, not part of a name, and followed by a name (`fn(u8)` is a type).
        if (at > 0 && is_ident(b[at - 1])) || b.get(at + 2).is_some_and(|&c| is_ident(c)) {
            continue;
        }
        let mut i = at + 2;
        while i < b.len() && b[i].is_ascii_whitespace() {
            i += 1;
        }
        if b[i..].starts_with(b"r#") {
            i += 2;
        }
        let name_start = i;
        while i < b.len() && is_ident(b[i]) {
            i += 1;
        }
        if i == name_start {
            continue;
        }
        let name = code[name_start..i].to_owned();
        // The body opens at the first `{` outside the signature's brackets; a `;` first
        // means there is none (a trait's or an extern block's declaration).
        let mut depth = 0usize;
        let open = loop {
            match b.get(i) {
                None => break None,
                Some(b'(' | b'[') => depth += 1,
                Some(b')' | b']') => depth = depth.saturating_sub(1),
                Some(b';') if depth == 0 => break None,
                Some(b'{') if depth == 0 => break Some(i),
                _ => {}
            }
            i += 1;
        };
        let Some(open) = open else { continue };
        let close = matching_brace(b, open).ok_or_else(|| line_of(open))?;
        let line = line_of(at);
        found.push(Function {
            name,
            line,
            lines: line_of(close) - line + 1,
        });
    }
    Ok(found)
}

/// The brace that closes the one at `open`.
fn matching_brace(b: &[u8], open: usize) -> Option<usize> {
    let mut depth = 0usize;
    for (i, &c) in b.iter().enumerate().skip(open) {
        match c {
            b'{' => depth += 1,
            b'}' => {
                depth -= 1;
                if depth == 0 {
                    return Some(i);
                }
            }
            _ => {}
        }
    }
    None
}

/// The scanner itself, on text made to trip it.
mod scanner {
    use super::{
        Function, MAX_FILE_LINES, MAX_FN_LINES, code_only, functions, non_test_part, scan,
    };

    /// Each function's name and length.
    fn lengths(text: &str) -> Vec<(String, usize)> {
        functions(&code_only(text))
            .expect("braces match")
            .into_iter()
            .map(|Function { name, lines, .. }| (name, lines))
            .collect()
    }

    /// A function of `lines` lines, from `fn` to `}`.
    fn function_of(name: &str, lines: usize) -> String {
        let mut text = format!("pub fn {name}() {{\n");
        for i in 0..lines - 2 {
            text.push_str(&format!("    let _x{i} = {i};\n"));
        }
        text.push_str("}\n");
        text
    }

    fn pair(name: &str, lines: usize) -> (String, usize) {
        (name.to_owned(), lines)
    }

    #[test]
    fn measures_from_fn_to_its_closing_brace() {
        let text = "fn one() {}\n\nimpl X {\n    pub(crate) async fn three(&self) -> u8 {\n        1\n    }\n}\n";
        assert_eq!(lengths(text), [pair("one", 1), pair("three", 3)]);
        let text = "fn sig(\n    a: u8,\n) -> u8\nwhere\n    u8: Copy,\n{\n    a\n}\n";
        assert_eq!(lengths(text), [pair("sig", 8)]);
    }

    #[test]
    fn ignores_braces_in_comments_strings_and_characters() {
        let text = r####"
fn f() {
    // } a brace in a line comment
    /* } /* nested } */ } */
    let s = "}\"}";
    let r = r#"}"}"#;
    let rr = r##"} "# }"##;
    let bytes = (b"}", br#"}"#, c"}", b'}', b'\'');
    let c = ('}', '\'', '\\', '\u{7d}', '∞', '"');
}
fn g() {}
"####;
        assert_eq!(lengths(text), [pair("f", 9), pair("g", 1)]);
    }

    #[test]
    fn reads_lifetimes_and_labels_as_code() {
        let text = "
fn f<'a, 'b: 'a>(x: &'a str, y: &'static str) -> &'a str {
    'outer: loop {
        break 'outer;
    }
    let c = 'c';
    x
}
fn g() {}
";
        assert_eq!(lengths(text), [pair("f", 7), pair("g", 1)]);
    }

    #[test]
    fn counts_nested_functions_and_skips_bodiless_ones() {
        let text = "
trait T {
    fn declared(&self) -> [u8; 4];
    fn provided(&self) {
        fn inner() {
            let p: fn(u8) -> u8 = |x| x;
        }
    }
}
fn r#type() {}
macro_rules! m { ($n:ident) => { fn $n() {} }; }
";
        assert_eq!(
            lengths(text),
            [pair("provided", 5), pair("inner", 3), pair("type", 1)]
        );
    }

    #[test]
    fn names_a_brace_without_a_match() {
        assert_eq!(functions(&code_only("\nfn f() {\n    {\n}\n")), Err(2));
    }

    #[test]
    fn leaves_tests_out() {
        let text = "fn a() {}\n    #[cfg(test)]\nfn b() {}\n#[cfg(test)]\nmod tests {}\n";
        assert_eq!(
            non_test_part(text),
            "fn a() {}\n    #[cfg(test)]\nfn b() {}\n"
        );
        assert_eq!(non_test_part("fn a() {}\n"), "fn a() {}\n");
    }

    #[test]
    fn fails_a_function_made_too_long() {
        let at_limit = function_of("fits", MAX_FN_LINES);
        assert_eq!(lengths(&at_limit), [pair("fits", MAX_FN_LINES)]);
        assert_eq!(scan("a.rs", &at_limit).offences, []);

        let text = format!("use x;\n{}", function_of("long", MAX_FN_LINES + 1));
        let offences: Vec<String> = scan("a.rs", &text)
            .offences
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(offences, ["a.rs:2: fn long is 101 lines, over 100"]);

        // Only before the tests.
        let text = format!("#[cfg(test)]\n{}", function_of("long", MAX_FN_LINES + 1));
        assert_eq!(scan("a.rs", &text).offences, []);
    }

    #[test]
    fn fails_a_file_too_long_before_its_tests() {
        let fits = "\n".repeat(MAX_FILE_LINES);
        assert_eq!(scan("a.rs", &fits).offences, []);
        let text = format!("{fits}#[cfg(test)]\n{fits}");
        assert_eq!(scan("a.rs", &text).offences, []);
        let text = format!("{fits}\n");
        let offences: Vec<String> = scan("a.rs", &text)
            .offences
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(offences, ["a.rs:651: 651 lines before its tests, over 650"]);
    }
}
