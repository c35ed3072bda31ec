//! `msgpack-json`: the JSON each msgpack format becomes, under every chunk
//! size, for the incremental decoder and its naive counter-example alike.

use bytes::Bytes;
use rmpv::Value;
use serde_json::{Value as Json, json};
use weir_stream::consume::{ConsumeOptions, bytes_sync};
use weir_stream::{Batch, BatchResult, StreamError, Transform, pull_sync_batches};
use weir_transform::msgpack::{MsgpackJsonSettings, MsgpackToJsonLines, NaiveMsgpackToJsonLines};

/// Runs `stage` over `input` cut into chunks of `chunk` bytes, one chunk per batch.
fn run<T: Transform>(stage: T, input: &[u8], chunk: usize) -> Result<Vec<u8>, StreamError> {
    let batches: Vec<BatchResult> = input
        .chunks(chunk.max(1))
        .map(|c| Ok(Batch::one(Bytes::copy_from_slice(c))))
        .collect();
    Ok(bytes_sync(pull_sync_batches(batches, stage), ConsumeOptions::new())?.to_vec())
}

fn incremental(input: &[u8], chunk: usize) -> Result<Vec<u8>, StreamError> {
    run(
        MsgpackToJsonLines::new(MsgpackJsonSettings::default()),
        input,
        chunk,
    )
}

fn naive(input: &[u8], chunk: usize) -> Result<Vec<u8>, StreamError> {
    run(
        NaiveMsgpackToJsonLines::new(MsgpackJsonSettings::default()),
        input,
        chunk,
    )
}

/// The chunk sizes every document is run under: 1, 7, 8192 and the whole.
fn chunk_sizes(len: usize) -> [usize; 4] {
    [1, 7, 8192, len.max(1)]
}

/// Each line of `out`, parsed. Fails unless every line (and only lines) ends with `\n`.
fn parse_lines(out: &[u8]) -> Vec<Json> {
    let text = std::str::from_utf8(out).unwrap();
    assert!(text.is_empty() || text.ends_with('\n'), "{text:?}");
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l:?}: {e}")))
        .collect()
}

/// Runs both decoders under every chunk size; asserts they give the same
/// bytes as the incremental one on the whole input; returns those bytes.
///
/// The naive decoder is quadratic in a value's length over the chunk size
/// (the point of the benchmark), so it gets 1-byte chunks only for inputs
/// up to 4 KiB, and 7-byte ones up to 64 KiB.
fn decode_everywhere(input: &[u8]) -> Vec<u8> {
    let reference = incremental(input, input.len().max(1)).unwrap();
    for chunk in chunk_sizes(input.len()) {
        assert_eq!(
            incremental(input, chunk).unwrap(),
            reference,
            "incremental, chunk {chunk}"
        );
        if input.len() <= chunk * 4096 {
            assert_eq!(
                naive(input, chunk).unwrap(),
                reference,
                "naive, chunk {chunk}"
            );
        }
    }
    reference
}

fn be16(n: usize) -> [u8; 2] {
    u16::try_from(n).unwrap().to_be_bytes()
}

fn be32(n: usize) -> [u8; 4] {
    u32::try_from(n).unwrap().to_be_bytes()
}

/// `s` with an explicit str header: `width` is 0 (fixstr), 8, 16 or 32.
fn str_as(width: u8, s: &str) -> Vec<u8> {
    let n = s.len();
    let mut v = match width {
        0 => vec![0xa0 | u8::try_from(n).unwrap()],
        8 => vec![0xd9, u8::try_from(n).unwrap()],
        16 => [&[0xda][..], &be16(n)].concat(),
        _ => [&[0xdb][..], &be32(n)].concat(),
    };
    v.extend_from_slice(s.as_bytes());
    v
}

/// `b` with an explicit bin header: 8, 16 or 32.
fn bin_as(width: u8, b: &[u8]) -> Vec<u8> {
    let n = b.len();
    let mut v = match width {
        8 => vec![0xc4, u8::try_from(n).unwrap()],
        16 => [&[0xc5][..], &be16(n)].concat(),
        _ => [&[0xc6][..], &be32(n)].concat(),
    };
    v.extend_from_slice(b);
    v
}

