//! Which elements a fragment left open, so that a fragment cut short can
//! be closed (`close_open_elements`).
//!
//! A rough tag tracker, not a parser: it sees start and end tags, skips
//! comments, void elements (HTML §13.1.2), self-closing tags and the text
//! of `script` and `style`, and keeps a bounded stack of open names. An end
//! tag closes the nearest open element of its name and everything opened
//! after it, as a browser would for most markup.

/// Most open elements tracked; deeper ones are not closed.
const MAX_DEPTH: usize = 256;
/// Most bytes of an unfinished tag carried to the next chunk.
const MAX_CARRY: usize = 1024;

const VOID: [&[u8]; 14] = [
    b"area", b"base", b"br", b"col", b"embed", b"hr", b"img", b"input", b"link", b"meta", b"param",
    b"source", b"track", b"wbr",
];

#[derive(Debug, Clone, PartialEq, Eq)]
enum Mode {
    Markup,
    /// Inside `<!-- … -->`.
    Comment,
    /// Inside `script` or `style` text, until its end tag.
    RawText(Vec<u8>),
}

/// Tracks the elements opened and not yet closed.
#[derive(Debug)]
pub(crate) struct OpenElements {
    stack: Vec<Vec<u8>>,
    carry: Vec<u8>,
    mode: Mode,
}

impl OpenElements {
    pub(crate) fn new() -> OpenElements {
        OpenElements {
            stack: Vec::new(),
            carry: Vec::new(),
            mode: Mode::Markup,
        }
    }

    /// Looks at the next bytes of the fragment.
    pub(crate) fn feed(&mut self, chunk: &[u8]) {
        let joined;
        let data: &[u8] = if self.carry.is_empty() {
            chunk
        } else {
            let mut v = std::mem::take(&mut self.carry);
            v.extend_from_slice(chunk);
            joined = v;
            &joined
        };
        let mut i = 0;
        while i < data.len() {
            match &self.mode {
                Mode::Comment => match memchr::memmem::find(&data[i..], b"-->") {
                    Some(n) => {
                        i += n + 3;
                        self.mode = Mode::Markup;
                    }
                    None => {
                        self.keep(&data[data.len().saturating_sub(2).max(i)..]);
                        return;
                    }
                },
                Mode::RawText(name) => {
                    let mut end = Vec::with_capacity(name.len() + 2);
                    end.extend_from_slice(b"</");
                    end.extend_from_slice(name);
                    match find_ci(&data[i..], &end) {
                        Some(n) => {
                            i += n;
                            self.mode = Mode::Markup;
                        }
                        None => {
                            self.keep(&data[data.len().saturating_sub(end.len()).max(i)..]);
                            return;
                        }
                    }
                }
                Mode::Markup => {
                    let Some(n) = memchr::memchr(b'<', &data[i..]) else {
                        return;
                    };
                    i += n;
                    let rest = &data[i..];
                    if rest.starts_with(b"<!--") {
                        self.mode = Mode::Comment;
                        i += 4;
                        continue;
                    }
                    let Some(close) = memchr::memchr(b'>', rest) else {
                        self.keep(rest);
                        return;
                    };
                    self.tag(&rest[1..close]);
                    i += close + 1;
                }
            }
        }
    }

    fn keep(&mut self, tail: &[u8]) {
        if tail.len() <= MAX_CARRY {
            self.carry = tail.to_vec();
        }
    }

    /// One tag, between `<` and `>`.
    fn tag(&mut self, inner: &[u8]) {
        let (end, body) = match inner.strip_prefix(b"/") {
            Some(b) => (true, b),
            None => (false, inner),
        };
        let len = body
            .iter()
            .position(|b| b.is_ascii_whitespace() || *b == b'/')
            .unwrap_or(body.len());
        let name = body[..len].to_ascii_lowercase();
        if name.is_empty() || !name[0].is_ascii_alphabetic() {
            return;
        }
        if end {
            if let Some(at) = self.stack.iter().rposition(|n| *n == name) {
                self.stack.truncate(at);
            }
            return;
        }
        if inner.ends_with(b"/") || VOID.contains(&name.as_slice()) {
            return;
        }
        if name == b"script" || name == b"style" {
            self.mode = Mode::RawText(name);
            return;
        }
        if self.stack.len() < MAX_DEPTH {
            self.stack.push(name);
        }
    }

    /// The end tags that close what is open, innermost first.
    pub(crate) fn closing_tags(&self) -> Vec<u8> {
        let mut out = Vec::new();
        if let Mode::RawText(name) = &self.mode {
            push_end(&mut out, name);
        }
        for name in self.stack.iter().rev() {
            push_end(&mut out, name);
        }
        out
    }
}

fn push_end(out: &mut Vec<u8>, name: &[u8]) {
    out.extend_from_slice(b"</");
    out.extend_from_slice(name);
    out.push(b'>');
}

/// Position of `needle` (ASCII, lower case) in `hay`, ignoring case.
fn find_ci(hay: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() || hay.len() < needle.len() {
        return None;
    }
    (0..=hay.len() - needle.len()).find(|&i| hay[i..i + needle.len()].eq_ignore_ascii_case(needle))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open_after(parts: &[&str]) -> String {
        let mut t = OpenElements::new();
        for p in parts {
            t.feed(p.as_bytes());
        }
        String::from_utf8(t.closing_tags()).expect("ascii")
    }

    #[test]
    fn closes_what_is_open_innermost_first() {
        assert_eq!(
            open_after(&["<div class=a><ul><li>one</li><li>tw"]),
            "</li></ul></div>"
        );
        assert_eq!(open_after(&["<div><p>x</div>"]), "");
        assert_eq!(
            open_after(&["<section><img src=x><br/><input>"]),
            "</section>"
        );
    }

    #[test]
    fn skips_comments_and_script_text_across_chunks() {
        assert_eq!(
            open_after(&["<div><!-- <p> ", "--><span>"]),
            "</span></div>"
        );
        assert_eq!(
            open_after(&["<div><script>if (a<b) '<p>'", "</scr", "ipt><em>"]),
            "</em></div>"
        );
        assert_eq!(
            open_after(&["<div><scr", "ipt>var x = '<b>'"]),
            "</script></div>"
        );
        assert_eq!(open_after(&["<art", "icle data-x=\"1\">"]), "</article>");
    }
}
