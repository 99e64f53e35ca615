//! From regular IR to lexemes: the regex of an expression, the lexeme of a regex or of
//! a run of expressions (looked up in the compile cache by printed regex or structural
//! key, built on a miss), literal chains in front of shared lexemes, key complements,
//! and the grammar's own table of lexemes with its budgets.
//!
//! Part of the lowering (the parent module); it uses the lexeme automata, the compile
//! caches and the parent's `Lowerer` state.

use super::*;

/// A part of a counted lexeme or key complement: its structural key and its lexeme (see
/// [`Lowerer::part`]).
pub(super) type Part = (Vec<u8>, std::sync::Arc<Lexeme>);

/// The start of `hir` printed, at most `n` bytes (whole characters): a lexeme's name,
/// without printing all of a long regex. Cost: O(n) after the regex's first nodes.
pub(super) fn printed_prefix(hir: &Hir, n: usize) -> String {
    struct Cut(String, usize);
    impl std::fmt::Write for Cut {
        fn write_str(&mut self, x: &str) -> std::fmt::Result {
            for c in x.chars() {
                if self.0.len() + c.len_utf8() > self.1 {
                    return Err(std::fmt::Error);
                }
                self.0.push(c);
            }
            Ok(())
        }
    }
    let mut w = Cut(String::new(), n);
    // An error only says the prefix is full.
    let _ = std::fmt::Write::write_fmt(&mut w, format_args!("{hir}"));
    w.0
}

/// Builds the lexeme of `hir`: when it starts with a literal (a property key and its
/// colon), as that literal's chain in front of the cached DFA of the rest (see
/// [`Dfa::prepend_literal`]), which the other keys of the schema share; else directly.
pub(super) fn build_hir_lexeme(
    caches: &cache::Caches,
    hir: &Hir,
    states: usize,
    bytes: usize,
    deadline: Option<std::time::Instant>,
) -> Result<Dfa, automata::dfa::DfaError> {
    if let Some((lit, rest)) = literal_head(hir) {
        match caches.cached(&rest.to_string(), &rest, states, bytes, deadline) {
            Ok(r) => {
                if let Some(d) = Dfa::prepend_literal(&lit, &r, states, bytes) {
                    return Ok(d);
                }
            }
            Err(automata::dfa::DfaError::Deadline) => {
                return Err(automata::dfa::DfaError::Deadline)
            }
            Err(automata::dfa::DfaError::TooBig { .. }) => {}
        }
    }
    Dfa::build_lexeme(caches, hir, states, bytes, deadline)
}

/// A concatenation that starts with a literal, split into the literal's bytes and the
/// rest (`None` for anything else; the rest may be the empty regex). Cost: a clone of the
/// rest's parts.
pub(super) fn literal_head(hir: &Hir) -> Option<(Vec<u8>, Hir)> {
    let hir::HirKind::Concat(parts) = hir.kind() else {
        return None;
    };
    let (first, rest) = parts.split_first()?;
    let hir::HirKind::Literal(lit) = first.kind() else {
        return None;
    };
    Some((lit.0.to_vec(), Hir::concat(rest.to_vec())))
}

/// The literal text that a sequence of `items` starts with (nested sequences flattened,
/// empty items skipped), and the items after it. Cost: O(items).
pub(super) fn literal_head_of<'e>(items: &[&'e Expr]) -> (Vec<u8>, Vec<&'e Expr>) {
    fn flatten<'e>(e: &'e Expr, out: &mut Vec<&'e Expr>) {
        match e {
            Expr::Seq(v) => v.iter().for_each(|x| flatten(x, out)),
            Expr::Empty => {}
            _ => out.push(e),
        }
    }
    let mut flat: Vec<&Expr> = Vec::with_capacity(items.len());
    items.iter().for_each(|e| flatten(e, &mut flat));
    let mut lit = Vec::new();
    let mut head = 0;
    while let Some(Expr::Literal(l)) = flat.get(head) {
        lit.extend_from_slice(l);
        head += 1;
    }
    flat.drain(..head);
    (lit, flat)
}

