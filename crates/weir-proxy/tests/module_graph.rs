//! The architecture rule of `weir-proxy/src`, checked: no file imports
//! another that (through others) imports it back, and no file is longer
//! than [`MAX_LINES`].
//!
//! A file's edges are the other files of the crate it names: `crate::a::b`,
//! `super::…` and `self::…` paths (in `use` declarations and in code), and
//! paths that start with one of its own child modules (`fill::tee` in
//! `cache/mod.rs`).
//! Comments, `#[cfg(test)]` modules and `lib.rs` (the crate's facade of
//! re-exports) do not count.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The longest a source file of `weir-proxy` may be, in lines.
const MAX_LINES: usize = 640;

type Module = Vec<String>;

fn source_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(dir).expect("read src");
    for entry in entries {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            source_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// `src/cache/mod.rs` → `["cache"]`, `src/cache/fill.rs` → `["cache", "fill"]`.
fn module_of(src: &Path, file: &Path) -> Module {
    let rel = file.strip_prefix(src).expect("under src");
    let mut parts: Module = rel
        .iter()
        .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_owned())
        .collect();
    if parts.last().is_some_and(|p| p == "mod" || p == "lib") {
        parts.pop();
    }
    parts
}

/// The text without comments, string and char literals, and
/// `#[cfg(test)]` items.
fn code_of(text: &str) -> String {
    without_cfg_test(&without_literals(text))
}

/// `text` with comments removed and every string or char literal emptied.
fn without_literals(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < bytes.len() {
        let rest = &text[i..];
        if rest.starts_with("//") {
            i += rest.find('\n').unwrap_or(rest.len());
        } else if rest.starts_with("/*") {
            i += rest.find("*/").map_or(rest.len(), |e| e + 2);
        } else if let Some(len) = (i == 0 || !is_ident(bytes[i - 1]))
            .then(|| raw_string_len(rest))
            .flatten()
        {
            i += len;
            out.push_str("\"\"");
        } else if bytes[i] == b'"' {
            i += 1;
            while i < bytes.len() && bytes[i] != b'"' {
                i += if bytes[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("\"\"");
        } else if let Some(len) = char_literal_len(rest) {
            i += len;
            out.push_str("' '");
        } else {
            let c = rest.chars().next().expect("a char");
            out.push(c);
            i += c.len_utf8();
        }
    }
    out
}

/// The length of a raw string literal (`r"…"`, `r#"…"#`) at the start of `s`.
fn raw_string_len(s: &str) -> Option<usize> {
    let after_r = s.strip_prefix('r').or_else(|| s.strip_prefix("br"))?;
    let hashes = after_r.bytes().take_while(|&b| b == b'#').count();
    let body = after_r[hashes..].strip_prefix('"')?;
    let close = format!("\"{}", "#".repeat(hashes));
    let end = body.find(&close)?;
    Some(s.len() - body.len() + end + close.len())
}

/// The length of a char literal (`'x'`, `'\n'`, `'\u{..}'`) at the start
/// of `s`; `None` for a lifetime.
fn char_literal_len(s: &str) -> Option<usize> {
    let body = s.strip_prefix('\'')?;
    if let Some(esc) = body.strip_prefix('\\') {
        let end = esc.find('\'')?;
        return (end <= 10).then_some(end + 3);
    }
    let c = body.chars().next()?;
    body[c.len_utf8()..]
        .starts_with('\'')
        .then_some(c.len_utf8() + 2)
}

/// `code` without the items that `#[cfg(test)]` marks: from the attribute
/// to the item's `;` or the brace that closes its block.
fn without_cfg_test(code: &str) -> String {
    let mut out = String::with_capacity(code.len());
    let mut rest = code;
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let item = &rest[at + "#[cfg(test)]".len()..];
        let mut depth = 0usize;
        let mut end = item.len();
        for (i, b) in item.bytes().enumerate() {
            match b {
                b'{' => depth += 1,
                b'}' => {
                    depth = depth.saturating_sub(1);
                    if depth == 0 {
                        end = i + 1;
                        break;
                    }
                }
                b';' if depth == 0 => {
                    end = i + 1;
                    break;
                }
                _ => {}
            }
        }
        rest = &item[end..];
    }
    out.push_str(rest);
    out
}

fn is_ident(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// The paths written after `start` (`crate::`, `super::`, `fill::`): each
/// as its segments, braces expanded one level (`crate::{a, b::c}`).
fn paths_after(code: &str, start: &str) -> Vec<Vec<String>> {
    let mut found = Vec::new();
    let bytes = code.as_bytes();
    let mut from = 0;
    while let Some(pos) = code[from..].find(start) {
        let at = from + pos;
        from = at + start.len();
        if at > 0 && (is_ident(bytes[at - 1]) || bytes[at - 1] == b':') {
            continue;
        }
        let head: Vec<String> = start
            .trim_end_matches("::")
            .split("::")
            .map(str::to_owned)
            .collect();
        let rest = &code[from..];
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            for item in group[..end].split(',') {
                let mut path = head.clone();
                path.extend(segments(item.trim()));
                found.push(path);
            }
        } else {
            let mut path = head;
            path.extend(segments(rest));
            found.push(path);
        }
    }
    found
}

/// The leading `ident::ident::…` segments of `text`.
fn segments(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    loop {
        let len = rest.bytes().take_while(|&b| is_ident(b)).count();
        if len == 0 {
            break;
        }
        out.push(rest[..len].to_owned());
        rest = &rest[len..];
        match rest.strip_prefix("::") {
            Some(r) if !r.starts_with('{') && !r.starts_with('*') => rest = r,
            _ => break,
        }
    }
    out
}

/// The files of `weir-proxy/src` each file depends on.
fn graph() -> (BTreeMap<Module, BTreeSet<Module>>, BTreeMap<Module, usize>) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    source_files(&src, &mut files);
    let mut code = BTreeMap::new();
    let mut lines = BTreeMap::new();
    for file in &files {
        let text = std::fs::read_to_string(file).expect("read source");
        let module = module_of(&src, file);
        lines.insert(module.clone(), text.lines().count());
        code.insert(module, code_of(&text));
    }
    let modules: BTreeSet<Module> = code.keys().cloned().collect();
    let resolve = |path: &[String]| -> Option<Module> {
        (1..=path.len())
            .rev()
            .map(|n| path[..n].to_vec())
            .find(|m| modules.contains(m))
    };
    let mut edges = BTreeMap::new();
    for (module, text) in &code {
        if module.is_empty() {
            continue; // lib.rs
        }
        let mut to = BTreeSet::new();
        for path in paths_after(text, "crate::") {
            to.extend(resolve(&path[1..]));
        }
        // `super` is the parent of this module.
        let parent = &module[..module.len() - 1];
        for path in paths_after(text, "super::") {
            let mut abs = parent.to_vec();
            abs.extend_from_slice(&path[1..]);
            to.extend(resolve(&abs));
        }
        // `self` is this module.
        for path in paths_after(text, "self::") {
            let mut abs = module.clone();
            abs.extend_from_slice(&path[1..]);
            to.extend(resolve(&abs));
        }
        // Paths through this module's own children.
        for child in modules
            .iter()
            .filter(|m| m.len() == module.len() + 1 && m.starts_with(module))
        {
            let name = child.last().expect("child name");
            for path in paths_after(text, &format!("{name}::")) {
                let mut abs = module.clone();
                abs.extend(path);
                to.extend(resolve(&abs));
            }
        }
        to.retain(|m| m != module && !m.is_empty());
        edges.insert(module.clone(), to);
    }
    (edges, lines)
}

