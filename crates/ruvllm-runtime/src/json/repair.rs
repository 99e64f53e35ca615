//! A tolerant JSON reader for model output.
//!
//! It accepts a superset of JSON, the mistakes models make, and reports what it fixed:
//!
//! | input | read as |
//! |---|---|
//! | ```` ```json ... ``` ```` fences, prose before/after | the JSON inside |
//! | `[1, 2,]`, `{"a": 1,}` | trailing comma dropped |
//! | `'text'` | a string |
//! | `{name: 1}` | `{"name": 1}` |
//! | `True`, `False`, `None` | `true`, `false`, `null` |
//! | `// ...`, `/* ... */`, `# ...` | comments dropped |
//! | a raw newline or tab inside a string | the character itself |
//! | `{"a": 1 "b": 2}` | missing comma inserted |
//! | `+1`, `.5`, `1.` | `1`, `0.5`, `1` |
//! | output cut off: `{"a": 1, "b": "hel` | `{"a": 1}` (brackets closed, the cut string dropped with its member) |
//! | cut off mid-member: `{"a": 1, "b": tr` | `{"a": 1}` (incomplete member dropped) |
//! | cut off after a number: `{"a": "x", "age": 3` | `{"a": "x"}` (`3` may have been `35`) |
//!
//! It never invents content beyond closing what was opened, and never passes off a value
//! the end of the output cut as complete: a string without its closing quote, a number or
//! a literal running into the end are dropped with their member or element (a value cut
//! at the top level is not JSON at all). Cost: linear in the input;
//! nesting deeper than [`MAX_DEPTH`] or input over [`MAX_INPUT`] bytes is refused.

use serde_json::{Map, Number, Value};
use thiserror::Error;

/// Deepest nesting accepted: below serde_json's default recursion limit (128), so that
/// whatever repair returns can be serialized and read back by ordinary JSON readers
/// (found by the `repair` fuzz target: a 130-deep repaired value did not read back).
pub const MAX_DEPTH: usize = 120;
/// Largest input accepted, in bytes.
pub const MAX_INPUT: usize = 16 << 20;
/// How many candidate starts (`{` or `[` in surrounding prose) are tried.
const MAX_STARTS: usize = 32;

/// A fix applied by [`repair_json`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Repair {
    /// A Markdown code fence was removed.
    CodeFence,
    /// Text before or after the JSON value was removed.
    SurroundingText,
    /// A trailing comma was removed.
    TrailingComma,
    /// A single-quoted string was read.
    SingleQuotes,
    /// An unquoted object key was quoted.
    UnquotedKey,
    /// `True`/`False`/`None` was read as `true`/`false`/`null`.
    PythonLiteral,
    /// A comment was removed.
    Comment,
    /// A raw control character inside a string was escaped.
    ControlCharacter,
    /// An invalid escape sequence (`\\U`) was read as a literal backslash and character.
    InvalidEscape,
    /// A missing comma between members or elements was inserted.
    MissingComma,
    /// A number in a non-JSON notation (`+1`, `.5`, `1.`) was normalized.
    NumberFormat,
    /// A string cut off by the end of the output was dropped with its member or element.
    UnclosedString,
    /// An object or array cut off by the end of the output was closed.
    UnclosedContainer,
    /// A member or element cut off before its value was complete was dropped (a number
    /// running into the end of the output counts as cut: it may have had more digits).
    IncompleteMember,
}

/// Why output could not be repaired.
#[derive(Debug, Clone, Error, PartialEq, Eq)]
pub enum RepairError {
    /// No JSON value could be found in the text.
    #[error("no JSON value found{}", .detail.as_ref().map(|d| format!(" ({d})")).unwrap_or_default())]
    NoJson {
        /// What the reader hit at the most promising start, if anything.
        detail: Option<String>,
    },
    /// Nesting deeper than [`MAX_DEPTH`].
    #[error("nesting deeper than {MAX_DEPTH} levels at byte {at}")]
    TooDeep {
        /// Byte offset.
        at: usize,
    },
    /// Input larger than `MAX_INPUT` (16 MiB).
    #[error("input of {len} bytes is larger than the {MAX_INPUT}-byte limit")]
    TooLarge {
        /// Its size.
        len: usize,
    },
}

