//! Canonical JSON (object keys sorted at every depth, no whitespace) written straight from a
//! [`Serialize`] value: the same bytes as [`crate::journal::canonical_json`] of the value's
//! `serde_json::to_value`, without building that value first. The journal hashes every
//! model request this way (a request carries the whole conversation and every tool schema,
//! so the tree cost more than the rest of the lookup). What it does not reproduce exactly
//! (byte arrays as keys, 128-bit integers out of range, serde_json's private number and raw
//! value types, a key given twice) is refused, and the caller takes the tree path.

use serde::Serialize;
use serde::ser::{self, Impossible};
use serde_json::Value;

/// A value this writer does not reproduce exactly (the caller builds the tree instead).
#[derive(Debug)]
pub(crate) struct Unsupported;

impl std::fmt::Display for Unsupported {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("not written canonically without a tree")
    }
}

impl std::error::Error for Unsupported {}

impl ser::Error for Unsupported {
    fn custom<T: std::fmt::Display>(_: T) -> Self {
        Unsupported
    }
}

/// Appends the canonical JSON of `v` to `out`, leaving out the top-level key `drop` (when
/// `v` is an object). On `Err`, `out` holds a partial text: the caller clears it.
pub(crate) fn write<T: Serialize + ?Sized>(
    v: &T,
    drop: Option<&str>,
    out: &mut Vec<u8>,
) -> Result<(), Unsupported> {
    let mut bufs = Bufs::default();
    v.serialize(Canon {
        out,
        bufs: &mut bufs,
        drop,
    })
}

/// One object entry written in place: `"key":value` at `out[start..end]`, the key's JSON
/// text ending at `key_end`; `escaped` when that text is not the key's bytes in quotes.
#[derive(Clone, Copy)]
struct Span {
    start: usize,
    key_end: usize,
    end: usize,
    escaped: bool,
}

/// What every object being written shares: the entries of the open objects (each owns
/// the part above where its own began) and a buffer to reorder entries through.
#[derive(Default)]
struct Bufs {
    spans: Vec<Span>,
    scratch: Vec<u8>,
}

/// The key of an entry as the tree sorts it (its bytes, unescaped).
fn key_of<'b>(out: &'b [u8], s: &Span) -> std::borrow::Cow<'b, [u8]> {
    let text = &out[s.start..s.key_end];
    if s.escaped {
        // Written by serde_json from a `str` just before: it reads back.
        let key: String = serde_json::from_slice(text).unwrap_or_default();
        std::borrow::Cow::Owned(key.into_bytes())
    } else {
        std::borrow::Cow::Borrowed(&text[1..text.len() - 1])
    }
}

/// JSON text of a string (serde_json's escaping, as a `Value::String` is written).
fn string(out: &mut Vec<u8>, s: &str) -> Result<(), Unsupported> {
    serde_json::to_writer(&mut *out, s).map_err(|_| Unsupported)
}

/// A scalar as serde_json's value tree writes it (floats go through `Value::from`, which is
/// how `to_value` stores them: a non-finite one becomes `null`).
fn scalar(out: &mut Vec<u8>, v: Value) -> Result<(), Unsupported> {
    serde_json::to_writer(&mut *out, &v).map_err(|_| Unsupported)
}

/// serde_json's own newtypes (arbitrary-precision numbers, raw values) serialize as
/// structs with these names.
fn private(name: &str) -> bool {
    name.starts_with("$serde_json::private")
}

struct Canon<'a> {
    out: &'a mut Vec<u8>,
    bufs: &'a mut Bufs,
    drop: Option<&'a str>,
}

impl<'a> ser::Serializer for Canon<'a> {
    type Ok = ();
    type Error = Unsupported;
    type SerializeSeq = Seq<'a>;
    type SerializeTuple = Seq<'a>;
    type SerializeTupleStruct = Seq<'a>;
    type SerializeTupleVariant = Seq<'a>;
    type SerializeMap = Obj<'a>;
    type SerializeStruct = Obj<'a>;
    type SerializeStructVariant = Obj<'a>;

