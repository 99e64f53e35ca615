//! GBNF (llama.cpp's grammar format) parser.
//!
//! Follows llama.cpp's `llama-grammar.cpp` parser: rules `name ::= alternatives` ending at a
//! newline; `|` alternation (a newline after `|` continues the rule); `( )` groups (newlines
//! allowed inside); `"..."` literals and `[...]` / `[^...]` classes with the escapes `\x`,
//! `\u`, `\U`, `\t`, `\r`, `\n`, `\\`, `\"`, `\[`, `\]`; `.` any character; postfix `*`, `+`,
//! `?`, `{m}`, `{m,}`, `{m,n}`; `#` comments. Rules may appear in any order and may recurse
//! (left recursion included). Differences: rule names may also contain `_`; a rule defined
//! twice is an error (llama.cpp silently keeps the last); token matchers `<...>` are refused
//! with an error.
//!
//! Errors carry 1-based line and column. The parser is recursive only in group nesting,
//! which is limited by [`Limits::max_nesting`].
//!
//! Part of the grammar front ends. Owns: one parse's position and counters. Uses: the IR
//! and `error`.

use std::collections::HashMap;

use super::ir::{Expr, Grammar, Rule, RuleId};
use crate::error::GrammarError;
use crate::Limits;

struct Parser<'a> {
    src: &'a str,
    b: &'a [u8],
    pos: usize,
    names: HashMap<String, RuleId>,
    rules: Vec<Option<Expr>>,
    rule_names: Vec<String>,
    /// First reference position of each rule (for undefined-rule errors).
    first_ref: Vec<usize>,
    limits: &'a Limits,
    depth: usize,
    nodes: usize,
}

pub(crate) fn line_col(src: &str, pos: usize) -> (usize, usize) {
    let pos = pos.min(src.len());
    let before = &src.as_bytes()[..pos];
    let line = before.iter().filter(|&&c| c == b'\n').count() + 1;
    let start = before
        .iter()
        .rposition(|&c| c == b'\n')
        .map(|p| p + 1)
        .unwrap_or(0);
    let col = String::from_utf8_lossy(&before[start..]).chars().count() + 1;
    (line, col)
}

fn is_word(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'-' || c == b'_'
}

pub(crate) fn parse(src: &str, limits: &Limits) -> Result<Grammar, GrammarError> {
    if src.len() > limits.max_grammar_bytes {
        return Err(GrammarError::Limit {
            what: "grammar text size in bytes",
            value: src.len(),
            limit: limits.max_grammar_bytes,
            kind: crate::error::LimitKind::GrammarBytes,
        });
    }
    let mut p = Parser {
        src,
        b: src.as_bytes(),
        pos: 0,
        names: HashMap::new(),
        rules: Vec::new(),
        rule_names: Vec::new(),
        first_ref: Vec::new(),
        limits,
        depth: 0,
        nodes: 0,
    };
    p.space(true);
    while p.pos < p.b.len() {
        p.rule()?;
    }
    let root = *p.names.get("root").ok_or(GrammarError::NoRoot)?;
    let mut rules = Vec::with_capacity(p.rules.len());
    for (i, body) in p.rules.into_iter().enumerate() {
        match body {
            Some(body) => rules.push(Rule {
                name: p.rule_names[i].clone(),
                body,
            }),
            None => {
                let (line, col) = line_col(src, p.first_ref[i]);
                return Err(GrammarError::UndefinedRule {
                    name: p.rule_names[i].clone(),
                    line,
                    col,
                });
            }
        }
    }
    let mut g = Grammar {
        rules,
        root,
        checks: Vec::new(),
        warnings: Vec::new(),
    };
    g.prune_unproductive()?;
    Ok(g)
}

impl<'a> Parser<'a> {
    fn err(&self, pos: usize, msg: impl Into<String>) -> GrammarError {
        let (line, col) = line_col(self.src, pos);
        GrammarError::Syntax {
            line,
            col,
            msg: msg.into(),
        }
    }

    fn peek(&self) -> Option<u8> {
        self.b.get(self.pos).copied()
    }

    fn space(&mut self, newline_ok: bool) {
        while let Some(c) = self.peek() {
            match c {
                b' ' | b'\t' => self.pos += 1,
                b'#' => {
                    while let Some(c) = self.peek() {
                        if c == b'\r' || c == b'\n' {
                            break;
                        }
                        self.pos += 1;
                    }
                }
                b'\r' | b'\n' if newline_ok => self.pos += 1,
                _ => break,
            }
        }
    }

