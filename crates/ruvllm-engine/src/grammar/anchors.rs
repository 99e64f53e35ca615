//! Anchors anywhere: rewrites a regex with `^`/`$` (`\A`/`\z`) in any position into an
//! anchor-free regex with the same language under whole-string matching.
//!
//! A generation constraint is the set of whole strings a pattern matches. An anchor at the
//! ends of the pattern is then redundant, but one inside an alternation or a group is not:
//! `^$|^https://` is "empty, or starting with https://" (regex-syntax even factors it into
//! `^(?:$|https://)`), and `(?:a|^)b` is `b` at the start of the string or `ab`. The
//! rewrite computes, for each sub-expression `h` and two flags, the anchor-free language
//! `L(h | s, e)`: the strings `h` matches when its match starts at position 0 of the whole
//! string (`s`) and ends at its end (`e`). An anchor is a positive assertion, so each
//! language only grows when a flag is set, and that gives the concatenation rule below
//! exactly, with no case lost and none added:
//!
//! ```text
//! L(ab|s,e) = L(a|s,0)·L(b|0,e)                 both sides non-empty (and more, all valid)
//!           ∪ L(b|s,e)   if ε ∈ L(a|s,0)        a matched nothing: b starts where a did
//!           ∪ L(a|s,e)   if ε ∈ L(b|0,e)        b matched nothing: a ends where b did
//!           ∪ ε          if ε ∈ L(a|s,e) and ε ∈ L(b|s,e)
//! L(x*|s,e) = ε ∪ L(x|s,e) ∪ L(x|s,0)·L(x|0,0)*·L(x|0,e)
//! ```
//!
//! (In a repetition, iterations that match nothing can be dropped without changing what
//! the others may match.) A bounded repetition of an anchored group is written out
//! (at most [`MAX_EXPANDED_REPEAT`] copies). Other assertions (word boundaries, the
//! multi-line `^`/`$` of `(?m)`, which depend on the neighbouring character) are refused
//! with their name rather than approximated.
//!
//! Cost: each sub-expression is rewritten at most four times (once per flag pair, memoized);
//! the result is bounded by [`crate::Limits::max_grammar_nodes`] nodes, checked as it grows.
//!
//! Part of the grammar front ends. Owns: the rewrite. Uses: `regex-syntax`'s HIR; read by
//! the regex front end and the JSON Schema `pattern` keyword.

use std::borrow::Cow;
use std::collections::HashMap;
use std::rc::Rc;

use regex_syntax::hir::{Hir, HirKind, Look, Repetition};

/// The most copies a bounded repetition of a group holding an anchor is written out to.
pub(crate) const MAX_EXPANDED_REPEAT: u32 = 32;

/// Why a pattern's assertions cannot be rewritten (the message names the construct).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AnchorError(pub String);

/// Whether `h` holds `^`/`$` anywhere but as the very first or last item of the whole
/// pattern or of one of its top-level alternatives: only then is [`whole_string`] needed.
/// Cost: O(1) (the HIR's precomputed properties).
pub(crate) fn has_anchor(h: &Hir) -> bool {
    let looks = h.properties().look_set();
    looks.contains(Look::Start) || looks.contains(Look::End)
}

/// An anchor-free HIR whose language is the set of strings `h` matches as a whole, every
/// `^` true only at position 0 and every `$` only at the end. `max_nodes` bounds the size of
/// the result. Cost: linear in `h` times four, plus the result's size.
pub(crate) fn whole_string(h: &Hir, max_nodes: usize) -> Result<Hir, AnchorError> {
    if let Some(other) = h
        .properties()
        .look_set()
        .iter()
        .find(|l| !matches!(l, Look::Start | Look::End))
    {
        return Err(AnchorError(format!(
            "the assertion {} is not supported (only ^ and $, \\A and \\z, anywhere)",
            look_name(other)
        )));
    }
    let mut r = Rewriter {
        max_nodes,
        memo: HashMap::new(),
        kept: Vec::new(),
    };
    Ok(r.rewrite(h, true, true)?.0)
}

