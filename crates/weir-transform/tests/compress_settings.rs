//! `CompressSettings` from TOML: defaults, ranges, media type rules.

use weir_transform::coding::Coding;
use weir_transform::compress::CompressSettings;

fn parse(src: &str) -> Result<CompressSettings, String> {
    toml::from_str::<CompressSettings>(src).map_err(|e| e.to_string())
}

#[test]
fn empty_table_is_the_default() {
    let s = parse("").unwrap();
    assert_eq!(s, CompressSettings::default());
    assert_eq!(s.codings, [Coding::Zstd, Coding::Brotli, Coding::Gzip]);
    assert_eq!(s.min_length, 256);
    assert_eq!((s.gzip_level, s.brotli_quality, s.zstd_level), (5, 4, 3));
}

#[test]
fn every_key() {
    let s = parse(
        r#"
        codings = ["gzip", "br"]
        min_length = 1024
        skip_content_types = ["image/", "!image/svg+xml", "application/pdf"]
        gzip_level = 9
        brotli_quality = 11
        zstd_level = 19
        "#,
    )
    .unwrap();
    assert_eq!(s.codings, [Coding::Gzip, Coding::Brotli]);
    assert_eq!(s.min_length, 1024);
    assert_eq!((s.gzip_level, s.brotli_quality, s.zstd_level), (9, 11, 19));
    assert!(s.skips_content_type("application/pdf"));
    assert!(s.skips_content_type("image/gif"));
    assert!(!s.skips_content_type("image/svg+xml"));
    assert!(!s.skips_content_type("application/octet-stream"));
}

#[test]
fn out_of_range_levels_are_errors_at_their_key() {
    for (src, key, line) in [
        ("gzip_level = 10", "gzip_level", 1),
        ("min_length = 5\ngzip_level = -1", "gzip_level", 2),
        ("brotli_quality = 12", "brotli_quality", 1),
        ("\n\nzstd_level = 0", "zstd_level", 3),
        ("zstd_level = 20", "zstd_level", 1),
        ("zstd_level = -5", "zstd_level", 1),
    ] {
        let err = parse(src).unwrap_err();
        assert!(err.contains(key), "{src}: {err}");
        assert!(err.contains(&format!("line {line}")), "{src}: {err}");
    }
    // The ends of each range are valid.
    for src in ["gzip_level = 0", "brotli_quality = 0", "zstd_level = 1"] {
        parse(src).unwrap();
    }
}

#[test]
fn unknown_keys_and_codings_are_errors() {
    let err = parse("level = 3").unwrap_err();
    assert!(err.contains("level"), "{err}");
    let err = parse(r#"codings = ["deflate"]"#).unwrap_err();
    assert!(err.contains("deflate"), "{err}");
    assert!(parse(r#"codings = ["x-gzip"]"#).is_err());
}

#[test]
fn malformed_media_type_rules_are_errors() {
    for rule in [
        "image",
        "!image/",
        "text/ html",
        "/html",
        "",
        "!",
        "a/b/c",
        "text/html;q=1",
    ] {
        let src = format!("skip_content_types = [{rule:?}]");
        let err = parse(&src).unwrap_err();
        assert!(err.contains("skip_content_types"), "{rule:?}: {err}");
    }
}

#[test]
fn default_media_type_rules() {
    let s = CompressSettings::default();
    for skipped in [
        "image/png",
        "image/jpeg",
        "IMAGE/AVIF",
        "video/webm",
        "audio/mpeg",
        "font/woff",
        "font/woff2",
        "application/zip",
        "application/x-gzip",
        "application/x-7z-compressed",
        "application/octet-stream; foo=bar",
    ] {
        assert!(s.skips_content_type(skipped), "{skipped}");
    }
    for compressed in [
        "text/html; charset=utf-8",
        "image/svg+xml",
        "Image/SVG+XML",
        "image/bmp",
        "image/vnd.microsoft.icon",
        "font/otf",
        "application/json",
        "application/xml",
        "application/zip-like",
        "imagex/png",
        "",
    ] {
        assert!(!s.skips_content_type(compressed), "{compressed}");
    }
}

#[test]
fn an_exception_wins_whatever_its_position() {
    let s = parse(r#"skip_content_types = ["!text/html", "text/"]"#).unwrap();
    assert!(!s.skips_content_type("text/html"));
    assert!(s.skips_content_type("text/plain"));
}
