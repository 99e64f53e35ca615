//! Printing the IR as GBNF (for `ruvllm schema to-gbnf` and for inspecting grammars).
//!
//! Part of the grammar front ends. Owns: nothing. Uses: the IR.

use std::fmt::Write;

use super::ir::{Expr, Grammar};

impl Grammar {
    /// The grammar in GBNF, when GBNF can express it (raw byte classes cannot be written:
    /// GBNF terminals are code points). Rule names are sanitized and made unique; `root`
    /// comes first. Parsing the output gives the same language. Grammars with semantic checks
    /// ([`super::ValueCheck`]) are refused.
    pub fn to_gbnf(&self) -> Result<String, String> {
        if let Some((r, c)) = self.checks.first() {
            return Err(format!(
                "GBNF cannot express a semantic check: {} (rule {:?})",
                c.0.describe(),
                self.rules[*r as usize].name
            ));
        }
        let mut names: Vec<String> = Vec::with_capacity(self.rules.len());
        let mut used = std::collections::HashSet::new();
        for (i, r) in self.rules.iter().enumerate() {
            let base: String = r
                .name
                .chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() || c == '-' {
                        c
                    } else {
                        '-'
                    }
                })
                .collect::<String>()
                .trim_matches('-')
                .to_string();
            let base = if i as u32 == self.root {
                "root".to_string()
            } else if base.is_empty() || base == "root" {
                format!("r{i}")
            } else {
                base
            };
            let mut name = base.clone();
            let mut k = 1;
            while !used.insert(name.clone()) {
                name = format!("{base}-{k}");
                k += 1;
            }
            names.push(name);
        }
        let mut out = String::new();
        let reachable = self.reachable();
        let mut order: Vec<usize> = vec![self.root as usize];
        order.extend((0..self.rules.len()).filter(|&i| i != self.root as usize && reachable[i]));
        for i in order {
            let mut body = String::new();
            write_expr(&self.rules[i].body, &names, &mut body, 0)?;
            let _ = writeln!(out, "{} ::= {}", names[i], body);
        }
        Ok(out)
    }
}

fn esc(c: char, in_class: bool) -> String {
    match c {
        '"' if !in_class => "\\\"".into(),
        '\\' => "\\\\".into(),
        '[' if in_class => "\\[".into(),
        ']' if in_class => "\\]".into(),
        '-' if in_class => "\\x2D".into(),
        '^' if in_class => "\\x5E".into(),
        '\n' => "\\n".into(),
        '\r' => "\\r".into(),
        '\t' => "\\t".into(),
        c if (c as u32) < 0x20 || c as u32 == 0x7F => format!("\\x{:02X}", c as u32),
        c if (c as u32) > 0xFFFF => format!("\\U{:08X}", c as u32),
        c if (c as u32) >= 0x80 && !c.is_alphanumeric() => format!("\\u{:04X}", c as u32),
        c => c.to_string(),
    }
}

/// prec: 0 = alternation allowed, 1 = inside a sequence, 2 = operand of a postfix operator.
fn write_expr(e: &Expr, names: &[String], out: &mut String, prec: u8) -> Result<(), String> {
    match e {
        Expr::Empty => out.push_str("\"\""),
        Expr::Literal(b) => {
            let s = std::str::from_utf8(b).map_err(|_| "a literal is not UTF-8".to_string())?;
            out.push('"');
            for c in s.chars() {
                out.push_str(&esc(c, false));
            }
            out.push('"');
        }
        Expr::Chars(r) => {
            if r.is_empty() {
                // An empty class: a class that matches nothing.
                out.push_str("[^\\x00-\\U0010FFFF]");
                return Ok(());
            }
            out.push('[');
            for &(a, b) in r {
                out.push_str(&esc(a, true));
                if b != a {
                    out.push('-');
                    out.push_str(&esc(b, true));
                }
            }
            out.push(']');
        }
        Expr::Bytes(_) => return Err("raw byte classes cannot be written in GBNF".into()),
        Expr::Ref(r) => out.push_str(&names[*r as usize]),
        Expr::Seq(v) => {
            if v.is_empty() {
                out.push_str("\"\"");
                return Ok(());
            }
            let paren = prec >= 2 && v.len() > 1;
            if paren {
                out.push('(');
            }
            for (i, x) in v.iter().enumerate() {
                if i > 0 {
                    out.push(' ');
                }
                write_expr(x, names, out, if v.len() > 1 { 1 } else { prec })?;
            }
            if paren {
                out.push(')');
            }
        }
        Expr::Alt(v) => {
            if v.is_empty() {
                out.push_str("[^\\x00-\\U0010FFFF]");
                return Ok(());
            }
            let paren = prec >= 1 && v.len() > 1;
            if paren {
                out.push('(');
            }
            for (i, x) in v.iter().enumerate() {
                if i > 0 {
                    out.push_str(" | ");
                }
                write_expr(x, names, out, if v.len() > 1 { 0 } else { prec })?;
            }
            if paren {
                out.push(')');
            }
        }
        Expr::Repeat { e, min, max } => {
            write_expr(e, names, out, 2)?;
            match (min, max) {
                (0, None) => out.push('*'),
                (1, None) => out.push('+'),
                (0, Some(1)) => out.push('?'),
                (m, None) => {
                    let _ = write!(out, "{{{m},}}");
                }
                (m, Some(n)) if m == n => {
                    let _ = write!(out, "{{{m}}}");
                }
                (m, Some(n)) => {
                    let _ = write!(out, "{{{m},{n}}}");
                }
            }
        }
        // GBNF has no such node: its expansion, spelled out.
        Expr::KeyComplement(k) => write_expr(&k.expand(), names, out, prec)?,
    }
    Ok(())
}
