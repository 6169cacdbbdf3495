//! One table model for every table the harness writes (report, sweep, tune): a table is
//! built once, as rows of cells with their columns' alignment, and rendered as a
//! markdown table, as aligned text (the terminal's summary) or as HTML. Text is escaped
//! here, by the one function for each format ([`html`], [`markdown`]).

use std::fmt::Write;

/// Text as HTML shows it, in an element or an attribute: the one HTML escape.
pub(crate) fn html(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            c => out.push(c),
        }
    }
    out
}

/// Text from a plan or a config (a description, a fault's name, a warning quoting either),
/// as markdown shows it and nothing more: HTML in it is shown, not rendered, and a `|` or a
/// line break cannot end a table cell or row. The one markdown escape.
pub(crate) fn markdown(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '|' => out.push_str("\\|"),
            '\r' | '\n' => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

/// `**bold**` and `` `code` `` of a line of markdown the harness wrote, as HTML, the rest
/// escaped.
pub(crate) fn inline_html(text: &str) -> String {
    let mut out = String::new();
    let (mut bold, mut code) = (false, false);
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '*' if chars.peek() == Some(&'*') => {
                chars.next();
                out.push_str(if bold { "</strong>" } else { "<strong>" });
                bold = !bold;
            }
            '`' => {
                out.push_str(if code { "</code>" } else { "<code>" });
                code = !code;
            }
            c => out.push_str(&html(c.encode_utf8(&mut [0; 4]))),
        }
    }
    out
}

/// How a column's cells line up: numbers to the right.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Align {
    Left,
    Right,
}

/// What a cell holds, which decides how each format escapes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// The harness's own words and figures: markdown shows them as they are.
    Own,
    /// Text from a plan, a config or a program: neutralised in markdown too.
    Quoted,
    /// A line of markdown the harness wrote (`**bold**`, `` `code` ``): HTML renders it.
    Inline,
}

/// How a cell stands out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stress {
    None,
    /// Bold in every format.
    Strong,
    /// Something wrong: bold in markdown, which has no row colours; HTML says it with the
    /// row's class.
    Flag,
}

/// One cell.
#[derive(Debug, Clone)]
pub(crate) struct Cell {
    text: String,
    kind: Kind,
    stress: Stress,
    /// HTML: the cell links there.
    link: Option<String>,
}

impl Cell {
    /// The harness's own words or a figure.
    pub(crate) fn new(text: impl Into<String>) -> Cell {
        Cell {
            text: text.into(),
            kind: Kind::Own,
            stress: Stress::None,
            link: None,
        }
    }

    /// Text from a plan, a config or a program.
    pub(crate) fn quoted(text: impl Into<String>) -> Cell {
        Cell {
            kind: Kind::Quoted,
            ..Cell::new(text)
        }
    }

    /// A line of markdown the harness wrote.
    pub(crate) fn inline(text: impl Into<String>) -> Cell {
        Cell {
            kind: Kind::Inline,
            ..Cell::new(text)
        }
    }

    /// Bold in every format.
    pub(crate) fn strong(self) -> Cell {
        Cell {
            stress: Stress::Strong,
            ..self
        }
    }

    /// Something wrong, when `wrong`: bold in markdown, the row's class in HTML.
    pub(crate) fn flag_if(self, wrong: bool) -> Cell {
        match wrong {
            true => Cell {
                stress: Stress::Flag,
                ..self
            },
            false => self,
        }
    }

    /// In HTML, a link to `href`.
    pub(crate) fn link(self, href: impl Into<String>) -> Cell {
        Cell {
            link: Some(href.into()),
            ..self
        }
    }

    fn markdown(&self) -> String {
        let text = match self.kind {
            Kind::Quoted => markdown(&self.text),
            Kind::Own | Kind::Inline => self.text.clone(),
        };
        match self.stress {
            Stress::None => text,
            Stress::Strong | Stress::Flag => format!("**{text}**"),
        }
    }

