//! One decoded msgpack value as JSON text. The mapping is documented on
//! [`super::MsgpackToJsonLines`].

use std::borrow::Cow;
use std::cell::Cell;
use std::io;

use rmpv::Value;
use serde::Serialize;
use serde::ser::{Error as _, SerializeMap, Serializer};

/// The most JSON bytes one value of `encoded_len` msgpack bytes may write,
/// counting the text of non-string map keys as they are built.
///
/// Honest output grows by at most 6x (a byte of `bin` as `255,`, a control
/// character in a str as `\u00XX`); a non-string key is its own JSON text
/// quoted as a string, and a key of a key of a key is escaped again at each
/// level, so without a bound a few hundred bytes of nested map keys would
/// write gigabytes. Past the budget the value fails with an error.
pub(crate) fn output_budget(encoded_len: usize) -> usize {
    encoded_len.saturating_mul(8).saturating_add(1024)
}

/// Writes `value` as one line of JSON (compact, then `\n`) to `out`,
/// writing at most `budget` bytes in all (see [`output_budget`]).
pub(crate) fn write_line(
    out: &mut Vec<u8>,
    value: &Value,
    budget: usize,
) -> Result<(), serde_json::Error> {
    let left = Cell::new(budget);
    let value = Json(value, &left);
    serde_json::to_writer(
        Bounded {
            out: &mut *out,
            left: &left,
        },
        &value,
    )?;
    out.push(b'\n');
    Ok(())
}

/// A writer that fails once `left` bytes have been written through any
/// writer sharing the same budget.
struct Bounded<'a> {
    out: &'a mut Vec<u8>,
    left: &'a Cell<usize>,
}

impl io::Write for Bounded<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let left = self.left.get();
        if buf.len() > left {
            return Err(io::Error::other("the JSON text exceeds its output budget"));
        }
        self.left.set(left - buf.len());
        self.out.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// A msgpack value, serialized as JSON, charged to a shared output budget.
struct Json<'a>(&'a Value, &'a Cell<usize>);

/// A msgpack map key, serialized as a JSON object key (a string).
struct Key<'a>(&'a Value, &'a Cell<usize>);

/// A msgpack str as text: invalid UTF-8 becomes U+FFFD.
fn text(s: &rmpv::Utf8String) -> Cow<'_, str> {
    match s.as_str() {
        Some(s) => Cow::Borrowed(s),
        None => String::from_utf8_lossy(s.as_bytes()),
    }
}

impl Serialize for Json<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            Value::Nil => s.serialize_unit(),
            Value::Boolean(b) => s.serialize_bool(*b),
            Value::Integer(i) => match (i.as_u64(), i.as_i64()) {
                (Some(u), _) => s.serialize_u64(u),
                (None, Some(n)) => s.serialize_i64(n),
                // An rmpv integer is always one or the other.
                (None, None) => s.serialize_unit(),
            },
            Value::F32(f) if f.is_finite() => s.serialize_f32(*f),
            Value::F64(f) if f.is_finite() => s.serialize_f64(*f),
            Value::F32(_) | Value::F64(_) => s.serialize_unit(),
            Value::String(t) => s.serialize_str(&text(t)),
            Value::Binary(b) => s.collect_seq(b),
            Value::Array(items) => s.collect_seq(items.iter().map(|v| Json(v, self.1))),
            Value::Map(pairs) => {
                let mut map = s.serialize_map(Some(pairs.len()))?;
                for (k, v) in pairs {
                    map.serialize_entry(&Key(k, self.1), &Json(v, self.1))?;
                }
                map.end()
            }
            Value::Ext(tag, data) => {
                let mut map = s.serialize_map(Some(2))?;
                map.serialize_entry("ext", tag)?;
                map.serialize_entry("data", data)?;
                map.end()
            }
        }
    }
}

impl Serialize for Key<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            Value::String(t) => s.serialize_str(&text(t)),
            other => {
                let mut json = Vec::new();
                let bounded = Bounded {
                    out: &mut json,
                    left: self.1,
                };
                serde_json::to_writer(bounded, &Json(other, self.1)).map_err(S::Error::custom)?;
                s.serialize_str(&String::from_utf8_lossy(&json))
            }
        }
    }
}
