//! Inputs found by attacking the stage: nested non-string map keys (whose
//! JSON text doubles per level) and depth limits that would overflow a stack.

use weir_stream::{Batch, StreamError, Transform};
use weir_transform::msgpack::{MsgpackJsonSettings, MsgpackToJsonLines};

fn run(input: &[u8]) -> Result<Vec<u8>, StreamError> {
    let mut stage = MsgpackToJsonLines::new(MsgpackJsonSettings::default());
    let mut out = Vec::new();
    for piece in [Some(Batch::one(input.to_vec())), None] {
        if let Some(b) = stage.transform(piece)? {
            for c in b.chunks() {
                out.extend_from_slice(c);
            }
        }
    }
    Ok(out)
}

#[test]
fn nested_map_keys_fail_within_a_bounded_output_instead_of_doubling() {
    // {{{...{1: 1}...: 1}: 1}: 1}: 200 maps nested as keys, 401 bytes.
    let n = 200;
    let mut input = vec![0x81u8; n];
    input.push(0x01);
    input.extend(std::iter::repeat_n(0x01u8, n));
    let err = run(&input).expect_err("the JSON text would double per level");
    assert!(err.to_string().contains("JSON"), "{err}");
}

#[test]
fn a_few_nested_map_keys_still_render() {
    // {{1: 2}: 3} → {"{\"1\":2}":3}
    let out = run(&[0x81, 0x81, 0x01, 0x02, 0x03]).expect("renders");
    assert_eq!(out, b"{\"{\\\"1\\\":2}\":3}\n");
}

#[test]
fn max_depth_beyond_the_cap_is_refused_when_read() {
    let err = toml::from_str::<MsgpackJsonSettings>("max_depth = 10000").expect_err("over the cap");
    assert!(err.to_string().contains("1 to 256"), "{err}");
    assert!(toml::from_str::<MsgpackJsonSettings>("max_depth = 0").is_err());
    let ok: MsgpackJsonSettings = toml::from_str("max_depth = 256").expect("the cap itself");
    assert_eq!(ok.max_depth, 256);
}
