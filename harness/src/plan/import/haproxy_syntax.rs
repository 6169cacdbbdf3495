//! HAProxy's config syntax: sections (`global`, `defaults`, `frontend`, `backend`,
//! `listen`, and the others, which the importer skips) holding one directive per line,
//! words split on spaces, `"`/`'` quotes and `\` escapes, `#` comments; and its times.

use std::time::Duration;

use super::ConfigError;
use super::nginx_syntax::Word;
use crate::plan::proxy::Source;

/// The words a section starts with.
const SECTIONS: &[&str] = &[
    "global",
    "defaults",
    "frontend",
    "backend",
    "listen",
    "peers",
    "resolvers",
    "userlist",
    "mailers",
    "program",
    "http-errors",
    "ring",
    "cache",
    "log-forward",
    "crt-store",
    "traces",
];

/// One directive line: its words, the first at `line`.
#[derive(Debug, Clone)]
pub(super) struct Line {
    pub(super) words: Vec<Word>,
}

impl Line {
    pub(super) fn word(&self, i: usize) -> Option<&str> {
        self.words.get(i).map(|w| w.text.as_str())
    }

    pub(super) fn line(&self) -> usize {
        self.words.first().map_or(0, |w| w.line)
    }

    pub(super) fn text(&self) -> String {
        self.words
            .iter()
            .map(|w| w.text.as_str())
            .collect::<Vec<_>>()
            .join(" ")
    }

    pub(super) fn error(&self, message: impl Into<String>) -> ConfigError {
        let (line, column) = self.words.first().map_or((1, 1), |w| (w.line, w.column));
        ConfigError::at(line, column, message)
    }

    pub(super) fn source(&self) -> Source {
        Source::at(self.text(), self.line())
    }

    pub(super) fn is(&self, words: &[&str]) -> bool {
        words
            .iter()
            .enumerate()
            .all(|(i, w)| self.word(i) == Some(w))
    }
}

/// A section: its header line (`backend app`) and its directives.
#[derive(Debug, Clone)]
pub(super) struct Section {
    pub(super) header: Line,
    pub(super) lines: Vec<Line>,
}

impl Section {
    pub(super) fn kind(&self) -> &str {
        self.header.word(0).unwrap_or_default()
    }

    pub(super) fn name(&self) -> Option<&str> {
        self.header.word(1)
    }

    /// The last line that starts with `words`: HAProxy takes the last one said.
    pub(super) fn last(&self, words: &[&str]) -> Option<&Line> {
        self.lines.iter().rev().find(|l| l.is(words))
    }
}

/// The sections of a config, each line split into words.
pub(super) fn sections(text: &str) -> Result<Vec<Section>, ConfigError> {
    let mut out: Vec<Section> = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = Line {
            words: words(raw, i + 1)?,
        };
        let Some(first) = line.word(0) else { continue };
        if SECTIONS.contains(&first) {
            out.push(Section {
                header: line,
                lines: Vec::new(),
            });
        } else if let Some(section) = out.last_mut() {
            section.lines.push(line);
        } else {
            return Err(line.error(format!("`{first}` is outside any section")).hint("a directive belongs to a section: `global`, `defaults`, `frontend`, `backend` or `listen`"));
        }
    }
    Ok(out)
}

/// The words of one line: split on spaces, quotes and `\` escapes kept together, a `#`
/// outside quotes ending the line.
fn words(raw: &str, line: usize) -> Result<Vec<Word>, ConfigError> {
    let mut out = Vec::new();
    let mut chars = raw.chars().enumerate().peekable();
    while let Some(&(i, c)) = chars.peek() {
        if c.is_whitespace() {
            chars.next();
            continue;
        }
        if c == '#' {
            break;
        }
        let mut text = String::new();
        let mut quote: Option<(char, usize)> = None;
        while let Some(&(j, c)) = chars.peek() {
            match (quote, c) {
                (None, c) if c.is_whitespace() || c == '#' => break,
                (None, '"' | '\'') => quote = Some((c, j)),
                (Some((q, _)), c) if c == q => quote = None,
                (_, '\\') => {
                    chars.next();
                    if let Some((_, next)) = chars.peek().copied() {
                        text.push(next);
                    }
                }
                (_, c) => text.push(c),
            }
            chars.next();
        }
        if let Some((q, at)) = quote {
            return Err(ConfigError::at(
                line,
                at + 1,
                format!("the quote {q} opened here is not closed on its line"),
            )
            .hint(format!("close it with {q}")));
        }
        out.push(Word {
            text,
            line,
            column: i + 1,
        });
    }
    Ok(out)
}

/// An HAProxy time: a whole number and a unit (`us`, `ms`, `s`, `m`, `h`, `d`), or a plain
/// number of milliseconds; at most a year.
pub(super) fn duration(w: &Word) -> Result<Duration, ConfigError> {
    let bad = || {
        ConfigError::at(
            w.line,
            w.column,
            format!("`{}` is not an HAProxy time", w.text),
        )
        .hint("a whole number and a unit: 500ms, 30s, 2m (a plain number is milliseconds)")
    };
    let digits = w
        .text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(w.text.len());
    let n: u32 = w.text[..digits].parse().map_err(|_| bad())?;
    let unit = match &w.text[digits..] {
        "us" => Duration::from_micros(1),
        "" | "ms" => Duration::from_millis(1),
        "s" => Duration::from_secs(1),
        "m" => Duration::from_secs(60),
        "h" => Duration::from_secs(3600),
        "d" => Duration::from_secs(86_400),
        _ => return Err(bad()),
    };
    unit.checked_mul(n)
        .filter(|d| *d <= fault_server::duration::MAX)
        .ok_or_else(bad)
}