/// Reads model output as JSON, tolerating and logging the usual mistakes (see the module
/// docs). Returns the value and the fixes applied (empty when the text was plain JSON).
pub fn repair_json(text: &str) -> Result<(Value, Vec<Repair>), RepairError> {
    if text.len() > MAX_INPUT {
        return Err(RepairError::TooLarge { len: text.len() });
    }
    // Plain JSON is read as itself, whatever it holds (a string may contain "```").
    if let Ok(v) = serde_json::from_str::<Value>(text) {
        if depth_within(&v, MAX_DEPTH) {
            return Ok((v, Vec::new()));
        }
    }
    // A text that begins with a value is read as that value when the value holds the
    // first fence: the fence is then inside one of its strings (a single-quoted one, which
    // the fence scan cannot tell from an apostrophe in prose: `{'a': '```'}`). Only a value
    // that closes before the end of the text: one cut off and closed at the end swallows
    // whatever follows, a fenced block included, which is then the better answer (the cut
    // value stays the answer when nothing else reads).
    let mut cut_lead = None;
    let lead = text.len() - text.trim_start().len();
    if text[lead..].starts_with(['{', '[']) {
        if let Some(&fence) = fences(text).first().filter(|&&f| f > lead) {
            let cut = |r: &[Repair]| {
                r.iter().any(|x| {
                    matches!(
                        x,
                        Repair::UnclosedString
                            | Repair::UnclosedContainer
                            | Repair::IncompleteMember
                    )
                })
            };
            match read_at(text, lead, &[]) {
                Ok((v, repairs, end)) if end > fence => {
                    if !cut(&repairs) {
                        return Ok((v, repairs));
                    }
                    cut_lead = Some((v, repairs));
                }
                Err(Stop::Deep(at)) => return Err(RepairError::TooDeep { at }),
                _ => {}
            }
        }
    }
    let mut repairs = Vec::new();
    let region = match strip_fence(text) {
        Some(r) => {
            repairs.push(Repair::CodeFence);
            r
        }
        None => text,
    };
    let mut last_err = None;
    // Candidate starts: the first non-space character, then each `{` or `[`.
    let first = region.len() - region.trim_start().len();
    let mut starts = vec![first];
    starts.extend(
        region
            .char_indices()
            .filter(|&(i, c)| (c == '{' || c == '[') && i != first)
            .map(|(i, _)| i)
            .take(MAX_STARTS),
    );
    for start in starts {
        match read_at(region, start, &repairs) {
            Ok((v, out, _)) => return Ok((v, out)),
            Err(Stop::Deep(at)) => return Err(RepairError::TooDeep { at }),
            Err(Stop::Bad(msg)) => {
                if last_err.is_none() {
                    last_err = Some(msg);
                }
            }
            Err(Stop::Eof) => {
                if last_err.is_none() {
                    last_err = Some("the text ends before a value".into());
                }
            }
        }
    }
    match cut_lead {
        Some(found) => Ok(found),
        None => Err(RepairError::NoJson { detail: last_err }),
    }
}

/// Reads one value of `region` from byte `start`: the value, the fixes (`before`, then
/// surrounding text if any, then the reader's own, each once) and where the value ends.
fn read_at(
    region: &str,
    start: usize,
    before: &[Repair],
) -> Result<(Value, Vec<Repair>, usize), Stop> {
    let mut r = Reader {
        s: region.as_bytes(),
        text: region,
        i: start,
        repairs: Vec::new(),
    };
    let v = r.value(0)?;
    let end = r.i;
    r.skip_space();
    let mut out = before.to_vec();
    if !region[..start].trim().is_empty() || r.i < region.len() {
        out.push(Repair::SurroundingText);
    }
    out.extend(r.repairs);
    let mut seen = Vec::new();
    out.retain(|x| {
        if seen.contains(x) {
            false
        } else {
            seen.push(*x);
            true
        }
    });
    Ok((v, out, end))
}

