//! Regex front end: `regex-syntax` parses the pattern, and its HIR is translated to the IR.
//!
//! The grammar's sentences are the strings that match the *whole* pattern (as a generation
//! constraint must be). `^`/`\A` at the start and `$`/`\z` at the end are therefore
//! redundant and dropped; anchors anywhere else (`^$|^https://`, `(?:a|^)b`) are rewritten
//! away by [`super::anchors`] with their exact meaning. Other assertions (word boundaries,
//! multi-line anchors) are refused with an error rather than approximated. Capture groups
//! are ignored.
//!
//! Part of the grammar front ends. Owns: one translation's counters. Uses: `regex-syntax`,
//! the IR and `error`.

use regex_syntax::hir::{Class, Hir, HirKind, Look};

use super::ir::{Expr, Grammar};
use crate::error::GrammarError;
use crate::Limits;

pub(crate) fn parse(pattern: &str, limits: &Limits) -> Result<Grammar, GrammarError> {
    if pattern.len() > limits.max_grammar_bytes {
        return Err(GrammarError::Limit {
            what: "regex size in bytes",
            value: pattern.len(),
            limit: limits.max_grammar_bytes,
            kind: crate::error::LimitKind::GrammarBytes,
        });
    }
    let hir = regex_syntax::ParserBuilder::new()
        .nest_limit(limits.max_nesting.min(u32::MAX as usize) as u32)
        .build()
        .parse(pattern)
        .map_err(|e| {
            let (offset, msg) = match &e {
                regex_syntax::Error::Parse(p)
                    if matches!(p.kind(), regex_syntax::ast::ErrorKind::NestLimitExceeded(_)) =>
                {
                    return GrammarError::Limit {
                        what: "regex nesting depth",
                        value: limits.max_nesting + 1,
                        limit: limits.max_nesting,
                        kind: crate::error::LimitKind::Nesting,
                    };
                }
                regex_syntax::Error::Parse(p) => (p.span().start.offset, p.kind().to_string()),
                regex_syntax::Error::Translate(t) => (t.span().start.offset, t.kind().to_string()),
                other => (0, other.to_string()),
            };
            GrammarError::Regex { offset, msg }
        })?;
    let mut body = strip_anchors(&hir);
    if !body.properties().look_set().is_empty() {
        body = super::anchors::whole_string(&hir, limits.max_grammar_nodes).map_err(|e| {
            GrammarError::Regex {
                offset: 0,
                msg: e.0,
            }
        })?;
    }
    let body = to_expr(&body, limits)?;
    let mut g = Grammar::single("root", body);
    g.prune_unproductive()?;
    Ok(g)
}

fn is_start(h: &Hir) -> bool {
    matches!(
        h.kind(),
        HirKind::Look(Look::Start | Look::StartLF | Look::StartCRLF)
    )
}
fn is_end(h: &Hir) -> bool {
    matches!(
        h.kind(),
        HirKind::Look(Look::End | Look::EndLF | Look::EndCRLF)
    )
}

/// Drops a leading start anchor and a trailing end anchor (also inside a top-level
/// alternation's branches).
fn strip_anchors(h: &Hir) -> Hir {
    match h.kind() {
        HirKind::Concat(parts) => {
            let mut v: Vec<Hir> = parts.to_vec();
            if v.first().is_some_and(is_start) {
                v.remove(0);
            }
            if v.last().is_some_and(is_end) {
                v.pop();
            }
            Hir::concat(v)
        }
        HirKind::Alternation(alts) => Hir::alternation(alts.iter().map(strip_anchors).collect()),
        HirKind::Capture(c) => strip_anchors(&c.sub),
        _ if is_start(h) || is_end(h) => Hir::empty(),
        _ => h.clone(),
    }
}

fn to_expr(h: &Hir, limits: &Limits) -> Result<Expr, GrammarError> {
    Ok(match h.kind() {
        HirKind::Empty => Expr::Empty,
        HirKind::Literal(l) => Expr::Literal(l.0.to_vec()),
        HirKind::Class(Class::Unicode(c)) => {
            Expr::Chars(c.ranges().iter().map(|r| (r.start(), r.end())).collect())
        }
        HirKind::Class(Class::Bytes(c)) => {
            Expr::Bytes(c.ranges().iter().map(|r| (r.start(), r.end())).collect())
        }
        HirKind::Look(l) => {
            return Err(GrammarError::Regex {
                offset: 0,
                msg: format!("assertion {l:?} left after rewriting the anchors"),
            })
        }
        HirKind::Repetition(r) => {
            let bound = r.max.unwrap_or(r.min) as usize;
            if bound > limits.max_repeat {
                return Err(GrammarError::Limit {
                    what: "repetition count",
                    value: bound,
                    limit: limits.max_repeat,
                    kind: crate::error::LimitKind::Repeat,
                });
            }
            Expr::repeat(to_expr(&r.sub, limits)?, r.min, r.max)
        }
        HirKind::Capture(c) => to_expr(&c.sub, limits)?,
        HirKind::Concat(v) => Expr::Seq(
            v.iter()
                .map(|x| to_expr(x, limits))
                .collect::<Result<_, _>>()?,
        ),
        HirKind::Alternation(v) => Expr::Alt(
            v.iter()
                .map(|x| to_expr(x, limits))
                .collect::<Result<_, _>>()?,
        ),
    })
}
