//! JSON values: whitespace and punctuation under the whitespace policy, any value, the
//! literal values of `const` and `enum`, and checks of a value against a schema where the
//! grammar cannot hold it.
//!
//! Part of the schema compiler (`Compiler` in the parent module), split by concern;
//! it may use everything of the parent and nothing of its siblings but through it.

use super::*;

impl Compiler<'_> {
    /// `e`, an integer part (a leading digit then a run), with every open run of digits
    /// capped so that it has at most [`SchemaOptions::number_digits`] digits (as is, when
    /// digits are not capped). Cost: a copy of `e`.
    pub(super) fn capped(&self, e: Expr) -> Expr {
        let Some(cap) = self.opts.number_digits else {
            return e;
        };
        let cap = cap.saturating_sub(1);
        fn cap_runs(e: Expr, cap: u32) -> Expr {
            match e {
                Expr::Repeat { e, min, max: None } if matches!(&*e, Expr::Chars(c) if c.as_slice() == [('0', '9')]) => {
                    Expr::Repeat {
                        e,
                        min,
                        max: Some(cap.max(min)),
                    }
                }
                Expr::Repeat { e, min, max } => Expr::Repeat {
                    e: Box::new(cap_runs(*e, cap)),
                    min,
                    max,
                },
                Expr::Seq(v) => Expr::Seq(v.into_iter().map(|x| cap_runs(x, cap)).collect()),
                Expr::Alt(v) => Expr::Alt(v.into_iter().map(|x| cap_runs(x, cap)).collect()),
                other => other,
            }
        }
        cap_runs(e, cap)
    }

    pub(super) fn checked_rule(&mut self, name: &str, body: Expr, c: Check) -> Expr {
        let r = self.reserve(name);
        self.set(r, body);
        self.checks.push((r, c));
        Expr::Ref(r)
    }

    pub(super) fn common(
        &mut self,
        name: &'static str,
        make: impl FnOnce(&mut Self) -> Expr,
    ) -> Expr {
        if let Some(&r) = self.common.get(name) {
            return Expr::Ref(r);
        }
        let r = self.reserve(name);
        self.common.insert(name, r);
        let body = make(self);
        self.set(r, body);
        Expr::Ref(r)
    }

    pub(super) fn ws(&mut self) -> Expr {
        match self.opts.whitespace {
            Whitespace::Compact => Expr::Empty,
            Whitespace::Bounded => self.common("ws", |_| Expr::Repeat {
                e: Box::new(Expr::Alt(vec![
                    Expr::Chars(vec![('\t', '\t'), (' ', ' ')]),
                    Expr::Seq(vec![
                        Expr::Literal(b"\n".to_vec()),
                        Expr::Repeat {
                            e: Box::new(Expr::Chars(vec![('\t', '\t'), (' ', ' ')])),
                            min: 0,
                            max: Some(20),
                        },
                    ]),
                ])),
                min: 0,
                max: Some(1),
            }),
            Whitespace::Flexible(n) => self.common("ws", |_| Expr::Repeat {
                e: Box::new(Expr::Chars(vec![('\t', '\n'), ('\r', '\r'), (' ', ' ')])),
                min: 0,
                max: Some(n),
            }),
        }
    }

    /// `ws , ws` between items or members: one rule per schema, which every use refers to
    /// (a big schema has thousands). Cost: O(1).
    pub(super) fn comma(&mut self) -> Expr {
        self.common("comma", |s| {
            let ws = s.ws();
            Expr::Seq(vec![ws.clone(), Expr::Literal(b",".to_vec()), ws])
        })
    }

    /// `ws : ws` after a key: one rule per schema, as [`Compiler::comma`]. Cost: O(1).
    pub(super) fn colon(&mut self) -> Expr {
        self.common("colon", |s| {
            let ws = s.ws();
            Expr::Seq(vec![ws.clone(), Expr::Literal(b":".to_vec()), ws])
        })
    }

    /// One JSON string character (a code point, raw or escaped).
    pub(super) fn json_char(&mut self) -> Expr {
        self.common("char", |_| {
            let hex = Expr::Chars(vec![('0', '9'), ('A', 'F'), ('a', 'f')]);
            let hex3 = Expr::Repeat {
                e: Box::new(hex.clone()),
                min: 3,
                max: Some(3),
            };
            let hex2 = Expr::Repeat {
                e: Box::new(hex.clone()),
                min: 2,
                max: Some(2),
            };
            // \uXXXX not a surrogate; or a high surrogate followed by \u low surrogate.
            let non_sur = Expr::Alt(vec![
                Expr::Seq(vec![
                    Expr::Chars(vec![
                        ('0', '9'),
                        ('A', 'C'),
                        ('E', 'F'),
                        ('a', 'c'),
                        ('e', 'f'),
                    ]),
                    hex3,
                ]),
                Expr::Seq(vec![
                    Expr::Chars(vec![('D', 'D'), ('d', 'd')]),
                    Expr::Chars(vec![('0', '7')]),
                    hex2.clone(),
                ]),
            ]);
            let pair = Expr::Seq(vec![
                Expr::Chars(vec![('D', 'D'), ('d', 'd')]),
                Expr::Chars(vec![('8', '9'), ('A', 'B'), ('a', 'b')]),
                hex2.clone(),
                Expr::Literal(b"\\u".to_vec()),
                Expr::Chars(vec![('D', 'D'), ('d', 'd')]),
                Expr::Chars(vec![('C', 'F'), ('c', 'f')]),
                hex2,
            ]);
            Expr::Alt(vec![
                Expr::Chars(vec![(' ', '!'), ('#', '['), (']', char::MAX)]),
                Expr::Seq(vec![Expr::Literal(b"\\".to_vec()), short_escapes()]),
                Expr::Seq(vec![
                    Expr::Literal(b"\\u".to_vec()),
                    Expr::Alt(vec![non_sur, pair]),
                ]),
            ])
        })
    }

    /// Any JSON value.
    pub(super) fn any_value(&mut self) -> Expr {
        if let Some(&r) = self.common.get("value") {
            return Expr::Ref(r);
        }
        let r = self.reserve("value");
        self.common.insert("value", r);
        let ws = self.ws();
        let ch = self.json_char();
        let string = Expr::Seq(vec![
            Expr::Literal(b"\"".to_vec()),
            Expr::Repeat {
                e: Box::new(ch),
                min: 0,
                max: None,
            },
            Expr::Literal(b"\"".to_vec()),
        ]);
        let string = self.rule("string", string);
        let number = self.number(&Map::new(), "", false).unwrap_or(Expr::Empty);
        let v = Expr::Ref(r);
        let sep = self.comma();
        let member = Expr::Seq(vec![
            string.clone(),
            ws.clone(),
            Expr::Literal(b":".to_vec()),
            ws.clone(),
            v.clone(),
        ]);
        let mut object = delimited(b'{', member, b'}', &ws, &sep);
        if self.opts.unique_keys {
            let c = self.unique_keys_check();
            object = self.checked_rule("any-object", object, c);
        }
        let array = delimited(b'[', v, b']', &ws, &sep);
        let body = Expr::Alt(vec![
            object,
            array,
            string,
            number,
            Expr::Literal(b"true".to_vec()),
            Expr::Literal(b"false".to_vec()),
            Expr::Literal(b"null".to_vec()),
        ]);
        self.set(r, body);
        Expr::Ref(r)
    }

    pub(super) fn literal_value(&mut self, v: &Value) -> Expr {
        match v {
            Value::Null => Expr::Literal(b"null".to_vec()),
            Value::Bool(b) => Expr::Literal(if *b {
                b"true".to_vec()
            } else {
                b"false".to_vec()
            }),
            Value::Number(n) => {
                let text = n.to_string();
                let exact = dec::Dec::from_number(n).filter(|d| {
                    // The value's plain spelling stays short: `1e300` is not written out.
                    let (_, i, f) = d.plain_parts();
                    i.len() + f.len() <= 400
                });
                if let Some(d) =
                    exact.filter(|_| self.opts.number_digits.is_none() && !self.opts.grammar_only)
                {
                    if !(self.opts.plain_integers && d.is_integer()) {
                        return self.number_literal(d);
                    }
                }
                if self.opts.plain_integers && (n.is_i64() || n.is_u64()) {
                    // Plain integers asked for: an integral constant as its digits only
                    // (`1`, not `1.0`, which draft 4 does not count as an integer).
                    return Expr::Literal(text.into_bytes());
                }
                if let Some(i) = n
                    .as_i64()
                    .map(|x| x as i128)
                    .or(n.as_u64().map(|x| x as i128))
                {
                    let mut alts = vec![Expr::Seq(vec![lit(&i.to_string()), zero_fraction()])];
                    if i == 0 {
                        alts.push(Expr::Literal(b"-0".to_vec()));
                    }
                    Expr::Alt(alts)
                } else if n
                    .as_f64()
                    .is_some_and(|f| f.fract() == 0.0 && f.abs() < 1e15)
                {
                    let i = n.as_f64().unwrap() as i128;
                    Expr::Alt(vec![
                        Expr::Literal(i.to_string().into_bytes()),
                        Expr::Literal(format!("{i}.0").into_bytes()),
                    ])
                } else {
                    Expr::Literal(text.into_bytes())
                }
            }
            Value::String(s) => {
                // One literal per run of characters written raw (a key is usually one
                // literal, quotes included); the others (`/`, `"`, `\`, controls) with
                // their escapes. Per character, keys were over half of a big schema's
                // grammar nodes, each a heap allocation built, hashed, copied and dropped.
                let mut seq = Vec::new();
                let mut run = b"\"".to_vec();
                let mut buf = [0u8; 4];
                for c in s.chars() {
                    if spelled_raw_only(c) {
                        run.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                        continue;
                    }
                    match json_chars(&[(c, c)]) {
                        Expr::Literal(l) => run.extend_from_slice(&l),
                        e => {
                            if !run.is_empty() {
                                seq.push(Expr::Literal(std::mem::take(&mut run)));
                            }
                            seq.push(e);
                        }
                    }
                }
                run.push(b'"');
                seq.push(Expr::Literal(run));
                if seq.len() == 1 {
                    seq.pop().unwrap_or(Expr::Empty)
                } else {
                    Expr::Seq(seq)
                }
            }
            Value::Array(a) => {
                let ws = self.ws();
                let mut seq = vec![Expr::Literal(b"[".to_vec()), ws.clone()];
                for (i, x) in a.iter().enumerate() {
                    if i > 0 {
                        seq.extend([ws.clone(), Expr::Literal(b",".to_vec()), ws.clone()]);
                    }
                    seq.push(self.literal_value(x));
                }
                seq.extend([ws, Expr::Literal(b"]".to_vec())]);
                Expr::Seq(seq)
            }
            // Properties in any order: the members in any order, each exactly once (a
            // check of the keys: the same as an object's in any order).
            Value::Object(o) if self.opts.any_order && o.len() > 1 => {
                let ws = self.ws();
                let mut members = Vec::new();
                for (k, x) in o {
                    let key = self.literal_value(&Value::String(k.clone()));
                    let colon = self.colon();
                    let value = self.literal_value(x);
                    members.push(Expr::Seq(vec![key, colon, value]));
                }
                let member = Expr::Alt(members);
                let comma = self.comma();
                let body = Expr::Seq(vec![
                    Expr::Literal(b"{".to_vec()),
                    ws.clone(),
                    member.clone(),
                    rep(Expr::Seq(vec![comma, member]), 0, Some(o.len() as u32 - 1)),
                    ws,
                    Expr::Literal(b"}".to_vec()),
                ]);
                let keys: Vec<String> = o.keys().cloned().collect();
                // The whole constant as the hint: all its members, in its order.
                let all: Vec<String> = o
                    .iter()
                    .map(|(k, x)| format!("{}:{x}", Value::String(k.clone())))
                    .collect();
                let c = check::object_keys(keys, o.len(), o.len(), vec![all.join(",")]);
                self.checked_rule("const-object", body, c)
            }
            Value::Object(o) => {
                let ws = self.ws();
                let mut seq = vec![Expr::Literal(b"{".to_vec()), ws.clone()];
                for (i, (k, x)) in o.iter().enumerate() {
                    if i > 0 {
                        seq.extend([ws.clone(), Expr::Literal(b",".to_vec()), ws.clone()]);
                    }
                    seq.push(self.literal_value(&Value::String(k.clone())));
                    seq.extend([ws.clone(), Expr::Literal(b":".to_vec()), ws.clone()]);
                    seq.push(self.literal_value(x));
                }
                seq.extend([ws, Expr::Literal(b"}".to_vec())]);
                Expr::Seq(seq)
            }
        }
    }
}

