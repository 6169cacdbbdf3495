//! Finds where a part of a plan is written, for errors found after parsing.
//!
//! serde_yaml gives line and column for what it rejects itself; a check that relates
//! several parts of a plan (a gate naming a policy that does not exist) runs later, on
//! values without positions. This scanner follows a path of keys and list indices through
//! the text (block style, and flow maps on one line) to the line the user must edit. It
//! is a best effort: where it loses the way it returns the deepest part it found.

/// One step of a path into the plan.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Seg {
    Key(&'static str),
    /// A key the plan itself names (a tier).
    Name(String),
    Index(usize),
}

impl Seg {
    fn key(&self) -> &str {
        match self {
            Seg::Key(key) => key,
            Seg::Name(key) => key,
            Seg::Index(_) => "",
        }
    }
}

/// The 1-based line and column of `path` in `text`, or of its longest prefix found.
pub(crate) fn locate(text: &str, path: &[Seg]) -> Option<(usize, usize)> {
    let lines: Vec<&str> = text.lines().collect();
    // The region still to search: lines [from, to), and the indentation its keys sit at
    // or beyond.
    let (mut from, mut to, mut min_indent) = (0usize, lines.len(), 0usize);
    let mut found: Option<(usize, usize)> = None;
    for (depth, seg) in path.iter().enumerate() {
        match seg {
            Seg::Key(_) | Seg::Name(_) => {
                let key = seg.key();
                let mut hit = None;
                for (i, line) in lines.iter().enumerate().take(to).skip(from) {
                    if line.trim_start().starts_with('#') {
                        continue;
                    }
                    // A top-level key sits at the start of its line.
                    let fits = |c: &usize| {
                        if depth == 0 {
                            *c == 0
                        } else {
                            *c >= min_indent || i == from
                        }
                    };
                    if let Some(col) = key_column(line, key).filter(fits) {
                        hit = Some((i, col));
                        break;
                    }
                }
                let Some((i, col)) = hit else {
                    return found;
                };
                found = Some((i + 1, col + 1));
                let indent = indentation(lines[i]);
                from = i;
                to = block_end(&lines, i, indent, to);
                min_indent = indent + 1;
            }
            Seg::Index(n) => {
                let mut count = 0;
                let mut hit = None;
                let mut item_indent = None;
                for (i, line) in lines.iter().enumerate().take(to).skip(from) {
                    let trimmed = line.trim_start();
                    if !trimmed.starts_with("- ") && trimmed != "-" {
                        continue;
                    }
                    let indent = indentation(line);
                    if indent < min_indent.saturating_sub(1) && i != from {
                        continue;
                    }
                    let expected = *item_indent.get_or_insert(indent);
                    if indent != expected {
                        continue;
                    }
                    if count == *n {
                        hit = Some((i, indent));
                        break;
                    }
                    count += 1;
                }
                let Some((i, indent)) = hit else {
                    return found;
                };
                found = Some((i + 1, indent + 1));
                from = i;
                to = block_end(&lines, i, indent, to);
                min_indent = indent + 2;
            }
        }
    }
    found
}

/// A block-style entry of a list: which one, its lines (0-based, `[start, end)`) and the
/// column of its `-`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Entry {
    pub(crate) index: usize,
    pub(crate) start: usize,
    pub(crate) end: usize,
    pub(crate) indent: usize,
}

/// The entry of the list at `list` that holds 1-based line `line`, when the list is
/// written in block style (flow-style entries share lines and are not told apart).
pub(crate) fn entry_at(text: &str, list: &[Seg], line: usize) -> Option<Entry> {
    let lines: Vec<&str> = text.lines().collect();
    let section = locate(text, list)?;
    let mut previous: Option<(usize, usize)> = None;
    for index in 0.. {
        let mut path = list.to_vec();
        path.push(Seg::Index(index));
        let here = locate(text, &path)?;
        // Past the last entry, `locate` answers with the list's own key.
        if here == section || previous.is_some_and(|p| p.0 >= here.0) {
            return None;
        }
        let start = here.0 - 1;
        let indent = here.1 - 1;
        let end = block_end(&lines, start, indent, lines.len());
        if (start + 1..=end).contains(&line) {
            return Some(Entry {
                index,
                start,
                end,
                indent,
            });
        }
        if start + 1 > line {
            return None;
        }
        previous = Some(here);
    }
    None
}

/// What of a plan's text a key and its value take up: on line `line` (0-based) from
/// column `start` (0-based, in characters) to `end`, or, for a block key (`end` `None`),
/// to the end of the line and every line of its value below.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct KeySpan {
    pub(crate) key: String,
    pub(crate) line: usize,
    pub(crate) start: usize,
    pub(crate) end: Option<usize>,
    /// Where the value starts (after `key:` and spaces), on `line`.
    pub(crate) value: usize,
    /// The last 1-based column on `line` of what holds the key: the `{` of its flow map,
    /// or what comes before a block key (its list entry's `-`).
    pub(crate) holder: usize,
}

