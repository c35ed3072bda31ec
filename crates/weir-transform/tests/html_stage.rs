//! The html-rewrite stage: injection, attributes, URL prefixes, streaming,
//! charsets and malformed input. Every document is run in many chunkings,
//! 1-byte chunks included, and must give the same output in each.

mod html_util;

use std::sync::Arc;

use bytes::Bytes;
use html_util::*;
use weir_stream::{Batch, StreamError, Transform};
use weir_transform::html::{HtmlError, HtmlRewrite};

const INJECT: &str = r#"
inject_head_end = "<HEAD-SNIPPET>"
inject_body_end = "<BODY-SNIPPET>"
"#;

#[test]
fn injects_before_head_and_body_end_once() {
    let s = settings(INJECT);
    assert_eq!(
        run_str(
            &s,
            "<!doctype html><html><head><title>t</title></head>\
             <body><p>x</p></body></html>\n"
        ),
        "<!doctype html><html><head><title>t</title><HEAD-SNIPPET></head>\
         <body><p>x</p><BODY-SNIPPET></body></html>\n"
    );
    // Several head and body elements: only the first of each.
    assert_eq!(
        run_str(
            &s,
            "<html><head></head><head></head><body></body><body><p>y</p></body></html>"
        ),
        "<html><head><HEAD-SNIPPET></head><head></head>\
         <body><BODY-SNIPPET></body><body><p>y</p></body></html>"
    );
    // Tag names are case-insensitive; end tags may carry whitespace.
    assert_eq!(
        run_str(
            &s,
            "<HTML><HEAD><TITLE>t</TITLE></HEAD ><BODY>b</Body\n></HTML>"
        ),
        "<HTML><HEAD><TITLE>t</TITLE><HEAD-SNIPPET></HEAD ><BODY>b<BODY-SNIPPET></Body\n></HTML>"
    );
}

#[test]
fn end_tags_in_text_comments_and_attributes_do_not_count() {
    let s = settings(INJECT);
    assert_eq!(
        run_str(
            &s,
            "<head><script>var a = '</head></body>';</script><!-- </head> --></head>\
             <body><textarea></body></textarea><p title='</body>'>x</p></body>"
        ),
        "<head><script>var a = '</head></body>';</script><!-- </head> --><HEAD-SNIPPET></head>\
         <body><textarea></body></textarea><p title='</body>'>x</p><BODY-SNIPPET></body>"
    );
}

#[test]
fn optional_end_tags() {
    let s = settings(INJECT);
    // No `</head>`: the head snippet goes where the browser closes the head.
    assert_eq!(
        run_str(
            &s,
            "<html><head><title>t</title><body><p>x</p></body></html>"
        ),
        "<html><head><title>t</title><HEAD-SNIPPET><body><p>x</p><BODY-SNIPPET></body></html>"
    );
    // No head at all.
    assert_eq!(
        run_str(&s, "<!doctype html><title>t</title><body>x</body>"),
        "<!doctype html><title>t</title><HEAD-SNIPPET><body>x<BODY-SNIPPET></body>"
    );
    // No `</body>`: the body snippet goes at the end of the document.
    assert_eq!(
        run_str(&s, "<head></head><body><p>x"),
        "<head><HEAD-SNIPPET></head><body><p>x<BODY-SNIPPET>"
    );
    assert_eq!(
        run_str(&s, "<head></head><body><p>x</p></html>\n"),
        "<head><HEAD-SNIPPET></head><body><p>x</p></html>\n<BODY-SNIPPET>"
    );
    // `</head>` after `<body>` (malformed): still once each. lol_html's
    // element stack closes the body at that `</head>` (a browser ignores
    // it); the snippet still lands inside the body as a browser builds it.
    assert_eq!(
        run_str(&s, "<head><body></head></body>"),
        "<head><HEAD-SNIPPET><body><BODY-SNIPPET></head></body>"
    );
}

#[test]
fn fragments_get_nothing() {
    let s = settings(INJECT);
    for doc in [
        "",
        "<div>partial</div>",
        "<tr><td>1</td></tr>",
        "just text",
        "</head></body>",
    ] {
        assert_eq!(run_str(&s, doc), doc);
    }
}

#[test]
fn only_one_snippet_configured() {
    let head = settings("inject_head_end = '<H>'");
    let body = settings("inject_body_end = '<B>'");
    let doc = "<head></head><body></body>";
    assert_eq!(run_str(&head, doc), "<head><H></head><body></body>");
    assert_eq!(run_str(&body, doc), "<head></head><body><B></body>");
    assert_eq!(run_str(&body, "<body>x"), "<body>x<B>");
    assert_eq!(run_str(&head, "<body>x"), "<H><body>x");
}

