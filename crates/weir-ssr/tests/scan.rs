//! The template scanner's contract: every construct, attributes, limits,
//! warnings, offsets, zero-copy text, and the same pieces however the
//! template is split into chunks.

use std::fmt::Write as _;
use std::time::Duration;

use bytes::Bytes;
use weir_ssr::{Include, Piece, ScanLimits, ScanWarning, Scanner, Syntax};

// ---------------------------------------------------------------- helpers

fn scan_chunks(chunks: &[Bytes], limits: ScanLimits) -> Vec<Piece> {
    let mut s = Scanner::new(limits);
    let mut out = Vec::new();
    for c in chunks {
        s.feed(c.clone(), &mut out);
    }
    s.finish(&mut out);
    assert_eq!(
        s.bytes_scanned(),
        chunks.iter().map(|c| c.len() as u64).sum::<u64>()
    );
    out
}

fn scan(doc: &str) -> Vec<Piece> {
    scan_chunks(
        &[Bytes::copy_from_slice(doc.as_bytes())],
        ScanLimits::default(),
    )
}

/// Adjacent text pieces merged into one; an empty text piece is a bug.
fn merged(pieces: Vec<Piece>) -> Vec<Piece> {
    let mut out: Vec<Piece> = Vec::new();
    let mut text: Vec<u8> = Vec::new();
    for p in pieces {
        match p {
            Piece::Text(t) => {
                assert!(!t.is_empty(), "empty text piece");
                text.extend_from_slice(&t);
            }
            p => {
                if !text.is_empty() {
                    out.push(Piece::Text(Bytes::from(std::mem::take(&mut text))));
                }
                out.push(p);
            }
        }
    }
    if !text.is_empty() {
        out.push(Piece::Text(Bytes::from(text)));
    }
    out
}

fn ms(v: Duration) -> u128 {
    v.as_millis()
}

/// The output a composer would build if every include rendered as a short
/// bracketed description: text as is, `[F …]` / `[E …]` for includes,
/// `{B}` for the body end, `{!…}` for warnings.
fn render(pieces: &[Piece]) -> String {
    let mut s = String::new();
    for p in pieces {
        match p {
            Piece::Text(t) => s.push_str(&String::from_utf8_lossy(t)),
            Piece::Include(i) => s.push_str(&render_include(i)),
            Piece::BodyEnd => s.push_str("{B}"),
            Piece::Warning(w) => s.push_str(&render_warning(w)),
        }
    }
    s
}

fn render_include(i: &Include) -> String {
    let mut s = String::from(match i.syntax {
        Syntax::Fragment => "[F",
        Syntax::Esi => "[E",
    });
    let opt = |s: &mut String, k: &str, v: &Option<String>| {
        if let Some(v) = v {
            let _ = write!(s, " {k}={v}");
        }
    };
    opt(&mut s, "src", &i.src);
    opt(&mut s, "id", &i.id);
    opt(&mut s, "fs", &i.fallback_src);
    opt(&mut s, "alt", &i.alt);
    if i.primary {
        s.push_str(" primary");
    }
    if i.is_async {
        s.push_str(" async");
    }
    if i.onerror_continue {
        s.push_str(" continue");
    }
    if let Some(t) = i.timeout {
        let _ = write!(s, " t={}", ms(t));
    }
    if let Some(t) = i.total_timeout {
        let _ = write!(s, " tt={}", ms(t));
    }
    if !i.fallback.is_empty() {
        let _ = write!(s, "|{}", String::from_utf8_lossy(&i.fallback));
    }
    s.push(']');
    s
}

fn render_warning(w: &ScanWarning) -> String {
    match w {
        ScanWarning::TagTooLong { .. } => "{!long tag}".into(),
        ScanWarning::FallbackTooLong { .. } => "{!long fallback}".into(),
        ScanWarning::Unterminated { what, .. } => format!("{{!open {what}}}"),
        ScanWarning::BadAttribute { name, value, .. } => format!("{{!bad {name}={value}}}"),
    }
}

fn out(doc: &str) -> String {
    render(&scan(doc))
}

fn includes(pieces: &[Piece]) -> Vec<&Include> {
    pieces
        .iter()
        .filter_map(|p| match p {
            Piece::Include(i) => Some(&**i),
            _ => None,
        })
        .collect()
}

fn only_include(doc: &str) -> Include {
    let pieces = scan(doc);
    let inc = includes(&pieces);
    assert_eq!(inc.len(), 1, "{doc}: {pieces:?}");
    inc[0].clone()
}

/// xorshift64*: a small seeded generator, so failures reproduce.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

