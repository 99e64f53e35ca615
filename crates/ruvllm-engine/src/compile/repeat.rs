//! Lowering long repetitions: counted lexemes (`P x{min,max} S` kept as a count rather
//! than unrolled), the dense DFA tried first when an unrolled repetition is small, and
//! the parts (item, prefix, suffix) they are built from.
//!
//! Part of the lowering (the parent module); it uses the lexeme automata, the compile
//! caches and the parent's `Lowerer` state.

use super::*;

impl Lowerer<'_> {
    /// Whether `e` has a repetition of more than [`LONG_REPEAT`] items strictly inside it
    /// (through sequences, alternatives, repetitions and inlinable rules): what
    /// [`Lowerer::seq`] would make a counted lexeme once `e` is split.
    pub(super) fn long_repeat_inside(&mut self, e: &Expr) -> bool {
        match e {
            Expr::Seq(v) | Expr::Alt(v) => v.iter().any(|x| self.long_repeat(x)),
            Expr::Repeat { e, .. } => self.long_repeat(e),
            Expr::Ref(r) => self.long_repeat(&Expr::Ref(*r)),
            // The expansion's only repetition is `ch*`.
            Expr::KeyComplement(k) => self.long_repeat(k.ch()),
            _ => false,
        }
    }

    /// Whether `e` is, or has inside it, a repetition of more than [`LONG_REPEAT`] items.
    /// Memoized per rule.
    pub(super) fn long_repeat(&mut self, e: &Expr) -> bool {
        match e {
            Expr::Repeat { min, max, .. } if max.unwrap_or(*min) > LONG_REPEAT => true,
            Expr::Ref(r) if self.inlinable[*r as usize] => {
                if let Some(x) = self.long_repeat_memo[*r as usize] {
                    return x;
                }
                let body = &self.g.rules[*r as usize].body;
                let x = self.long_repeat(body);
                self.long_repeat_memo[*r as usize] = Some(x);
                x
            }
            Expr::Ref(_) => false,
            other => self.long_repeat_inside(other),
        }
    }

    /// Lowers `rep` as a counted lexeme if it is a repetition of a prefix-free item,
    /// absorbing `prefix` and one of `suffixes` (elements, and the runs they span; widest
    /// first) where the counted lexeme's conditions allow (a prefix it cannot take is lexed
    /// on its own first). Returns the number of runs of the suffix taken (0 for none), or
    /// `None` (nothing emitted) when `rep` cannot be counted.
    // Long (166 lines): the conditions of a counted lexeme and the absorption of prefix
    // and suffix, tried in order with early returns.
    pub(super) fn counted_run(
        &mut self,
        prefix: Option<&[&Expr]>,
        rep: &Expr,
        suffixes: &[(&[&Expr], usize)],
        out: &mut Vec<Sym>,
    ) -> Result<Option<usize>, GrammarError> {
        let Expr::Repeat { e: item, min, max } = rep else {
            return Ok(None);
        };
        // A few repetitions of a heavy item (an optional group of properties, `(, k: v){0,1}`)
        // are not worth the item's DFA: such items are property alternatives, almost never
        // prefix-free (a number value), so the counted lexeme is refused after the build. On
        // the 566-file MaskBench sample, all 682 attempts were refused, after 163 ms of
        // DFA builds (a tenth of compile time). Lowered another way, the language is the
        // same.
        let item_weight = expr_weight(item, &self.weight);
        if max.is_some_and(|m| m <= LONG_REPEAT) && item_weight > SHARE_WEIGHT {
            return Ok(None);
        }
        // Nor is a heavy item with a long repetition inside (a property loop whose values
        // are `maxLength` strings): its DFA unrolls those counts, as a dense attempt would
        // (see `dense_ok`). On a Snowplow schema three such items had 3,117 to 9,402
        // states and took 6.4 ms of a 10 ms compile; lowered structurally instead, each
        // string is a counted lexeme of its own, and the language is the same.
        if item_weight > NESTED_DENSE_WEIGHT && self.long_repeat_inside(item) {
            return Ok(None);
        }
        let Some(x) = self.part(&[&**item])? else {
            return Ok(None);
        };
        let part_of = |this: &mut Self, run: Option<&[&Expr]>| -> Result<_, GrammarError> {
            let Some(run) = run else { return Ok(None) };
            if run.iter().all(|e| matches!(e, Expr::Empty)) {
                return Ok(None);
            }
            this.part(run)
        };
        // A prefix that starts with literal text (a property key) is that text's chain in
        // front of the counted lexeme of the rest ([`Dfa::prepend_literal`]): the rest (`ws
        // : ws "` and the string) is then one cached lexeme for every key, and so are its
        // token tables, where each key's lexeme computed its own (1.5-2.7 ms apiece for
        // the first count of a `maxLength` string, once per property).
        let (head, prefix_tail) = prefix.map_or((Vec::new(), Vec::new()), literal_head_of);
        let p = part_of(self, Some(&prefix_tail[..]))?;
        let has_p = p.is_some() || !head.is_empty();
        let mut ss_all = Vec::with_capacity(suffixes.len());
        for &(run, n) in suffixes {
            if let Some(d) = part_of(self, Some(run))? {
                ss_all.push((d, n));
            }
        }
        // The widest combination the conditions allow: each suffix with and without the
        // prefix, then neither.
        let mut tries: Vec<(bool, Option<usize>)> = Vec::new();
        for i in 0..ss_all.len() {
            tries.extend([(true, Some(i)), (false, Some(i))]);
        }
        tries.extend([(true, None), (false, None)]);
        for (use_p, si) in tries {
            if use_p && !has_p {
                continue; // the same as the try without the prefix
            }
            let pp: Option<&Part> = p.as_ref().filter(|_| use_p);
            let ss = si.map(|i| &ss_all[i].0);
            let used = si.map_or(0, |i| ss_all[i].1);
            let Some(dfa) = Dfa::counted(
                pp.map(|(_, d)| d.clone()),
                x.1.clone(),
                *min,
                *max,
                ss.map(|(_, d)| d.clone()),
            ) else {
                continue;
            };
            // Keyed by its parts' structural keys (written once per part, not printed);
            // named after their printed regexes, as `p(?:x){min,max}s`.
            let (states, bytes) = (self.limits.max_lexeme_states, self.limits.max_dfa_bytes);
            let mut key = vec![STRUCTURAL_KEY, b'C'];
            for part in [pp, Some(&x), ss] {
                match part {
                    Some((k, _)) => {
                        key.push(1);
                        key.extend_from_slice(k);
                    }
                    None => key.push(0),
                }
            }
            key.extend_from_slice(&min.to_le_bytes());
            key.extend_from_slice(&max.map_or([0xFF; 5], |m| {
                let [a, b, c, d] = m.to_le_bytes();
                [0, a, b, c, d]
            }));
            let mut cache_key = format!("{states}/{bytes}/").into_bytes();
            cache_key.extend_from_slice(&key);
            let head = if use_p { &head[..] } else { &[][..] };
            let name = || {
                let show = |part: Option<&Part>| {
                    part.map_or("", |(_, d)| d.name().unwrap_or_default())
                        .to_string()
                };
                let bound = max.map_or(String::new(), |m| m.to_string());
                let head = if head.is_empty() {
                    String::new()
                } else {
                    printed_prefix(&Hir::literal(head.to_vec()), automata::dfa::NAME_BYTES)
                };
                format!(
                    "{head}{}(?:{}){{{min},{bound}}}{}",
                    show(pp),
                    show(Some(&x)),
                    show(ss)
                )
            };
            let (key, cache_key, dfa) = if head.is_empty() {
                (key, cache_key, dfa)
            } else {
                // The counted rest, cached on its own, with the text's chain in front.
                let Ok(rest) = self.caches.cached_with(&cache_key, || Ok(dfa)) else {
                    continue;
                };
                let Some(chain) = Dfa::prepend_literal(head, &rest, states, bytes) else {
                    continue;
                };
                let mut whole = vec![STRUCTURAL_KEY, b'H'];
                whole.extend_from_slice(&(head.len() as u64).to_le_bytes());
                whole.extend_from_slice(head);
                whole.extend_from_slice(&key);
                let mut whole_cache = format!("{states}/{bytes}/").into_bytes();
                whole_cache.extend_from_slice(&whole);
                (whole, whole_cache, chain)
            };
            let Some(l) = self.register(&cache_key, key, name, move || Ok(dfa))? else {
                return Ok(None);
            };
            if let (Some(run), false) = (prefix, use_p) {
                self.lex_run(run, out)?;
            }
            out.push(Sym::Lex(LexemeId(l)));
            return Ok(Some(used));
        }
        // Not countable (an item that is not prefix-free, such as a word `\S+\s+`), but
        // small once unrolled: one dense DFA for the prefix, the repetition and the widest
        // suffix (a string's quotes, a key), rather than the repetition lexed apart from
        // them, with lexeme boundaries (parser walks in the masks) where they meet. On
        // MaskBench's word-count `pattern`s (`(\S+\s+){0,99}\S+`) the worst masks went
        // from 3.5-4.2 ms to 0.9-2.7 ms (the 7 files of that family, alone).
        if let Some(m) = max {
            let unrolled = x.1.num_states() as u64 * (u64::from(*m) + 1);
            if unrolled <= DENSE_UNROLLED_STATES {
                let (tail, used) = suffixes.first().map_or((&[][..], 0), |&(r, n)| (r, n));
                let parts: Vec<&Expr> = prefix
                    .unwrap_or(&[])
                    .iter()
                    .copied()
                    .chain([rep])
                    .chain(tail.iter().copied())
                    .collect();
                if let Some(l) = self.lexeme_of(Group::Seq, &parts)? {
                    out.push(Sym::Lex(LexemeId(l)));
                    return Ok(Some(used));
                }
            }
        }
        Ok(None)
    }

    /// The DFA of a part of a counted lexeme or key complement (the expressions `items` in
    /// sequence), with its structural key (see [`Lowerer::expr_key`]); `None` when it
    /// exceeds the DFA limits. Shared with the engine's cache, where a hit builds and
    /// prints no regex; a part built is named after the start of its printed regex.
    pub(super) fn part(&mut self, items: &[&Expr]) -> Result<Option<Part>, GrammarError> {
        self.check_budgets()?;
        let (states, bytes) = (self.limits.max_lexeme_states, self.limits.max_dfa_bytes);
        let mut key = vec![STRUCTURAL_KEY, b'P'];
        self.group_key(Group::Seq, items.iter().copied(), &mut key);
        let mut cache_key = format!("{states}/{bytes}/").into_bytes();
        cache_key.extend_from_slice(&key);
        let deadline = Some(self.deadline());
        let caches = self.caches;
        let entry = self.fetch_or_build(&cache_key, Group::Seq, items, |hir| {
            Dfa::build_lexeme(caches, hir, states, bytes, deadline)
        })?;
        match entry {
            // Charged once, as part of the counted lexeme's states (see `register`).
            Ok(d) => Ok(Some((key, d))),
            Err(automata::dfa::DfaError::TooBig { cost }) => {
                self.dfa_spent += cost;
                Ok(None)
            }
            Err(automata::dfa::DfaError::Deadline) => Err(self.time_error()),
        }
    }

    /// Whether a run of weight `w` is worth a dense DFA attempt: within `max_inline_weight`,
    /// and, when a long counted repetition is nested in it (a bounded string among the
    /// alternatives of a property loop), light enough that unrolling the count stays small
    /// ([`NESTED_DENSE_WEIGHT`]); heavier ones are better as a counted lexeme of their own
    /// than inside a dense DFA, which would unroll the count (when it fits at all: the
    /// attempt alone took 40 ms on such loops).
    pub(super) fn dense_ok(&mut self, run: &[&Expr], w: usize) -> bool {
        w <= self.limits.max_inline_weight
            && (w <= NESTED_DENSE_WEIGHT || !run.iter().any(|e| self.long_repeat_inside(e)))
    }
}
