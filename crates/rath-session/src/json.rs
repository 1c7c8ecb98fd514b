//! JSON text exactly as Python's `json.dumps(obj, ensure_ascii=False)` writes it.
//!
//! Python separates items with `", "` and keys from values with `": "`, keeps non-ASCII text
//! as is, escapes control characters as `\u00XX` (lowercase hex) and prints floats with
//! `repr` (`1e+16`, `1e-05`, `0.0001`, `2.0`). serde_json's compact output differs in all of
//! those spacing and float details, so every store line, lineage row and tool result the
//! workspace writes goes through [`PyFormatter`].
//!
//! ```
//! let v = serde_json::json!({"ok": false, "ratio": 1e16, "text": "é"});
//! assert_eq!(rath_session::json::to_string(&v)?, r#"{"ok": false, "ratio": 1e+16, "text": "é"}"#);
//! # Ok::<(), serde_json::Error>(())
//! ```
//!
//! One deliberate difference: U+2028, U+2029 and U+0085 are written as `\u2028`-style escapes.
//! Python's loader splits lines with `str.splitlines()`, which breaks a line at those
//! characters, so a raw one would make the file unreadable to Python itself. The escaped form
//! decodes to the same string everywhere.

use std::io::{self, Write};

use serde::Serialize;
use serde_json::ser::Formatter;

/// A serde_json formatter that reproduces Python's `json.dumps` default layout.
#[derive(Clone, Copy, Debug, Default)]
pub struct PyFormatter;

impl Formatter for PyFormatter {
    fn begin_array_value<W: ?Sized + Write>(&mut self, w: &mut W, first: bool) -> io::Result<()> {
        if first { Ok(()) } else { w.write_all(b", ") }
    }

    fn begin_object_key<W: ?Sized + Write>(&mut self, w: &mut W, first: bool) -> io::Result<()> {
        if first { Ok(()) } else { w.write_all(b", ") }
    }

    fn begin_object_value<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        w.write_all(b": ")
    }

    fn write_f64<W: ?Sized + Write>(&mut self, w: &mut W, value: f64) -> io::Result<()> {
        w.write_all(python_float_repr(value).as_bytes())
    }

    fn write_f32<W: ?Sized + Write>(&mut self, w: &mut W, value: f32) -> io::Result<()> {
        w.write_all(python_float_repr(f64::from(value)).as_bytes())
    }

    fn write_string_fragment<W: ?Sized + Write>(&mut self, w: &mut W, s: &str) -> io::Result<()> {
        // Fast path: U+2028/U+2029 start with byte 0xE2 and U+0085 with 0xC2 in UTF-8; a
        // plain byte scan vectorises, a char search does not.
        if !s.bytes().any(|b| b == 0xE2 || b == 0xC2) {
            return w.write_all(s.as_bytes());
        }
        let mut start = 0;
        for (i, c) in s.char_indices() {
            let esc: &[u8] = match c {
                '\u{2028}' => b"\\u2028",
                '\u{2029}' => b"\\u2029",
                '\u{0085}' => b"\\u0085",
                _ => continue,
            };
            w.write_all(&s.as_bytes()[start..i])?;
            w.write_all(esc)?;
            start = i + c.len_utf8();
        }
        w.write_all(&s.as_bytes()[start..])
    }
}

/// Python's `repr(float)` for a finite value (`json.dumps` uses it). Non-finite values are
/// never passed here: serde_json writes them as `null`.
pub fn python_float_repr(value: f64) -> String {
    if !value.is_finite() {
        return "null".to_owned();
    }
    if value == 0.0 {
        return if value.is_sign_negative() {
            "-0.0"
        } else {
            "0.0"
        }
        .to_owned();
    }
    // Rust's `{:e}` gives the shortest round-trip digits, like Python's repr.
    let sci = format!("{value:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((sci.as_str(), "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let (sign, mantissa) = match mantissa.strip_prefix('-') {
        Some(m) => ("-", m),
        None => ("", mantissa),
    };
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let decpt = exp + 1; // position of the decimal point relative to the digits
    if !(-3..=16).contains(&decpt) {
        let (head, tail) = digits.split_at(1);
        let frac = if tail.is_empty() {
            String::new()
        } else {
            format!(".{tail}")
        };
        let esign = if exp < 0 { '-' } else { '+' };
        format!("{sign}{head}{frac}e{esign}{:02}", exp.unsigned_abs())
    } else if decpt <= 0 {
        let zeros = "0".repeat(decpt.unsigned_abs() as usize);
        format!("{sign}0.{zeros}{digits}")
    } else {
        let d = decpt as usize;
        if digits.len() <= d {
            let zeros = "0".repeat(d - digits.len());
            format!("{sign}{digits}{zeros}.0")
        } else {
            format!("{sign}{}.{}", &digits[..d], &digits[d..])
        }
    }
}

/// Appends `value` as one Python-style JSON line (with the trailing `\n`) to `out`.
pub fn write_line<T: Serialize + ?Sized>(out: &mut Vec<u8>, value: &T) -> serde_json::Result<()> {
    let mut ser = serde_json::Serializer::with_formatter(&mut *out, PyFormatter);
    value.serialize(&mut ser)?;
    out.push(b'\n');
    Ok(())
}

/// `value` as Python-style JSON text (no newline).
pub fn to_string<T: Serialize + ?Sized>(value: &T) -> serde_json::Result<String> {
    let mut out = Vec::new();
    let mut ser = serde_json::Serializer::with_formatter(&mut out, PyFormatter);
    value.serialize(&mut ser)?;
    // The formatter only ever writes valid UTF-8 (it copies &str fragments and ASCII escapes).
    Ok(String::from_utf8_lossy(&out).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_match_python_repr() {
        let cases = [
            (1.0, "1.0"),
            (0.5, "0.5"),
            (1e16, "1e+16"),
            (1e15, "1000000000000000.0"),
            (1.5e-5, "1.5e-05"),
            (0.0001, "0.0001"),
            (123.456, "123.456"),
            (-2.5e100, "-2.5e+100"),
            (1.7976931348623157e308, "1.7976931348623157e+308"),
            (5e-324, "5e-324"),
            (0.1 + 0.2, "0.30000000000000004"),
            (-0.0, "-0.0"),
            (12345678901234567.0, "1.2345678901234568e+16"),
        ];
        for (v, want) in cases {
            assert_eq!(python_float_repr(v), want, "{v:e}");
        }
    }

    #[test]
    fn layout_matches_python() {
        let v = serde_json::json!({"a": [1, 2.0, null], "b": "é\u{1}\n\u{2028}"});
        assert_eq!(
            to_string(&v).unwrap(),
            "{\"a\": [1, 2.0, null], \"b\": \"é\\u0001\\n\\u2028\"}"
        );
    }
}