#[test]
fn sets_and_removes_attributes_by_selector() {
    let s = settings(
        r##"
set_attributes = [
  { selector = "a[target=_blank]", name = "rel", value = "noopener" },
  { selector = "img", name = "decoding", value = "async" },
  { selector = "#q", name = "title", value = "say \"hi\" & bye" },
]
remove_attributes = [
  { selector = "img", name = "LOADING" },
  { selector = "div.drop", name = "data-x" },
]
"##,
    );
    assert_eq!(
        run_str(
            &s,
            "<a href=x target=_blank rel=opener>1</a><a  href='y'>2</a>\
             <img src=i.png loading=lazy><IMG Loading=eager>\
             <div class='drop keep' data-x=1 data-y=2></div><div  data-x=1></div>\
             <p id=q>q</p>"
        ),
        // Unchanged tags keep their bytes; changed ones are re-serialized
        // by lol_html (unchanged attributes keep theirs).
        "<a href=x target=_blank rel=\"noopener\">1</a><a  href='y'>2</a>\
         <img src=i.png decoding=\"async\"><IMG decoding=\"async\">\
         <div class='drop keep' data-y=2></div><div  data-x=1></div>\
         <p id=q title=\"say &quot;hi&quot; & bye\">q</p>"
    );
}

#[test]
fn rewrites_url_prefixes() {
    let s = settings(r#"url_prefixes = [{ from = "/", to = "/app/" }]"#);
    assert_eq!(
        run_str(
            &s,
            "<a href=\"/x\">a</a><a href='//cdn.example/x'>cdn</a><a href=\"/app/y\">in</a>\
             <a href=/app>root</a><a href=\"/apple\">apple</a><a href=\"rel/x\">r</a>\
             <a href=\"https://e.com/x\">abs</a><a href=\"#f\">f</a><a href=\"/\\evil\">bs</a>\
             <img src=/i.png srcset=\"/a.png 1x, //cdn/b.png 2x,/c.png 3x\">\
             <form action=/post><button formaction=/other>b</button></form>\
             <video poster=/p.jpg></video><link rel=stylesheet href=\"/s.css\">\
             <div data-href=\"/no\">d</div><p>/text/ stays</p>"
        ),
        "<a href=\"/app/x\">a</a><a href='//cdn.example/x'>cdn</a><a href=\"/app/y\">in</a>\
         <a href=/app>root</a><a href=\"/app/apple\">apple</a><a href=\"rel/x\">r</a>\
         <a href=\"https://e.com/x\">abs</a><a href=\"#f\">f</a><a href=\"/\\evil\">bs</a>\
         <img src=\"/app/i.png\" srcset=\"/app/a.png 1x, //cdn/b.png 2x,/app/c.png 3x\">\
         <form action=\"/app/post\"><button formaction=\"/app/other\">b</button></form>\
         <video poster=\"/app/p.jpg\"></video><link rel=stylesheet href=\"/app/s.css\">\
         <div data-href=\"/no\">d</div><p>/text/ stays</p>"
    );
}

#[test]
fn duplicate_and_uppercase_url_attributes() {
    // Browsers use the first of duplicate attributes; names are case-insensitive.
    let s = settings(r#"url_prefixes = [{ from = "/", to = "/app/" }]"#);
    assert_eq!(
        run_str(&s, "<a href=/x HREF=/y>d</a><IMG SRC='/i'>"),
        "<a href=\"/app/x\" HREF=/y>d</a><IMG SRC=\"/app/i\">"
    );
}

#[test]
fn url_prefixes_then_set_attributes() {
    // An explicitly set value is not prefix-rewritten.
    let s = settings(
        r#"
url_prefixes = [{ from = "/", to = "/app/" }]
set_attributes = [{ selector = "a.home", name = "href", value = "/" }]
"#,
    );
    assert_eq!(
        run_str(&s, "<a class=home href=/x>h</a><a href=/x>x</a>"),
        "<a class=home href=\"/\">h</a><a href=\"/app/x\">x</a>"
    );
}

#[test]
fn streams_piece_by_piece() {
    let s = settings(&format!(
        "{INJECT}\nurl_prefixes = [{{ from = '/', to = '/app/' }}]"
    ));
    let mut stage = HtmlRewrite::new(s, UTF8);
    let mut out = Vec::new();
    let mut feed = |stage: &mut HtmlRewrite, part: &str| {
        out.extend(flat(
            stage
                .transform(Some(Batch::one(Bytes::copy_from_slice(part.as_bytes()))))
                .unwrap(),
        ));
        out.extend(flat(stage.idle().unwrap()));
        String::from_utf8(out.clone()).unwrap()
    };
    let so_far = feed(
        &mut stage,
        "<html><head><title>x</title></head><body><p>one</p>",
    );
    assert_eq!(
        so_far,
        "<html><head><title>x</title><HEAD-SNIPPET></head><body><p>one</p>"
    );
    // A tag cut in two is held back, and only that.
    let so_far = feed(&mut stage, "<p>two</p>text<a hr");
    assert_eq!(
        so_far,
        "<html><head><title>x</title><HEAD-SNIPPET></head><body><p>one</p><p>two</p>text"
    );
    let so_far = feed(&mut stage, "ef=/z>z</a>more text");
    assert!(
        so_far.ends_with("text<a href=\"/app/z\">z</a>more text"),
        "{so_far}"
    );
    let so_far = feed(&mut stage, "</body></html>");
    assert!(
        so_far.ends_with("more text<BODY-SNIPPET></body></html>"),
        "{so_far}"
    );
    assert_eq!(flat(stage.transform(None).unwrap()), b"");
}

#[test]
fn empty_batches_and_chunks() {
    let s = settings(INJECT);
    let batches = vec![
        Batch::new(),
        Batch::from(vec![
            Bytes::new(),
            Bytes::from_static(b"<head>"),
            Bytes::new(),
        ]),
        Batch::one(Bytes::new()),
        Batch::one(Bytes::from_static(b"</head>")),
    ];
    assert_eq!(
        run_batches(&s, UTF8, batches),
        b"<head><HEAD-SNIPPET></head>"
    );
}

/// Random markup-ish documents: fragments of valid and broken HTML mixed
/// with arbitrary bytes.
fn messy_document(rng: &mut Rng) -> Vec<u8> {
    const PIECES: &[&str] = &[
        "<div",
        "<p>",
        "</p>",
        "<",
        ">",
        "</",
        "<a href=",
        "\"",
        "'",
        "=",
        " ",
        "\n",
        "<!--",
        "-->",
        "<!",
        "<?",
        "<![CDATA[",
        "]]>",
        "<script>",
        "</script>",
        "<style>",
        "</style>",
        "<textarea>",
        "</textarea>",
        "<svg>",
        "</svg>",
        "<math>",
        "<title>",
        "</title>",
        "<img src=x",
        "/>",
        "&amp;",
        "&#",
        "<b><i></b></i>",
        "<table><tr>",
        "<select><xmp>",
        "</select>",
        "<template>",
        "<noscript>",
        "<plaintext>",
        "<iframe>",
        "x",
        "text ",
        "é",
        "\u{fffd}",
    ];
    let mut doc = Vec::new();
    for _ in 0..rng.below(200) {
        if rng.below(4) == 0 {
            for _ in 0..rng.below(8) {
                doc.push(rng.next() as u8);
            }
        } else {
            doc.extend_from_slice(PIECES[rng.below(PIECES.len())].as_bytes());
        }
    }
    doc
}

#[test]
fn malformed_documents_pass_through_byte_identical() {
    // Rules that match nothing here, but make lol_html lex every tag.
    let noop = settings(
        r##"
url_prefixes = [{ from = "/never-", to = "/x/" }]
set_attributes = [{ selector = "#never", name = "a", value = "b" }]
remove_attributes = [{ selector = "nav.never", name = "a" }]
"##,
    );
    let fixed: &[&[u8]] = &[
        b"<div <p>stray < less than</div>",
        b"<a href=\"/x' title='unterminated>text</a>",
        b"<p class=>x</p><p =y>z</p></ p></>< /p>",
        b"<!-- unclosed comment <a href=/never-x>",
        b"<script>if (a < b && c > d) document.write('<p>')</script>",
        b"<![CDATA[ x ]]><!DOCTYPE html SYSTEM 'x'><?php echo 1 ?>",
        b"\x00\xff\xfe<\x80>\xc3(\xe2\x82</\xff>",
        b"<table><tr><td>1<td>2</table></tr>",
        b"<select><xmp><script>\"use strict\";</script></select>",
        b"<svg><![CDATA[<a href=/never-1>]]><foreignObject><p>x</svg>",
        b"<plaintext></plaintext><a href=/never-2>",
    ];
    for doc in fixed {
        assert_eq!(
            run_all(&noop, UTF8, doc),
            *doc,
            "{}",
            String::from_utf8_lossy(doc)
        );
    }
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    for _ in 0..150 {
        let doc = messy_document(&mut rng);
        assert_eq!(
            run_all(&noop, UTF8, &doc),
            doc,
            "{}",
            String::from_utf8_lossy(&doc)
        );
    }
}

#[test]
fn malformed_documents_change_only_at_rewrite_points() {
    // Inject unique markers; the output less the markers is the input.
    let s = settings(
        r#"inject_head_end = "[[H]]"
inject_body_end = "[[B]]""#,
    );
    let mut rng = Rng(0xD1B5_4A32_D192_ED03);
    for round in 0..150 {
        let mut doc = messy_document(&mut rng);
        if round % 2 == 0 {
            doc.splice(0..0, b"<head>".iter().copied());
            doc.extend_from_slice(b"</head><body>");
            doc.extend(messy_document(&mut rng));
        }
        let out = run_all(&s, UTF8, &doc);
        let text = String::from_utf8_lossy(&out);
        assert!(text.matches("[[H]]").count() <= 1, "{text}");
        assert!(text.matches("[[B]]").count() <= 1, "{text}");
        let stripped: Vec<u8> = String::from_utf8_lossy(&out)
            .replace("[[H]]", "")
            .replace("[[B]]", "")
            .into();
        assert_eq!(stripped, String::from_utf8_lossy(&doc).as_bytes(), "{text}");
    }
}

#[test]
fn legacy_charset_document_stays_byte_identical() {
    let s = settings(
        r#"
inject_head_end = "<script src=/a.js></script>"
url_prefixes = [{ from = "/", to = "/app/" }]
set_attributes = [{ selector = "p", name = "title", value = "café" }]
"#,
    );
    // windows-1252: é = E9, € = 80, ü = FC, and a C1 byte (81) kept as is.
    let doc: &[u8] = b"<html><head><title>Caf\xe9 \x80</title></head><body>\
        <a href=\"/caf\xe9?q=\xfc\" title=\"\xfc\x81\">men\xfc</a><p>x</p>\xe9</body></html>";
    let out = run_all(&s, encoding_rs::WINDOWS_1252, doc);
    let expected: &[u8] = b"<html><head><title>Caf\xe9 \x80</title><script src=/a.js></script></head><body>\
        <a href=\"/app/caf\xe9?q=\xfc\" title=\"\xfc\x81\">men\xfc</a><p title=\"caf\xe9\">x</p>\xe9</body></html>";
    assert_eq!(out, expected, "{}", String::from_utf8_lossy(&out));

    // The same bytes read as UTF-8 (no charset in the header): the URL
    // does not decode, so it is left alone; the rest is unchanged too, and
    // the set value is written in UTF-8.
    let out = run_all(&s, UTF8, doc);
    let expected: &[u8] = b"<html><head><title>Caf\xe9 \x80</title><script src=/a.js></script></head><body>\
        <a href=\"/caf\xe9?q=\xfc\" title=\"\xfc\x81\">men\xfc</a><p title=\"caf\xc3\xa9\">x</p>\xe9</body></html>";
    assert_eq!(out, expected, "{}", String::from_utf8_lossy(&out));
}

#[test]
fn multibyte_legacy_charset() {
    // Shift_JIS: 0x83 0x5C is one character whose second byte is `\`.
    let s = settings(r#"url_prefixes = [{ from = "/", to = "/app/" }]"#);
    let doc: &[u8] = b"<a href=\"/\x83\x5c\">\x83\x5c</a><img src='/x\x83\x5c'>";
    let out = run_all(&s, encoding_rs::SHIFT_JIS, doc);
    assert_eq!(
        out,
        b"<a href=\"/app/\x83\x5c\">\x83\x5c</a><img src=\"/app/x\x83\x5c\">"
    );
}

#[test]
fn unsupported_encoding() {
    let s = settings(INJECT);
    let err = HtmlRewrite::try_new(Arc::clone(&s), encoding_rs::UTF_16LE).unwrap_err();
    assert!(
        matches!(err, HtmlError::UnsupportedEncoding("UTF-16LE")),
        "{err}"
    );
    // `new` makes a pass-through stage instead.
    let doc = b"<\0h\0e\0a\0d\0>\0<\0/\0h\0e\0a\0d\0>\0";
    assert_eq!(run_all(&s, encoding_rs::UTF_16LE, doc), doc);
}

#[test]
fn abort_drops_the_rewriter() {
    let s = settings(INJECT);
    let mut stage = HtmlRewrite::new(s, UTF8);
    let out = stage
        .transform(Some(Batch::one(Bytes::from_static(b"<head><ti"))))
        .unwrap();
    assert_eq!(flat(out), b"<head>");
    stage.abort(&StreamError::aborted("client left"));
    assert!(format!("{stage:?}").contains("done"));
}

#[test]
fn runs_in_a_pipeline() {
    let s = settings(INJECT);
    let stage = HtmlRewrite::new(s, UTF8);
    let source = split(b"<html><head></head><body>hello</body></html>", 4)
        .into_iter()
        .map(|c| Ok(Batch::one(c)));
    let out = weir_stream::consume::bytes_sync(
        weir_stream::pull_sync_batches(source, stage),
        Default::default(),
    )
    .unwrap();
    assert_eq!(
        &out[..],
        b"<html><head><HEAD-SNIPPET></head><body>hello<BODY-SNIPPET></body></html>"
    );
}
