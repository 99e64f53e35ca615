//! The per-generation matcher: masks, commits, rollback and forced text.
//!
//! Owns: one generation's state (`Matcher`: Earley sets, memos, scratch buffers). Uses: the
//! constraint and everything below it (tables, boundary walks, budget masks, completions,
//! the deadline clock).

use std::sync::Arc;

use crate::compile::Sym;
pub(crate) use crate::deadline::Deadline;
use crate::error::MatchError;
use crate::handle::constraint::Constraint;
use crate::matching::boundary::WalkMemo;
use crate::parse::earley::Parser;

/// Tracks one generation against a [`Constraint`].
///
/// Costs: [`Matcher::compute_mask`] is a union of precomputed token sets plus a parser walk
/// over the few tokens that cross a lexeme boundary (its parser steps memoized per
/// matcher: ARCHITECTURE.md and the engine's `boundary` module say why that is exact);
/// [`Matcher::commit_token`] is one parser step per byte of the token;
/// [`Matcher::rollback`] is O(1); [`Matcher::clone`] copies the parser history
/// (O(bytes generated · items per byte)) and starts with an empty walk memo.
#[derive(Clone)]
pub struct Matcher {
    pub(crate) c: Arc<Constraint>,
    pub(crate) parser: Parser,
    /// For each committed token: the parser set index after it, and whether it was EOS.
    pub(crate) tokens: Vec<(u32, bool)>,
    pub(crate) finished: bool,
    ranges: Vec<(u32, u32)>,
    /// Parser steps of the boundary walk, remembered (see [`crate::matching::boundary`]).
    memo: WalkMemo,
    /// The last shortest completion computed, with the state it is for (see
    /// [`Matcher::shortest_completion`]).
    pub(crate) known: Option<crate::parse::facts::Known>,
    /// The rest of an earlier completion whose first tokens were committed since: a
    /// completion of the current state (see `crate::matching::complete`).
    pub(crate) carry: Option<crate::parse::facts::Known>,
    /// The parse-state identity the last mask computed, with the output length it is for
    /// (the budget mask asks for it again right after).
    pub(crate) last_id: Option<(usize, u32)>,
    /// The budget facts of the last state a budget mask met (see `crate::matching::budget`).
    pub(crate) last_facts: Option<(u32, std::sync::Arc<crate::parse::facts::StateBudget>)>,
    /// The last bound the budget mask computed (bytes), and the masks since that relied on
    /// it (see `crate::matching::budget`).
    pub(crate) budget_hint: Option<(u32, u32)>,
}

/// The outcome of checking text against a grammar (see [`Matcher::check_bytes`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CheckResult {
    /// The text is a complete sentence.
    Accepted,
    /// The text is a proper prefix of a sentence; `expected` describes what may come next.
    Incomplete {
        /// Rules and lexemes the parser expects next.
        expected: Vec<String>,
    },
    /// Byte `at` cannot continue any sentence; `expected` describes what could.
    Rejected {
        /// Offset of the first refused byte.
        at: usize,
        /// Rules and lexemes the parser expected there.
        expected: Vec<String>,
    },
}

impl Matcher {
    /// A matcher at the start of the output.
    pub fn new(c: &Arc<Constraint>) -> Result<Matcher, MatchError> {
        let parser = Parser::new(&c.grammar, c.limits.max_parser_items)?;
        Ok(Matcher {
            c: c.clone(),
            parser,
            tokens: Vec::new(),
            finished: false,
            ranges: Vec::new(),
            memo: WalkMemo::default(),
            known: None,
            carry: None,
            last_id: None,
            last_facts: None,
            budget_hint: None,
        })
    }

    /// The boundary-walk memo's transitions and nodes.
    #[cfg(test)]
    pub(crate) fn memo_sizes(&self) -> (usize, usize) {
        self.memo.sizes()
    }

    /// The constraint this matcher follows.
    pub fn constraint(&self) -> &Arc<Constraint> {
        &self.c
    }