    fn serialize_bool(self, v: bool) -> Result<(), Unsupported> {
        self.out
            .extend_from_slice(if v { b"true" } else { b"false" });
        Ok(())
    }
    fn serialize_i8(self, v: i8) -> Result<(), Unsupported> {
        self.serialize_i64(i64::from(v))
    }
    fn serialize_i16(self, v: i16) -> Result<(), Unsupported> {
        self.serialize_i64(i64::from(v))
    }
    fn serialize_i32(self, v: i32) -> Result<(), Unsupported> {
        self.serialize_i64(i64::from(v))
    }
    fn serialize_i64(self, v: i64) -> Result<(), Unsupported> {
        scalar(self.out, Value::from(v))
    }
    fn serialize_i128(self, v: i128) -> Result<(), Unsupported> {
        match (i64::try_from(v), u64::try_from(v)) {
            (Ok(x), _) => self.serialize_i64(x),
            (_, Ok(x)) => self.serialize_u64(x),
            _ => Err(Unsupported),
        }
    }
    fn serialize_u8(self, v: u8) -> Result<(), Unsupported> {
        self.serialize_u64(u64::from(v))
    }
    fn serialize_u16(self, v: u16) -> Result<(), Unsupported> {
        self.serialize_u64(u64::from(v))
    }
    fn serialize_u32(self, v: u32) -> Result<(), Unsupported> {
        self.serialize_u64(u64::from(v))
    }
    fn serialize_u64(self, v: u64) -> Result<(), Unsupported> {
        scalar(self.out, Value::from(v))
    }
    fn serialize_u128(self, v: u128) -> Result<(), Unsupported> {
        u64::try_from(v)
            .map_err(|_| Unsupported)
            .and_then(|x| self.serialize_u64(x))
    }
    fn serialize_f32(self, v: f32) -> Result<(), Unsupported> {
        scalar(self.out, Value::from(v))
    }
    fn serialize_f64(self, v: f64) -> Result<(), Unsupported> {
        scalar(self.out, Value::from(v))
    }
    fn serialize_char(self, v: char) -> Result<(), Unsupported> {
        string(self.out, v.encode_utf8(&mut [0; 4]))
    }
    fn serialize_str(self, v: &str) -> Result<(), Unsupported> {
        string(self.out, v)
    }
    fn serialize_bytes(self, v: &[u8]) -> Result<(), Unsupported> {
        // The tree keeps bytes as an array of numbers.
        self.out.push(b'[');
        for (i, b) in v.iter().enumerate() {
            if i > 0 {
                self.out.push(b',');
            }
            scalar(self.out, Value::from(*b))?;
        }
        self.out.push(b']');
        Ok(())
    }
    fn serialize_none(self) -> Result<(), Unsupported> {
        self.serialize_unit()
    }
    fn serialize_some<T: Serialize + ?Sized>(self, v: &T) -> Result<(), Unsupported> {
        v.serialize(self)
    }
    fn serialize_unit(self) -> Result<(), Unsupported> {
        self.out.extend_from_slice(b"null");
        Ok(())
    }
    fn serialize_unit_struct(self, _name: &'static str) -> Result<(), Unsupported> {
        self.serialize_unit()
    }
    fn serialize_unit_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
    ) -> Result<(), Unsupported> {
        string(self.out, variant)
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        name: &'static str,
        v: &T,
    ) -> Result<(), Unsupported> {
        if private(name) {
            return Err(Unsupported);
        }
        v.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        v: &T,
    ) -> Result<(), Unsupported> {
        self.out.push(b'{');
        string(self.out, variant)?;
        self.out.push(b':');
        v.serialize(Canon {
            out: &mut *self.out,
            bufs: &mut *self.bufs,
            drop: None,
        })?;
        self.out.push(b'}');
        Ok(())
    }
    fn serialize_seq(self, _len: Option<usize>) -> Result<Seq<'a>, Unsupported> {
        self.out.push(b'[');
        Ok(Seq {
            out: self.out,
            bufs: self.bufs,
            first: true,
            variant: false,
        })
    }
    fn serialize_tuple(self, len: usize) -> Result<Seq<'a>, Unsupported> {
        self.serialize_seq(Some(len))
    }
    fn serialize_tuple_struct(
        self,
        _name: &'static str,
        len: usize,
    ) -> Result<Seq<'a>, Unsupported> {
        self.serialize_seq(Some(len))
    }
    fn serialize_tuple_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        _len: usize,
    ) -> Result<Seq<'a>, Unsupported> {
        self.out.push(b'{');
        string(self.out, variant)?;
        self.out.extend_from_slice(b":[");
        Ok(Seq {
            out: self.out,
            bufs: self.bufs,
            first: true,
            variant: true,
        })
    }
    fn serialize_map(self, _len: Option<usize>) -> Result<Obj<'a>, Unsupported> {
        Obj::new(self, None)
    }
    fn serialize_struct(self, name: &'static str, _len: usize) -> Result<Obj<'a>, Unsupported> {
        if private(name) {
            return Err(Unsupported);
        }
        Obj::new(self, None)
    }
    fn serialize_struct_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        _len: usize,
    ) -> Result<Obj<'a>, Unsupported> {
        Obj::new(Canon { drop: None, ..self }, Some(variant))
    }
}