/// One case: msgpack bytes and the JSON value they must become.
fn cases() -> Vec<(Vec<u8>, Json)> {
    let long = "x".repeat(300);
    let longer = "y".repeat(1000);
    let bytes: Vec<u8> = (0..=255).collect();
    let mut c: Vec<(Vec<u8>, Json)> = vec![
        (vec![0xc0], json!(null)),
        (vec![0xc3], json!(true)),
        (vec![0xc2], json!(false)),
        (vec![0x7f], json!(127)),
        (vec![0xe0], json!(-32)),
        (vec![0xcc, 0xff], json!(255)),
        (vec![0xcd, 0x01, 0x00], json!(256)),
        (vec![0xce, 0xff, 0xff, 0xff, 0xff], json!(4_294_967_295u64)),
        (
            [&[0xcf][..], &u64::MAX.to_be_bytes()].concat(),
            json!(u64::MAX),
        ),
        (vec![0xd0, 0x80], json!(-128)),
        (vec![0xd1, 0x80, 0x00], json!(-32768)),
        (vec![0xd2, 0x80, 0, 0, 0], json!(i32::MIN)),
        (
            [&[0xd3][..], &i64::MIN.to_be_bytes()].concat(),
            json!(i64::MIN),
        ),
        // A small positive number in a wide signed format is still a number.
        (vec![0xd3, 0, 0, 0, 0, 0, 0, 0, 5], json!(5)),
        ([&[0xca][..], &1.5f32.to_be_bytes()].concat(), json!(1.5)),
        (
            [&[0xcb][..], &(-0.25f64).to_be_bytes()].concat(),
            json!(-0.25),
        ),
        (
            [&[0xcb][..], &1e300f64.to_be_bytes()].concat(),
            json!(1e300),
        ),
        ([&[0xcb][..], &f64::NAN.to_be_bytes()].concat(), json!(null)),
        (
            [&[0xca][..], &f32::INFINITY.to_be_bytes()].concat(),
            json!(null),
        ),
        (
            [&[0xcb][..], &f64::NEG_INFINITY.to_be_bytes()].concat(),
            json!(null),
        ),
        (str_as(0, ""), json!("")),
        (
            str_as(0, "héllo \"q\" \n\t\u{1}"),
            json!("héllo \"q\" \n\t\u{1}"),
        ),
        (str_as(8, "eight"), json!("eight")),
        (str_as(8, &long[..200]), json!(long[..200])),
        (str_as(16, "sixteen"), json!("sixteen")),
        (str_as(16, &long), json!(long)),
        (str_as(32, "thirty-two"), json!("thirty-two")),
        (str_as(32, &longer), json!(longer)),
        // Not UTF-8: replaced, not refused.
        (vec![0xa3, b'a', 0xff, b'b'], json!("a\u{fffd}b")),
        (bin_as(8, &[]), json!([])),
        (bin_as(8, &[1, 2, 255]), json!([1, 2, 255])),
        (bin_as(16, &bytes), json!(bytes)),
        (bin_as(32, &[0, 7]), json!([0, 7])),
        (vec![0xd4, 0x01, 0x09], json!({"ext": 1, "data": [9]})),
        (vec![0xd5, 0xff, 1, 2], json!({"ext": -1, "data": [1, 2]})),
        (
            vec![0xd6, 2, 1, 2, 3, 4],
            json!({"ext": 2, "data": [1, 2, 3, 4]}),
        ),
        (
            [&[0xd7, 3][..], &[8; 8]].concat(),
            json!({"ext": 3, "data": vec![8; 8]}),
        ),
        (
            [&[0xd8, 4][..], &[6; 16]].concat(),
            json!({"ext": 4, "data": vec![6; 16]}),
        ),
        (vec![0xc7, 0, 5], json!({"ext": 5, "data": []})),
        (vec![0xc7, 2, 6, 1, 2], json!({"ext": 6, "data": [1, 2]})),
        (vec![0xc8, 0, 1, 7, 3], json!({"ext": 7, "data": [3]})),
        (
            vec![0xc9, 0, 0, 0, 2, 0x80, 4, 5],
            json!({"ext": -128, "data": [4, 5]}),
        ),
        (vec![0x90], json!([])),
        (vec![0x93, 0x01, 0xc0, 0xa1, b'z'], json!([1, null, "z"])),
        (vec![0xdc, 0, 2, 0xc3, 0xc2], json!([true, false])),
        (vec![0xdd, 0, 0, 0, 1, 0x90], json!([[]])),
        (vec![0x80], json!({})),
        (vec![0x81, 0xa1, b'k', 0x05], json!({"k": 5})),
        (vec![0xde, 0, 1, 0xa1, b'a', 0x80], json!({"a": {}})),
        (
            vec![0xdf, 0, 0, 0, 1, 0xa1, b'b', 0x91, 0x02],
            json!({"b": [2]}),
        ),
        // Keys that are not strings: their own JSON text.
        (
            vec![
                0x84, 0x01, 0xa1, b'i', 0xc0, 0x02, 0xc3, 0x03, 0x92, 0x01, 0x02, 0x04,
            ],
            json!({"1": "i", "null": 2, "true": 3, "[1,2]": 4}),
        ),
        (
            vec![0x81, 0x81, 0xa1, b'k', 0x01, 0x02],
            json!({"{\"k\":1}": 2}),
        ),
    ];
    // An API-like record: nested maps and arrays of every kind above.
    let mut rec = vec![0x85];
    rec.extend(str_as(0, "id"));
    rec.extend([0xce, 0, 1, 0, 0]);
    rec.extend(str_as(0, "name"));
    rec.extend(str_as(8, "Ada"));
    rec.extend(str_as(0, "tags"));
    rec.extend([0x92]);
    rec.extend(str_as(0, "a"));
    rec.extend(str_as(16, "b"));
    rec.extend(str_as(0, "geo"));
    rec.extend([0x82]);
    rec.extend(str_as(0, "lat"));
    rec.extend([&[0xcb][..], &51.5f64.to_be_bytes()].concat());
    rec.extend(str_as(0, "raw"));
    rec.extend(bin_as(8, &[1]));
    rec.extend(str_as(0, "ok"));
    rec.extend([0xc3]);
    c.push((
        rec,
        json!({"id": 65536, "name": "Ada", "tags": ["a", "b"], "geo": {"lat": 51.5, "raw": [1]}, "ok": true}),
    ));
    c
}