    /// Writes the allowed-token mask into `mask` (bit `t % 32` of word `t / 32` set iff
    /// token `t` may come next; `mask` may be longer than the vocabulary, e.g. sized to the
    /// model's logits, and the extra bits are cleared). EOS bits are set exactly when the
    /// output is complete. After EOS was committed, the mask is empty.
    pub fn compute_mask(&mut self, mask: &mut [u32]) -> Result<(), MatchError> {
        let vocab = &self.c.vocab;
        let need = vocab.mask_words();
        if mask.len() < need {
            return Err(MatchError::MaskTooSmall {
                got: mask.len(),
                need,
            });
        }
        mask.fill(0);
        if self.finished {
            return Ok(());
        }
        let g = &self.c.grammar;
        let mut clock = Deadline::new(self.c.limits.max_mask_time);
        self.memo.prepare(&mut self.parser);
        self.parser.ensure_closed(g)?;
        let id = self.parser.top_id(g, &self.c.states);
        self.last_id = Some((self.parser.top(), id));
        // The boundary walk from this parse state, if a matcher of this constraint
        // walked it before (see `states`): only its parts that ran checks are walked.
        let walked = self.c.walks.get(id);
        let trie = vocab.trie();
        let k = self.parser.top();
        let mut seen: Vec<(u32, u32)> = Vec::new();
        let mut finals: Vec<u32> = Vec::new();
        self.ranges.clear();
        for it in self.parser.set(k) {
            if let Sym::Lex(l) = g.syms[it.pos as usize] {
                let sensitive = g.has_checks && g.lex_check_sensitive[it.pos as usize];
                let repeat = seen.contains(&(l.0, it.state));
                clock.tick(seen.len())?;
                if repeat && !sensitive {
                    continue;
                }
                let tables = &self.c.tables[l.ix()];
                let lexeme = &g.lexemes[l.ix()];
                let t = match tables.known(lexeme, it.state) {
                    Some(t) => t,
                    None => {
                        // A first use is one trie walk: look at the clock before each.
                        clock.check()?;
                        tables.get(self.c.store(), lexeme, it.state, trie, vocab.len())
                    }
                };
                if sensitive {
                    finals.extend_from_slice(&t.finals);
                }
                if repeat {
                    continue;
                }
                seen.push((l.0, it.state));
                t.accept.or_into(mask);
                if walked.is_none() {
                    self.ranges.extend_from_slice(&t.uncertain);
                }
            }
        }
        let c = self.c.clone();
        if let Some(w) = walked {
            for &t in &w.accepted {
                mask[(t >> 5) as usize] |= 1 << (t & 31);
            }
            if !w.dirty.is_empty() {
                crate::matching::boundary::walk(
                    &c,
                    &mut self.parser,
                    &mut self.memo,
                    &w.dirty,
                    mask,
                    &mut clock,
                    false,
                )?;
            }
        } else if !self.ranges.is_empty() {
            self.ranges.sort_unstable();
            let mut merged: Vec<(u32, u32)> = Vec::with_capacity(self.ranges.len());
            for &(a, b) in &self.ranges {
                match merged.last_mut() {
                    Some(last) if a <= last.1 => last.1 = last.1.max(b),
                    _ => merged.push((a, b)),
                }
            }
            let rec = crate::matching::boundary::walk(
                &c,
                &mut self.parser,
                &mut self.memo,
                &merged,
                mask,
                &mut clock,
                true,
            )?;
            if let Some(rec) = rec {
                c.walks.put(id, rec);
            }
        }
        // Tokens that complete a value under a semantic check: the parser decides.
        if !finals.is_empty() {
            finals.sort_unstable();
            finals.dedup();
            for t in finals {
                let bytes = c.vocab.token_bytes(t);
                clock.tick(bytes.len() * self.parser.set(k).len())?;
                let ok = self.token_viable(bytes)?;
                let (w, bit) = ((t >> 5) as usize, 1u32 << (t & 31));
                if ok {
                    mask[w] |= bit;
                } else {
                    mask[w] &= !bit;
                }
            }
        }
        if self.parser.top_info().accepting {
            for &e in self.c.vocab.eos_tokens() {
                mask[(e >> 5) as usize] |= 1 << (e & 31);
            }
        }
        Ok(())
    }

