//! A cheap look at YAML input before it is parsed, so a huge file or nesting nobody
//! writes by hand cannot make the parser spend seconds of CPU (its cost grows with the
//! square of the depth) or the reader gigabytes.
//!
//! The scan is linear and conservative: it counts flow nesting (`[`, `{`) outside quoted
//! scalars and comments, and on each line the block nesting its indentation and leading
//! `- ` / `? ` markers imply. A document deeper than the limit is refused; every real plan
//! and script is far below it.

/// Reads a file of at most `max` bytes; `None` when it is larger. A regular file larger
/// than `max` is refused by its size, unread, and one within it read into a buffer of its
/// size: a buffer grown by doubling held up to twice the file (a 62 MB baseline took
/// 128 MiB before it was parsed). Anything else is read to one byte past the limit
/// rather than trusted for a size (a FIFO or a device has none), so a huge input costs no
/// more than the limit.
pub fn read_bounded(path: &std::path::Path, max: u64) -> std::io::Result<Option<Vec<u8>>> {
    use std::io::Read;
    let file = std::fs::File::open(path)?;
    let meta = file.metadata()?;
    let mut bytes = Vec::new();
    if meta.is_file() {
        if meta.len() > max {
            return Ok(None);
        }
        // A file that grows while read still stops one byte past the limit, below.
        bytes.reserve_exact(usize::try_from(meta.len()).unwrap_or(0).saturating_add(1));
    }
    file.take(max.saturating_add(1)).read_to_end(&mut bytes)?;
    Ok((bytes.len() as u64 <= max).then_some(bytes))
}

/// The deepest nesting accepted: plans and scripts use about six levels.
pub const MAX_DEPTH: usize = 64;

/// Where the text first nests deeper than allowed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}, column {column}: nested {depth} levels deep (at most {max} are accepted)")]
pub struct TooDeep {
    pub line: usize,
    pub column: usize,
    pub depth: usize,
    pub max: usize,
}

/// Checks that `text` nests at most `max` levels.
pub fn check_depth(text: &str, max: usize) -> Result<(), TooDeep> {
    let mut flow = 0usize;
    let mut quote: Option<char> = None;
    for (index, line) in text.lines().enumerate() {
        let too_deep = |depth: usize, column: usize| TooDeep {
            line: index + 1,
            column,
            depth,
            max,
        };
        if quote.is_none() && flow == 0 {
            // Block nesting: two columns of indentation, or one `- `/`? ` marker, a level.
            let indent = line.len() - line.trim_start_matches(' ').len();
            let mut rest = &line[indent..];
            let mut markers = 0;
            while let Some(r) = rest.strip_prefix("- ").or_else(|| rest.strip_prefix("? ")) {
                markers += 1;
                rest = r.trim_start_matches(' ');
            }
            let depth = indent / 2 + markers;
            if depth > max {
                return Err(too_deep(depth, indent + 1));
            }
        }
        let mut previous = ' ';
        let mut escaped = false;
        for (column, c) in line.chars().enumerate() {
            match quote {
                // Inside double quotes a backslash escapes the next character; inside
                // single quotes `''` closes and reopens, which comes to the same.
                Some('"') if escaped => escaped = false,
                Some('"') if c == '\\' => escaped = true,
                Some(q) if c == q => quote = None,
                Some(_) => {}
                None => match c {
                    '#' if previous == ' ' || column == 0 => break,
                    '\'' | '"' => quote = Some(c),
                    '[' | '{' => {
                        flow += 1;
                        if flow > max {
                            return Err(too_deep(flow, column + 1));
                        }
                    }
                    ']' | '}' => flow = flow.saturating_sub(1),
                    _ => {}
                },
            }
            previous = c;
        }
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // Tests: a panic is the failure report.
mod tests {
    use super::{MAX_DEPTH, check_depth};

    #[test]
    fn real_documents_pass_and_deep_ones_are_located() {
        let ok = [
            "faults: [ { until: 10s, respond: { status: 503 } } ]",
            "a:\n  b:\n    - c: 1\n    - d: [1, 2, {e: f}]\n",
            "s: '[[[[ not nesting'\nt: \"{{{{ nor this \\\" [[[\"\n# [[[[[ nor a comment\n",
        ];
        for text in ok {
            assert_eq!(check_depth(text, 8), Ok(()), "{text}");
        }
        let flow = format!("x: {}{}", "[".repeat(10), "]".repeat(10));
        let e = check_depth(&flow, 8).unwrap_err();
        assert_eq!((e.line, e.column, e.depth), (1, 12, 9));
        let block = (0..12)
            .map(|i| format!("{}k{i}:", "  ".repeat(i)))
            .collect::<Vec<_>>()
            .join("\n");
        let e = check_depth(&block, 8).unwrap_err();
        assert_eq!((e.line, e.depth), (10, 9));
        let dashes = format!("{}x", "- ".repeat(20));
        assert_eq!(check_depth(&dashes, 8).unwrap_err().depth, 20);
        assert!(check_depth(&"[".repeat(100_000), MAX_DEPTH).is_err());
    }
}
