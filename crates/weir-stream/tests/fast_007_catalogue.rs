//! FAST-007: the whole behaviour catalogue runs in CI. This gate fails when
//! an ID of `catalogue_ids.txt` has no test function named after it
//! (`push_040_…` for PUSH-040) in `tests/` or in a unit-test module of `src/`.

use std::path::Path;

fn rust_sources(dir: &Path, out: &mut String) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push_str(&std::fs::read_to_string(&path).unwrap_or_default());
            out.push('\n');
        }
    }
}

#[test]
fn fast_007_every_catalogue_item_has_a_named_test() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let ids =
        std::fs::read_to_string(root.join("tests/catalogue_ids.txt")).expect("catalogue_ids.txt");
    let mut code = String::new();
    rust_sources(&root.join("tests"), &mut code);
    rust_sources(&root.join("src"), &mut code);
    let mut total = 0;
    let missing: Vec<&str> = ids
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .inspect(|_| total += 1)
        .filter(|id| {
            let prefix = id
                .trim_end_matches('★')
                .to_ascii_lowercase()
                .replace('-', "_");
            !code.contains(&format!("fn {prefix}_"))
        })
        .collect();
    assert!(total >= 100, "the ID list looks truncated: {total} IDs");
    assert!(
        missing.is_empty(),
        "catalogue items without a named test: {missing:?}"
    );
}