/// A cycle through `start`, if there is one (depth-first search).
fn cycle_from(edges: &BTreeMap<Module, BTreeSet<Module>>, start: &Module) -> Option<Vec<Module>> {
    fn walk(
        edges: &BTreeMap<Module, BTreeSet<Module>>,
        at: &Module,
        start: &Module,
        path: &mut Vec<Module>,
        seen: &mut BTreeSet<Module>,
    ) -> bool {
        for next in edges.get(at).into_iter().flatten() {
            if next == start {
                return true;
            }
            if seen.insert(next.clone()) {
                path.push(next.clone());
                if walk(edges, next, start, path, seen) {
                    return true;
                }
                path.pop();
            }
        }
        false
    }
    let mut path = vec![start.clone()];
    let mut seen = BTreeSet::new();
    walk(edges, start, start, &mut path, &mut seen).then_some(path)
}

#[test]
fn no_file_of_weir_proxy_imports_one_that_imports_it_back() {
    let (edges, _) = graph();
    assert!(edges.len() > 20, "found only {} files", edges.len());
    let cycles: Vec<String> = edges
        .keys()
        .filter_map(|m| cycle_from(&edges, m))
        .map(|c| {
            let names: Vec<String> = c.iter().map(|m| m.join("::")).collect();
            format!("{} -> {}", names.join(" -> "), names[0])
        })
        .collect();
    assert!(cycles.is_empty(), "import cycles:\n{}", cycles.join("\n"));
}

#[test]
fn no_file_of_weir_proxy_is_longer_than_the_limit() {
    let (_, lines) = graph();
    let long: Vec<String> = lines
        .iter()
        .filter(|&(_, &n)| n > MAX_LINES)
        .map(|(m, n)| format!("{}: {n} lines", m.join("::")))
        .collect();
    assert!(
        long.is_empty(),
        "files over {MAX_LINES} lines:\n{}",
        long.join("\n")
    );
}

#[test]
fn the_graph_sees_imports_of_each_kind() {
    // The checker must see what it checks: `crate::…`, `super::…`,
    // `self::…`, a grouped `{…}`, a `pub use` of a child and a path through
    // a child module.
    let (edges, _) = graph();
    let m = |s: &str| -> Module { s.split("::").map(str::to_owned).collect() };
    let has = |from: &str, to: &str| edges[&m(from)].contains(&m(to));
    assert!(has("exchange::send", "upstream"), "{edges:?}");
    assert!(has("exchange::send", "exchange::context"), "super::");
    assert!(has("exchange", "exchange::context"), "self::");
    assert!(
        has("config::validate", "config::types"),
        "super::types::{{…}}"
    );
    assert!(has("config", "config::validate"), "validate::parse");
    assert!(has("cache", "cache::state"), "a `pub use` of a child");
}

/// Prints each file's imports: `cargo test -p weir-proxy --test
/// module_graph -- --ignored --nocapture`.
#[test]
#[ignore = "prints the graph; run by hand"]
fn print_the_graph() {
    let (edges, lines) = graph();
    for (module, to) in &edges {
        let to: Vec<String> = to.iter().map(|m| m.join("::")).collect();
        println!(
            "{} ({} lines) -> {}",
            module.join("::"),
            lines[module],
            to.join(", ")
        );
    }
}