/// Whether an enum/const value passes the other keywords of its schema: `type`, lengths,
/// numeric bounds and item/property counts are checked; unknown keywords are annotations;
/// other validation keywords next to `enum`/`const` are refused.
pub(super) fn value_passes(
    v: &Value,
    m: &Map<String, Value>,
    ptr: &str,
    draft: u32,
) -> Result<bool, SchemaError> {
    const CHECKED: &[&str] = &[
        "multipleOf",
        "enum",
        "const",
        "type",
        "minLength",
        "maxLength",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "minItems",
        "maxItems",
        "minProperties",
        "maxProperties",
        "required",
    ];
    const OTHER_VALIDATION: &[&str] = &[
        "pattern",
        "format",
        "multipleOf",
        "items",
        "prefixItems",
        "additionalItems",
        "properties",
        "additionalProperties",
        "uniqueItems",
    ];
    for k in m.keys() {
        if OTHER_VALIDATION.contains(&k.as_str()) && !CHECKED.contains(&k.as_str()) {
            // Only refuse when the keyword applies to one of the listed values' types.
            let applies = match k.as_str() {
                "pattern" | "format" => v.is_string(),
                "multipleOf" => v.is_number(),
                "items" | "prefixItems" | "additionalItems" | "uniqueItems" => v.is_array(),
                _ => v.is_object(),
            };
            if applies {
                return Err(unsupported(k, ptr, "enum/const combined with this keyword"));
            }
        }
    }
    if let Some(t) = m.get("type") {
        let mut mask = type_mask(t);
        if mask & T_NUMBER != 0 {
            mask |= T_INTEGER;
        }
        let mut vt = type_of(v);
        if draft == 4 && v.as_i64().is_none() && v.as_u64().is_none() {
            vt &= !T_INTEGER;
        }
        if vt & mask == 0 {
            return Ok(false);
        }
    }
    let num = |k: &str| m.get(k).and_then(exact_num);
    let count = |k: &str| m.get(k).and_then(|x| x.as_u64()).map(|x| x as usize);
    match v {
        Value::String(s) => {
            let n = s.chars().count();
            if count("minLength").is_some_and(|x| n < x)
                || count("maxLength").is_some_and(|x| n > x)
            {
                return Ok(false);
            }
        }
        Value::Number(x) => {
            let Some(x) = dec::Dec::from_number(x) else {
                return Ok(false);
            };
            let ex_min_bool = m.get("exclusiveMinimum") == Some(&Value::Bool(true));
            let ex_max_bool = m.get("exclusiveMaximum") == Some(&Value::Bool(true));
            if num("minimum").is_some_and(|l| x < l || (ex_min_bool && x == l))
                || num("maximum").is_some_and(|h| x > h || (ex_max_bool && x == h))
                || num("exclusiveMinimum").is_some_and(|l| x <= l)
                || num("exclusiveMaximum").is_some_and(|h| x >= h)
                || num("multipleOf").is_some_and(|d| d.is_zero() || !x.is_multiple_of(&d))
            {
                return Ok(false);
            }
        }
        Value::Array(a)
            if count("minItems").is_some_and(|x| a.len() < x)
                || count("maxItems").is_some_and(|x| a.len() > x) =>
        {
            return Ok(false);
        }
        Value::Object(o) => {
            if count("minProperties").is_some_and(|x| o.len() < x)
                || count("maxProperties").is_some_and(|x| o.len() > x)
            {
                return Ok(false);
            }
            if let Some(Value::Array(req)) = m.get("required") {
                if req
                    .iter()
                    .any(|r| r.as_str().is_some_and(|r| !o.contains_key(r)))
                {
                    return Ok(false);
                }
            }
        }
        _ => {}
    }
    Ok(true)
}