#[test]
fn each_format_becomes_the_expected_json_under_every_chunk_size() {
    for (input, expected) in cases() {
        let out = decode_everywhere(&input);
        assert_eq!(parse_lines(&out), vec![expected], "input {input:02x?}");
    }
}

#[test]
fn concatenated_values_become_one_line_each() {
    let all = cases();
    let input: Vec<u8> = all.iter().flat_map(|(b, _)| b.clone()).collect();
    let expected: Vec<Json> = all.into_iter().map(|(_, j)| j).collect();
    let out = decode_everywhere(&input);
    assert_eq!(parse_lines(&out), expected);
}

#[test]
fn floats_keep_their_width() {
    // 0.1 as a float 32 is 0.100000001490116…; written as float 32 it reads "0.1".
    let input = [&[0xca][..], &0.1f32.to_be_bytes()].concat();
    assert_eq!(decode_everywhere(&input), b"0.1\n");
    let input = [&[0xcb][..], &0.1f64.to_be_bytes()].concat();
    assert_eq!(decode_everywhere(&input), b"0.1\n");
}

#[test]
fn empty_input_gives_no_output() {
    assert_eq!(incremental(b"", 1).unwrap(), b"");
    assert_eq!(naive(b"", 1).unwrap(), b"");
}

#[test]
fn a_value_is_written_by_the_call_that_completes_it_and_idle_adds_nothing() {
    let mut t = MsgpackToJsonLines::new(MsgpackJsonSettings::default());
    // 1, then the first two bytes of [2, 3].
    let out = t
        .transform(Some(Batch::one(&[0x01, 0x92, 0x02][..])))
        .unwrap();
    assert_eq!(out.unwrap().chunks(), [Bytes::from_static(b"1\n")]);
    assert_eq!(t.held_bytes(), 2);
    assert!(t.idle().unwrap().is_none());
    let out = t.transform(Some(Batch::one(&[0x03][..]))).unwrap();
    assert_eq!(out.unwrap().chunks(), [Bytes::from_static(b"[2,3]\n")]);
    assert_eq!(t.held_bytes(), 0);
    assert!(t.transform(None).unwrap().is_none());
}

#[test]
fn several_chunks_of_one_batch_give_one_output_chunk() {
    let mut t = MsgpackToJsonLines::new(MsgpackJsonSettings::default());
    let batch = Batch::from(vec![
        Bytes::from_static(&[0x01, 0x92]),
        Bytes::from_static(&[0x02]),
        Bytes::from_static(&[0x03, 0xc0]),
    ]);
    let out = t.transform(Some(batch)).unwrap().unwrap();
    assert_eq!(out.chunks(), [Bytes::from_static(b"1\n[2,3]\nnull\n")]);
}

