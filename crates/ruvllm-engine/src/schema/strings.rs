//! Strings: `minLength`/`maxLength`, `pattern` (ECMAScript translated to the regex crate's
//! syntax, then to JSON string characters), `format` and content keywords lowered to string
//! grammars.
//!
//! Part of the schema compiler (`Compiler` in the parent module), split by concern;
//! it may use everything of the parent and nothing of its siblings but through it.

use super::*;

impl Compiler<'_> {
    pub(super) fn string(
        &mut self,
        m: &Map<String, Value>,
        ptr: &str,
    ) -> Result<Expr, SchemaError> {
        let min = get_uint(m, "minLength", ptr)?.unwrap_or(0);
        let max = get_uint(m, "maxLength", ptr)?;
        let pattern = m.get("pattern");
        let format = m.get("format").and_then(|f| f.as_str());
        let quote = || Expr::Literal(b"\"".to_vec());
        // Formats we have no rule for: refused if the standard defines them (a validator may
        // assert them), ignored otherwise (unknown formats are annotations, with a warning,
        // or refused on request); OpenAPI's numeric formats say nothing of strings.
        let fmt_re = match format {
            None => None,
            Some(f) if self.openapi_annotation(f) => {
                self.unknown_format(f, ptr)?;
                None
            }
            Some(f) => match format_regex(f, self.opts.portable_values, self.opts.grammar_only) {
                Some(r) => Some(r),
                None if NUMBER_FORMATS.contains(&f) => None,
                None if KNOWN_FORMATS.contains(&f) => {
                    return Err(unsupported(
                        "format",
                        ptr,
                        format!("format {f:?} is not supported yet"),
                    ))
                }
                None => {
                    self.unknown_format(f, ptr)?;
                    None
                }
            },
        };
        let body = match (pattern, fmt_re) {
            (None, None) => {
                if max.is_some_and(|x| x < min) {
                    return Ok(Expr::Alt(vec![]));
                }
                if min > 10_000 {
                    return Err(unsupported("minLength", ptr, "minLength above 10000"));
                }
                if min == 0 && max.is_none() {
                    // Any string: one rule per schema, which every use refers to.
                    return Ok(self.common("any-string", |s| {
                        let ch = s.json_char();
                        Expr::Seq(vec![
                            quote(),
                            Expr::Repeat {
                                e: Box::new(ch),
                                min: 0,
                                max: None,
                            },
                            quote(),
                        ])
                    }));
                }
                let ch = self.json_char();
                let max = match max {
                    Some(x) if x > 1_000_000 => {
                        return Err(unsupported("maxLength", ptr, "maxLength above 1000000"))
                    }
                    other => other,
                };
                Expr::Repeat {
                    e: Box::new(ch),
                    min: min as u32,
                    max: max.map(|x| x as u32),
                }
            }
            (Some(_), Some(_)) => {
                return Err(unsupported("pattern", ptr, "pattern together with format"))
            }
            (Some(p), None) => {
                if min > 0 || max.is_some() {
                    return Err(unsupported(
                        "pattern",
                        ptr,
                        "pattern together with minLength/maxLength",
                    ));
                }
                let p = p
                    .as_str()
                    .ok_or_else(|| invalid(ptr, "pattern must be a string"))?;
                self.pattern(p, &join(ptr, "pattern"), false)?
            }
            (None, Some(re)) => {
                if min > 0 || max.is_some() {
                    return Err(unsupported(
                        "format",
                        ptr,
                        "format together with minLength/maxLength",
                    ));
                }
                let body = self.pattern(&re, &join(ptr, "format"), true)?;
                let value = Expr::Seq(vec![quote(), body, quote()]);
                // What the format's regex cannot say, checked on the decoded string.
                if let Some(c) = format.and_then(|f| {
                    format_check(f, self.opts.grammar_only || self.opts.portable_values)
                }) {
                    return Ok(self.checked_rule(
                        &format!("format{}", ptr.replace('/', "-")),
                        value,
                        c,
                    ));
                }
                return Ok(value);
            }
        };
        Ok(Expr::Seq(vec![quote(), body, quote()]))
    }

    /// A regex over decoded characters, as an expression over their JSON encoding.
    /// ECMAScript semantics: unanchored unless `^`/`$`; `\d`, `\w` ASCII.
    pub(super) fn pattern(
        &mut self,
        p: &str,
        ptr: &str,
        anchored: bool,
    ) -> Result<Expr, SchemaError> {
        if let Some(e) = self.patterns[anchored as usize].get(p) {
            return Ok(e.clone());
        }
        let e = self.pattern_uncached(p, ptr, anchored)?;
        self.patterns[anchored as usize].insert(p.to_string(), e.clone());
        Ok(e)
    }

    /// [`Compiler::pattern`] without its memo.
    pub(super) fn pattern_uncached(
        &mut self,
        p: &str,
        ptr: &str,
        anchored: bool,
    ) -> Result<Expr, SchemaError> {
        let translated = ecma_to_rust(p).map_err(|e| unsupported("pattern", ptr, e))?;
        let hir = regex_syntax::ParserBuilder::new()
            .nest_limit(100)
            .build()
            .parse(&translated)
            .map_err(|e| {
                unsupported(
                    "pattern",
                    ptr,
                    format!("cannot parse {p:?}: {}", first_line(&e.to_string())),
                )
            })?;
        let branches: Vec<Hir> = match hir.kind() {
            HirKind::Alternation(a) if !anchored => a.clone(),
            _ => vec![hir],
        };
        // Branches grouped by their anchors, each group one alternation between its
        // shared free ends: `X*A X* | X*B X*` is the language `X*(A|B)X*`, and written
        // that way the subset construction tracks one search instead of one per branch
        // (with seven unanchored keywords, the sets of branches already found made some
        // 2^7 copies of the search: 61 ms to build, against 0.5 ms).
        let mut groups: Vec<((bool, bool), Vec<Expr>)> = Vec::new();
        for b in branches {
            let b = strip_capture(&b);
            if let Some(body) = self.pattern_anchored_inside(&b, ptr, anchored)? {
                match groups.iter_mut().find(|(k, _)| *k == (true, true)) {
                    Some((_, v)) => v.push(body),
                    None => groups.push(((true, true), vec![body])),
                }
                continue;
            }
            let mut parts: Vec<Hir> = match b.kind() {
                HirKind::Concat(v) => v.clone(),
                _ => vec![b.clone()],
            };
            let start = anchored
                || parts
                    .first()
                    .is_some_and(|h| matches!(h.kind(), HirKind::Look(Look::Start)));
            let end = anchored
                || parts
                    .last()
                    .is_some_and(|h| matches!(h.kind(), HirKind::Look(Look::End)));
            if parts
                .first()
                .is_some_and(|h| matches!(h.kind(), HirKind::Look(Look::Start)))
            {
                parts.remove(0);
            }
            if parts
                .last()
                .is_some_and(|h| matches!(h.kind(), HirKind::Look(Look::End)))
            {
                parts.pop();
            }
            let mut seq = Vec::new();
            for h in &parts {
                seq.push(self.hir_json(h, ptr)?);
            }
            let body = Expr::Seq(seq);
            match groups.iter_mut().find(|(k, _)| *k == (start, end)) {
                Some((_, v)) => v.push(body),
                None => groups.push(((start, end), vec![body])),
            }
        }
        let mut alts = Vec::new();
        for ((start, end), mut bodies) in groups {
            let body = if bodies.len() == 1 {
                bodies.pop().unwrap()
            } else {
                Expr::Alt(bodies)
            };
            let mut any = || Expr::Repeat {
                e: Box::new(self.json_char()),
                min: 0,
                max: None,
            };
            let mut seq = Vec::new();
            if !start {
                seq.push(any());
            }
            seq.push(body);
            if !end {
                seq.push(any());
            }
            alts.push(Expr::Seq(seq));
        }
        Ok(if alts.len() == 1 {
            alts.pop().unwrap()
        } else {
            Expr::Alt(alts)
        })
    }

    /// A branch of a pattern with `^`/`$` (or another assertion) somewhere other than its
    /// first or last item: the search it is (`.*branch.*`, unless `anchored`) rewritten to
    /// a whole-string pattern without anchors ([`crate::grammar::anchors`]), over the JSON
    /// encoding. `None` for a branch whose assertions are only at its ends (the common
    /// case, compiled as one search with its siblings).
    fn pattern_anchored_inside(
        &mut self,
        b: &Hir,
        ptr: &str,
        anchored: bool,
    ) -> Result<Option<Expr>, SchemaError> {
        let mut inner: &[Hir] = match b.kind() {
            HirKind::Concat(v) => v,
            _ => std::slice::from_ref(b),
        };
        if inner
            .first()
            .is_some_and(|h| matches!(h.kind(), HirKind::Look(Look::Start)))
        {
            inner = &inner[1..];
        }
        if inner
            .last()
            .is_some_and(|h| matches!(h.kind(), HirKind::Look(Look::End)))
        {
            inner = &inner[..inner.len() - 1];
        }
        if inner.iter().all(|h| h.properties().look_set().is_empty()) {
            return Ok(None);
        }
        let search = if anchored {
            b.clone()
        } else {
            let any = Hir::repetition(regex_syntax::hir::Repetition {
                min: 0,
                max: None,
                greedy: true,
                sub: Box::new(Hir::class(Class::Unicode(
                    regex_syntax::hir::ClassUnicode::new([
                        regex_syntax::hir::ClassUnicodeRange::new('\0', char::MAX),
                    ]),
                ))),
            });
            Hir::concat(vec![any.clone(), b.clone(), any])
        };
        let whole = crate::grammar::anchors::whole_string(&search, self.limits.max_grammar_nodes)
            .map_err(|e| unsupported("pattern", ptr, e.0))?;
        Ok(Some(self.hir_json(&whole, ptr)?))
    }

    pub(super) fn hir_json(&mut self, h: &Hir, ptr: &str) -> Result<Expr, SchemaError> {
        Ok(match h.kind() {
            HirKind::Empty => Expr::Empty,
            HirKind::Literal(l) => {
                let s = std::str::from_utf8(&l.0)
                    .map_err(|_| unsupported("pattern", ptr, "byte-level pattern"))?;
                Expr::Seq(
                    s.chars()
                        .map(|c| json_chars_with(&[(c, c)], &PATTERN_U_ESCAPED))
                        .collect(),
                )
            }
            HirKind::Class(Class::Unicode(c)) => json_chars_with(
                &c.ranges()
                    .iter()
                    .map(|r| (r.start(), r.end()))
                    .collect::<Vec<_>>(),
                &PATTERN_U_ESCAPED,
            ),
            HirKind::Class(Class::Bytes(_)) => {
                return Err(unsupported("pattern", ptr, "byte-level class"))
            }
            HirKind::Look(_) => {
                return Err(unsupported(
                    "pattern",
                    ptr,
                    "an assertion left after rewriting the anchors",
                ))
            }
            HirKind::Repetition(r) => {
                if r.max.unwrap_or(r.min) > 10_000 {
                    return Err(unsupported("pattern", ptr, "repetition bound above 10000"));
                }
                Expr::Repeat {
                    e: Box::new(self.hir_json(&r.sub, ptr)?),
                    min: r.min,
                    max: r.max,
                }
            }
            HirKind::Capture(c) => self.hir_json(&c.sub, ptr)?,
            HirKind::Concat(v) => Expr::Seq(
                v.iter()
                    .map(|x| self.hir_json(x, ptr))
                    .collect::<Result<_, _>>()?,
            ),
            HirKind::Alternation(v) => Expr::Alt(
                v.iter()
                    .map(|x| self.hir_json(x, ptr))
                    .collect::<Result<_, _>>()?,
            ),
        })
    }
}