fn split_at(doc: &Bytes, cuts: &[usize]) -> Vec<Bytes> {
    let mut chunks = Vec::new();
    let mut from = 0;
    for &c in cuts {
        chunks.push(doc.slice(from..c));
        from = c;
    }
    chunks.push(doc.slice(from..));
    chunks
}

/// Scans `doc` whole, at split points, in 1-byte chunks and in seeded
/// random chunkings (empty chunks included); all must give the same
/// pieces once adjacent text is merged. Returns the whole-scan pieces.
fn same_in_any_chunking(doc: &[u8], limits: ScanLimits, seed: u64) -> Vec<Piece> {
    let doc = Bytes::copy_from_slice(doc);
    let whole = merged(scan_chunks(std::slice::from_ref(&doc), limits));
    let check = |chunks: Vec<Bytes>, how: &str| {
        let got = merged(scan_chunks(&chunks, limits));
        assert_eq!(got, whole, "{how}: doc {:?}", String::from_utf8_lossy(&doc));
    };
    let mut rng = Rng(seed | 1);
    if doc.len() <= 600 {
        for cut in 0..=doc.len() {
            check(split_at(&doc, &[cut]), &format!("split at {cut}"));
        }
    } else {
        for _ in 0..100 {
            let cut = rng.below(doc.len() + 1);
            check(split_at(&doc, &[cut]), &format!("split at {cut}"));
        }
    }
    check(
        split_at(&doc, &(1..doc.len()).collect::<Vec<_>>()),
        "1-byte chunks",
    );
    for round in 0..6 {
        let mut cuts = Vec::new();
        let mut at = 0;
        let max_step = [2, 5, 17, 64, 300, 4096][round];
        while at < doc.len() {
            at = (at + rng.below(max_step)).min(doc.len());
            cuts.push(at);
        }
        check(split_at(&doc, &cuts), &format!("random chunking {round}"));
    }
    whole
}

// ------------------------------------------------------- each construct

#[test]
fn fragment_with_inline_fallback_becomes_one_include() {
    let doc = r#"<p>a</p><fragment src="/nav" id=nav>Loading <b>nav</b>…</fragment><p>b</p>"#;
    assert_eq!(
        out(doc),
        "<p>a</p>[F src=/nav id=nav|Loading <b>nav</b>…]<p>b</p>"
    );
    let inc = only_include(doc);
    assert_eq!(inc.syntax, Syntax::Fragment);
    assert_eq!(&inc.fallback[..], "Loading <b>nav</b>…".as_bytes());
}