/// The key whose key or value is at 1-based `line` and `column`: the innermost key of a
/// flow map (`{ a: 1, b: 2 }`) written on that one line, or else the block key of the line
/// (or of the nearest line above that holds the line's value). `None` where the text is
/// not laid out so (a flow map over several lines, a document's first line).
pub(crate) fn key_span(text: &str, line: usize, column: usize) -> Option<KeySpan> {
    let lines: Vec<&str> = text.lines().collect();
    let at = line.checked_sub(1)?;
    let chars: Vec<char> = lines.get(at)?.chars().collect();
    let target = column.saturating_sub(1).min(chars.len().saturating_sub(1));
    // Flow collections open on this line, each with the start of its current key.
    let mut frames: Vec<(char, usize, Option<usize>)> = Vec::new();
    let mut quote: Option<char> = None;
    let mut expect_key = false;
    for (i, &c) in chars.iter().enumerate() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None => match c {
                '#' if i == 0 || chars[i - 1] == ' ' => break,
                '{' | '[' => {
                    frames.push((c, i, None));
                    expect_key = c == '{';
                }
                '}' | ']' => {
                    frames.pop();
                    expect_key = false;
                }
                ',' => expect_key = frames.last().is_some_and(|f| f.0 == '{'),
                ' ' => {}
                _ => {
                    if expect_key {
                        if let Some(frame) = frames.last_mut() {
                            frame.2 = Some(i);
                        }
                        expect_key = false;
                    }
                    if c == '"' || c == '\'' {
                        quote = Some(c);
                    }
                }
            },
        }
        if i == target {
            break;
        }
    }
    if let Some((open, start)) = frames
        .iter()
        .rev()
        .find(|f| f.0 == '{')
        .and_then(|f| Some((f.1, f.2?)))
    {
        return flow_key(&chars, at, start, open + 1);
    }
    block_key(&lines, at)
}

/// The flow key starting at `start` on a line, to the end of its value.
fn flow_key(chars: &[char], line: usize, start: usize, holder: usize) -> Option<KeySpan> {
    let colon = (start..chars.len()).find(|&i| chars[i] == ':')?;
    let key: String = chars[start..colon].iter().collect();
    let key = key.trim().trim_matches(['"', '\'']).to_owned();
    let mut depth = 0usize;
    let mut quote: Option<char> = None;
    let mut value = None;
    for (i, &c) in chars.iter().enumerate().skip(colon + 1) {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None => match c {
                '"' | '\'' => quote = Some(c),
                '{' | '[' => depth += 1,
                '}' | ']' if depth == 0 => {
                    return Some(KeySpan {
                        key,
                        line,
                        start,
                        end: Some(i),
                        value: value.unwrap_or(i),
                        holder,
                    });
                }
                '}' | ']' => depth -= 1,
                ',' if depth == 0 => {
                    return Some(KeySpan {
                        key,
                        line,
                        start,
                        end: Some(i + 1),
                        value: value.unwrap_or(i),
                        holder,
                    });
                }
                _ => {}
            },
        }
        if value.is_none() && c != ' ' {
            value = Some(i);
        }
    }
    // The map goes on below: not told apart here.
    None
}

/// The block key of line `at`, or of the nearest line above that the line's value
/// belongs to.
fn block_key(lines: &[&str], at: usize) -> Option<KeySpan> {
    let mut within = usize::MAX;
    for i in (0..=at).rev() {
        let line = lines[i];
        let trimmed = line.trim_start();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let indent = indentation(line);
        if i != at && indent > within {
            continue;
        }
        // Past `- ` markers, to the key.
        let mut start = indent;
        let mut rest = trimmed;
        while let Some(r) = rest.strip_prefix("- ") {
            let spaces = r.len() - r.trim_start().len();
            start += 2 + spaces;
            rest = r.trim_start();
        }
        if let Some(key) = plain_key(rest) {
            let after = rest
                .char_indices()
                .nth(key.chars().count() + 1)
                .map_or(0, |(b, _)| b);
            let value_text = &rest[after.min(rest.len())..];
            let value = start
                + key.chars().count()
                + 1
                + (value_text.chars().count() - value_text.trim_start().chars().count());
            return Some(KeySpan {
                key: key.to_owned(),
                line: i,
                start,
                end: None,
                value,
                holder: start,
            });
        }
        // A line of a value (a list item, a continued scalar): its key is above, less
        // indented (or as indented, for a list written at its key's indentation).
        within = if trimmed.starts_with("- ") || trimmed == "-" {
            indent
        } else {
            indent.saturating_sub(1)
        };
        if i == 0 {
            return None;
        }
    }
    None
}

/// The plain key a line (past its indentation and markers) starts with: `key:` followed by
/// a space or the end of the line.
fn plain_key(rest: &str) -> Option<&str> {
    let colon = rest.find(':')?;
    let key = &rest[..colon];
    let after = &rest[colon + 1..];
    let plain = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_alphanumeric() || matches!(c, '_' | '-' | '.'));
    (plain && (after.is_empty() || after.starts_with(' '))).then_some(key)
}