/// JSON Schema equality: numbers by exact value, objects in any member order.
pub(super) fn json_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            dec::Dec::from_number(x).is_some()
                && dec::Dec::from_number(x) == dec::Dec::from_number(y)
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| json_eq(p, q))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| json_eq(v, w)))
        }
        _ => a == b,
    }
}

/// JSON equality as JSON Schema defines it (numbers by value).
/// A number's exact decimal value (`None` for anything else).
pub(super) fn exact_num(v: &Value) -> Option<dec::Dec> {
    v.as_number().and_then(dec::Dec::from_number)
}

/// The items of an array schema when they are a small set of scalar values with pairwise
/// disjoint spellings (strings, integers, booleans, null; deduplicated): `items` is just an
/// `enum` or a `const` (annotations aside), with no `prefixItems`, `contains` or
/// `additionalItems`. `None` otherwise.
pub(super) fn small_value_set(m: &Map<String, Value>) -> Option<Vec<Value>> {
    let allowed_here = [
        "type",
        "items",
        "minItems",
        "maxItems",
        "uniqueItems",
        "title",
        "description",
        "$comment",
        "default",
        "examples",
    ];
    if m.keys()
        .any(|k| !allowed_here.contains(&k.as_str()) && !ANNOTATIONS.contains(&k.as_str()))
    {
        return None;
    }
    let Some(Value::Object(items)) = m.get("items") else {
        return None;
    };
    let annotation = |k: &str| matches!(k, "title" | "description" | "$comment");
    if items
        .keys()
        .any(|k| !(k == "enum" || k == "const" || annotation(k)))
    {
        return None;
    }
    let raw: Vec<Value> = match (items.get("enum"), items.get("const")) {
        (Some(Value::Array(e)), None) => e.clone(),
        (None, Some(c)) => vec![c.clone()],
        _ => return None,
    };
    let mut out: Vec<Value> = Vec::new();
    for v in raw {
        let scalar = match &v {
            Value::String(_) | Value::Bool(_) | Value::Null => true,
            Value::Number(n) => n.is_i64() || n.is_u64(),
            _ => false,
        };
        if !scalar {
            return None;
        }
        if !out.contains(&v) {
            out.push(v);
        }
    }
    (out.len() <= MAX_UNIQUE_VALUES).then_some(out)
}

/// An array's brackets: `[ ]` when `empty` is allowed, and `[ items ]` when there are
/// items, with optional whitespace `ws` inside the brackets. Cost: O(1).
pub(super) fn array_frame(ws: &Expr, empty: bool, items: Option<Expr>) -> Expr {
    let mut alts = Vec::new();
    if empty {
        alts.push(Expr::Seq(vec![
            Expr::Literal(b"[".to_vec()),
            ws.clone(),
            Expr::Literal(b"]".to_vec()),
        ]));
    }
    if let Some(items) = items {
        alts.push(Expr::Seq(vec![
            Expr::Literal(b"[".to_vec()),
            ws.clone(),
            items,
            ws.clone(),
            Expr::Literal(b"]".to_vec()),
        ]));
    }
    Expr::Alt(alts)
}

/// Most distinct values for which `uniqueItems` is compiled into the grammar.
const MAX_UNIQUE_VALUES: usize = 8;