/// Whether every value inside `v` sits at depth `max` or less (`v` itself at 0), the
/// reader's own limit. Cost: one walk of `v`.
fn depth_within(v: &Value, max: usize) -> bool {
    let mut stack = vec![(v, 0usize)];
    while let Some((v, d)) = stack.pop() {
        if d > max {
            return false;
        }
        match v {
            Value::Array(a) => stack.extend(a.iter().map(|k| (k, d + 1))),
            Value::Object(o) => stack.extend(o.values().map(|k| (k, d + 1))),
            _ => {}
        }
    }
    true
}

/// The offsets of the Markdown fences (```` ``` ````) outside double-quoted strings. Cost:
/// one pass.
fn fences(text: &str) -> Vec<usize> {
    let s = text.as_bytes();
    let mut out = Vec::new();
    let (mut inside, mut escaped) = (false, false);
    let mut i = 0;
    while i < s.len() {
        let b = s[i];
        if escaped {
            escaped = false;
        } else if inside {
            match b {
                b'\\' => escaped = true,
                b'"' => inside = false,
                _ => {}
            }
        } else if b == b'"' {
            inside = true;
        } else if s[i..].starts_with(b"```") {
            out.push(i);
            i += 3;
            continue;
        }
        i += 1;
    }
    out
}

/// The content of the first Markdown code fence outside a string, if there is one, up to
/// the last fence after it (a fence inside a JSON string, as in `{"a": "```"}`, neither
/// opens nor closes one). Cost: one pass.
fn strip_fence(text: &str) -> Option<&str> {
    let found = fences(text);
    let open = *found.first()?;
    let after = &text[open + 3..];
    // The info string: a language tag such as `json` (the body may follow on the same line).
    let tag = after
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '+'))
        .unwrap_or(after.len());
    let body_start = open + 3 + tag;
    Some(match found.last() {
        Some(&close) if close >= body_start => &text[body_start..close],
        _ => &text[body_start..],
    })
}

enum Stop {
    /// The text ended where a value was needed.
    Eof,
    /// Something that cannot be read as JSON.
    Bad(String),
    /// Too deep.
    Deep(usize),
}

struct Reader<'a> {
    s: &'a [u8],
    text: &'a str,
    i: usize,
    repairs: Vec<Repair>,
}