    fn name(&mut self) -> Result<&'a str, GrammarError> {
        let start = self.pos;
        while self.peek().is_some_and(is_word) {
            self.pos += 1;
        }
        if self.pos == start {
            return Err(self.err(
                start,
                format!("expecting a rule name, found {}", self.describe(start)),
            ));
        }
        Ok(&self.src[start..self.pos])
    }

    fn describe(&self, pos: usize) -> String {
        match self.src.get(pos..).and_then(|s| s.chars().next()) {
            Some(c) => format!("{c:?}"),
            None => "end of input".into(),
        }
    }

    fn rule_id(&mut self, name: &str, pos: usize) -> Result<RuleId, GrammarError> {
        if let Some(&id) = self.names.get(name) {
            return Ok(id);
        }
        if self.rules.len() >= self.limits.max_rules {
            return Err(GrammarError::Limit {
                what: "number of rules",
                value: self.rules.len() + 1,
                limit: self.limits.max_rules,
                kind: crate::error::LimitKind::Rules,
            });
        }
        let id = self.rules.len() as RuleId;
        self.names.insert(name.to_string(), id);
        self.rules.push(None);
        self.rule_names.push(name.to_string());
        self.first_ref.push(pos);
        Ok(id)
    }

    fn rule(&mut self) -> Result<(), GrammarError> {
        let start = self.pos;
        let name = self.name()?;
        self.space(false);
        if !self.b[self.pos..].starts_with(b"::=") {
            return Err(self.err(self.pos, format!("expecting ::= after rule name `{name}`")));
        }
        self.pos += 3;
        self.space(true);
        let id = self.rule_id(name, start)?;
        if self.rules[id as usize].is_some() {
            let (line, col) = line_col(self.src, start);
            return Err(GrammarError::DuplicateRule {
                name: name.to_string(),
                line,
                col,
            });
        }
        let body = self.alternates(false)?;
        self.rules[id as usize] = Some(body);
        match self.peek() {
            None => {}
            Some(b'\r') => {
                self.pos += 1;
                if self.peek() == Some(b'\n') {
                    self.pos += 1;
                }
            }
            Some(b'\n') => self.pos += 1,
            Some(_) => {
                return Err(self.err(
                    self.pos,
                    format!(
                        "expecting newline or end of rule, found {}",
                        self.describe(self.pos)
                    ),
                ))
            }
        }
        self.space(true);
        Ok(())
    }

    fn alternates(&mut self, nested: bool) -> Result<Expr, GrammarError> {
        let mut alts = vec![self.sequence(nested)?];
        while self.peek() == Some(b'|') {
            self.pos += 1;
            self.space(true);
            alts.push(self.sequence(nested)?);
        }
        Ok(if alts.len() == 1 {
            alts.pop().unwrap()
        } else {
            Expr::Alt(alts)
        })
    }

    fn count_node(&mut self) -> Result<(), GrammarError> {
        self.nodes += 1;
        if self.nodes > self.limits.max_grammar_nodes {
            return Err(GrammarError::Limit {
                what: "number of grammar symbols",
                value: self.nodes,
                limit: self.limits.max_grammar_nodes,
                kind: crate::error::LimitKind::GrammarNodes,
            });
        }
        Ok(())
    }

    // Long (181 lines): one arm per GBNF element (literal, class, group, reference,
    // postfix operators), each with its own error position; the grammar is the outline.
    fn sequence(&mut self, nested: bool) -> Result<Expr, GrammarError> {
        let mut seq: Vec<Expr> = Vec::new();
        while let Some(c) = self.peek() {
            let sym_start = self.pos;
            match c {
                b'"' => {
                    self.pos += 1;
                    let mut lit = Vec::new();
                    loop {
                        match self.peek() {
                            None => return Err(self.err(sym_start, "unterminated string literal")),
                            Some(b'"') => break,
                            _ => {
                                let ch = self.char_()?;
                                let mut buf = [0u8; 4];
                                lit.extend_from_slice(ch.encode_utf8(&mut buf).as_bytes());
                            }
                        }
                    }
                    self.pos += 1;
                    self.count_node()?;
                    seq.push(if lit.is_empty() {
                        Expr::Empty
                    } else {
                        Expr::Literal(lit)
                    });
                }
                b'[' => {
                    self.pos += 1;
                    let negated = self.peek() == Some(b'^');
                    if negated {
                        self.pos += 1;
                    }
                    let mut ranges: Vec<(u32, u32)> = Vec::new();
                    loop {
                        match self.peek() {
                            None => return Err(self.err(sym_start, "unterminated character class")),
                            Some(b']') => break,
                            _ => {
                                let lo = self.char_code()?;
                                if self.peek() == Some(b'-')
                                    && self.b.get(self.pos + 1).is_some_and(|&c| c != b']')
                                {
                                    self.pos += 1;
                                    let at = self.pos;
                                    let hi = self.char_code()?;
                                    if hi < lo {
                                        return Err(self.err(
                                            at,
                                            format!(
                                                "character range is out of order: {lo:#x}-{hi:#x}"
                                            ),
                                        ));
                                    }
                                    ranges.push((lo, hi));
                                } else {
                                    ranges.push((lo, lo));
                                }
                            }
                        }
                    }
                    self.pos += 1;
                    self.count_node()?;
                    seq.push(Expr::Chars(make_class(&ranges, negated)));
                }
                b'(' => {
                    self.pos += 1;
                    self.depth += 1;
                    if self.depth > self.limits.max_nesting {
                        return Err(GrammarError::Limit {
                            what: "group nesting depth",
                            value: self.depth,
                            limit: self.limits.max_nesting,
                            kind: crate::error::LimitKind::Nesting,
                        });
                    }
                    self.space(true);
                    let inner = self.alternates(true)?;
                    self.depth -= 1;
                    if self.peek() != Some(b')') {
                        return Err(self.err(
                            self.pos,
                            format!(
                                "expecting ')' to close the group opened at {}, found {}",
                                {
                                    let (l, c) = line_col(self.src, sym_start);
                                    format!("{l}:{c}")
                                },
                                self.describe(self.pos)
                            ),
                        ));
                    }
                    self.pos += 1;
                    self.count_node()?;
                    seq.push(inner);
                }
                b'.' => {
                    self.pos += 1;
                    self.count_node()?;
                    seq.push(Expr::Chars(vec![('\0', char::MAX)]));
                }
                b'*' | b'+' | b'?' => {
                    let Some(last) = seq.pop() else {
                        return Err(self.err(
                            self.pos,
                            format!("expecting an item before '{}'", c as char),
                        ));
                    };
                    self.pos += 1;
                    let (min, max) = match c {
                        b'*' => (0, None),
                        b'+' => (1, None),
                        _ => (0, Some(1)),
                    };
                    seq.push(self.repeat(last, min, max)?);
                }
                b'{' => {
                    let Some(last) = seq.pop() else {
                        return Err(self.err(self.pos, "expecting an item before '{'"));
                    };
                    self.pos += 1;
                    self.space(nested);
                    let min = self.int()?;
                    self.space(nested);
                    let max = if self.peek() == Some(b',') {
                        self.pos += 1;
                        self.space(nested);
                        if self.peek().is_some_and(|c| c.is_ascii_digit()) {
                            let m = self.int()?;
                            self.space(nested);
                            Some(m)
                        } else {
                            None
                        }
                    } else {
                        Some(min)
                    };
                    if self.peek() != Some(b'}') {
                        return Err(self.err(
                            self.pos,
                            format!(
                                "expecting '}}' to close the repetition, found {}",
                                self.describe(self.pos)
                            ),
                        ));
                    }
                    self.pos += 1;
                    if let Some(m) = max {
                        if m < min {
                            return Err(self.err(
                                sym_start,
                                format!("repetition maximum {m} is below its minimum {min}"),
                            ));
                        }
                    }
                    seq.push(self.repeat(last, min, max)?);
                }
                b'<' | b'!' => {
                    let (line, col) = line_col(self.src, self.pos);
                    return Err(GrammarError::Unsupported {
                        line,
                        col,
                        msg: "token matchers (<...>, !<...>) are not supported; write the text instead".into(),
                    });
                }
                c if is_word(c) => {
                    let name = self.name()?;
                    let id = self.rule_id(name, sym_start)?;
                    self.count_node()?;
                    seq.push(Expr::Ref(id));
                }
                _ => break,
            }
            self.space(nested);
        }
        Ok(match seq.len() {
            0 => Expr::Empty,
            1 => seq.pop().unwrap(),
            _ => Expr::Seq(seq),
        })
    }

    fn repeat(&mut self, e: Expr, min: u32, max: Option<u32>) -> Result<Expr, GrammarError> {
        let bound = max.unwrap_or(min) as usize;
        if bound > self.limits.max_repeat {
            return Err(GrammarError::Limit {
                what: "repetition count",
                value: bound,
                limit: self.limits.max_repeat,
                kind: crate::error::LimitKind::Repeat,
            });
        }
        // Nested postfix operators deepen the tree too.
        let depth = repeat_depth(&e) + 1;
        if depth > self.limits.max_nesting {
            return Err(GrammarError::Limit {
                what: "repetition nesting depth",
                value: depth,
                limit: self.limits.max_nesting,
                kind: crate::error::LimitKind::Nesting,
            });
        }
        self.count_node()?;
        Ok(Expr::repeat(e, min, max))
    }

    fn int(&mut self) -> Result<u32, GrammarError> {
        let start = self.pos;
        while self.peek().is_some_and(|c| c.is_ascii_digit()) {
            self.pos += 1;
        }
        if start == self.pos {
            return Err(self.err(
                start,
                format!("expecting an integer, found {}", self.describe(start)),
            ));
        }
        self.src[start..self.pos]
            .parse::<u32>()
            .map_err(|_| self.err(start, "integer is too large"))
    }

    /// One (possibly escaped) character of a literal or class, as a code point number.
    fn char_code(&mut self) -> Result<u32, GrammarError> {
        let start = self.pos;
        if self.peek() == Some(b'\\') {
            let esc = self.b.get(self.pos + 1).copied();
            self.pos += 2;
            let hex = |p: &mut Self, n: usize| -> Result<u32, GrammarError> {
                let s = p.pos;
                let mut v: u32 = 0;
                for _ in 0..n {
                    match p.peek().and_then(|c| (c as char).to_digit(16)) {
                        Some(d) => {
                            v = v * 16 + d;
                            p.pos += 1;
                        }
                        None => {
                            return Err(p.err(
                                s,
                                format!(
                                    "expecting {n} hex digits after \\{}",
                                    esc.map(|c| c as char).unwrap_or(' ')
                                ),
                            ))
                        }
                    }
                }
                Ok(v)
            };
            return match esc {
                Some(b'x') => hex(self, 2),
                Some(b'u') => hex(self, 4),
                Some(b'U') => hex(self, 8),
                Some(b't') => Ok('\t' as u32),
                Some(b'r') => Ok('\r' as u32),
                Some(b'n') => Ok('\n' as u32),
                Some(c @ (b'\\' | b'"' | b'[' | b']')) => Ok(c as u32),
                _ => Err(self.err(
                    start,
                    format!("unknown escape {}", self.describe(start + 1)),
                )),
            };
        }
        let c = self.src[self.pos..]
            .chars()
            .next()
            .ok_or_else(|| self.err(start, "unexpected end of input"))?;
        self.pos += c.len_utf8();
        Ok(c as u32)
    }

    fn char_(&mut self) -> Result<char, GrammarError> {
        let start = self.pos;
        let v = self.char_code()?;
        char::from_u32(v)
            .ok_or_else(|| self.err(start, format!("{v:#x} is not a Unicode scalar value")))
    }
}