/// An array being written (`variant`: inside a `{"variant":` wrapper to close too).
struct Seq<'a> {
    out: &'a mut Vec<u8>,
    bufs: &'a mut Bufs,
    first: bool,
    variant: bool,
}

impl Seq<'_> {
    fn element<T: Serialize + ?Sized>(&mut self, v: &T) -> Result<(), Unsupported> {
        if !self.first {
            self.out.push(b',');
        }
        self.first = false;
        v.serialize(Canon {
            out: &mut *self.out,
            bufs: &mut *self.bufs,
            drop: None,
        })
    }
    fn close(self) -> Result<(), Unsupported> {
        self.out.push(b']');
        if self.variant {
            self.out.push(b'}');
        }
        Ok(())
    }
}

/// The array traits, all one thing here: `$trait` with its element method `$method`.
macro_rules! seq_impl {
    ($trait:ident, $method:ident) => {
        impl ser::$trait for Seq<'_> {
            type Ok = ();
            type Error = Unsupported;
            fn $method<T: Serialize + ?Sized>(&mut self, v: &T) -> Result<(), Unsupported> {
                self.element(v)
            }
            fn end(self) -> Result<(), Unsupported> {
                self.close()
            }
        }
    };
}

seq_impl!(SerializeSeq, serialize_element);
seq_impl!(SerializeTuple, serialize_element);
seq_impl!(SerializeTupleStruct, serialize_field);
seq_impl!(SerializeTupleVariant, serialize_field);

/// An object being written: its entries go straight to `out` in the order they come, then
/// are put in key order at the end should they not be in it already (a struct's fields
/// seldom are, a `serde_json` map's always are). `variant`: wrapped in `{"variant": ...}`.
struct Obj<'a> {
    out: &'a mut Vec<u8>,
    bufs: &'a mut Bufs,
    drop: Option<&'a str>,
    variant: bool,
    /// Where the entries begin (after the `{`).
    body: usize,
    /// The first of this object's entries in `bufs.spans`.
    base: usize,
    /// A map key written and its value not yet: `(where the entry began, where the key
    /// ends, escaped)`, or `None` inside when the key is the one to leave out.
    key: Option<Option<(usize, usize, bool)>>,
    /// Where `out` ended before the pending key (and its comma).
    before_key: usize,
}

impl<'a> Obj<'a> {
    fn new(c: Canon<'a>, variant: Option<&'static str>) -> Result<Self, Unsupported> {
        if let Some(v) = variant {
            c.out.push(b'{');
            string(c.out, v)?;
            c.out.push(b':');
        }
        c.out.push(b'{');
        Ok(Self {
            body: c.out.len(),
            base: c.bufs.spans.len(),
            out: c.out,
            bufs: c.bufs,
            drop: c.drop,
            variant: variant.is_some(),
            key: None,
            before_key: 0,
        })
    }