/// A small deterministic generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A random value of at most `depth` more levels. Floats are multiples of
/// 1/8, exact in both widths and in short decimal; map keys are strings or
/// integers.
fn random_value(rng: &mut Rng, depth: u32) -> Value {
    let pick = if depth == 0 {
        rng.below(9)
    } else {
        rng.below(12)
    };
    match pick {
        0 => Value::Nil,
        1 => Value::Boolean(rng.below(2) == 1),
        2 => Value::from(rng.next()),
        3 => Value::from(rng.next() as i64),
        4 => Value::from(rng.below(1 << 20) as i64 - (1 << 19)),
        5 => Value::F32((rng.below(1 << 16) as f32 - 32768.0) / 8.0),
        6 => Value::F64((rng.below(1 << 40) as f64 - (1u64 << 39) as f64) / 8.0),
        7 => {
            let len = [0, 5, 31, 32, 255, 256, 300][rng.below(7) as usize];
            let s: String = (0..len)
                .map(|i| ['a', 'é', '"', '\n', '€', '\u{1F600}'][(i + rng.below(6) as usize) % 6])
                .collect();
            Value::from(s)
        }
        8 => {
            let len = [0, 1, 300][rng.below(3) as usize];
            let v: Vec<u8> = (0..len).map(|_| rng.below(256) as u8).collect();
            if rng.below(2) == 0 {
                Value::Binary(v)
            } else {
                Value::Ext(rng.below(256) as u8 as i8, v)
            }
        }
        9 | 10 => {
            let n = [0, 1, 3, 16, 40][rng.below(5) as usize];
            Value::Array((0..n).map(|_| random_value(rng, depth - 1)).collect())
        }
        _ => {
            let n = [0, 1, 4, 16, 20][rng.below(5) as usize];
            Value::Map(
                (0..n)
                    .map(|i| {
                        let key = if rng.below(4) == 0 {
                            Value::from(i)
                        } else {
                            Value::from(format!("k{i}"))
                        };
                        (key, random_value(rng, depth - 1))
                    })
                    .collect(),
            )
        }
    }
}

/// The JSON for `v`, worked out independently of the stage.
fn expected_json(v: &Value) -> Json {
    match v {
        Value::Nil => Json::Null,
        Value::Boolean(b) => json!(b),
        Value::Integer(i) => match i.as_u64() {
            Some(u) => json!(u),
            None => json!(i.as_i64().unwrap()),
        },
        Value::F32(f) => json!(f64::from(*f)),
        Value::F64(f) => json!(f),
        Value::String(s) => json!(s.as_str().unwrap()),
        Value::Binary(b) => json!(b),
        Value::Ext(t, d) => json!({"ext": t, "data": d}),
        Value::Array(a) => Json::Array(a.iter().map(expected_json).collect()),
        Value::Map(m) => Json::Object(
            m.iter()
                .map(|(k, v)| {
                    let key = match k {
                        Value::String(s) => s.as_str().unwrap().to_owned(),
                        Value::Integer(i) => i.to_string(),
                        other => panic!("no such key in these documents: {other}"),
                    };
                    (key, expected_json(v))
                })
                .collect(),
        ),
    }
}

#[test]
fn random_documents_agree_under_every_chunk_size() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for round in 0..40 {
        let values: Vec<Value> = (0..1 + rng.below(4))
            .map(|_| random_value(&mut rng, 4))
            .collect();
        let mut input = Vec::new();
        for v in &values {
            rmpv::encode::write_value(&mut input, v).unwrap();
        }
        let out = decode_everywhere(&input);
        let expected: Vec<Json> = values.iter().map(expected_json).collect();
        assert_eq!(parse_lines(&out), expected, "round {round}");
        // Uneven chunk sizes too.
        let cut = 1 + rng.below(300) as usize;
        assert_eq!(
            incremental(&input, cut).unwrap(),
            out,
            "round {round}, chunk {cut}"
        );
    }
}

#[test]
fn a_long_string_spans_many_chunks() {
    // 70 000 bytes: a str 32 when encoded by rmpv.
    let s: String = "ab€".repeat(14_000);
    let mut input = Vec::new();
    rmpv::encode::write_value(&mut input, &Value::from(s.as_str())).unwrap();
    assert_eq!(input[0], 0xdb);
    let out = decode_everywhere(&input);
    assert_eq!(parse_lines(&out), vec![json!(s)]);
}

#[test]
fn the_stages_can_go_into_a_body() {
    fn body_stage<T: Transform + Send + 'static>(_: &T) {}
    body_stage(&MsgpackToJsonLines::new(MsgpackJsonSettings::default()));
    body_stage(&NaiveMsgpackToJsonLines::new(MsgpackJsonSettings::default()));
    let mut t = MsgpackToJsonLines::new(MsgpackJsonSettings::default());
    assert_eq!(
        t.transform(Some(Batch::one(&[0xc0][..])))
            .unwrap()
            .unwrap()
            .byte_len(),
        5
    );
}
