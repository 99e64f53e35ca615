//! Python's `json.dumps(value, ensure_ascii=False)`, byte for byte: separators `", "` and
//! `": "`, escapes for `"`, `\`, and control characters (short forms, else `\u00xx`), floats
//! as Python's `repr` (shortest round-trip digits; exponent form below 1e-4 and from 1e16,
//! with a sign and at least two exponent digits).
//!
//! Python reads an integer literal as an exact integer and any other number as a float, so
//! `1000000000000000000001` prints with every digit and `1.0` as `1.0`: a `serde_json`
//! [`Value`] (without `arbitrary_precision`) loses the first. [`loads`] reads a JSON text
//! as `json.loads` does ([`Py`]), and [`dumps_py`] writes it back as `json.dumps` does: the
//! harnesses score instances exactly as the published convention serializes them.

use serde_json::Value;

/// Serializes like Python's `json.dumps(v, ensure_ascii=False)` (a `serde_json` value: an
/// integer beyond 64 bits has already become a float; [`loads`] keeps it).
pub fn dumps(v: &Value) -> String {
    dumps_py(&Py::from(v))
}

impl From<&Value> for Py {
    /// The value as Python would hold it. Cost: a copy.
    fn from(v: &Value) -> Py {
        match v {
            Value::Null => Py::Null,
            Value::Bool(b) => Py::Bool(*b),
            Value::Number(n) => match (n.as_i64(), n.as_u64()) {
                (Some(i), _) => Py::Int(i.to_string()),
                (_, Some(u)) => Py::Int(u.to_string()),
                _ => Py::Float(n.as_f64().unwrap_or(0.0)),
            },
            Value::String(s) => Py::Str(s.clone()),
            Value::Array(a) => Py::List(a.iter().map(Py::from).collect()),
            Value::Object(o) => Py::Dict(o.iter().map(|(k, x)| (k.clone(), Py::from(x))).collect()),
        }
    }
}

fn string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Python's `repr(float)`.
pub fn float_repr(f: f64) -> String {
    if f.is_nan() {
        return "NaN".into();
    }
    if f.is_infinite() {
        return if f > 0.0 {
            "Infinity".into()
        } else {
            "-Infinity".into()
        };
    }
    if f == 0.0 {
        return if f.is_sign_negative() {
            "-0.0".into()
        } else {
            "0.0".into()
        };
    }
    // Shortest round-trip digits and decimal exponent, from Rust's `{:e}`.
    let e = format!("{:e}", f.abs());
    let (mant, exp) = e.split_once('e').unwrap();
    let exp: i32 = exp.parse().unwrap();
    let digits: String = mant.chars().filter(|c| c.is_ascii_digit()).collect();
    let sign = if f < 0.0 { "-" } else { "" };
    if (-4..16).contains(&exp) {
        let n = digits.len() as i32;
        let s = if exp >= 0 {
            let int_len = exp + 1;
            if n <= int_len {
                format!("{}{}.0", digits, "0".repeat((int_len - n) as usize))
            } else {
                format!(
                    "{}.{}",
                    &digits[..int_len as usize],
                    &digits[int_len as usize..]
                )
            }
        } else {
            format!("0.{}{}", "0".repeat((-exp - 1) as usize), digits)
        };
        format!("{sign}{s}")
    } else {
        let m = if digits.len() > 1 {
            format!("{}.{}", &digits[..1], &digits[1..])
        } else {
            digits.clone()
        };
        let es = if exp < 0 {
            format!("-{:02}", -exp)
        } else {
            format!("+{exp:02}")
        };
        format!("{sign}{m}e{es}")
    }
}

/// A JSON value as Python's `json.loads` holds it: integers exact (their digits), other
/// numbers as floats, object members in order (duplicates kept, as `json.dumps` of a
/// `dict` would not; the suites have none).
#[derive(Debug, Clone, PartialEq)]
pub enum Py {
    /// `None`.
    Null,
    /// `True` / `False`.
    Bool(bool),
    /// An `int`: its decimal digits, `-` first when negative, no leading zeros (`-0` is `0`).
    Int(String),
    /// A `float`.
    Float(f64),
    /// A `str`.
    Str(String),
    /// A `list`.
    List(Vec<Py>),
    /// A `dict`.
    Dict(Vec<(String, Py)>),
}