fn look_name(l: Look) -> &'static str {
    match l {
        Look::Start | Look::End => "^ or $",
        Look::StartLF | Look::EndLF | Look::StartCRLF | Look::EndCRLF => {
            "multi-line ^ or $ ((?m), true beside a line break)"
        }
        _ => "word boundary (\\b, \\B, \\< or \\>)",
    }
}

/// A rewritten expression and its size in nodes.
type Sized = (Hir, usize);

struct Rewriter {
    max_nodes: usize,
    /// `L(h|s,e)` by the node's address and the flags. Every node with an anchor that is
    /// rewritten lives until the rewrite ends (in the input, or in `kept`), so an address
    /// names one node.
    memo: HashMap<(*const Hir, bool, bool), Sized>,
    /// Expressions built to expand a repetition, kept alive for the memo's keys.
    kept: Vec<Rc<Hir>>,
}

fn fail() -> Sized {
    (Hir::fail(), 1)
}

fn empty() -> Sized {
    (Hir::empty(), 1)
}

fn is_fail(h: &Hir) -> bool {
    h.properties().minimum_len().is_none()
}

/// The number of nodes of an expression the rewrite copies as it is.
fn size(h: &Hir) -> usize {
    1 + match h.kind() {
        HirKind::Concat(v) | HirKind::Alternation(v) => v.iter().map(size).sum(),
        HirKind::Repetition(r) => size(&r.sub),
        HirKind::Capture(c) => size(&c.sub),
        _ => 0,
    }
}

/// Whether `h` matches the empty string at a position that is the start (`s`) and the end
/// (`e`) of the whole string or not.
fn nullable(h: &Hir, s: bool, e: bool) -> bool {
    match h.kind() {
        HirKind::Empty => true,
        HirKind::Literal(_) | HirKind::Class(_) => false,
        HirKind::Look(Look::Start) => s,
        HirKind::Look(Look::End) => e,
        HirKind::Look(_) => false,
        HirKind::Repetition(r) => r.min == 0 || nullable(&r.sub, s, e),
        HirKind::Capture(c) => nullable(&c.sub, s, e),
        HirKind::Concat(v) => v.iter().all(|x| nullable(x, s, e)),
        HirKind::Alternation(v) => v.iter().any(|x| nullable(x, s, e)),
    }
}

impl Rewriter {
    fn check(&self, n: usize) -> Result<(), AnchorError> {
        if n > self.max_nodes {
            return Err(AnchorError(format!(
                "rewriting the pattern's anchors needs more than {} nodes (the limit on grammar \
                 nodes); write the anchors at the ends of the alternatives",
                self.max_nodes
            )));
        }
        Ok(())
    }

    /// A concatenation, failing when one part fails.
    fn cat(&self, parts: Vec<Sized>) -> Result<Sized, AnchorError> {
        if parts.iter().any(|(h, _)| is_fail(h)) {
            return Ok(fail());
        }
        let n = 1 + parts.iter().map(|p| p.1).sum::<usize>();
        self.check(n)?;
        Ok((Hir::concat(parts.into_iter().map(|p| p.0).collect()), n))
    }

    /// An alternation without its failing and repeated alternatives.
    fn alt(&self, parts: Vec<Sized>) -> Result<Sized, AnchorError> {
        let mut kept: Vec<Sized> = Vec::new();
        for p in parts {
            if !is_fail(&p.0) && !kept.iter().any(|k| k.0 == p.0) {
                kept.push(p);
            }
        }
        match kept.len() {
            0 => Ok(fail()),
            1 => Ok(kept.pop().unwrap()),
            _ => {
                let n = 1 + kept.iter().map(|p| p.1).sum::<usize>();
                self.check(n)?;
                Ok((Hir::alternation(kept.into_iter().map(|p| p.0).collect()), n))
            }
        }
    }

    fn star(&self, x: Sized) -> Result<Sized, AnchorError> {
        if is_fail(&x.0) {
            return Ok(empty());
        }
        self.check(x.1 + 1)?;
        let rep = Repetition {
            min: 0,
            max: None,
            greedy: true,
            sub: Box::new(x.0),
        };
        Ok((Hir::repetition(rep), x.1 + 1))
    }