    fn html(&self) -> String {
        let text = match self.kind {
            Kind::Inline => inline_html(&self.text),
            Kind::Own | Kind::Quoted => html(&self.text),
        };
        let text = match self.stress {
            Stress::Strong => format!("<b>{text}</b>"),
            Stress::None | Stress::Flag => text,
        };
        match &self.link {
            Some(href) => format!("<a href=\"{}\">{text}</a>", html(href)),
            None => text,
        }
    }
}

impl From<&str> for Cell {
    fn from(text: &str) -> Cell {
        Cell::new(text)
    }
}

impl From<String> for Cell {
    fn from(text: String) -> Cell {
        Cell::new(text)
    }
}

/// One row: its cells, and in HTML its class (`pass`, `fail`, ...).
#[derive(Debug, Clone)]
pub(crate) struct Row {
    cells: Vec<Cell>,
    class: Option<String>,
}

/// A table: a header, the columns' alignment and the rows.
#[derive(Debug, Clone)]
pub(crate) struct Table {
    header: Vec<Cell>,
    align: Vec<Align>,
    rows: Vec<Row>,
    /// HTML: the table's class.
    class: Option<&'static str>,
    /// HTML: right-aligned cells carry `class="num"` (report.html's style); the sweep's
    /// and tune's pages align their columns in their style instead.
    num_class: bool,
    /// What a table without rows says in its one row (markdown only).
    empty: Option<&'static str>,
}

impl Table {
    /// A table of these columns, each left-aligned.
    pub(crate) fn new<C: Into<Cell>>(header: impl IntoIterator<Item = C>) -> Table {
        let header: Vec<Cell> = header.into_iter().map(Into::into).collect();
        Table {
            align: vec![Align::Left; header.len()],
            header,
            rows: Vec::new(),
            class: None,
            num_class: false,
            empty: None,
        }
    }

    /// The columns' alignment, first to last.
    pub(crate) fn align(mut self, align: impl IntoIterator<Item = Align>) -> Table {
        self.align = align.into_iter().collect();
        self
    }

    /// Every column but the first right-aligned (a name, then figures).
    pub(crate) fn figures(self) -> Table {
        let n = self.header.len();
        self.align((0..n).map(|c| if c == 0 { Align::Left } else { Align::Right }))
    }

    /// One column left-aligned (text among figures); a column it does not have, none.
    pub(crate) fn left(mut self, column: usize) -> Table {
        if let Some(a) = self.align.get_mut(column) {
            *a = Align::Left;
        }
        self
    }

    /// HTML: the table's class, and `class="num"` on its right-aligned cells.
    pub(crate) fn class(mut self, class: &'static str) -> Table {
        self.class = Some(class);
        self.num_class = true;
        self
    }

    /// What the table says when it has no rows (markdown).
    pub(crate) fn empty(mut self, says: &'static str) -> Table {
        self.empty = Some(says);
        self
    }

    /// Another row.
    pub(crate) fn row<C: Into<Cell>>(&mut self, cells: impl IntoIterator<Item = C>) {
        self.classed_row(None::<String>, cells);
    }

    /// Another row, with its HTML class (`Some("")` writes an empty one).
    pub(crate) fn classed_row<C: Into<Cell>>(
        &mut self,
        class: Option<impl Into<String>>,
        cells: impl IntoIterator<Item = C>,
    ) {
        self.rows.push(Row {
            cells: cells.into_iter().map(Into::into).collect(),
            class: class.map(Into::into),
        });
    }

    /// A last column, for HTML alone (a link to each row's report).
    pub(crate) fn with_column(
        mut self,
        header: Cell,
        cells: impl IntoIterator<Item = Cell>,
    ) -> Table {
        self.header.push(header);
        self.align.push(Align::Left);
        for (row, cell) in self.rows.iter_mut().zip(cells) {
            row.cells.push(cell);
        }
        self
    }

    /// A markdown table, each line ended by a newline.
    pub(crate) fn markdown(&self) -> String {
        let line = |cells: &[String]| {
            let mut out = String::from("|");
            for c in cells {
                let _ = write!(out, " {c} |");
            }
            out.push('\n');
            out
        };
        let header: Vec<String> = self.header.iter().map(Cell::markdown).collect();
        let mut out = line(&header);
        out.push('|');
        for a in &self.align {
            out.push_str(match a {
                Align::Left => " --- |",
                Align::Right => " ---: |",
            });
        }
        out.push('\n');
        for row in &self.rows {
            let cells: Vec<String> = row.cells.iter().map(Cell::markdown).collect();
            out.push_str(&line(&cells));
        }
        if let (true, Some(says)) = (self.rows.is_empty(), self.empty) {
            let rest = " |".repeat(self.header.len().saturating_sub(1));
            let _ = writeln!(out, "| {says} |{rest}");
        }
        out
    }