pub(super) fn strip_capture(h: &Hir) -> Hir {
    match h.kind() {
        HirKind::Capture(c) => strip_capture(&c.sub),
        _ => h.clone(),
    }
}

pub(super) fn first_line(s: &str) -> String {
    s.lines().last().unwrap_or(s).trim().to_string()
}

/// Rewrites ECMAScript regex syntax into the Rust (`regex-syntax`) dialect with the same
/// meaning: `\d`, `\w` (and negations, and `\b`-free) are ASCII in ECMAScript; `\s` is
/// Unicode whitespace in both; `\/` is `/`.
pub(super) fn ecma_to_rust(p: &str) -> Result<String, String> {
    let mut out = String::with_capacity(p.len() + 16);
    let mut in_class = false;
    let mut it = p.chars().peekable();
    while let Some(c) = it.next() {
        match c {
            '\\' => {
                let Some(n) = it.next() else {
                    return Err("trailing backslash".into());
                };
                const ECMA_SPACE: &str = "\\t\\n\\x0B\\x0C\\r \\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}\\x{FEFF}";
                let space_out = format!("[{ECMA_SPACE}]");
                let nspace_out = format!("[^{ECMA_SPACE}]");
                let rep: Option<(&str, &str)> = match n {
                    's' => Some((space_out.as_str(), ECMA_SPACE)),
                    'S' => Some((nspace_out.as_str(), "")),
                    'd' => Some(("[0-9]", "0-9")),
                    'D' => Some(("[^0-9]", "")),
                    'w' => Some(("[A-Za-z0-9_]", "A-Za-z0-9_")),
                    'W' => Some(("[^A-Za-z0-9_]", "")),
                    _ => None,
                };
                match rep {
                    Some((outside, inside)) => {
                        if in_class {
                            if inside.is_empty() {
                                return Err(format!("\\{n} inside a character class"));
                            }
                            out.push_str(inside);
                        } else {
                            out.push_str(outside);
                        }
                    }
                    None => match n {
                        '/' => out.push('/'),
                        'b' | 'B' if !in_class => {
                            return Err("word boundaries are not supported".into())
                        }
                        // `\cX`: the control character X mod 32 (ECMA-262 22.2.2.9).
                        'c' => match it.next() {
                            Some(l) if l.is_ascii_alphabetic() => {
                                out.push_str(&format!("\\x{{{:02X}}}", l as u32 % 32));
                            }
                            _ => return Err("\\c must be followed by a letter".into()),
                        },
                        'k' => return Err(format!("\\{n} is not supported")),
                        'u' if it.peek() == Some(&'{') => {
                            out.push_str("\\x");
                        }
                        'u' => {
                            let hex: String = (0..4).filter_map(|_| it.next()).collect();
                            if hex.len() != 4 || !hex.chars().all(|c| c.is_ascii_hexdigit()) {
                                return Err("\\u needs 4 hex digits".into());
                            }
                            out.push_str(&format!("\\x{{{hex}}}"));
                        }
                        _ => {
                            out.push('\\');
                            out.push(n);
                        }
                    },
                }
            }
            '[' if !in_class => {
                in_class = true;
                out.push('[');
                if it.peek() == Some(&'^') {
                    out.push(it.next().unwrap());
                }
                if it.peek() == Some(&']') {
                    // ECMAScript: `[]` matches nothing, `[^]` anything.
                    it.next();
                    in_class = false;
                    if out.ends_with('^') {
                        out.truncate(out.len() - 2);
                        out.push_str("(?s:.)");
                    } else {
                        out.truncate(out.len() - 1);
                        out.push_str("[^\\x{0}-\\x{10FFFF}]");
                    }
                }
            }
            '[' if in_class => out.push_str("\\["),
            ']' if in_class => {
                in_class = false;
                out.push(']');
            }
            '(' if !in_class && it.peek() == Some(&'?') => {
                // Lookarounds and named groups: (?=, (?!, (?<=, (?<!, (?<name>
                let rest: String = it.clone().take(3).collect();
                if rest.starts_with("?=")
                    || rest.starts_with("?!")
                    || rest.starts_with("?<=")
                    || rest.starts_with("?<!")
                {
                    return Err("lookaround assertions are not supported".into());
                }
                out.push('(');
                if rest.starts_with("?<") {
                    it.next();
                    it.next();
                    out.push_str("?P<");
                }
            }
            '.' if !in_class => out.push_str("[^\\n\\r\\x{2028}\\x{2029}]"),
            _ => out.push(c),
        }
    }
    Ok(out)
}