    /// `L(h|s,e)`.
    fn rewrite(&mut self, h: &Hir, s: bool, e: bool) -> Result<Sized, AnchorError> {
        let looks = h.properties().look_set();
        if !has_anchor(h) {
            let n = size(h);
            self.check(n)?;
            return Ok((h.clone(), n));
        }
        // A flag no anchor inside reads changes nothing: one memo entry serves both values.
        let s = s && looks.contains(Look::Start);
        let e = e && looks.contains(Look::End);
        let key = (h as *const Hir, s, e);
        if let Some(r) = self.memo.get(&key) {
            return Ok(r.clone());
        }
        let out = match h.kind() {
            HirKind::Look(Look::Start) => {
                if s {
                    empty()
                } else {
                    fail()
                }
            }
            HirKind::Look(Look::End) => {
                if e {
                    empty()
                } else {
                    fail()
                }
            }
            HirKind::Capture(c) => self.rewrite(&c.sub, s, e)?,
            HirKind::Alternation(v) => {
                let parts = v
                    .iter()
                    .map(|x| self.rewrite(x, s, e))
                    .collect::<Result<Vec<_>, _>>()?;
                self.alt(parts)?
            }
            HirKind::Concat(v) => self.concat(v, s, e)?,
            HirKind::Repetition(r) => self.repetition(r, s, e)?,
            // No anchor inside: returned above.
            _ => (h.clone(), size(h)),
        };
        self.memo.insert(key, out.clone());
        Ok(out)
    }

    /// `L(v[0] v[1] ... |s,e)`: runs of anchor-free items as one part, then the
    /// concatenation rule from the right.
    fn concat(&mut self, v: &[Hir], s: bool, e: bool) -> Result<Sized, AnchorError> {
        // Anchored items by reference (they are memo keys); the runs between them are new
        // nodes, but anchor-free, which the memo never sees.
        let mut parts: Vec<Cow<'_, Hir>> = Vec::new();
        let mut run: Vec<Hir> = Vec::new();
        for x in v {
            if has_anchor(x) {
                if !run.is_empty() {
                    parts.push(Cow::Owned(Hir::concat(std::mem::take(&mut run))));
                }
                parts.push(Cow::Borrowed(x));
            } else {
                run.push(x.clone());
            }
        }
        if !run.is_empty() {
            parts.push(Cow::Owned(Hir::concat(run)));
        }
        let mut memo = HashMap::new();
        self.suffix(&parts, 0, s, e, &mut memo)
    }