#[test]
fn fragment_self_closing_and_empty() {
    assert_eq!(out(r#"x<fragment src="/a"/>y"#), "x[F src=/a]y");
    assert_eq!(out(r#"x<fragment src="/a" />y"#), "x[F src=/a]y");
    assert_eq!(out(r#"x<fragment src='/a'></fragment>y"#), "x[F src=/a]y");
    assert_eq!(out("x<fragment/>y"), "x[F]y");
    assert_eq!(out("x<fragment></fragment >y"), "x[F]y");
}

#[test]
fn slash_before_gt_self_closes_even_after_an_unquoted_value() {
    // Unlike HTML (which reads src="/a/" and an open tag).
    assert_eq!(
        out("<fragment src=/a/>z</fragment>"),
        "[F src=/a]z</fragment>"
    );
    assert_eq!(out("<fragment src=/a />z"), "[F src=/a]z");
    assert_eq!(out(r#"<fragment src="/a/"/>z"#), "[F src=/a/]z");
    assert_eq!(out("<fragment src=/a/ >fb</fragment>z"), "[F src=/a/|fb]z");
}

#[test]
fn nested_fragment_inside_fallback_is_fallback_text() {
    assert_eq!(
        out(r#"<fragment src=/a>x<fragment src=/b>y</fragment>z</fragment>"#),
        "[F src=/a|x<fragment src=/b>y]z</fragment>"
    );
}

#[test]
fn stray_fragment_end_tag_is_text() {
    assert_eq!(out("a</fragment>b"), "a</fragment>b");
}

#[test]
fn esi_include_self_closing_and_with_end_tag() {
    assert_eq!(
        out(r#"a<esi:include src="/e" alt="/alt" onerror="continue"/>b"#),
        "a[E src=/e alt=/alt continue]b"
    );
    assert_eq!(
        out(r#"a<esi:include src="/e"></esi:include>b"#),
        "a[E src=/e]b"
    );
    // What sits between the tags is markup like any other; the end tag goes.
    assert_eq!(
        out(r#"a<esi:include src="/e"><fragment src=/f/></esi:include>b"#),
        "a[E src=/e][F src=/f]b"
    );
    let inc = only_include(r#"<esi:include src="/e"/>"#);
    assert_eq!(inc.syntax, Syntax::Esi);
    assert!(inc.fallback.is_empty());
}

#[test]
fn esi_remove_drops_content_without_scanning_it() {
    assert_eq!(
        out(r#"a<esi:remove><fragment src=/x/><!-- c --></body></esi:remove>b</body>"#),
        "ab{B}</body>"
    );
    assert_eq!(out("a<ESI:REMOVE >x</Esi:Remove >b"), "ab");
    assert_eq!(out("a<esi:remove/>b"), "ab");
}

#[test]
fn esi_comment_wrapper_removed_and_content_scanned() {
    assert_eq!(
        out(r#"a<!--esi <esi:include src="/c"/> kept -->b"#),
        "a [E src=/c] kept b"
    );
    assert_eq!(out("a<!--esi<fragment src=/f/>-->b"), "a[F src=/f]b");
    assert_eq!(out("a<!--esi-->b"), "ab");
    // `-->` outside an ESI comment is text; `-` inside one is too.
    assert_eq!(out("a-->b"), "a-->b");
    assert_eq!(out("<!--esi a-b--c-->"), " a-b--c");
    // `<!--esix` is an ordinary comment.
    assert_eq!(
        out("<!--esix <fragment src=/f/> -->"),
        "<!--esix <fragment src=/f/> -->"
    );
}

#[test]
fn html_comment_passes_through_unscanned() {
    let doc = "a<!-- <fragment src=/x/> </body> --><fragment src=/y/>";
    assert_eq!(out(doc), "a<!-- <fragment src=/x/> </body> -->[F src=/y]");
    // HTML's short comments end at once.
    assert_eq!(out("<!--><fragment src=/a/>"), "<!-->[F src=/a]");
    assert_eq!(out("<!---><fragment src=/a/>"), "<!--->[F src=/a]");
    assert_eq!(
        out("<!-- - -> --><fragment src=/a/>"),
        "<!-- - -> -->[F src=/a]"
    );
    assert_eq!(out("<!-- --->x"), "<!-- --->x");
}

#[test]
fn script_and_style_pass_through_unscanned() {
    let doc = r#"<script type="text/javascript">var s = "</body><fragment src=x>"; if (a<b) {}</script></body>"#;
    assert_eq!(
        out(doc),
        r#"<script type="text/javascript">var s = "</body><fragment src=x>"; if (a<b) {}</script>{B}</body>"#
    );
    assert_eq!(
        out("<STYLE>a<fragment src=/x/>{}</Style ><fragment src=/y/>"),
        "<STYLE>a<fragment src=/x/>{}</Style >[F src=/y]"
    );
    // `</scripts` does not end a script; a self-closed script is still open (HTML).
    assert_eq!(
        out("<script/>x</scripts><fragment src=/x/></script><fragment src=/y/>"),
        "<script/>x</scripts><fragment src=/x/></script>[F src=/y]"
    );
    // A `>` inside a quoted attribute of the script tag is not its end.
    assert_eq!(
        out(r#"<script data-x="a>b"></script><fragment src=/y/>"#),
        r#"<script data-x="a>b"></script>[F src=/y]"#
    );
}

#[test]
fn body_end_reported_once_before_its_text() {
    assert_eq!(out("a</body>b</body>c"), "a{B}</body>b</body>c");
    assert_eq!(out("a</BODY\n>b"), "a{B}</BODY\n>b");
    assert_eq!(out("a</bodyx>b"), "a</bodyx>b");
    assert_eq!(out("<body>x</body >"), "<body>x{B}</body >");
}

#[test]
fn body_end_not_inside_script_comment_or_attribute() {
    let doc = r#"<script>"</body>"</script><!-- </body> --><a title="</body>">x</a><style></body></style></body>"#;
    let pieces = scan(doc);
    assert_eq!(
        pieces
            .iter()
            .filter(|p| matches!(p, Piece::BodyEnd))
            .count(),
        1
    );
    assert!(render(&pieces).ends_with("</style>{B}</body>"));
}

#[test]
fn includes_inside_other_tags_attributes_are_not_taken() {
    let doc = r#"<img alt="<fragment src=/no/>" title='<!--'><div data-x=<esi:include>x</div>"#;
    assert_eq!(out(doc), doc);
    // A `>` inside a quoted value does not end the tag either.
    for doc in [
        r#"<a title="x>y<fragment src=/no/>">z</a>"#,
        r#"<a title='x>y</body>'>z</a>"#,
        r#"<a b="1" title="x>y<script>" c='2'>z</a><fragment src=/yes/>"#,
    ] {
        assert_eq!(
            out(doc),
            doc.replace("<fragment src=/yes/>", "[F src=/yes]"),
            "{doc}"
        );
    }
}

#[test]
fn a_stray_quote_may_end_an_ordinary_tag_early() {
    // The documented approximation: `b"c` holds a quote that HTML reads as
    // part of an unquoted value; counting it, the `>` inside the title
    // value ends the tag (HTML would end it after `e"`).
    assert_eq!(
        out(r#"<a x=b"c title="d>e<fragment src=/f/>">"#),
        r#"<a x=b"c title="d>e[F src=/f]">"#
    );
    // Include tags themselves are read by the tokenizer's rules.
    assert_eq!(out(r#"<fragment x=b"c src="d>e"/>"#), "[F src=d>e]");
}

#[test]
fn anything_else_is_text() {
    for doc in [
        "<div>a < b</div>",
        "<",
        "a<",
        "< fragment src=/x/>",
        "<!DOCTYPE html><html>",
        "<?xml version=\"1.0\"?>",
        "<fragments src=/a/>",
        "<esi:includes src=/a/>",
        "<esi:other/>",
        "</ fragment>",
        "a <= b && c >= d",
    ] {
        assert_eq!(out(doc), doc, "{doc}");
        assert!(includes(&scan(doc)).is_empty());
    }
}

#[test]
fn tag_names_are_case_insensitive() {
    assert_eq!(out("<FrAgMeNt SRC=/a></fRaGmEnT>"), "[F src=/a]");
    assert_eq!(out("<ESI:INCLUDE SRC=/a/>"), "[E src=/a]");
    assert_eq!(out("<!--ESI <Esi:Include src=/a/>-->"), " [E src=/a]");
    assert_eq!(
        out("<SCRIPT><fragment src=/x/></SCRIPT>"),
        "<SCRIPT><fragment src=/x/></SCRIPT>"
    );
}

// ------------------------------------------------------------ attributes

#[test]
fn attribute_quoting_forms() {
    let inc = only_include(
        "<fragment src='/a?q=\"x\"' id=\"it's\" fallback-src=/fb timeout = 250 primary async/>",
    );
    assert_eq!(inc.src.as_deref(), Some("/a?q=\"x\""));
    assert_eq!(inc.id.as_deref(), Some("it's"));
    assert_eq!(inc.fallback_src.as_deref(), Some("/fb"));
    assert_eq!(inc.timeout, Some(Duration::from_millis(250)));
    assert!(inc.primary && inc.is_async);
    assert!(inc.fallback.is_empty());
}

#[test]
fn attribute_names_are_lower_cased_duplicates_first_wins_unknown_ignored() {
    let inc = only_include(r#"<fragment SRC="/first" src="/second" data-x="1" Id=a ID=b/>"#);
    assert_eq!(inc.src.as_deref(), Some("/first"));
    assert_eq!(inc.id.as_deref(), Some("a"));
}

#[test]
fn bare_attributes_are_true_and_src_empty_is_none() {
    let inc = only_include("<fragment primary async src id=''/>");
    assert!(inc.primary && inc.is_async);
    assert_eq!(inc.src, None);
    assert_eq!(inc.id, None);
    let inc = only_include(r#"<fragment src="" primary="false"/>"#);
    assert_eq!(inc.src, None);
    assert!(inc.primary, "presence is what counts");
    assert_eq!(only_include("<fragment/>").src, None);
}

#[test]
fn attribute_values_decode_character_references() {
    let inc = only_include(
        r#"<esi:include src="/p?a=1&amp;b=&lt;2&gt;&amp;c=&quot;&apos;&#65;&#x42;" alt="&nbsp;&amp"/>"#,
    );
    assert_eq!(inc.src.as_deref(), Some("/p?a=1&b=<2>&c=\"'AB"));
    assert_eq!(inc.alt.as_deref(), Some("&nbsp;&amp"));
}

#[test]
fn attributes_belong_to_their_syntax() {
    let esi = only_include(r#"<esi:include src=/e primary async fallback-src=/x timeout=5s/>"#);
    assert!(!esi.primary && !esi.is_async && esi.fallback_src.is_none());
    assert_eq!(esi.timeout, Some(Duration::from_secs(5)));
    let frag = only_include(r#"<fragment src=/f alt=/x onerror=continue/>"#);
    assert!(frag.alt.is_none() && !frag.onerror_continue);
}

#[test]
fn every_timeout_form() {
    for (v, want) in [
        ("500", 500),
        ("500ms", 500),
        ("2s", 2000),
        ("1.5s", 1500),
        ("0", 0),
        ("75MS", 75),
        (" 3s ", 3000),
        ("&#49;s", 1000),
    ] {
        let inc = only_include(&format!(r#"<fragment timeout="{v}" total-timeout="{v}"/>"#));
        assert_eq!(inc.timeout, Some(Duration::from_millis(want)), "{v}");
        assert_eq!(inc.total_timeout, Some(Duration::from_millis(want)), "{v}");
    }
}

#[test]
fn bad_timeout_is_a_warning_and_none() {
    for v in ["", "fast", "1m", "-5", "1.5 s", "5e2", "ms"] {
        let doc = format!(r#"<fragment src=/a timeout="{v}" total-timeout="2s"/>"#);
        let pieces = scan(&doc);
        assert_eq!(
            pieces[0],
            Piece::Warning(ScanWarning::BadAttribute {
                offset: 0,
                name: "timeout".into(),
                value: v.into(),
            }),
            "{v}"
        );
        let inc = includes(&pieces)[0];
        assert_eq!(inc.timeout, None);
        assert_eq!(inc.total_timeout, Some(Duration::from_secs(2)));
    }
    assert_eq!(
        out("x<fragment TOTAL-TIMEOUT=soon/>"),
        "x{!bad total-timeout=soon}[F]"
    );
}

#[test]
fn bad_onerror_is_a_warning() {
    assert_eq!(
        out(r#"<esi:include src=/a onerror="abort"/>"#),
        "{!bad onerror=abort}[E src=/a]"
    );
}

// ------------------------------------------------------ limits, warnings

fn small(tag: usize, fallback: usize) -> ScanLimits {
    ScanLimits {
        max_tag_bytes: tag,
        max_fallback_bytes: fallback,
    }
}

fn out_with(doc: &str, limits: ScanLimits) -> String {
    render(&scan_chunks(
        &[Bytes::copy_from_slice(doc.as_bytes())],
        limits,
    ))
}

#[test]
fn fallback_too_long_is_cut_with_a_warning() {
    let doc = "<fragment src=/a>0123456789abcdef</fragment>tail";
    assert_eq!(
        out_with(doc, small(1024, 10)),
        "{!long fallback}[F src=/a|0123456789]tail"
    );
    // Exactly at the limit: no warning.
    assert_eq!(
        out_with(doc, small(1024, 16)),
        "[F src=/a|0123456789abcdef]tail"
    );
    // Cut in any chunking, the same.
    same_in_any_chunking(doc.as_bytes(), small(1024, 10), 7);
}

#[test]
fn include_tag_too_long_passes_through_as_text() {
    let doc = r#"a<fragment src="/a" data-pad="xxxxxxxxxxxxxxxxxxxx">fb</fragment>b"#;
    let tag_len = doc.find('>').unwrap_or(0);
    assert_eq!(
        out_with(doc, small(tag_len - 1, 1024)),
        format!("a{{!long tag}}{}", &doc[1..])
    );
    // Within the limit (the tag is `tag_len` bytes, `<` to `>`).
    assert_eq!(out_with(doc, small(tag_len, 1024)), "a[F src=/a|fb]b");
    let pieces = scan_chunks(&[Bytes::copy_from_slice(doc.as_bytes())], small(10, 1024));
    assert_eq!(
        pieces[1],
        Piece::Warning(ScanWarning::TagTooLong { offset: 1 })
    );
    same_in_any_chunking(doc.as_bytes(), small(10, 1024), 3);
    same_in_any_chunking(doc.as_bytes(), small(tag_len, 1024), 4);
    same_in_any_chunking(doc.as_bytes(), small(tag_len - 1, 1024), 5);
}

#[test]
fn unterminated_constructs_flush_and_warn() {
    assert_eq!(
        out("a<fragment src=/a>fall"),
        "a[F src=/a|fall]{!open fragment}"
    );
    assert_eq!(
        out("a<fragment src=/a>fall</frag"),
        "a[F src=/a|fall</frag]{!open fragment}"
    );
    assert_eq!(out("a<fragment src=\"/a"), "a<fragment src=\"/a{!open tag}");
    assert_eq!(
        out("a<esi:include src=/a"),
        "a<esi:include src=/a{!open tag}"
    );
    assert_eq!(out("a<fragment"), "a<fragment");
    assert_eq!(out("a<!-- x"), "a<!-- x{!open comment}");
    assert_eq!(out("a<script>x"), "a<script>x{!open script}");
    assert_eq!(out("a<style>x</sty"), "a<style>x</sty{!open style}");
    assert_eq!(out("a<esi:remove>x"), "a{!open esi:remove}");
    assert_eq!(out("a<esi:remove"), "a<esi:remove", "undecided: text");
    assert_eq!(out("a<esi:remove x"), "a{!open esi:remove}");
    assert_eq!(out("a<!--esi x"), "a x{!open esi comment}");
    assert_eq!(
        out("<!--esi <fragment src=/a>x"),
        " [F src=/a|x]{!open fragment}{!open esi comment}"
    );
    assert_eq!(out("a<div class=\"x"), "a<div class=\"x{!open tag}");
    let pieces = scan("ab<!-- x");
    assert_eq!(
        pieces.last(),
        Some(&Piece::Warning(ScanWarning::Unterminated {
            offset: 2,
            what: "comment"
        }))
    );
}

#[test]
fn unterminated_constructs_stream_instead_of_buffering() {
    let mut s = Scanner::new(small(64, 64));
    let mut out = Vec::new();
    s.feed(Bytes::from_static(b"<!-- open"), &mut out);
    s.feed(Bytes::from(vec![b'x'; 100_000]), &mut out);
    assert_eq!(
        render(&out).len(),
        100_009,
        "comment text emitted as it came"
    );
    out.clear();
    let mut s = Scanner::new(small(64, 64));
    s.feed(Bytes::from_static(b"<script>"), &mut out);
    s.feed(Bytes::from(vec![b'<'; 100_000]), &mut out);
    assert_eq!(render(&out).len(), 100_008, "script text is never held");
    out.clear();
    let mut s = Scanner::new(small(64, 64));
    s.feed(Bytes::from_static(b"a<esi:remove>"), &mut out);
    s.feed(Bytes::from(vec![b'x'; 100_000]), &mut out);
    assert_eq!(render(&out), "a");
    out.clear();
    // An include tag that never ends: held up to the limit, then streamed.
    let mut s = Scanner::new(small(64, 64));
    s.feed(Bytes::from_static(b"<fragment data=\""), &mut out);
    assert!(out.is_empty());
    for _ in 0..100 {
        s.feed(Bytes::from(vec![b'x'; 1000]), &mut out);
    }
    assert_eq!(
        out[0],
        Piece::Warning(ScanWarning::TagTooLong { offset: 0 })
    );
    assert_eq!(render(&out[1..]).len(), 16 + 100_000);
    out.clear();
    let mut s = Scanner::new(small(64, 64));
    s.feed(Bytes::from_static(b"<fragment>"), &mut out);
    s.feed(Bytes::from(vec![b'x'; 100_000]), &mut out);
    s.feed(Bytes::from_static(b"</fragment>z"), &mut out);
    assert_eq!(
        render(&out),
        format!("{{!long fallback}}[F|{}]z", "x".repeat(64))
    );
}

// ------------------------------------------------ streaming and offsets

#[test]
fn offsets_are_positions_in_the_whole_template() {
    let doc =
        "0123<fragment src=/a/>89<!--esi <esi:include src=/b/>-->x<fragment src=/c>f</fragment>";
    let chunks: Vec<Bytes> = doc
        .as_bytes()
        .chunks(5)
        .map(Bytes::copy_from_slice)
        .collect();
    let pieces = scan_chunks(&chunks, ScanLimits::default());
    let offsets: Vec<u64> = includes(&pieces).iter().map(|i| i.offset).collect();
    let want: Vec<u64> = ["<fragment src=/a", "<esi:include", "<fragment src=/c"]
        .iter()
        .map(|n| doc.find(n).unwrap_or(usize::MAX) as u64)
        .collect();
    assert_eq!(offsets, want);
}

#[test]
fn bytes_scanned_counts_fed_bytes() {
    let mut s = Scanner::new(ScanLimits::default());
    let mut out = Vec::new();
    assert_eq!(s.bytes_scanned(), 0);
    s.feed(Bytes::from_static(b"abc<frag"), &mut out);
    assert_eq!(s.bytes_scanned(), 8);
    s.feed(Bytes::new(), &mut out);
    s.feed(Bytes::from_static(b"ment/>"), &mut out);
    assert_eq!(s.bytes_scanned(), 14);
}

#[test]
fn text_is_emitted_at_each_feed_and_only_a_possible_tag_start_is_held() {
    let mut s = Scanner::new(ScanLimits::default());
    let mut out = Vec::new();
    s.feed(Bytes::from_static(b"hello <div>world <fr"), &mut out);
    assert_eq!(render(&out), "hello <div>world ");
    out.clear();
    s.feed(Bytes::from_static(b"agment src=/a"), &mut out);
    assert!(out.is_empty(), "the tag is held until its `>`");
    s.feed(Bytes::from_static(b" />more <b"), &mut out);
    assert_eq!(render(&out), "[F src=/a]more <b");
    out.clear();
    s.feed(Bytes::from_static(b"><script>x</scr"), &mut out);
    assert_eq!(render(&out), "><script>x</scr", "script text is never held");
    out.clear();
    s.feed(Bytes::from_static(b"ipt>-->"), &mut out);
    s.finish(&mut out);
    assert_eq!(render(&out), "ipt>-->");
}

#[test]
fn text_pieces_share_memory_with_the_input() {
    let chunk = Bytes::from_static(
        b"<html><body class=\"x\"><p>plain text, tags, a < b, <!-- c --> <script>1<2</script></p>",
    );
    let range = chunk.as_ptr() as usize..chunk.as_ptr() as usize + chunk.len();
    let mut s = Scanner::new(ScanLimits::default());
    let mut out = Vec::new();
    s.feed(chunk.clone(), &mut out);
    assert_eq!(out.len(), 1);
    for p in &out {
        let Piece::Text(t) = p else { panic!("{p:?}") };
        assert!(range.contains(&(t.as_ptr() as usize)));
        assert!(range.contains(&(t.as_ptr() as usize + t.len() - 1)));
    }
    // Around an include, still slices of the chunk; the fallback too.
    let chunk = Bytes::from_static(b"before<fragment src=/a>fallback</fragment>after");
    let range = chunk.as_ptr() as usize..chunk.as_ptr() as usize + chunk.len();
    out.clear();
    s.feed(chunk.clone(), &mut out);
    let shared = |b: &Bytes| range.contains(&(b.as_ptr() as usize));
    assert_eq!(out.len(), 3);
    for p in &out {
        match p {
            Piece::Text(t) => assert!(shared(t)),
            Piece::Include(i) => assert!(shared(&i.fallback)),
            other => panic!("{other:?}"),
        }
    }
}

// --------------------------------------------------- chunking invariance

const HAND_WRITTEN: &[&str] = &[
    "<!DOCTYPE html><html><head><title>t</title><style>a>b{}</style></head><body>",
    r#"<div class="a" data-x='1>2'><fragment src="/f" id=f timeout="1.5s" primary>fb <b>x</b></fragment></div>"#,
    r#"<esi:include src="/e?a=1&amp;b=2" alt="/alt" onerror="continue"/><esi:include src=/e2></esi:include>"#,
    "a<esi:remove><fragment src=/gone/>x</ESI:REMOVE>b",
    "<!--esi <esi:include src=/c/> kept --> <!-- <fragment src=/no/> --> <!--> <!--->",
    "<script>var s = '</body>'; if (a<b && c-->d) {}</script></body></html>",
    "a < b <= c <a href=x>y</a> <fragmentx> </fragment> <esi:x> - -- --> <!x>",
    "<fragment src=/a>x<fragment src=/b>y</fragment>z</fragment>",
    "<fragment src=/open>never closed <b>",
    "<!--esi <fragment src=/a>x</fragment> <esi:remove>r</esi:remove> -->tail",
    "<img alt=\"<fragment src=/no/>\" title='<!--'><p>after</p></body>",
    "<fragment timeout=bad src=/t></fragment><esi:include onerror=stop src=/u/>",
    "x<fragment src=\"/unterminated",
    "<!--esi -- -> --->",
];

#[test]
fn hand_written_templates_give_the_same_pieces_in_any_chunking() {
    for (i, doc) in HAND_WRITTEN.iter().enumerate() {
        same_in_any_chunking(doc.as_bytes(), ScanLimits::default(), i as u64 + 1);
        same_in_any_chunking(doc.as_bytes(), small(20, 4), i as u64 + 100);
    }
}

/// One piece of a generated template and the rendering it must produce.
/// `first_body`: whether a `</body>` here is the first one.
fn part(rng: &mut Rng, i: usize, body_seen: &mut bool) -> (String, String) {
    let pick = rng.below(18);
    let same = |s: String| (s.clone(), s);
    match pick {
        0 => same(format!("Lorem ipsum {i} dolor sit amet. ")),
        1 => same(format!("<div class=\"c-{i}\" data-x='a>b' hidden>")),
        2 => same("</div>\n".into()),
        3 => same("a < b && c > d - e -- f ".into()),
        4 => same(format!("<!-- note {i} <fragment src=\"/no\"/> </body> -->")),
        5 => same("<script>var s = \"</body><fragment src=x>\"; if (a<b) {}</script>".into()),
        6 => same("<style>a > b { color: red }</style>".into()),
        7 => (
            format!(r#"<fragment src="/f{i}" id=f{i} timeout="1.5s">fb<b>{i}</b></fragment>"#),
            format!("[F src=/f{i} id=f{i} t=1500|fb<b>{i}</b>]"),
        ),
        8 => (
            format!(r#"<fragment src="/s{i}"/>"#),
            format!("[F src=/s{i}]"),
        ),
        9 => (
            format!(r#"<esi:include src="/e{i}?a=1&amp;b=2" onerror="continue"/>"#),
            format!("[E src=/e{i}?a=1&b=2 continue]"),
        ),
        10 => (
            format!(r#"<esi:include src="/e{i}"></esi:include>"#),
            format!("[E src=/e{i}]"),
        ),
        11 => (
            "<esi:remove><fragment src=\"/gone\"/>removed</body></esi:remove>".into(),
            String::new(),
        ),
        12 => (
            format!(r#"<!--esi <esi:include src="/c{i}"/> kept -->"#),
            format!(" [E src=/c{i}] kept "),
        ),
        13 => {
            let r = if *body_seen { "</body>" } else { "{B}</body>" };
            *body_seen = true;
            ("</body>".into(), r.into())
        }
        14 => (
            format!("<FRAGMENT SRC='/u{i}' PRIMARY ASYNC total-timeout=2s></FRAGMENT>"),
            format!("[F src=/u{i} primary async tt=2000]"),
        ),
        15 => same(format!("<img alt=\"<fragment src=/no{i}>\" src=/i{i}.png>")),
        16 => (
            format!(r#"<fragment src=/t{i} timeout="bad"/>"#),
            format!("{{!bad timeout=bad}}[F src=/t{i}]"),
        ),
        _ => same("<!DOCTYPE html><p>&amp; &lt;</p>".into()),
    }
}

#[test]
fn generated_templates_render_as_expected_in_any_chunking() {
    for seed in 1..=40u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let mut doc = String::new();
        let mut want = String::new();
        let mut body_seen = false;
        let parts = 5 + rng.below(40);
        for i in 0..parts {
            let (d, w) = part(&mut rng, i, &mut body_seen);
            doc.push_str(&d);
            want.push_str(&w);
        }
        let pieces = same_in_any_chunking(doc.as_bytes(), ScanLimits::default(), seed);
        assert_eq!(render(&pieces), want, "seed {seed}");
    }
}

/// Soup of construct pieces, unbalanced on purpose: the scanner must still
/// be split-independent (with tiny limits, to cross them often).
#[test]
fn random_soup_gives_the_same_pieces_in_any_chunking() {
    const ATOMS: &[&str] = &[
        "<",
        "</",
        ">",
        "/>",
        "<!--",
        "-->",
        "-",
        "--",
        "<!--esi",
        "<!--esi ",
        "<fragment",
        "<FRAGMENT ",
        "</fragment>",
        "</fragment",
        "<esi:include",
        "</esi:include>",
        "<esi:remove>",
        "</esi:remove>",
        "<script>",
        "</script>",
        "<style>",
        "</style >",
        "</body>",
        "<body>",
        " src=",
        "\"",
        "'",
        "=",
        " ",
        "x",
        "/a",
        "&amp;",
        " timeout=",
        "1.5s",
        "bad",
        "<div",
        "<!",
        "<!-->",
        "\n",
    ];
    for seed in 1..=60u64 {
        let mut rng = Rng(seed.wrapping_mul(0xD1B5_4A32_D192_ED03));
        let mut doc = String::new();
        for _ in 0..(10 + rng.below(80)) {
            doc.push_str(ATOMS[rng.below(ATOMS.len())]);
        }
        same_in_any_chunking(doc.as_bytes(), ScanLimits::default(), seed);
        same_in_any_chunking(doc.as_bytes(), small(24, 6), seed + 1000);
    }
}

#[test]
fn a_large_generated_template_in_random_chunks() {
    let mut rng = Rng(42);
    let mut doc = String::new();
    let mut want = String::new();
    let mut body_seen = false;
    let mut i = 0;
    while doc.len() < 200_000 {
        let (d, w) = part(&mut rng, i, &mut body_seen);
        doc.push_str(&d);
        want.push_str(&w);
        i += 1;
    }
    let pieces = same_in_any_chunking(doc.as_bytes(), ScanLimits::default(), 42);
    assert_eq!(render(&pieces), want);
}