/// The last line (exclusive, 0-based) of the value of the block key at `span`.
pub(crate) fn block_value_end(text: &str, span: &KeySpan) -> usize {
    let lines: Vec<&str> = text.lines().collect();
    for (i, line) in lines.iter().enumerate().skip(span.line + 1) {
        let trimmed = line.trim_start();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let indent = line.chars().count() - trimmed.chars().count();
        let item = trimmed.starts_with("- ") || trimmed == "-";
        if indent < span.start || (indent == span.start && !item) {
            return i;
        }
    }
    lines.len()
}

fn indentation(line: &str) -> usize {
    line.len() - line.trim_start().len()
}

/// The 0-based column of `key:` in the line (as a block key, a list item's key, or a key
/// inside a flow map), if any.
fn key_column(line: &str, key: &str) -> Option<usize> {
    let code = line.split(" #").next().unwrap_or(line);
    let bytes = code.as_bytes();
    let mut start = 0;
    while let Some(pos) = code[start..].find(key) {
        let at = start + pos;
        let before = at.checked_sub(1).map(|b| bytes[b]);
        let after = &code[at + key.len()..];
        let boundary = matches!(
            before,
            None | Some(b' ' | b'{' | b',' | b'-' | b'"' | b'\'')
        );
        let colon = after
            .trim_start_matches(['"', '\''])
            .trim_start()
            .starts_with(':');
        if boundary && colon {
            return Some(at);
        }
        start = at + key.len();
    }
    None
}

/// The end (exclusive) of the block that starts at line `at` with indentation `indent`.
fn block_end(lines: &[&str], at: usize, indent: usize, limit: usize) -> usize {
    for (i, line) in lines.iter().enumerate().take(limit).skip(at + 1) {
        let trimmed = line.trim_start();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let this = indentation(line);
        if this < indent || (this == indent && !trimmed.starts_with("- ")) {
            return i;
        }
        if this == indent && trimmed.starts_with("- ") && !lines[at].trim_start().starts_with("- ")
        {
            continue;
        }
        if this == indent && trimmed.starts_with("- ") {
            return i;
        }
    }
    limit
}

#[cfg(test)]
mod tests {
    use super::{Seg, locate};

    const PLAN: &str = "\
name: x
load:
  rate: 10
policies:
  - name: a
    max_attempts: 3
  - name: b
    budget:
      ratio: -1
  - { name: c, budget: { ratio: 2 } }
gates:
  - { metric: success_rate, min: 0.9, policy: zed }
";

    #[test]
    fn finds_keys_items_and_flow_keys() {
        use Seg::{Index, Key};
        assert_eq!(locate(PLAN, &[Key("load"), Key("rate")]), Some((3, 3)));
        assert_eq!(locate(PLAN, &[Key("policies"), Index(0)]), Some((5, 3)));
        assert_eq!(
            locate(PLAN, &[Key("policies"), Index(1), Key("budget")]),
            Some((8, 5))
        );
        assert_eq!(
            locate(
                PLAN,
                &[Key("policies"), Index(1), Key("budget"), Key("ratio")]
            ),
            Some((9, 7))
        );
        assert_eq!(
            locate(PLAN, &[Key("policies"), Index(2), Key("budget")]),
            Some((10, 16))
        );
        assert_eq!(
            locate(PLAN, &[Key("gates"), Index(0), Key("policy")]),
            Some((12, 39))
        );
    }

    #[test]
    fn comments_and_nested_keys_are_not_top_level_keys() {
        let plan = "# target: { url: x }\nload:\n  requests:\n    - { name: r }\nname: real\ntarget: embedded\n";
        assert_eq!(locate(plan, &[Seg::Key("target")]), Some((6, 1)));
        assert_eq!(locate(plan, &[Seg::Key("name")]), Some((5, 1)));
    }

    #[test]
    fn a_key_is_found_from_any_place_in_it_or_its_value() {
        use super::key_span;
        let plan = "\
duration: 10
load:
  rate: 10
policies:
  - name: a
    retry_on:
    - 503
    - 50x
  - { name: b, backoff: { fixed: 1x }, jitter: full }
";
        let at =
            |line, column| key_span(plan, line, column).map(|s| (s.key, s.line, s.start, s.end));
        // Block keys: at the key, at the value; a list item's key is the list's.
        assert_eq!(at(1, 11), Some(("duration".into(), 0, 0, None)));
        assert_eq!(at(3, 3), Some(("rate".into(), 2, 2, None)));
        assert_eq!(at(5, 5), Some(("name".into(), 4, 4, None)));
        assert_eq!(at(8, 7), Some(("retry_on".into(), 5, 4, None)));
        // Flow keys, to the end of their value and its comma; the innermost map's.
        assert_eq!(at(9, 7), Some(("name".into(), 8, 6, Some(14))));
        assert_eq!(at(9, 16), Some(("backoff".into(), 8, 15, Some(38))));
        assert_eq!(at(9, 34), Some(("fixed".into(), 8, 26, Some(36))));
        assert_eq!(at(9, 40), Some(("jitter".into(), 8, 39, Some(52))));
    }

    #[test]
    fn a_missing_step_is_none() {
        assert_eq!(locate(PLAN, &[Seg::Key("telemetry")]), None);
    }
}
