//! Planning a route's chain per response, and running it: which stages
//! apply, the head edits they make, and the idle and end cascades.

use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use weir_stream::{Batch, StreamError, Transform};
use weir_transform::chain::{
    ChainError, ChainSpec, CoalesceSettings, StageError, StageName, StageSpec,
};
use weir_transform::compress::CompressSettings;
use weir_transform::html::HtmlRewriteSettings;
use weir_transform::msgpack::MsgpackJsonSettings;

fn coalesce(min: usize, max: usize) -> StageSpec {
    StageSpec::Coalesce(CoalesceSettings {
        min_bytes: min,
        max_bytes: max,
    })
}

fn head(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (k, v) in pairs {
        h.append(*k, HeaderValue::from_static(v));
    }
    h
}

fn plan(spec: &ChainSpec, method: Method, status: u16, resp: &mut HeaderMap) -> Vec<StageName> {
    let req = head(&[("accept-encoding", "gzip")]);
    spec.plan(
        &method,
        &req,
        StatusCode::from_u16(status).expect("status"),
        resp,
    )
    .names()
}

#[test]
fn order_duplicates_and_bounds_are_checked() {
    let compress = || StageSpec::Compress(Arc::new(CompressSettings::default()));
    let html = || StageSpec::HtmlRewrite(Arc::new(HtmlRewriteSettings::default()));
    assert!(matches!(
        ChainSpec::new(vec![compress(), html()]),
        Err(ChainError::AfterCompress(StageName::HtmlRewrite))
    ));
    assert!(matches!(
        ChainSpec::new(vec![coalesce(1, 2), coalesce(1, 2)]),
        Err(ChainError::Duplicate(StageName::Coalesce))
    ));
    assert!(matches!(
        ChainSpec::new(vec![coalesce(0, 2)]),
        Err(ChainError::CoalesceBounds { .. })
    ));
    assert!(matches!(
        ChainSpec::new(vec![coalesce(3, 2)]),
        Err(ChainError::CoalesceBounds { .. })
    ));
    let ok = ChainSpec::new(vec![html(), coalesce(1, 2), compress()]).expect("valid");
    assert!(ok.reads_content());
    assert!(
        !ChainSpec::new(vec![coalesce(1, 2)])
            .expect("valid")
            .reads_content()
    );
}

#[test]
fn stage_names_parse_and_print() {
    for name in StageName::ALL {
        assert_eq!(name.as_str().parse::<StageName>().expect("parses"), name);
    }
    let e = "gzip".parse::<StageName>().expect_err("not a stage");
    assert!(e.to_string().contains("expected one of"), "{e}");
}

#[test]
fn bodiless_and_partial_responses_get_no_stage() {
    let spec = ChainSpec::new(vec![coalesce(8, 64)]).expect("valid");
    assert_eq!(
        plan(&spec, Method::GET, 200, &mut HeaderMap::new()),
        [StageName::Coalesce]
    );
    for status in [204, 206, 304, 101] {
        assert!(
            plan(&spec, Method::GET, status, &mut HeaderMap::new()).is_empty(),
            "{status}"
        );
    }
    assert!(plan(&spec, Method::HEAD, 200, &mut HeaderMap::new()).is_empty());
}

#[test]
fn x_accel_buffering_no_disables_coalescing_for_that_response() {
    let spec = ChainSpec::new(vec![coalesce(8, 64)]).expect("valid");
    let mut resp = head(&[("x-accel-buffering", "no")]);
    assert!(plan(&spec, Method::GET, 200, &mut resp).is_empty());
    let mut resp = head(&[("x-accel-buffering", "yes")]);
    assert_eq!(
        plan(&spec, Method::GET, 200, &mut resp),
        [StageName::Coalesce]
    );
}

#[test]
fn msgpack_json_applies_to_msgpack_only_and_edits_the_head() {
    let spec = ChainSpec::new(vec![StageSpec::MsgpackJson(MsgpackJsonSettings::default())])
        .expect("valid");
    let mut resp = head(&[
        ("content-type", "application/msgpack"),
        ("content-length", "3"),
        ("accept-ranges", "bytes"),
        ("etag", "\"v1\""),
    ]);
    assert_eq!(
        plan(&spec, Method::GET, 200, &mut resp),
        [StageName::MsgpackJson]
    );
    assert_eq!(resp[header::CONTENT_TYPE], "application/x-ndjson");
    assert!(resp.get(header::CONTENT_LENGTH).is_none());
    assert!(resp.get(header::ACCEPT_RANGES).is_none());
    assert_eq!(resp[header::ETAG], "W/\"v1\"");

    let mut json = head(&[("content-type", "application/json")]);
    assert!(plan(&spec, Method::GET, 200, &mut json).is_empty());
    let mut encoded = head(&[
        ("content-type", "application/x-msgpack"),
        ("content-encoding", "gzip"),
    ]);
    assert!(plan(&spec, Method::GET, 200, &mut encoded).is_empty());
}

#[test]
fn msgpack_json_reads_every_content_encoding_line_and_quoted_parameters() {
    let spec = ChainSpec::new(vec![StageSpec::MsgpackJson(MsgpackJsonSettings::default())])
        .expect("valid");
    // Since weir-http: `Content-Encoding` is a list over all its lines, as
    // for html-rewrite and compress (only the first line was read, whole).
    let mut encoded = head(&[
        ("content-type", "application/msgpack"),
        ("content-encoding", "identity"),
        ("content-encoding", "gzip"),
    ]);
    assert!(plan(&spec, Method::GET, 200, &mut encoded).is_empty());
    let mut identity = head(&[
        ("content-type", "application/msgpack"),
        ("content-encoding", "identity, identity"),
    ]);
    assert_eq!(
        plan(&spec, Method::GET, 200, &mut identity),
        [StageName::MsgpackJson]
    );
    // A quoted parameter may hold obs-text (RFC 9110 §5.6.4); the media
    // type is still msgpack (`to_str` refused the whole value before).
    let mut latin = head(&[]);
    latin.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_bytes(b"application/msgpack; note=\"caf\xe9\"").expect("value"),
    );
    assert_eq!(
        plan(&spec, Method::GET, 200, &mut latin),
        [StageName::MsgpackJson]
    );
}