    /// Whether the parser can read `bytes` now (the parser is left unchanged).
    fn token_viable(&mut self, bytes: &[u8]) -> Result<bool, MatchError> {
        let g = &self.c.grammar;
        let mut pushed = 0;
        let mut ok = true;
        for &b in bytes {
            match self.parser.push_byte(g, b) {
                Ok(true) => pushed += 1,
                Ok(false) => {
                    ok = false;
                    break;
                }
                Err(e) => {
                    for _ in 0..pushed {
                        self.parser.pop();
                    }
                    return Err(e);
                }
            }
        }
        for _ in 0..pushed {
            self.parser.pop();
        }
        Ok(ok && !bytes.is_empty())
    }

    /// Whether the output so far is a complete sentence (EOS is allowed now).
    pub fn is_accepting(&mut self) -> bool {
        if self.finished {
            return false;
        }
        // A budget error while closing means the state cannot be judged: not accepting.
        self.parser.ensure_closed(&self.c.grammar).is_ok() && self.parser.top_info().accepting
    }

    /// An identity of the parse state, for tests and diagnostics: two matchers of the
    /// same constraint with equal keys accept the same continuations, unless the
    /// grammar has semantic checks (which also read the text). Cost: an interning.
    #[doc(hidden)]
    pub fn state_key(&mut self) -> Result<u32, MatchError> {
        self.parser.ensure_closed(&self.c.grammar)?;
        Ok(self.parser.top_id(&self.c.grammar, &self.c.states))
    }

    /// Whether EOS has been committed.
    pub fn is_finished(&self) -> bool {
        self.finished
    }

    /// Bytes of output so far.
    pub fn position(&self) -> usize {
        self.parser.top()
    }

    /// Number of committed tokens.
    pub fn num_tokens(&self) -> usize {
        self.tokens.len()
    }

    /// Commits token `t`. On refusal the state is unchanged and the error says where.
    pub fn commit_token(&mut self, t: u32) -> Result<(), MatchError> {
        let vocab = &self.c.vocab;
        if t as usize >= vocab.len() {
            return Err(MatchError::UnknownToken(t));
        }
        if self.finished {
            return Err(MatchError::Finished);
        }
        let reject = |m: &Matcher| MatchError::TokenRejected {
            token: t,
            text: String::from_utf8_lossy(m.c.vocab.token_bytes(t)).into_owned(),
            position: m.parser.top(),
        };
        if vocab.eos_tokens().contains(&t) {
            self.parser.ensure_closed(&self.c.grammar)?;
            if !self.parser.top_info().accepting {
                return Err(reject(self));
            }
            self.finished = true;
            self.last_id = None;
            self.tokens.push((self.parser.top() as u32, true));
            return Ok(());
        }
        if vocab.is_special(t) || vocab.token_bytes(t).is_empty() {
            return Err(reject(self));
        }
        let before = self.parser.top();
        let c = self.c.clone();
        for &b in c.vocab.token_bytes(t) {
            match self.parser.push_byte(&c.grammar, b) {
                Ok(true) => {}
                Ok(false) => {
                    self.parser.truncate(before);
                    return Err(reject(self));
                }
                Err(e) => {
                    self.parser.truncate(before);
                    return Err(e);
                }
            }
        }
        self.tokens.push((self.parser.top() as u32, false));
        self.last_id = None;
        self.carry_over(t, before);
        Ok(())
    }

    /// After committing `t` (the output was `before` bytes long): keeps the rest of the
    /// completion known before it when that completion started with `t`.
    fn carry_over(&mut self, t: u32, before: usize) {
        let at = (self.tokens.len() - 1, before);
        let pick = |k: &Option<crate::parse::facts::Known>| {
            k.as_ref()
                .filter(|k| (k.tokens, k.bytes) == at)
                .and_then(|k| k.completion.as_ref())
                .filter(|w| w.tokens().first() == Some(&t))
                .and_then(|w| w.rest(&self.c.vocab))
        };
        let rest = pick(&self.known).or_else(|| pick(&self.carry));
        self.carry = rest.map(|w| crate::parse::facts::Known {
            tokens: self.tokens.len(),
            bytes: self.parser.top(),
            completion: Some(w),
        });
    }