impl Py {
    /// The member `key` of a dict (`None` elsewhere). Cost: O(members).
    pub fn get(&self, key: &str) -> Option<&Py> {
        match self {
            Py::Dict(m) => m.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    /// The items of a list (empty elsewhere).
    pub fn items(&self) -> &[Py] {
        match self {
            Py::List(a) => a,
            _ => &[],
        }
    }
}

/// Reads a JSON text as Python's `json.loads` does. Cost: one pass; strings are decoded by
/// `serde_json`.
pub fn loads(text: &str) -> Result<Py, String> {
    let mut p = Reader {
        b: text.as_bytes(),
        i: 0,
    };
    let v = p.value(0)?;
    p.ws();
    if p.i != p.b.len() {
        return Err(format!("trailing characters at byte {}", p.i));
    }
    Ok(v)
}

struct Reader<'a> {
    b: &'a [u8],
    i: usize,
}

impl Reader<'_> {
    fn ws(&mut self) {
        while self.i < self.b.len() && matches!(self.b[self.i], b' ' | b'\t' | b'\n' | b'\r') {
            self.i += 1;
        }
    }

    fn err<T>(&self, what: &str) -> Result<T, String> {
        Err(format!("{what} at byte {}", self.i))
    }

    fn value(&mut self, depth: usize) -> Result<Py, String> {
        if depth > 512 {
            return self.err("nesting too deep");
        }
        self.ws();
        let Some(&c) = self.b.get(self.i) else {
            return self.err("unexpected end");
        };
        match c {
            b'{' => {
                self.i += 1;
                let mut m = Vec::new();
                self.ws();
                if self.b.get(self.i) == Some(&b'}') {
                    self.i += 1;
                    return Ok(Py::Dict(m));
                }
                loop {
                    self.ws();
                    let Py::Str(k) = self.string()? else {
                        return self.err("expected a key");
                    };
                    self.ws();
                    if self.b.get(self.i) != Some(&b':') {
                        return self.err("expected ':'");
                    }
                    self.i += 1;
                    let v = self.value(depth + 1)?;
                    m.push((k, v));
                    self.ws();
                    match self.b.get(self.i) {
                        Some(b',') => self.i += 1,
                        Some(b'}') => {
                            self.i += 1;
                            return Ok(Py::Dict(m));
                        }
                        _ => return self.err("expected ',' or '}'"),
                    }
                }
            }
            b'[' => {
                self.i += 1;
                let mut a = Vec::new();
                self.ws();
                if self.b.get(self.i) == Some(&b']') {
                    self.i += 1;
                    return Ok(Py::List(a));
                }
                loop {
                    a.push(self.value(depth + 1)?);
                    self.ws();
                    match self.b.get(self.i) {
                        Some(b',') => self.i += 1,
                        Some(b']') => {
                            self.i += 1;
                            return Ok(Py::List(a));
                        }
                        _ => return self.err("expected ',' or ']'"),
                    }
                }
            }
            b'"' => self.string(),
            b't' if self.b[self.i..].starts_with(b"true") => {
                self.i += 4;
                Ok(Py::Bool(true))
            }
            b'f' if self.b[self.i..].starts_with(b"false") => {
                self.i += 5;
                Ok(Py::Bool(false))
            }
            b'n' if self.b[self.i..].starts_with(b"null") => {
                self.i += 4;
                Ok(Py::Null)
            }
            b'-' | b'0'..=b'9' => self.number(),
            _ => self.err("unexpected character"),
        }
    }

    fn string(&mut self) -> Result<Py, String> {
        let start = self.i;
        if self.b.get(self.i) != Some(&b'"') {
            return self.err("expected a string");
        }
        self.i += 1;
        while self.i < self.b.len() && self.b[self.i] != b'"' {
            self.i += if self.b[self.i] == b'\\' { 2 } else { 1 };
        }
        if self.i >= self.b.len() {
            return self.err("unterminated string");
        }
        self.i += 1;
        serde_json::from_slice::<String>(&self.b[start..self.i])
            .map(Py::Str)
            .map_err(|e| format!("string at byte {start}: {e}"))
    }