#[test]
fn an_empty_chain_hands_batches_on_as_they_came() {
    let spec = ChainSpec::default();
    let mut chain = spec.plan(
        &Method::GET,
        &HeaderMap::new(),
        StatusCode::OK,
        &mut HeaderMap::new(),
    );
    assert!(chain.is_empty());
    let chunk = Bytes::from_static(b"as it came");
    let out = chain
        .transform(Some(Batch::one(chunk.clone())))
        .expect("ok")
        .expect("a batch");
    // The same chunk, not a copy.
    assert_eq!(out.chunks()[0].as_ptr(), chunk.as_ptr());
    assert_eq!(chain.idle().expect("ok"), None);
    assert_eq!(chain.transform(None).expect("ok"), None);
}

#[test]
fn idle_and_end_cascade_through_the_stages() {
    let spec = ChainSpec::new(vec![coalesce(100, 1000)]).expect("valid");
    let mut chain = spec.plan(
        &Method::GET,
        &HeaderMap::new(),
        StatusCode::OK,
        &mut HeaderMap::new(),
    );
    // Small chunks are held while input is ready...
    assert_eq!(chain.transform(Some(Batch::one("ab"))).expect("ok"), None);
    assert_eq!(chain.transform(Some(Batch::one("cd"))).expect("ok"), None);
    // ...and let go of when the upstream idles.
    let idle = chain.idle().expect("ok").expect("held bytes");
    assert_eq!(idle.chunks().concat(), b"abcd");
    assert_eq!(chain.idle().expect("ok"), None);
    assert_eq!(chain.transform(Some(Batch::one("ef"))).expect("ok"), None);
    let end = chain.transform(None).expect("ok").expect("held bytes");
    assert_eq!(end.chunks().concat(), b"ef");
}

#[test]
fn a_failing_stage_is_named_in_the_error() {
    let spec = ChainSpec::new(vec![StageSpec::MsgpackJson(MsgpackJsonSettings::default())])
        .expect("valid");
    let mut resp = head(&[("content-type", "application/msgpack")]);
    let mut chain = spec.plan(&Method::GET, &HeaderMap::new(), StatusCode::OK, &mut resp);
    // An array that promises two items and ends after one.
    let _ = chain
        .transform(Some(Batch::one(&b"\x92\x01"[..])))
        .expect("not yet");
    let err = chain.transform(None).expect_err("truncated value");
    let StreamError::Failed(reason) = &err else {
        panic!("{err:?}")
    };
    let stage = reason.downcast_ref::<StageError>().expect("a StageError");
    assert_eq!(stage.stage, StageName::MsgpackJson);
    assert!(err.to_string().contains("msgpack-json"), "{err}");
}

fn compress_chain() -> ChainSpec {
    ChainSpec::new(vec![StageSpec::Compress(Arc::new(
        CompressSettings::default(),
    ))])
    .expect("valid")
}

#[test]
fn a_head_gets_the_head_a_get_would_get_and_no_stage() {
    let spec = compress_chain();
    let fields = [
        ("content-type", "text/html"),
        ("content-length", "5000"),
        ("etag", "\"v1\""),
        ("accept-ranges", "bytes"),
    ];
    let mut get = head(&fields);
    assert_eq!(
        plan(&spec, Method::GET, 200, &mut get),
        [StageName::Compress]
    );
    let mut head_resp = head(&fields);
    assert!(plan(&spec, Method::HEAD, 200, &mut head_resp).is_empty());
    assert_eq!(get, head_resp, "HEAD and GET heads differ");
    assert_eq!(head_resp[header::CONTENT_ENCODING], "gzip");
}

#[test]
fn a_304_carries_the_vary_and_weak_validator_of_the_200() {
    let spec = compress_chain();
    let mut resp = head(&[("etag", "\"v1\"")]);
    assert!(plan(&spec, Method::GET, 304, &mut resp).is_empty());
    assert_eq!(resp[header::ETAG], "W/\"v1\"");
    assert_eq!(resp[header::VARY], "Accept-Encoding");
}

#[test]
fn no_transform_keeps_content_stages_away() {
    let spec = ChainSpec::new(vec![
        StageSpec::HtmlRewrite(Arc::new(
            toml::from_str::<HtmlRewriteSettings>("inject_body_end = \"<i>x</i>\"").expect("ok"),
        )),
        StageSpec::MsgpackJson(MsgpackJsonSettings::default()),
    ])
    .expect("valid");
    for ct in ["text/html", "application/msgpack"] {
        let mut resp = head(&[
            ("content-type", ct),
            ("cache-control", "public, no-transform"),
        ]);
        assert!(plan(&spec, Method::GET, 200, &mut resp).is_empty(), "{ct}");
        let mut resp = head(&[("content-type", ct)]);
        assert_eq!(plan(&spec, Method::GET, 200, &mut resp).len(), 1, "{ct}");
    }
}

#[test]
fn a_200_with_content_range_gets_no_stage() {
    let spec = compress_chain();
    let mut resp = head(&[
        ("content-type", "text/html"),
        ("content-range", "bytes 0-9/100"),
    ]);
    assert!(plan(&spec, Method::GET, 200, &mut resp).is_empty());
    assert!(resp.get(header::CONTENT_ENCODING).is_none());
}