    /// Aligned text for a terminal: columns two spaces apart, a rule under the header.
    pub(crate) fn text(&self) -> String {
        let rows: Vec<Vec<String>> = std::iter::once(&self.header)
            .chain(self.rows.iter().map(|r| &r.cells))
            .map(|cells| cells.iter().map(|c| c.text.clone()).collect())
            .collect();
        let widths: Vec<usize> = (0..self.header.len())
            .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
            .collect();
        let mut out = String::new();
        for (i, row) in rows.iter().enumerate() {
            let cells: Vec<String> = row
                .iter()
                .zip(&widths)
                .zip(&self.align)
                .map(|((cell, w), a)| match a {
                    Align::Left => format!("{cell:<w$}"),
                    Align::Right => format!("{cell:>w$}"),
                })
                .collect();
            let _ = writeln!(out, "{}", cells.join("  ").trim_end());
            if i == 0 {
                let rule: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
                let _ = writeln!(out, "{}", rule.join("  "));
            }
        }
        out
    }

    /// An HTML table.
    pub(crate) fn html(&self) -> String {
        let mut out = match self.class {
            Some(class) => format!("<table class=\"{class}\"><tr>"),
            None => "<table><tr>".to_owned(),
        };
        for h in &self.header {
            let _ = write!(out, "<th>{}</th>", h.html());
        }
        out.push_str("</tr>");
        for row in &self.rows {
            match &row.class {
                Some(class) => {
                    let _ = write!(out, "<tr class=\"{class}\">");
                }
                None => out.push_str("<tr>"),
            }
            for (cell, a) in row.cells.iter().zip(&self.align) {
                let num = if self.num_class && *a == Align::Right {
                    " class=\"num\""
                } else {
                    ""
                };
                let _ = write!(out, "<td{num}>{}</td>", cell.html());
            }
            out.push_str("</tr>");
        }
        out.push_str("</table>");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::{Align, Cell, Table};

    fn table() -> Table {
        let mut t = Table::new(["name", "n"]).figures();
        t.classed_row(
            Some("fail"),
            [Cell::quoted("a|<b>"), Cell::new("12").flag_if(true)],
        );
        t.row([Cell::new("x <= 1"), Cell::new("3").strong()]);
        t
    }

    #[test]
    fn markdown_neutralises_quoted_text_and_bolds_what_stands_out() {
        assert_eq!(
            table().markdown(),
            "| name | n |\n| --- | ---: |\n| a\\|&lt;b&gt; | **12** |\n| x <= 1 | **3** |\n"
        );
        let empty = Table::new(["gate", "result", "detail"]).empty("(no gates)");
        assert_eq!(
            empty.markdown(),
            "| gate | result | detail |\n| --- | --- | --- |\n| (no gates) | | |\n"
        );
    }

    #[test]
    fn html_escapes_every_cell_and_marks_rows_and_numbers() {
        let mut t = table().class("summary");
        t = t.with_column(Cell::new(""), [Cell::new("r").link("a&b"), Cell::new("-")]);
        assert_eq!(
            t.html(),
            "<table class=\"summary\"><tr><th>name</th><th>n</th><th></th></tr>\
             <tr class=\"fail\"><td>a|&lt;b&gt;</td><td class=\"num\">12</td><td><a href=\"a&amp;b\">r</a></td></tr>\
             <tr><td>x &lt;= 1</td><td class=\"num\"><b>3</b></td><td>-</td></tr></table>"
        );
    }

    #[test]
    fn text_aligns_columns_under_a_rule() {
        let t = table().align([Align::Left, Align::Right]);
        assert_eq!(t.text(), "name     n\n------  --\na|<b>   12\nx <= 1   3\n");
    }
}
