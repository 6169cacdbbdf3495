//! Rust source as the structure tests read it: its code with comments and the contents of
//! literals blanked, shared by `architecture.rs` (the module graph) and `sizes.rs`
//! (function and file lengths), so the two read the same code.

#![allow(dead_code, unreachable_pub)]

/// Whether `b` can be part of an identifier.
pub fn is_ident(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// The text with comments and the contents of string and character literals blanked
/// (newlines kept, so lines keep their numbers), leaving only code to match braces in.
pub fn code_only(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = b.to_vec();
    let mut i = 0;
    while i < b.len() {
        let (from, to, next) = match literal_or_comment(text, i) {
            Some(span) => span,
            None => {
                i += 1;
                continue;
            }
        };
        for c in &mut out[from..to] {
            if *c != b'\n' {
                *c = b' ';
            }
        }
        i = next;
    }
    String::from_utf8(out).expect("only whole characters were blanked")
}

/// If a comment or a literal starts at `i`, the span to blank (a comment whole, a
/// literal's contents: its quotes are kept) and where the code goes on after it.
fn literal_or_comment(text: &str, i: usize) -> Option<(usize, usize, usize)> {
    let b = text.as_bytes();
    let after_ident = i > 0 && is_ident(b[i - 1]);
    match b[i] {
        b'/' if b.get(i + 1) == Some(&b'/') => {
            let end = b[i..]
                .iter()
                .position(|&c| c == b'\n')
                .map_or(b.len(), |n| i + n);
            Some((i, end, end))
        }
        // Block comments nest.
        b'/' if b.get(i + 1) == Some(&b'*') => {
            let (mut depth, mut j) = (0usize, i);
            while j < b.len() {
                if b[j..].starts_with(b"/*") {
                    depth += 1;
                    j += 2;
                } else if b[j..].starts_with(b"*/") {
                    depth -= 1;
                    j += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    j += 1;
                }
            }
            Some((i, j, j))
        }
        // "...", and b"..." and c"..." (their prefix is just an identifier before it).
        b'"' => {
            let mut j = i + 1;
            while j < b.len() && b[j] != b'"' {
                j += if b[j] == b'\\' { 2 } else { 1 };
            }
            let end = j.min(b.len());
            Some((i + 1, end, end + 1))
        }
        // A raw string, r"..." or r#"..."# (br and cr too), not a raw identifier (r#fn)
        // nor an identifier's last letter.
        b'r' if !after_ident
            || (matches!(b[i - 1], b'b' | b'c') && !(i > 1 && is_ident(b[i - 2]))) =>
        {
            let hashes = b[i + 1..].iter().take_while(|&&c| c == b'#').count();
            if b.get(i + 1 + hashes) != Some(&b'"') {
                return None;
            }
            let start = i + 2 + hashes;
            let mut close = vec![b'"'];
            close.extend(std::iter::repeat_n(b'#', hashes));
            let end = b[start..]
                .windows(close.len())
                .position(|w| w == close.as_slice())
                .map_or(b.len(), |n| start + n);
            Some((start, end, end + close.len()))
        }
        // A character literal ('x', '\n', '\u{7b}', '∞', b'{'), not a lifetime or a
        // label ('a, 'static, 'outer:), which has no closing quote after one character.
        b'\'' => {
            let rest = &text[i + 1..];
            let end = if rest.starts_with('\\') {
                rest.get(2..)?.find('\'').map(|n| i + 3 + n)
            } else {
                let c = rest.chars().next().map_or(0, char::len_utf8);
                (rest.as_bytes().get(c) == Some(&b'\'')).then_some(i + 1 + c)
            };
            end.map(|end| (i + 1, end, end + 1))
        }
        _ => None,
    }
}