    /// `L(parts[i..]|s,e)`, memoized by `(i, s, e)`.
    fn suffix(
        &mut self,
        parts: &[Cow<'_, Hir>],
        i: usize,
        s: bool,
        e: bool,
        memo: &mut HashMap<(usize, bool, bool), Sized>,
    ) -> Result<Sized, AnchorError> {
        if i == parts.len() {
            return Ok(empty());
        }
        if i + 1 == parts.len() {
            return self.rewrite(&parts[i], s, e);
        }
        if let Some(r) = memo.get(&(i, s, e)) {
            return Ok(r.clone());
        }
        let a = &parts[i];
        let rest_nullable = |s: bool, e: bool| parts[i + 1..].iter().all(|x| nullable(x, s, e));
        let head = self.rewrite(a, s, false)?;
        let tail = self.suffix(parts, i + 1, false, e, memo)?;
        let mut alts = vec![self.cat(vec![head, tail])?];
        if nullable(a, s, false) {
            alts.push(self.suffix(parts, i + 1, s, e, memo)?);
        }
        if rest_nullable(false, e) {
            alts.push(self.rewrite(a, s, e)?);
        }
        if nullable(a, s, e) && rest_nullable(s, e) {
            alts.push(empty());
        }
        let out = self.alt(alts)?;
        memo.insert((i, s, e), out.clone());
        Ok(out)
    }

    /// `L(x{min,max}|s,e)` for an `x` holding an anchor.
    fn repetition(&mut self, r: &Repetition, s: bool, e: bool) -> Result<Sized, AnchorError> {
        let x = &*r.sub;
        match (r.min, r.max) {
            (_, Some(0)) => Ok(empty()),
            (1, Some(1)) => self.rewrite(x, s, e),
            (0, Some(1)) => {
                let one = self.rewrite(x, s, e)?;
                self.alt(vec![empty(), one])
            }
            (0, None) => {
                let once = self.rewrite(x, s, e)?;
                let first = self.rewrite(x, s, false)?;
                let middle = self.rewrite(x, false, false)?;
                let middle = self.star(middle)?;
                let last = self.rewrite(x, false, e)?;
                let many = self.cat(vec![first, middle, last])?;
                self.alt(vec![empty(), once, many])
            }
            (min, max) => {
                let copies = max.unwrap_or(min + 1);
                if copies > MAX_EXPANDED_REPEAT {
                    return Err(AnchorError(format!(
                        "a repetition of more than {MAX_EXPANDED_REPEAT} of a group holding \
                         ^ or $ is not supported"
                    )));
                }
                // x{min,max} = x^min (x?)^(max-min); x{min,} = x^min x*.
                let mut items: Vec<Hir> = (0..min).map(|_| x.clone()).collect();
                let tail = |min, max| {
                    Hir::repetition(Repetition {
                        min,
                        max,
                        greedy: true,
                        sub: Box::new(x.clone()),
                    })
                };
                match max {
                    Some(max) => items.extend((min..max).map(|_| tail(0, Some(1)))),
                    None => items.push(tail(0, None)),
                }
                let expanded = Rc::new(Hir::concat(items));
                self.kept.push(expanded.clone());
                self.rewrite(&expanded, s, e)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hir(p: &str) -> Hir {
        regex_syntax::parse(p).unwrap()
    }

    /// Every string of length <= 4 over `alphabet` is accepted by the rewrite exactly when
    /// regex-automata finds `\A(?:pattern)\z` in it (the anchors inside then refer to the
    /// same string, as they do in a generation).
    fn agrees(pattern: &str, alphabet: &[char]) {
        let rewritten = whole_string(&hir(pattern), 100_000).unwrap();
        assert!(!has_anchor(&rewritten), "{pattern}: anchors left");
        let ours = regex_automata::meta::Regex::builder()
            .build_from_hir(&Hir::concat(vec![
                Hir::look(Look::Start),
                rewritten,
                Hir::look(Look::End),
            ]))
            .unwrap();
        let theirs = regex_automata::meta::Regex::new(&format!(r"\A(?:{pattern})\z")).unwrap();
        let mut words = vec![String::new()];
        let mut last = words.clone();
        for _ in 0..4 {
            last = last
                .iter()
                .flat_map(|w| alphabet.iter().map(move |c| format!("{w}{c}")))
                .collect();
            words.extend(last.iter().cloned());
        }
        for w in &words {
            assert_eq!(
                ours.is_match(w.as_str()),
                theirs.is_match(w.as_str()),
                "{pattern} on {w:?}"
            );
        }
    }

    #[test]
    fn anchors_in_alternatives_and_groups() {
        for p in [
            r"^$|^ab",
            r"^$|^[0-9]+$",
            r"(?:a|^)b",
            r"a(?:$|b)",
            r"(?:^a|b)+",
            r"(?:a$|b)*",
            r"^a|b$",
            r"(?:^|a)(?:b|$)",
            r"a*^b",
            r"a*$b*",
            r"(?:^a){1,3}",
            r"(?:a$)?b?",
        ] {
            agrees(p, &['a', 'b', '0']);
        }
    }

    #[test]
    fn other_assertions_are_named() {
        let e = whole_string(&hir(r"a\bb"), 1000).unwrap_err();
        assert!(e.0.contains("word boundary"), "{e:?}");
        let e = whole_string(&hir(r"(?m)^a"), 1000).unwrap_err();
        assert!(e.0.contains("multi-line"), "{e:?}");
    }

    #[test]
    fn the_size_limit_holds() {
        let p = "(?:^a|b$|c)".repeat(40);
        assert!(whole_string(&hir(&p), 100_000).is_ok());
        let e = whole_string(&hir(&p), 50).unwrap_err();
        assert!(e.0.contains("more than 50 nodes"), "{e:?}");
    }
}