    /// Undoes the last `n` committed tokens (EOS included). O(1).
    pub fn rollback(&mut self, n: usize) -> Result<(), MatchError> {
        if n > self.tokens.len() {
            return Err(MatchError::Rollback {
                requested: n,
                available: self.tokens.len(),
            });
        }
        if n == 0 {
            return Ok(());
        }
        self.tokens.truncate(self.tokens.len() - n);
        self.finished = false;
        self.known = None;
        self.carry = None;
        self.last_id = None;
        let k = self.tokens.last().map(|x| x.0 as usize).unwrap_or(0);
        self.parser.truncate(k);
        Ok(())
    }

    /// Feeds raw bytes (not tokens) and reports how far they get: used by `grammar check`.
    /// The matcher is left after the accepted prefix; tokens are not recorded.
    pub fn check_bytes(&mut self, text: &[u8]) -> Result<CheckResult, MatchError> {
        let c = self.c.clone();
        self.known = None;
        self.carry = None;
        self.last_id = None;
        for (i, &b) in text.iter().enumerate() {
            if !self.parser.push_byte(&c.grammar, b)? {
                self.parser.ensure_closed(&c.grammar)?;
                return Ok(CheckResult::Rejected {
                    at: i,
                    expected: self.expected(),
                });
            }
        }
        self.parser.ensure_closed(&c.grammar)?;
        Ok(if self.parser.top_info().accepting {
            CheckResult::Accepted
        } else {
            CheckResult::Incomplete {
                expected: self.expected(),
            }
        })
    }

    /// The bytes that may come next (exact). Empty when only the end may follow.
    pub fn next_bytes(&mut self) -> Result<crate::byteset::ByteSet, MatchError> {
        self.parser.ensure_closed(&self.c.grammar)?;
        Ok(self.parser.top_info().allowed)
    }

    /// Describes what the parser expects next: `rule: lexeme` for each pending lexeme.
    pub fn expected(&self) -> Vec<String> {
        let g = &self.c.grammar;
        let mut out: Vec<String> = Vec::new();
        for it in self.parser.set(self.parser.top()) {
            if let Sym::Lex(_) = g.syms[it.pos as usize] {
                let d = g.describe_pos(it.pos);
                if !out.contains(&d) {
                    out.push(d);
                }
            }
        }
        out
    }

    /// The bytes every continuation must start with (empty when there is a choice, or when
    /// the output may end here). At most `Limits::max_forced_bytes`.
    pub fn forced_bytes(&mut self) -> Result<Vec<u8>, MatchError> {
        let c = self.c.clone();
        let start = self.parser.top();
        let mut out = Vec::new();
        if self.finished {
            return Ok(out);
        }
        while out.len() < c.limits.max_forced_bytes {
            if let Err(e) = self.parser.ensure_closed(&c.grammar) {
                self.parser.truncate(start);
                return Err(e);
            }
            let info = self.parser.top_info();
            if info.accepting || info.allowed.len() != 1 {
                break;
            }
            let b = info.allowed.first().unwrap();
            match self.parser.push_byte(&c.grammar, b) {
                Ok(true) => out.push(b),
                Ok(false) => break,
                Err(e) => {
                    self.parser.truncate(start);
                    return Err(e);
                }
            }
        }
        self.parser.truncate(start);
        Ok(out)
    }