impl<'a> Reader<'a> {
    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }

    fn bad<T>(&self, what: &str) -> Result<T, Stop> {
        let found: String = self.text[self.i..].chars().take(12).collect();
        Err(Stop::Bad(format!(
            "{what} at byte {}, found {found:?}",
            self.i
        )))
    }

    /// Skips whitespace and comments.
    fn skip_space(&mut self) {
        loop {
            match self.peek() {
                Some(b' ' | b'\t' | b'\n' | b'\r') => self.i += 1,
                Some(b'/') if self.s.get(self.i + 1) == Some(&b'/') => self.line_comment(),
                Some(b'#') => self.line_comment(),
                Some(b'/') if self.s.get(self.i + 1) == Some(&b'*') => {
                    self.repairs.push(Repair::Comment);
                    match self.text[self.i + 2..].find("*/") {
                        Some(e) => self.i += 2 + e + 2,
                        None => self.i = self.s.len(),
                    }
                }
                _ => return,
            }
        }
    }

    fn line_comment(&mut self) {
        self.repairs.push(Repair::Comment);
        while let Some(c) = self.peek() {
            self.i += 1;
            if c == b'\n' {
                break;
            }
        }
    }

    fn value(&mut self, depth: usize) -> Result<Value, Stop> {
        if depth > MAX_DEPTH {
            return Err(Stop::Deep(self.i));
        }
        self.skip_space();
        match self.peek() {
            None => Err(Stop::Eof),
            Some(b'{') => self.object(depth),
            Some(b'[') => self.array(depth),
            Some(b'"' | b'\'') => self.string().map(Value::String),
            Some(b'-' | b'+' | b'.' | b'0'..=b'9') => self.number(),
            Some(c) if c.is_ascii_alphabetic() || c == b'_' => {
                let start = self.i;
                let word = self.ident();
                match word {
                    "true" => Ok(Value::Bool(true)),
                    "false" => Ok(Value::Bool(false)),
                    "null" => Ok(Value::Null),
                    "True" | "False" | "None" => {
                        self.repairs.push(Repair::PythonLiteral);
                        Ok(match word {
                            "True" => Value::Bool(true),
                            "False" => Value::Bool(false),
                            _ => Value::Null,
                        })
                    }
                    // A literal cut off by the end of the text.
                    w if self.i == self.s.len()
                        && ["true", "false", "null", "True", "False", "None"]
                            .iter()
                            .any(|l| l.starts_with(w)) =>
                    {
                        Err(Stop::Eof)
                    }
                    _ => {
                        self.i = start;
                        self.bad("not a JSON value")
                    }
                }
            }
            Some(_) => self.bad("not a JSON value"),
        }
    }

    fn ident(&mut self) -> &'a str {
        let start = self.i;
        while let Some(c) = self.peek() {
            if c.is_ascii_alphanumeric() || c == b'_' || c == b'$' || c == b'-' {
                self.i += 1;
            } else {
                break;
            }
        }
        let text: &'a str = self.text;
        &text[start..self.i]
    }

    fn number(&mut self) -> Result<Value, Stop> {
        let start = self.i;
        while let Some(c) = self.peek() {
            if c.is_ascii_digit() || matches!(c, b'-' | b'+' | b'.' | b'e' | b'E') {
                self.i += 1;
            } else {
                break;
            }
        }
        let raw = &self.text[start..self.i];
        if self.i == self.s.len() {
            // A number that runs into the end of the output may have been cut short.
            return Err(Stop::Eof);
        }
        if let Ok(n) = serde_json::from_str::<Number>(raw) {
            return Ok(Value::Number(n));
        }
        // Normalize: leading '+', leading '.', trailing '.', exponent without digits.
        let mut t = raw.trim_start_matches('+').to_string();
        let neg = t.starts_with('-');
        if neg {
            t.remove(0);
        }
        if t.starts_with('.') {
            t.insert(0, '0');
        }
        let t = t
            .trim_end_matches(['e', 'E', '+', '-'])
            .trim_end_matches('.');
        let t = if neg { format!("-{t}") } else { t.to_string() };
        match serde_json::from_str::<Number>(&t) {
            Ok(n) => {
                self.repairs.push(Repair::NumberFormat);
                Ok(Value::Number(n))
            }
            Err(_) if self.i == self.s.len() => Err(Stop::Eof),
            Err(_) => {
                self.i = start;
                self.bad("not a number")
            }
        }
    }

    /// A `"`- or `'`-delimited string; an unterminated one ends at the end of the text.
    fn string(&mut self) -> Result<String, Stop> {
        let quote = self.s[self.i];
        if quote == b'\'' {
            self.repairs.push(Repair::SingleQuotes);
        }
        self.i += 1;
        let mut out = String::new();
        loop {
            let Some(c) = self.text[self.i..].chars().next() else {
                self.repairs.push(Repair::UnclosedString);
                return Err(Stop::Eof);
            };
            self.i += c.len_utf8();
            match c {
                c if c as u32 == quote as u32 => return Ok(out),
                '\\' => {
                    let Some(e) = self.text[self.i..].chars().next() else {
                        self.repairs.push(Repair::UnclosedString);
                        return Err(Stop::Eof);
                    };
                    self.i += e.len_utf8();
                    match e {
                        '"' | '\\' | '/' => out.push(e),
                        'b' => out.push('\u{8}'),
                        'f' => out.push('\u{c}'),
                        'n' => out.push('\n'),
                        'r' => out.push('\r'),
                        't' => out.push('\t'),
                        'u' => out.push(self.unicode_escape()),
                        '\'' => out.push('\''),
                        // `C:\Users`: keep the backslash the writer meant literally.
                        other => {
                            self.repairs.push(Repair::InvalidEscape);
                            out.push('\\');
                            out.push(other);
                        }
                    }
                }
                c if (c as u32) < 0x20 => {
                    self.repairs.push(Repair::ControlCharacter);
                    out.push(c);
                }
                c => out.push(c),
            }
        }
    }

    /// The code point of `\uXXXX` (after the `u`), pairing surrogates; U+FFFD if broken.
    fn unicode_escape(&mut self) -> char {
        let hex = |r: &mut Self| -> Option<u32> {
            let h = r.text.get(r.i..r.i + 4)?;
            let v = u32::from_str_radix(h, 16).ok()?;
            r.i += 4;
            Some(v)
        };
        let Some(hi) = hex(self) else {
            self.repairs.push(Repair::InvalidEscape);
            return '\u{FFFD}';
        };
        if (0xD800..0xDC00).contains(&hi) && self.text[self.i..].starts_with("\\u") {
            let save = self.i;
            self.i += 2;
            if let Some(lo) = hex(self) {
                if (0xDC00..0xE000).contains(&lo) {
                    let c = 0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00);
                    return char::from_u32(c).unwrap_or('\u{FFFD}');
                }
            }
            self.i = save;
        }
        char::from_u32(hi).unwrap_or_else(|| {
            self.repairs.push(Repair::InvalidEscape);
            '\u{FFFD}'
        })
    }

    fn object(&mut self, depth: usize) -> Result<Value, Stop> {
        self.i += 1; // '{'
        let mut m = Map::new();
        let mut need_sep = false;
        loop {
            self.skip_space();
            let Some(c) = self.peek() else {
                self.repairs.push(Repair::UnclosedContainer);
                return Ok(Value::Object(m));
            };
            match c {
                b'}' => {
                    self.i += 1;
                    return Ok(Value::Object(m));
                }
                b',' => {
                    self.i += 1;
                    self.skip_space();
                    if self.peek() == Some(b'}') {
                        self.repairs.push(Repair::TrailingComma);
                    }
                    need_sep = false;
                    continue;
                }
                _ => {}
            }
            if need_sep {
                self.repairs.push(Repair::MissingComma);
            }
            // Key.
            let key = match c {
                b'"' | b'\'' => match self.string() {
                    Ok(k) if self.i < self.s.len() => k,
                    // The key itself was cut off, or nothing follows it.
                    Ok(_) | Err(Stop::Eof) => {
                        self.repairs.push(Repair::IncompleteMember);
                        self.repairs.push(Repair::UnclosedContainer);
                        return Ok(Value::Object(m));
                    }
                    Err(e) => return Err(e),
                },
                c if c.is_ascii_alphabetic() || c == b'_' || c == b'$' => {
                    self.repairs.push(Repair::UnquotedKey);
                    self.ident().to_string()
                }
                _ => return self.bad("expected an object key"),
            };
            self.skip_space();
            match self.peek() {
                Some(b':') => self.i += 1,
                // `=` and a bare space are not separators we guess at.
                None => {
                    self.repairs.push(Repair::IncompleteMember);
                    self.repairs.push(Repair::UnclosedContainer);
                    return Ok(Value::Object(m));
                }
                _ => return self.bad("expected ':' after an object key"),
            }
            match self.value(depth + 1) {
                Ok(v) => {
                    m.insert(key, v);
                }
                Err(Stop::Eof) => {
                    self.repairs.push(Repair::IncompleteMember);
                    self.repairs.push(Repair::UnclosedContainer);
                    return Ok(Value::Object(m));
                }
                Err(e) => return Err(e),
            }
            need_sep = true;
        }
    }

    fn array(&mut self, depth: usize) -> Result<Value, Stop> {
        self.i += 1; // '['
        let mut a = Vec::new();
        let mut need_sep = false;
        loop {
            self.skip_space();
            let Some(c) = self.peek() else {
                self.repairs.push(Repair::UnclosedContainer);
                return Ok(Value::Array(a));
            };
            match c {
                b']' => {
                    self.i += 1;
                    return Ok(Value::Array(a));
                }
                b',' => {
                    self.i += 1;
                    self.skip_space();
                    if self.peek() == Some(b']') {
                        self.repairs.push(Repair::TrailingComma);
                    }
                    need_sep = false;
                    continue;
                }
                _ => {}
            }
            if need_sep {
                self.repairs.push(Repair::MissingComma);
            }
            match self.value(depth + 1) {
                Ok(v) => a.push(v),
                Err(Stop::Eof) => {
                    self.repairs.push(Repair::IncompleteMember);
                    self.repairs.push(Repair::UnclosedContainer);
                    return Ok(Value::Array(a));
                }
                Err(e) => return Err(e),
            }
            need_sep = true;
        }
    }
}