    /// Starts an entry: its comma (unless first) and key text; `None` when the key is the
    /// one to leave out (nothing is left written).
    fn open(
        &mut self,
        write_key: impl FnOnce(&mut Vec<u8>) -> Result<(), Unsupported>,
    ) -> Result<Option<(usize, usize, bool)>, Unsupported> {
        self.before_key = self.out.len();
        if self.bufs.spans.len() > self.base {
            self.out.push(b',');
        }
        let start = self.out.len();
        write_key(self.out)?;
        let key_end = self.out.len();
        // serde_json escapes with a backslash, and a backslash itself.
        let escaped = self.out[start + 1..key_end - 1].contains(&b'\\');
        let span = Span {
            start,
            key_end,
            end: key_end,
            escaped,
        };
        if let Some(drop) = self.drop
            && *key_of(self.out, &span) == *drop.as_bytes()
        {
            self.out.truncate(self.before_key);
            return Ok(None);
        }
        Ok(Some((start, key_end, escaped)))
    }

    /// Ends the entry `open` started with its value.
    fn value<T: Serialize + ?Sized>(
        &mut self,
        opened: Option<(usize, usize, bool)>,
        v: &T,
    ) -> Result<(), Unsupported> {
        let Some((start, key_end, escaped)) = opened else {
            return Ok(());
        };
        self.out.push(b':');
        v.serialize(Canon {
            out: &mut *self.out,
            bufs: &mut *self.bufs,
            drop: None,
        })?;
        self.bufs.spans.push(Span {
            start,
            key_end,
            end: self.out.len(),
            escaped,
        });
        Ok(())
    }

    fn entry<T: Serialize + ?Sized>(&mut self, key: &str, v: &T) -> Result<(), Unsupported> {
        let opened = self.open(|out| string(out, key))?;
        self.value(opened, v)
    }

    fn close(self) -> Result<(), Unsupported> {
        let Self {
            out,
            bufs,
            body,
            base,
            variant,
            ..
        } = self;
        let spans = &mut bufs.spans[base..];
        let order = |a: &Span, b: &Span| key_of(out, a).cmp(&key_of(out, b));
        if !spans
            .windows(2)
            .all(|w| order(&w[0], &w[1]) == std::cmp::Ordering::Less)
        {
            spans.sort_unstable_by(order);
            if spans
                .windows(2)
                .any(|w| order(&w[0], &w[1]) == std::cmp::Ordering::Equal)
            {
                // The tree keeps the last of a repeated key: not reproduced here.
                return Err(Unsupported);
            }
            let scratch = &mut bufs.scratch;
            scratch.clear();
            scratch.extend_from_slice(&out[body..]);
            out.truncate(body);
            for (i, s) in spans.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                out.extend_from_slice(&scratch[s.start - body..s.end - body]);
            }
        }
        bufs.spans.truncate(base);
        out.push(b'}');
        if variant {
            out.push(b'}');
        }
        Ok(())
    }
}

impl ser::SerializeMap for Obj<'_> {
    type Ok = ();
    type Error = Unsupported;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<(), Unsupported> {
        if self.key.is_some() {
            return Err(Unsupported);
        }
        let opened = self.open(|out| key.serialize(KeyText(out)))?;
        self.key = Some(opened);
        Ok(())
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, v: &T) -> Result<(), Unsupported> {
        let opened = self.key.take().ok_or(Unsupported)?;
        self.value(opened, v)
    }
    fn end(self) -> Result<(), Unsupported> {
        self.close()
    }
}

/// The struct traits (a struct and a struct variant gather their fields alike).
macro_rules! struct_impl {
    ($trait:ident) => {
        impl ser::$trait for Obj<'_> {
            type Ok = ();
            type Error = Unsupported;
            fn serialize_field<T: Serialize + ?Sized>(
                &mut self,
                key: &'static str,
                v: &T,
            ) -> Result<(), Unsupported> {
                self.entry(key, v)
            }
            fn end(self) -> Result<(), Unsupported> {
                self.close()
            }
        }
    };
}

