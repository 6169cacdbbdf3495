//! Kubernetes manifests as teams keep them: one file of several YAML documents (`---`),
//! each an object with a `kind:`, and an error placed at the line of the file it is on.
//!
//! Why: a mesh's config is applied with `kubectl apply -f`, and the file applied holds a
//! VirtualService beside its DestinationRule (and often a Deployment and a Service).
//! serde_yaml reads one document at a time and knows nothing of where a value sat, so each
//! document keeps its own text and first line: `locate.rs` finds a key in that text, and
//! the line is the file's.

use serde_yaml::Value;

use super::ConfigError;
use crate::plan::locate::{Seg, locate};

/// One document of a manifest file.
pub(crate) struct Document {
    pub(crate) value: Value,
    /// The document's text, for locating a key in it.
    text: String,
    /// How many lines of the file come before it.
    offset: usize,
}

impl Document {
    /// The file's 1-based line and column of `path` (or of its longest prefix found; the
    /// document's first line if none of it is).
    pub(crate) fn at(&self, path: &[Seg]) -> (usize, usize) {
        locate(&self.text, path).map_or_else(
            || (self.offset + first_content_line(&self.text), 1),
            |(line, column)| (line + self.offset, column),
        )
    }

    /// An error at `path` in this document.
    pub(crate) fn error(&self, path: &[Seg], message: impl Into<String>) -> ConfigError {
        let (line, column) = self.at(path);
        ConfigError::at(line, column, message)
    }

    /// `metadata.name`, when it has one.
    pub(crate) fn name(&self) -> Option<&str> {
        self.value.get("metadata")?.get("name")?.as_str()
    }

    pub(crate) fn kind(&self) -> Option<&str> {
        self.value.get("kind")?.as_str()
    }
}

/// The 1-based line, within `text`, of its first line that is neither blank nor a comment.
fn first_content_line(text: &str) -> usize {
    text.lines()
        .position(|l| {
            let t = l.trim();
            !t.is_empty() && !t.starts_with('#')
        })
        .map_or(1, |i| i + 1)
}

/// Whether `line` ends a document (`...`) or starts the next (`---`, maybe followed by
/// content on the same line, which YAML allows and this reader refuses to guess about).
fn separator(line: &str) -> bool {
    let t = line.trim_end();
    t == "---" || t.starts_with("--- ") || t == "..."
}

/// The file's documents that hold something, in order. A document that is not YAML is an
/// error at its line in the file.
pub(crate) fn documents(text: &str) -> Result<Vec<Document>, ConfigError> {
    let lines: Vec<&str> = text.lines().collect();
    let mut starts = vec![0];
    starts.extend(
        lines
            .iter()
            .enumerate()
            .filter(|(_, l)| separator(l))
            .map(|(i, _)| i + 1),
    );
    let mut out = Vec::new();
    for (n, &start) in starts.iter().enumerate() {
        let end = starts.get(n + 1).map_or(lines.len(), |next| next - 1);
        let body = lines.get(start..end.max(start)).unwrap_or_default();
        let doc_text = body.join("\n");
        let value: Value = serde_yaml::from_str(&doc_text).map_err(|e| {
            let (line, column) = e.location().map_or((1, 1), |l| (l.line(), l.column()));
            let mut message = e.to_string();
            if let Some(at) = message.find(" at line ") {
                message.truncate(at);
            }
            // An error at the document's end is on its last line, not past it.
            let line = (line + start).min(end.max(start + 1));
            ConfigError::at(line, column, format!("not YAML: {message}"))
        })?;
        if value.is_null() {
            continue;
        }
        out.push(Document {
            value,
            text: doc_text,
            offset: start,
        });
    }
    Ok(out)
}

/// The kinds of the file's documents, for an error that finds none it wants.
pub(crate) fn kinds(docs: &[Document]) -> String {
    let kinds: Vec<&str> = docs
        .iter()
        .map(|d| d.kind().unwrap_or("(no kind)"))
        .collect();
    if kinds.is_empty() {
        "it holds no document".to_owned()
    } else {
        format!("its kinds: {}", kinds.join(", "))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // Tests: a panic is the failure report.

    use super::documents;
    use crate::plan::locate::Seg;

    #[test]
    fn documents_keep_the_lines_of_the_file() {
        let text = "# a manifest\n---\nkind: Service\nmetadata: { name: a }\n---\n\n---\nkind: VirtualService\nspec:\n  http:\n    - name: x\n...\n";
        let docs = documents(text).unwrap();
        assert_eq!(docs.len(), 2);
        assert_eq!(docs[0].kind(), Some("Service"));
        assert_eq!(docs[0].name(), Some("a"));
        assert_eq!(docs[1].at(&[Seg::Key("spec"), Seg::Key("http")]), (10, 3));
        assert_eq!(docs[1].at(&[Seg::Key("nothing")]), (8, 1));
        let bad = documents("kind: A\n---\nkind: [B\n").err().unwrap();
        assert_eq!(bad.line, 3, "{bad:?}");
    }
}