    fn number(&mut self) -> Result<Py, String> {
        let start = self.i;
        let mut float = false;
        while let Some(&c) = self.b.get(self.i) {
            match c {
                b'0'..=b'9' | b'-' | b'+' => {}
                b'.' | b'e' | b'E' => float = true,
                _ => break,
            }
            self.i += 1;
        }
        let text = std::str::from_utf8(&self.b[start..self.i]).map_err(|e| e.to_string())?;
        if float {
            return text
                .parse::<f64>()
                .map(Py::Float)
                .map_err(|e| format!("number {text:?}: {e}"));
        }
        let (neg, digits) = match text.strip_prefix('-') {
            Some(d) => (true, d),
            None => (false, text),
        };
        if digits.is_empty() || !digits.bytes().all(|c| c.is_ascii_digit()) {
            return Err(format!("number {text:?} at byte {start}"));
        }
        let digits = digits.trim_start_matches('0');
        Ok(Py::Int(match (neg, digits) {
            (_, "") => "0".into(),
            (true, d) => format!("-{d}"),
            (false, d) => d.into(),
        }))
    }
}

/// Serializes like Python's `json.dumps(v, ensure_ascii=False)` ([`Py`] from [`loads`]).
pub fn dumps_py(v: &Py) -> String {
    let mut out = String::new();
    write_py(v, &mut out);
    out
}

fn write_py(v: &Py, out: &mut String) {
    match v {
        Py::Null => out.push_str("null"),
        Py::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Py::Int(d) => out.push_str(d),
        Py::Float(f) => out.push_str(&float_repr(*f)),
        Py::Str(s) => string(s, out),
        Py::List(a) => {
            out.push('[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_py(x, out);
            }
            out.push(']');
        }
        Py::Dict(o) => {
            out.push('{');
            for (i, (k, x)) in o.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                string(k, out);
                out.push_str(": ");
                write_py(x, out);
            }
            out.push('}');
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_python() {
        // Values checked against CPython 3.11.
        for (f, want) in [
            (1.0, "1.0"),
            (100.0, "100.0"),
            (0.1, "0.1"),
            (1e-4, "0.0001"),
            (1e-5, "1e-05"),
            (1.5e-7, "1.5e-07"),
            (1e16, "1e+16"),
            (1.2345678901234568e17, "1.2345678901234568e+17"),
            (123456789.125, "123456789.125"),
            (-2.5, "-2.5"),
            (1e100, "1e+100"),
            (9999999999999998.0, "9999999999999998.0"),
            (0.000123, "0.000123"),
        ] {
            assert_eq!(float_repr(f), want, "{f}");
        }
        let v: Value = serde_json::from_str(
            r#"{"a": [1, 2.5, "x\"\\\n\u0001é"], "b": null, "c": {"d": true}}"#,
        )
        .unwrap();
        assert_eq!(
            dumps(&v),
            "{\"a\": [1, 2.5, \"x\\\"\\\\\\n\\u0001é\"], \"b\": null, \"c\": {\"d\": true}}"
        );
    }

    #[test]
    fn loads_keeps_integers_exact_as_python_does() {
        // Checked against CPython 3.11's json.dumps(json.loads(text)).
        for (text, want) in [
            ("1000000000000000000001", "1000000000000000000001"),
            (
                "123456789012345678901234567890",
                "123456789012345678901234567890",
            ),
            ("-0", "0"),
            ("-0.0", "-0.0"),
            ("1.0", "1.0"),
            ("1e400", "Infinity"),
            ("1E2", "100.0"),
            ("[1, {\"a\": 2.50}]", "[1, {\"a\": 2.5}]"),
            ("\"\\u00e9\\n\"", "\"é\\n\""),
        ] {
            assert_eq!(dumps_py(&loads(text).unwrap()), want, "{text}");
        }
        assert!(loads("[1,").is_err());
        assert!(loads("01x").is_err());
    }
}