struct_impl!(SerializeStruct);
struct_impl!(SerializeStructVariant);

/// Integer keys: their digits, as the tree's keys have them.
macro_rules! digits {
    ($($method:ident: $t:ty),*) => {
        $(fn $method(self, v: $t) -> Result<(), Unsupported> {
            use std::io::Write as _;
            write!(self.0, "\"{v}\"").map_err(|_| Unsupported)
        })*
    };
}

/// A map key as the tree's object key: strings, chars and integers (as their digits);
/// anything else is refused.
struct KeyText<'a>(&'a mut Vec<u8>);

impl ser::Serializer for KeyText<'_> {
    type Ok = ();
    type Error = Unsupported;
    type SerializeSeq = Impossible<(), Unsupported>;
    type SerializeTuple = Impossible<(), Unsupported>;
    type SerializeTupleStruct = Impossible<(), Unsupported>;
    type SerializeTupleVariant = Impossible<(), Unsupported>;
    type SerializeMap = Impossible<(), Unsupported>;
    type SerializeStruct = Impossible<(), Unsupported>;
    type SerializeStructVariant = Impossible<(), Unsupported>;

    digits!(
        serialize_i8: i8,
        serialize_i16: i16,
        serialize_i32: i32,
        serialize_i64: i64,
        serialize_u8: u8,
        serialize_u16: u16,
        serialize_u32: u32,
        serialize_u64: u64
    );
    fn serialize_bool(self, _v: bool) -> Result<(), Unsupported> {
        Err(Unsupported)
    }
    fn serialize_f32(self, _v: f32) -> Result<(), Unsupported> {
        Err(Unsupported)
    }
    fn serialize_f64(self, _v: f64) -> Result<(), Unsupported> {
        Err(Unsupported)
    }
    fn serialize_char(self, v: char) -> Result<(), Unsupported> {
        string(self.0, v.encode_utf8(&mut [0; 4]))
    }
    fn serialize_str(self, v: &str) -> Result<(), Unsupported> {
        string(self.0, v)
    }
    fn serialize_bytes(self, _v: &[u8]) -> Result<(), Unsupported> {
        Err(Unsupported)
    }
    fn serialize_none(self) -> Result<(), Unsupported> {
        Err(Unsupported)
    }
    fn serialize_some<T: Serialize + ?Sized>(self, _v: &T) -> Result<(), Unsupported> {
        Err(Unsupported)
    }
    fn serialize_unit(self) -> Result<(), Unsupported> {
        Err(Unsupported)
    }
    fn serialize_unit_struct(self, _name: &'static str) -> Result<(), Unsupported> {
        Err(Unsupported)
    }
    fn serialize_unit_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
    ) -> Result<(), Unsupported> {
        string(self.0, variant)
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        name: &'static str,
        v: &T,
    ) -> Result<(), Unsupported> {
        if private(name) {
            return Err(Unsupported);
        }
        v.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        _index: u32,
        _variant: &'static str,
        _v: &T,
    ) -> Result<(), Unsupported> {
        Err(Unsupported)
    }
    fn serialize_seq(self, _len: Option<usize>) -> Result<Self::SerializeSeq, Unsupported> {
        Err(Unsupported)
    }
    fn serialize_tuple(self, _len: usize) -> Result<Self::SerializeTuple, Unsupported> {
        Err(Unsupported)
    }
    fn serialize_tuple_struct(
        self,
        _name: &'static str,
        _len: usize,
    ) -> Result<Self::SerializeTupleStruct, Unsupported> {
        Err(Unsupported)
    }
    fn serialize_tuple_variant(
        self,
        _name: &'static str,
        _index: u32,
        _variant: &'static str,
        _len: usize,
    ) -> Result<Self::SerializeTupleVariant, Unsupported> {
        Err(Unsupported)
    }
    fn serialize_map(self, _len: Option<usize>) -> Result<Self::SerializeMap, Unsupported> {
        Err(Unsupported)
    }
    fn serialize_struct(
        self,
        _name: &'static str,
        _len: usize,
    ) -> Result<Self::SerializeStruct, Unsupported> {
        Err(Unsupported)
    }
    fn serialize_struct_variant(
        self,
        _name: &'static str,
        _index: u32,
        _variant: &'static str,
        _len: usize,
    ) -> Result<Self::SerializeStructVariant, Unsupported> {
        Err(Unsupported)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::canonical_json;
    use rath_provider::{ProviderRequest, ToolSchema};
    use rath_session::{Chunk, Session, Stamper, ToolCall};
    use serde_json::json;

    fn direct<T: Serialize>(v: &T, drop: Option<&str>) -> Result<String, Unsupported> {
        let mut out = Vec::new();
        write(v, drop, &mut out)?;
        Ok(String::from_utf8(out).expect("JSON text is UTF-8"))
    }

    fn via_tree<T: Serialize>(v: &T, drop: Option<&str>) -> String {
        let mut tree = serde_json::to_value(v).expect("serializes");
        if let (Some(k), Value::Object(m)) = (drop, &mut tree) {
            m.remove(k);
        }
        canonical_json(&tree)
    }

    /// A small generator (xorshift): the same values on every run.
    struct Gen(u64);

    impl Gen {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn pick(&mut self, n: u64) -> u64 {
            self.next() % n
        }
        fn text(&mut self) -> String {
            const PARTS: [&str; 12] = [
                "a",
                "Z",
                "é",
                "\"",
                "\\",
                "\n",
                "\u{1}",
                "\u{7f}",
                "日本",
                "😀",
                " ",
                "request_id",
            ];
            (0..self.pick(6))
                .map(|_| PARTS[self.pick(PARTS.len() as u64) as usize])
                .collect()
        }
        fn value(&mut self, depth: u32) -> Value {
            match self.pick(if depth == 0 { 6 } else { 8 }) {
                0 => Value::Null,
                1 => Value::Bool(self.pick(2) == 0),
                2 => json!(self.next() as i64),
                3 => json!(self.next()),
                4 => {
                    const FLOATS: [f64; 8] = [0.1, -0.0, 1e300, 2.5e-8, -1.5, 0.7, 123456.789, 1.0];
                    json!(FLOATS[self.pick(8) as usize])
                }
                5 => Value::String(self.text()),
                6 => Value::Array((0..self.pick(4)).map(|_| self.value(depth - 1)).collect()),
                _ => Value::Object(
                    (0..self.pick(6))
                        .map(|_| (self.text(), self.value(depth - 1)))
                        .collect(),
                ),
            }
        }
    }

    #[test]
    fn values_come_out_as_the_tree_path_writes_them() {
        let mut g = Gen(0x9E37_79B9_7F4A_7C15);
        for _ in 0..2000 {
            let v = g.value(4);
            assert_eq!(direct(&v, None).unwrap(), canonical_json(&v), "{v}");
        }
    }

    #[test]
    fn a_request_comes_out_as_its_normalized_tree_without_its_id() {
        let s = Session::user_with("plan it", Stamper::seeded(3))
            .push(Chunk::system("Be brief. \"quoted\"\n"))
            .push(Chunk::assistant(
                Some("calling".into()),
                Some(vec![ToolCall::function(
                    "c1",
                    "noop",
                    r#"{"i": 1, "request_id": "x"}"#,
                )]),
            ))
            .push(Chunk::tool_result("c1", "noop", "{}"))
            .push(Chunk::assistant_text("done é 😀"));
        let tools = vec![ToolSchema::new(
            "noop",
            "Do nothing.",
            json!({"type": "object", "properties": {"i": {"type": "integer"}}, "required": ["i"]}),
        )];
        let mut req = ProviderRequest::from_session(&s, tools).with_agent("a");
        req.temperature = Some(0.7);
        req.seed = Some(-3);
        req.max_tokens = Some(512);
        req.thinking.insert(
            "c1".into(),
            vec![json!({"type": "thinking", "signature": "s"})],
        );
        let text = direct(&req, Some("request_id")).unwrap();
        assert_eq!(text, canonical_json(&req.normalized()));
        assert!(!text.contains(&req.request_id));
        assert!(
            text.contains("request_id"),
            "only the top-level key is left out"
        );
        // A request with the defaults too (no temperature, no thinking).
        let plain = ProviderRequest::from_session(&s, Vec::new());
        assert_eq!(
            direct(&plain, Some("request_id")).unwrap(),
            canonical_json(&plain.normalized())
        );
    }

    /// An object whose entries come in the order given (a struct's fields do not come
    /// sorted; a `serde_json` map's do).
    struct Unordered(Vec<(String, Value)>);

    impl Serialize for Unordered {
        fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            use serde::ser::SerializeMap;
            let mut m = s.serialize_map(Some(self.0.len()))?;
            for (k, v) in &self.0 {
                m.serialize_entry(k, v)?;
            }
            m.end()
        }
    }

    #[test]
    fn entries_in_any_order_come_out_sorted_as_the_tree_sorts_them() {
        let mut g = Gen(0x2545_F491_4F6C_DD1D);
        for _ in 0..2000 {
            let Value::Object(m) = g.value(3) else {
                continue;
            };
            let mut entries: Vec<(String, Value)> = m.into_iter().collect();
            // Reversed, then rotated: most orders a writer meets, escaped keys among them.
            entries.reverse();
            let turn = g.pick(entries.len().max(1) as u64) as usize;
            entries.rotate_left(turn);
            let v = Unordered(entries);
            assert_eq!(direct(&v, None).unwrap(), via_tree(&v, None));
            if let Some((k, _)) = v.0.first() {
                assert_eq!(direct(&v, Some(k)).unwrap(), via_tree(&v, Some(k)));
            }
        }
    }

    #[derive(Serialize)]
    enum Shape {
        Unit,
        New(u8),
        Tuple(i32, String),
        Struct { z: f32, a: Option<char> },
    }

    #[derive(Serialize)]
    struct Many {
        shapes: Vec<Shape>,
        pair: (u16, bool),
        bytes: serde_bytes_like::Bytes,
        keyed: std::collections::BTreeMap<u32, i128>,
        huge: u128,
        nan: f64,
        #[serde(flatten)]
        rest: std::collections::BTreeMap<String, Value>,
    }

    /// Bytes through `serialize_bytes` (what `serde_bytes` does), without the crate.
    mod serde_bytes_like {
        pub struct Bytes(pub Vec<u8>);
        impl serde::Serialize for Bytes {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_bytes(&self.0)
            }
        }
    }

    #[test]
    fn every_serde_shape_matches_the_tree_path() {
        let v = Many {
            shapes: vec![
                Shape::Unit,
                Shape::New(7),
                Shape::Tuple(-1, "t".into()),
                Shape::Struct {
                    z: 0.1,
                    a: Some('é'),
                },
                Shape::Struct { z: 2.0, a: None },
            ],
            pair: (9, true),
            bytes: serde_bytes_like::Bytes(vec![0, 255, 16]),
            keyed: [(10, -5), (2, i128::from(u64::MAX))].into_iter().collect(),
            huge: 1 << 60,
            nan: f64::NAN,
            rest: [
                ("b".to_string(), json!([1])),
                ("a".to_string(), json!(null)),
            ]
            .into_iter()
            .collect(),
        };
        assert_eq!(direct(&v, None).unwrap(), via_tree(&v, None));
        assert_eq!(
            direct(&v, Some("pair")).unwrap(),
            via_tree(&v, Some("pair"))
        );
    }

    #[test]
    fn what_it_cannot_reproduce_is_refused() {
        let bool_keys: std::collections::BTreeMap<bool, u8> = [(true, 1)].into_iter().collect();
        assert!(direct(&bool_keys, None).is_err());
        assert!(direct(&(u128::MAX), None).is_err());
        struct Twice;
        impl Serialize for Twice {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                use serde::ser::SerializeMap;
                let mut m = s.serialize_map(Some(2))?;
                m.serialize_entry("k", &1)?;
                m.serialize_entry("k", &2)?;
                m.end()
            }
        }
        assert!(direct(&Twice, None).is_err());
    }
}