fn repeat_depth(e: &Expr) -> usize {
    match e {
        Expr::Repeat { e, .. } => 1 + repeat_depth(e),
        _ => 0,
    }
}

/// Normalizes code point ranges (clipping out-of-range values) into sorted disjoint `char`
/// ranges without surrogates, negated (over all Unicode scalar values) when asked.
pub(crate) fn make_class(ranges: &[(u32, u32)], negated: bool) -> Vec<(char, char)> {
    let mut v: Vec<(u32, u32)> = ranges
        .iter()
        .filter(|r| r.0 <= r.1 && r.0 <= 0x10FFFF)
        .map(|&(a, b)| (a, b.min(0x10FFFF)))
        .collect();
    v.sort_unstable();
    let mut merged: Vec<(u32, u32)> = Vec::new();
    for (a, b) in v {
        match merged.last_mut() {
            Some(last) if a <= last.1.saturating_add(1) => last.1 = last.1.max(b),
            _ => merged.push((a, b)),
        }
    }
    if negated {
        let mut comp = Vec::new();
        let mut next = 0u32;
        for &(a, b) in &merged {
            if a > next {
                comp.push((next, a - 1));
            }
            next = b + 1;
        }
        if next <= 0x10FFFF {
            comp.push((next, 0x10FFFF));
        }
        merged = comp;
    }
    let mut out = Vec::new();
    for (a, b) in merged {
        for (x, y) in [(a, b.min(0xD7FF)), (a.max(0xE000), b)] {
            if x <= y {
                out.push((char::from_u32(x).unwrap(), char::from_u32(y).unwrap()));
            }
        }
    }
    out
}
