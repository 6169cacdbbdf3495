//! nginx's config syntax: directives (`name args;`), blocks (`name args { ... }`), quoted
//! words (`"a b"`, `'a'`, with `\` escapes), `#` comments to the end of the line, and the
//! line and column of every word, so an error points at what to edit.
//!
//! Why a reader of our own: the syntax is small (nginx's own `ngx_conf_parse` is one
//! function), and nothing else here needs a crate for it. It reads the file as nginx
//! does, without `include` (the importer names an `include` where a block is missing).

use std::time::Duration;

use super::ConfigError;

/// The deepest nesting of blocks read: nginx configs nest `http`, `server`, `location`
/// and a few more; a file nested deeper is generated or broken, and the bound keeps the
/// tree's (recursive) drop shallow.
const MAX_DEPTH: usize = 32;

/// A word of a directive and where it starts (1-based).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Word {
    pub(crate) text: String,
    pub(crate) line: usize,
    pub(crate) column: usize,
}

/// One directive, and its block's directives when it has one.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Directive {
    pub(crate) name: Word,
    pub(crate) args: Vec<Word>,
    pub(crate) block: Option<Vec<Directive>>,
}

impl Directive {
    pub(crate) fn name(&self) -> &str {
        &self.name.text
    }

    pub(crate) fn line(&self) -> usize {
        self.name.line
    }

    /// The directive as written, on one line: `proxy_next_upstream error timeout`.
    pub(crate) fn text(&self) -> String {
        std::iter::once(self.name.text.as_str())
            .chain(self.args.iter().map(|a| a.text.as_str()))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// The error of this directive, at its name.
    pub(crate) fn error(&self, message: impl Into<String>) -> ConfigError {
        ConfigError::at(self.name.line, self.name.column, message)
    }

    /// The directives of its block (none for a simple directive).
    pub(crate) fn children(&self) -> &[Directive] {
        self.block.as_deref().unwrap_or_default()
    }
}

enum Token {
    Word(Word),
    Semicolon(usize, usize),
    Open(usize, usize),
    Close(usize, usize),
}

/// The file's top-level directives, or the first syntax error at its line and column.
pub(crate) fn parse(text: &str) -> Result<Vec<Directive>, ConfigError> {
    // Each open block: its directive, and the directives around it read so far.
    let mut open: Vec<(Directive, Vec<Directive>)> = Vec::new();
    let mut current: Vec<Directive> = Vec::new();
    let mut words: Vec<Word> = Vec::new();
    for token in Tokens::new(text) {
        match token? {
            Token::Word(w) => words.push(w),
            Token::Semicolon(line, column) => {
                let directive = directive(&mut words).ok_or_else(|| {
                    ConfigError::at(line, column, "a `;` with no directive before it")
                        .hint("remove the extra `;`")
                })?;
                current.push(directive);
            }
            Token::Open(line, column) => {
                let header = directive(&mut words).ok_or_else(|| {
                    ConfigError::at(line, column, "a block `{` with no directive naming it")
                        .hint("a block follows its directive: `location /api { ... }`")
                })?;
                if open.len() >= MAX_DEPTH {
                    return Err(header
                        .error(format!("blocks nested more than {MAX_DEPTH} deep"))
                        .hint("an nginx config nests `http`, `server` and `location` a few levels deep; this looks generated or broken"));
                }
                open.push((header, std::mem::take(&mut current)));
            }
            Token::Close(line, column) => {
                if let Some(first) = words.first() {
                    return Err(ConfigError::at(
                        first.line,
                        first.column,
                        format!("directive `{}` has no `;`", first.text),
                    )
                    .hint("end each directive with `;`"));
                }
                let (mut header, outer) = open.pop().ok_or_else(|| {
                    ConfigError::at(line, column, "a `}` that closes no block")
                        .hint("remove it, or add the block it was meant to close")
                })?;
                header.block = Some(std::mem::replace(&mut current, outer));
                current.push(header);
            }
        }
    }
    if let Some(first) = words.first() {
        return Err(ConfigError::at(
            first.line,
            first.column,
            format!(
                "directive `{}` has no `;` before the end of the file",
                first.text
            ),
        )
        .hint("end each directive with `;`"));
    }
    if let Some((header, _)) = open.last() {
        return Err(header
            .error(format!("the block of `{}` is never closed", header.text()))
            .hint("add its `}`"));
    }
    Ok(current)
}

fn directive(words: &mut Vec<Word>) -> Option<Directive> {
    let mut all = std::mem::take(words).into_iter();
    let name = all.next()?;
    Some(Directive {
        name,
        args: all.collect(),
        block: None,
    })
}

/// The tokens of a config, each with its position.
struct Tokens<'a> {
    chars: std::iter::Peekable<std::str::Chars<'a>>,
    line: usize,
    column: usize,
    failed: bool,
}

