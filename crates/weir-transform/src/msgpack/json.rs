//! One decoded msgpack value as JSON text. The mapping is documented on
//! [`super::MsgpackToJsonLines`].

use std::borrow::Cow;

use rmpv::Value;
use serde::Serialize;
use serde::ser::{Error as _, SerializeMap, Serializer};

/// Writes `value` as one line of JSON (compact, then `\n`) to `out`.
pub(crate) fn write_line(out: &mut Vec<u8>, value: &Value) -> Result<(), serde_json::Error> {
    serde_json::to_writer(&mut *out, &Json(value))?;
    out.push(b'\n');
    Ok(())
}

/// A msgpack value, serialized as JSON.
struct Json<'a>(&'a Value);

/// A msgpack map key, serialized as a JSON object key (a string).
struct Key<'a>(&'a Value);

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
            Value::Array(items) => s.collect_seq(items.iter().map(Json)),
            Value::Map(pairs) => {
                let mut map = s.serialize_map(Some(pairs.len()))?;
                for (k, v) in pairs {
                    map.serialize_entry(&Key(k), &Json(v))?;
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
                let json = serde_json::to_string(&Json(other)).map_err(S::Error::custom)?;
                s.serialize_str(&json)
            }
        }
    }
}