impl Lowerer<'_> {
    /// The HIR of a lexable expression (rule references are inlined).
    pub(super) fn hir(&mut self, e: &Expr) -> Result<Hir, GrammarError> {
        Ok(match e {
            Expr::Empty => Hir::empty(),
            Expr::Literal(l) => Hir::literal(l.clone()),
            Expr::Chars(r) => Hir::class(hir::Class::Unicode(hir::ClassUnicode::new(
                r.iter().map(|&(a, b)| hir::ClassUnicodeRange::new(a, b)),
            ))),
            Expr::Bytes(r) => Hir::class(hir::Class::Bytes(hir::ClassBytes::new(
                r.iter().map(|&(a, b)| hir::ClassBytesRange::new(a, b)),
            ))),
            Expr::Ref(r) => {
                if let Some(h) = &self.hir_cache[*r as usize] {
                    return Ok(h.clone());
                }
                let body = &self.g.rules[*r as usize].body;
                let h = self.hir(body)?;
                self.hir_cache[*r as usize] = Some(h.clone());
                h
            }
            Expr::Seq(v) => Hir::concat(v.iter().map(|x| self.hir(x)).collect::<Result<_, _>>()?),
            Expr::Alt(v) => {
                Hir::alternation(v.iter().map(|x| self.hir(x)).collect::<Result<_, _>>()?)
            }
            Expr::Repeat { e, min, max } => Hir::repetition(hir::Repetition {
                min: *min,
                max: *max,
                greedy: true,
                sub: Box::new(self.hir(e)?),
            }),
            Expr::KeyComplement(k) => self.hir(&k.expand())?,
        })
    }

    /// The key complement `e` is, directly or as a reference to a rule whose body is one.
    pub(super) fn key_complement(
        &self,
        e: &Expr,
    ) -> Option<std::sync::Arc<crate::grammar::KeyComplement>> {
        match e {
            Expr::KeyComplement(k) => Some(k.clone()),
            Expr::Ref(r) => match &self.g.rules[*r as usize].body {
                Expr::KeyComplement(k) => Some(k.clone()),
                _ => None,
            },
            _ => None,
        }
    }

    /// The lexeme of key complement `k` (see [`keys`]), built from its keys; `None` when
    /// the automaton exceeds the DFA limits (the caller lowers the expansion instead).
    /// Cost: O(states x classes) unless the engine's cache has it.
    pub(super) fn key_lexeme(
        &mut self,
        k: &crate::grammar::KeyComplement,
    ) -> Result<Option<u32>, GrammarError> {
        let Some((dev_key, dev)) = self.part(&[&keys::dev_expr(k.ch())])? else {
            return Ok(None);
        };
        let keys = k.keys().to_vec();
        let (states, bytes) = (self.limits.max_lexeme_states, self.limits.max_dfa_bytes);
        // The keys, each as its length in characters and its text: unambiguous, and much
        // cheaper to write than their `Debug` form (every character quoted); then the
        // structural key of the string character's part.
        let mut text = String::from("(?:a key other than ");
        for k in &keys {
            use std::fmt::Write;
            let _ = write!(text, "{}:", k.len());
            text.extend(k.iter());
        }
        text.push(')');
        let mut key = text.clone().into_bytes();
        key.extend_from_slice(&dev_key);
        let mut cache_key = format!("{states}/{bytes}/").into_bytes();
        cache_key.extend_from_slice(&key);
        let name = {
            let dev = dev.clone();
            move || text + dev.name().unwrap_or_default()
        };
        let built = std::cell::Cell::new(false);
        let tail = dev.clone();
        let l = self.register(&cache_key, key, name, || {
            built.set(true);
            keys::key_complement(
                &keys,
                crate::grammar::json_string::json_encodings,
                &dev,
                states,
                bytes,
            )
        })?;
        // The plain string of the same characters, whose tables derive this lexeme's,
        // recorded when the lexeme is built here: its states past the start and end are
        // then `tail`'s, numbered as in `tail` (a cached one may come from another build
        // of the tail).
        if let (Some(l), true) = (l, built.get()) {
            if let Some((_, base)) = self.part(&[&keys::base_expr(k.ch())])? {
                self.lexemes[l as usize].set_key_base(base, tail);
            }
        }
        Ok(l)
    }

    /// Builds (or reuses) the lexeme for `hir`; `None` when it exceeds the DFA limits.
    ///
    /// A lexeme that starts with a literal (a property key and the colon after it) is
    /// built as the literal's chain in front of the cached DFA of the rest (see
    /// [`Dfa::prepend_literal`]), which the other keys of the schema share.
    pub(super) fn lexeme(&mut self, hir: Hir) -> Result<Option<u32>, GrammarError> {
        let key = hir.to_string();
        let (states, bytes) = (self.limits.max_lexeme_states, self.limits.max_dfa_bytes);
        let deadline = Some(self.deadline());
        let caches = self.caches;
        let cache_key = format!("{states}/{bytes}/{key}");
        let name = key.clone();
        self.register(
            cache_key.as_bytes(),
            key.into_bytes(),
            || name,
            move || build_hir_lexeme(caches, &hir, states, bytes, deadline),
        )
    }

    /// The lexeme of a sequence or an alternation of lexable expressions, as
    /// [`Lowerer::lexeme`] makes it from their regex, but looked up by a structural key of
    /// the expressions ([`Lowerer::expr_key`]) rather than by the printed regex: most
    /// lookups find the lexeme cached (12,100 of 20,468 on the 566-file MaskBench sample,
    /// against 7,976 builds), and then the regex is neither built nor printed, which was
    /// about a fifth of compile time. The key is exact: it encodes the expressions with
    /// rule references inlined, of which the regex is a function. Expressions that make
    /// the same regex but differ in ways the key does not normalize (see
    /// [`Lowerer::expr_key`]) get two cache entries: a second build, never a wrong
    /// share. Cost: a write of the key (a copy of each rule's key, written once per
    /// grammar) and a lookup; on a miss, the regex, the start of its printed form (the
    /// lexeme's name), and the build.
    pub(super) fn lexeme_of(
        &mut self,
        group: Group,
        items: &[&Expr],
    ) -> Result<Option<u32>, GrammarError> {
        let mut key = vec![STRUCTURAL_KEY];
        self.group_key(group, items.iter().copied(), &mut key);
        if let Some(l) = self.lex_map.get(&key) {
            return Ok(Some(*l));
        }
        self.room_for_lexeme()?;
        let (states, bytes) = (self.limits.max_lexeme_states, self.limits.max_dfa_bytes);
        let mut cache_key = format!("{states}/{bytes}/").into_bytes();
        cache_key.extend_from_slice(&key);
        let deadline = Some(self.deadline());
        let caches = self.caches;
        let entry = match self.caches.get(&cache_key) {
            Some(entry) => entry,
            None => match self.literal_head_lexeme(group, items, &cache_key)? {
                Some(entry) => entry,
                None => self.fetch_or_build(&cache_key, group, items, |hir| {
                    build_hir_lexeme(caches, hir, states, bytes, deadline)
                })?,
            },
        };
        let name = match &entry {
            Ok(l) => l.name().unwrap_or_default().to_string(),
            Err(_) => String::new(),
        };
        self.add_lexeme(key, &name, entry)
    }

    /// The lexeme of a sequence that starts with literal text (a property key), built as
    /// that text's chain in front of the lexeme of the rest ([`Dfa::prepend_literal`]),
    /// the rest looked up by its structural key: the rest (`ws : ws` and the value) is
    /// usually shared by other keys of the schema, and then no regex is built or printed
    /// at all. [`build_hir_lexeme`] makes the same split on the regex, which it had to
    /// build and print whole first (about 4% of compile time on the MaskBench files that
    /// compile in 15-26 ms). `None` when `items` do not start with a literal followed by
    /// something, or the rest is too big or the chain does not fit; the caller then builds
    /// the whole. The entry is cached under `cache_key`. Cost: a write of the rest's key,
    /// a lookup, O(literal + 256) for the chain; on a miss, the rest's build.
    pub(super) fn literal_head_lexeme(
        &mut self,
        group: Group,
        items: &[&Expr],
        cache_key: &[u8],
    ) -> Result<Option<cache::Entry>, GrammarError> {
        if group != Group::Seq {
            return Ok(None);
        }
        let (lit, rest) = literal_head_of(items);
        if lit.is_empty() || rest.is_empty() {
            return Ok(None);
        }
        let rest = &rest[..];
        let (states, bytes) = (self.limits.max_lexeme_states, self.limits.max_dfa_bytes);
        let mut rest_key = format!("{states}/{bytes}/").into_bytes();
        rest_key.push(STRUCTURAL_KEY);
        self.group_key(Group::Seq, rest.iter().copied(), &mut rest_key);
        let deadline = Some(self.deadline());
        let caches = self.caches;
        let r = match self.fetch_or_build(&rest_key, Group::Seq, rest, |hir| {
            Dfa::build_lexeme(caches, hir, states, bytes, deadline)
        })? {
            Ok(r) => r,
            Err(automata::dfa::DfaError::Deadline) => {
                return Ok(Some(Err(automata::dfa::DfaError::Deadline)))
            }
            Err(automata::dfa::DfaError::TooBig { .. }) => return Ok(None),
        };
        let Some(d) = Dfa::prepend_literal(&lit, &r, states, bytes) else {
            return Ok(None);
        };
        let entry = self.caches.put(cache_key, Ok(d));
        if let Ok(l) = &entry {
            let mut name = printed_prefix(&Hir::literal(lit), automata::dfa::NAME_BYTES);
            name.push_str(r.name().unwrap_or_default());
            l.set_name(&name);
        }
        Ok(Some(entry))
    }

    /// The cache entry under `cache_key` (a structural key); on a miss, the regex of
    /// `items` joined by `group` is built, given to `build`, and the result cached, its
    /// lexeme named after the start of the printed regex. Cost: a lookup; on a miss, the
    /// regex and the build.
    pub(super) fn fetch_or_build(
        &mut self,
        cache_key: &[u8],
        group: Group,
        items: &[&Expr],
        build: impl FnOnce(&Hir) -> Result<Dfa, automata::dfa::DfaError>,
    ) -> Result<cache::Entry, GrammarError> {
        if let Some(entry) = self.caches.get(cache_key) {
            return Ok(entry);
        }
        let parts = items
            .iter()
            .map(|e| self.hir(e))
            .collect::<Result<Vec<_>, _>>()?;
        let hir = match group {
            Group::Seq => Hir::concat(parts),
            Group::Alt => Hir::alternation(parts),
        };
        let entry = self.caches.put(cache_key, build(&hir));
        if let Ok(l) = &entry {
            l.set_name(&printed_prefix(&hir, automata::dfa::NAME_BYTES));
        }
        Ok(entry)
    }

    /// Adds the lexeme named `key` to the grammar (once per grammar), building it with
    /// `build` unless the engine's cache has it under `cache_key`; `None` when it
    /// exceeds the DFA limits.
    pub(super) fn register(
        &mut self,
        cache_key: &[u8],
        key: Vec<u8>,
        name: impl FnOnce() -> String,
        build: impl FnOnce() -> Result<Dfa, automata::dfa::DfaError>,
    ) -> Result<Option<u32>, GrammarError> {
        if let Some(&l) = self.lex_map.get(&key) {
            return Ok(Some(l));
        }
        self.room_for_lexeme()?;
        let entry = match self.caches.get(cache_key) {
            Some(entry) => entry,
            None => self.caches.put(cache_key, build()),
        };
        self.add_lexeme(key, &name(), entry)
    }

    /// Fails when one more lexeme would pass `max_lexemes`, or a compile budget is spent.
    pub(super) fn room_for_lexeme(&self) -> Result<(), GrammarError> {
        if self.lexemes.len() >= self.limits.max_lexemes {
            return Err(limit(
                "number of lexemes",
                self.lexemes.len() + 1,
                self.limits.max_lexemes,
                crate::error::LimitKind::Lexemes,
            ));
        }
        self.check_budgets()
    }

    /// Adds the lexeme of a cache entry to the grammar under `key`, named after the start
    /// of `name` (a printed regex); `None` when the entry says it exceeds the DFA limits.
    pub(super) fn add_lexeme(
        &mut self,
        key: Vec<u8>,
        name: &str,
        entry: cache::Entry,
    ) -> Result<Option<u32>, GrammarError> {
        match entry {
            Ok(d) => {
                self.dfa_spent += d.num_states();
                let l = self.lexemes.len() as u32;
                self.lexemes.push(d);
                // Control characters escaped, so diagnostics stay on one line (only the
                // first 61 bytes are needed to name it).
                let full = name;
                let mut name = String::new();
                for c in full.chars() {
                    if name.len() > 60 {
                        break;
                    }
                    if c.is_control() {
                        name.extend(c.escape_default());
                    } else {
                        name.push(c);
                    }
                }
                if name.len() > 60 {
                    let mut cut = 57;
                    while !name.is_char_boundary(cut) {
                        cut -= 1;
                    }
                    name.truncate(cut);
                    name.push_str("...");
                }
                self.lex_name.push(name);
                self.lex_map.insert(key, l);
                Ok(Some(l))
            }
            Err(automata::dfa::DfaError::TooBig { cost }) => {
                self.dfa_spent += cost;
                Ok(None)
            }
            Err(automata::dfa::DfaError::Deadline) => Err(self.time_error()),
        }
    }
}