impl<'a> Tokens<'a> {
    fn new(text: &'a str) -> Tokens<'a> {
        Tokens {
            chars: text.chars().peekable(),
            line: 1,
            column: 1,
            failed: false,
        }
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.chars.next()?;
        if c == '\n' {
            self.line += 1;
            self.column = 1;
        } else {
            self.column += 1;
        }
        Some(c)
    }

    /// A quoted word, its opening quote at `line`:`column` already read.
    fn quoted(&mut self, quote: char, line: usize, column: usize) -> Result<Word, ConfigError> {
        let mut text = String::new();
        loop {
            match self.bump() {
                None => {
                    return Err(ConfigError::at(
                        line,
                        column,
                        format!("the quote {quote} opened here is never closed"),
                    )
                    .hint(format!(
                        "close it with {quote}; a {quote} inside it is written \\{quote}"
                    )));
                }
                Some('\\') => match self.bump() {
                    Some(c) if c == quote || c == '\\' => text.push(c),
                    Some(c) => {
                        text.push('\\');
                        text.push(c);
                    }
                    None => {}
                },
                Some(c) if c == quote => break,
                Some(c) => text.push(c),
            }
        }
        Ok(Word { text, line, column })
    }

    /// An unquoted word: up to a space, `;`, `{` or `}` (but `${name}`, a variable).
    fn plain(&mut self) -> Word {
        let (line, column) = (self.line, self.column);
        let mut text = String::new();
        while let Some(&c) = self.chars.peek() {
            if c.is_whitespace() || matches!(c, ';' | '{' | '}') {
                break;
            }
            self.bump();
            text.push(c);
            if c == '\\' {
                if let Some(next) = self.bump() {
                    text.push(next);
                }
            } else if c == '$' && self.chars.peek() == Some(&'{') {
                while let Some(v) = self.bump() {
                    text.push(v);
                    if v == '}' {
                        break;
                    }
                }
            }
        }
        Word { text, line, column }
    }
}

impl Iterator for Tokens<'_> {
    type Item = Result<Token, ConfigError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        loop {
            let (line, column) = (self.line, self.column);
            let c = *self.chars.peek()?;
            let token = match c {
                c if c.is_whitespace() => {
                    self.bump();
                    continue;
                }
                '#' => {
                    while self.chars.peek().is_some_and(|&c| c != '\n') {
                        self.bump();
                    }
                    continue;
                }
                ';' | '{' | '}' => {
                    self.bump();
                    match c {
                        ';' => Token::Semicolon(line, column),
                        '{' => Token::Open(line, column),
                        _ => Token::Close(line, column),
                    }
                }
                '"' | '\'' => {
                    self.bump();
                    match self.quoted(c, line, column) {
                        Ok(word) => Token::Word(word),
                        Err(e) => {
                            self.failed = true;
                            return Some(Err(e));
                        }
                    }
                }
                _ => Token::Word(self.plain()),
            };
            return Some(Ok(token));
        }
    }
}

/// An nginx time: a number and a unit (`ms`, `s`, `m`, `h`, `d`, `w`), several summed
/// (`1m30s`), or a plain number of seconds; at most a year.
pub(crate) fn duration(word: &Word) -> Result<Duration, ConfigError> {
    let bad = || {
        ConfigError::at(
            word.line,
            word.column,
            format!("`{}` is not an nginx time", word.text),
        )
        .hint("a number and a unit: 500ms, 30s, 2m, 1h (a plain number is seconds)")
    };
    let text = word.text.as_str();
    if text.is_empty() {
        return Err(bad());
    }
    if text.bytes().all(|b| b.is_ascii_digit()) {
        return text
            .parse::<u64>()
            .ok()
            .filter(|&s| s <= fault_server::duration::MAX.as_secs())
            .map(Duration::from_secs)
            .ok_or_else(bad);
    }
    let mut total = Duration::ZERO;
    let mut rest = text;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        let n: u64 = rest[..digits].parse().map_err(|_| bad())?;
        rest = &rest[digits..];
        let (unit, len) = match rest.as_bytes() {
            [b'm', b's', ..] => (Duration::from_millis(1), 2),
            [b's', ..] => (Duration::from_secs(1), 1),
            [b'm', ..] => (Duration::from_secs(60), 1),
            [b'h', ..] => (Duration::from_secs(3600), 1),
            [b'd', ..] => (Duration::from_secs(86_400), 1),
            [b'w', ..] => (Duration::from_secs(7 * 86_400), 1),
            _ => return Err(bad()),
        };
        rest = &rest[len..];
        let part = u32::try_from(n)
            .ok()
            .and_then(|n| unit.checked_mul(n))
            .ok_or_else(bad)?;
        total = total.checked_add(part).ok_or_else(bad)?;
    }
    if total > fault_server::duration::MAX {
        return Err(bad().hint("at most a year (8760h); check the config for a typo"));
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::parse;

    #[test]
    fn directives_blocks_quotes_and_comments_read_with_their_places() {
        let text = "user www-data; # who\nhttp {\n  log_format main '$a \"b\" ${c}d';\n  server { listen 80; }\n}\n";
        let tree = parse(text).expect("parses");
        assert_eq!(tree.len(), 2);
        assert_eq!(tree[0].text(), "user www-data");
        let http = &tree[1];
        assert_eq!((http.name(), http.line()), ("http", 2));
        let format = &http.children()[0];
        assert_eq!(format.args[1].text, "$a \"b\" ${c}d");
        assert_eq!((format.args[1].line, format.args[1].column), (3, 19));
        let server = &http.children()[1];
        assert_eq!(server.children()[0].text(), "listen 80");
    }

    #[test]
    fn syntax_errors_name_their_line_and_column() {
        let at = |text: &str| {
            let e = parse(text).expect_err(text);
            (e.line, e.column, e.message)
        };
        assert_eq!(
            at("http {\n  server {\n"),
            (2, 3, "the block of `server` is never closed".to_owned())
        );
        assert_eq!(
            at("http {\n  listen 80\n}\n"),
            (2, 3, "directive `listen` has no `;`".to_owned())
        );
        assert_eq!(at("}\n").0, 1);
        assert_eq!(at("a 'b;\n").1, 3);
        assert_eq!(at("\n  ;").1, 3);
        assert_eq!(at("x\n").0, 1);
        assert!(at(&"a{".repeat(40)).2.contains("nested"));
    }
}