    /// Forced text as tokens that are safe to append without sampling: the canonical
    /// tokenization of [`Matcher::forced_bytes`] (cut to whole UTF-8 characters), minus the
    /// trailing tokens at whose end a longer vocabulary token could start instead (so the
    /// model keeps the choice of how to tokenize across the boundary).
    pub fn forced_tokens(&mut self) -> Result<Vec<u32>, MatchError> {
        let bytes = self.forced_bytes()?;
        let valid = match std::str::from_utf8(&bytes) {
            Ok(s) => s,
            Err(e) => std::str::from_utf8(&bytes[..e.valid_up_to()]).unwrap(),
        };
        if valid.is_empty() {
            return Ok(Vec::new());
        }
        let vocab = &self.c.vocab;
        let enc = vocab.encoder().ok_or(MatchError::NoEncoder)?;
        let ids = enc.encode(valid).map_err(|_| MatchError::NoEncoder)?;
        // The encoding must reproduce the text exactly.
        let mut offsets = Vec::with_capacity(ids.len());
        let mut joined: Vec<u8> = Vec::new();
        for &t in &ids {
            if vocab.is_special(t) {
                return Ok(Vec::new());
            }
            offsets.push(joined.len());
            joined.extend_from_slice(vocab.token_bytes(t));
        }
        if joined != valid.as_bytes() {
            return Ok(Vec::new());
        }
        let trie = vocab.trie();
        let f = valid.as_bytes();
        let mut keep = ids.len();
        while keep > 0 {
            let a = offsets[keep - 1];
            let tlen = vocab.token_bytes(ids[keep - 1]).len();
            // Is there a token starting at `a` longer than ids[keep-1] that agrees with F?
            let mut n = 0u32;
            let mut unsafe_ = false;
            for (d, &b) in f[a..].iter().enumerate() {
                match trie.child(n, b) {
                    Some(ch) => {
                        n = ch;
                        if d + 1 > tlen && !trie.tokens_at(n).is_empty() {
                            unsafe_ = true;
                            break;
                        }
                    }
                    None => break,
                }
                if d + 1 == f.len() - a && trie.end(n) > n + 1 {
                    unsafe_ = true;
                }
            }
            if !unsafe_ {
                break;
            }
            keep -= 1;
        }
        Ok(ids[..keep].to_vec())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::{schema_to_grammar, SchemaOptions};

    /// A byte-level vocabulary (one token per byte) plus an end token.
    fn bytes_vocab() -> Arc<crate::vocab::Vocabulary> {
        let mut toks: Vec<Vec<u8>> = (0..=255u8).map(|b| vec![b]).collect();
        toks.push(b"<eos>".to_vec());
        let mut special = vec![false; 256];
        special.push(true);
        Arc::new(crate::vocab::Vocabulary::new("bytes", toks, special, vec![256]).unwrap())
    }

    /// Parse-state identities name the parser's future, not its history: the elements of
    /// an array (each one lexeme here, whose items' origins are the previous element's
    /// end) reach the same identities from the third element on, with checks or without,
    /// keys in order or in any order, so their walks are shared.
    #[test]
    fn identities_repeat_across_array_elements() {
        let v = bytes_vocab();
        let item = r#"{"type":"object","properties":{"name":{"enum":["ab","cd"]},
            "value":{"type":"string"}},"required":["name","value"]}"#;
        for unique in [false, true] {
            for any_order in [false, true] {
                let schema = format!(r#"{{"type":"array","uniqueItems":{unique},"items":{item}}}"#);
                let s: serde_json::Value = serde_json::from_str(&schema).unwrap();
                let opts = SchemaOptions {
                    any_order,
                    ..SchemaOptions::default()
                };
                let g = schema_to_grammar(&s, &opts).unwrap();
                let c = Constraint::new(&g, v.clone(), &crate::Limits::default()).unwrap();
                let mut m = Matcher::new(&c).unwrap();
                let text = r#"[{"name": "ab", "value": "x"}, {"name": "cd", "value": "y"}, {"name": "ab", "value": "z"}, {"name": "cd", "value": "w"}, {"name": "ab", "value": "v"}]"#;
                let mut mask = vec![0u32; v.mask_words()];
                let (mut at_open, mut at_value) = (Vec::new(), Vec::new());
                for (i, b) in text.bytes().enumerate() {
                    m.compute_mask(&mut mask).unwrap();
                    let id = m.parser.top_id(&c.grammar, &c.states);
                    if b == b'{' {
                        at_open.push(id);
                    }
                    if text[..i].ends_with(r#""name": "#) {
                        at_value.push(id);
                    }
                    m.commit_token(b as u32).unwrap();
                }
                let what = format!("uniqueItems {unique}, any order {any_order}");
                assert_eq!(at_open.len(), 5, "{what}");
                assert!(
                    at_open[2..].iter().all(|&x| x == at_open[2]),
                    "{what}: {at_open:x?}"
                );
                assert!(
                    at_value[2..].iter().all(|&x| x == at_value[2]),
                    "{what}: {at_value:x?}"
                );
                assert_ne!(at_open[2], at_value[2], "{what}");
            }
        }
    }
}
