//! The last step of lowering: the flattened Earley grammar, and what the parser needs
//! beside it (the bytes that may follow each lexeme, which lexemes complete a checked
//! rule).
//!
//! Part of the lowering (the parent module); it uses the IR and the parent's state.

use super::*;

/// Positions whose completion may complete a checked rule in the same step: a rule is
/// "hot" if it is checked or sits before a nullable suffix in a hot rule's alternative; a
/// position is sensitive if a nullable suffix follows it in a hot rule. Cost: a fixpoint
/// over the grammar.
pub(super) fn check_sensitive(
    syms: &[Sym],
    rule_alts: &[Vec<u32>],
    nullable: &[bool],
    checks: &[Option<Check>],
) -> Vec<bool> {
    let mut hot: Vec<bool> = checks.iter().map(|c| c.is_some()).collect();
    if !hot.iter().any(|&h| h) {
        return vec![false; syms.len()];
    }
    // Whether the suffix after position p (up to End) is nullable.
    let tail_null = |p: usize| -> bool {
        let mut i = p + 1;
        loop {
            match syms[i] {
                Sym::End(_) => return true,
                Sym::Lex(_) => return false,
                Sym::Rule(r) if !nullable[r.ix()] => return false,
                Sym::Rule(_) => i += 1,
            }
        }
    };
    loop {
        let mut changed = false;
        for (r, alts) in rule_alts.iter().enumerate() {
            if !hot[r] {
                continue;
            }
            for &a in alts {
                let mut i = a as usize;
                while let Sym::Rule(_) | Sym::Lex(_) = syms[i] {
                    if let Sym::Rule(x) = syms[i] {
                        if !hot[x.ix()] && tail_null(i) {
                            hot[x.ix()] = true;
                            changed = true;
                        }
                    }
                    i += 1;
                }
            }
        }
        if !changed {
            break;
        }
    }
    let mut out = vec![false; syms.len()];
    for (r, alts) in rule_alts.iter().enumerate() {
        if !hot[r] {
            continue;
        }
        for &a in alts {
            let mut i = a as usize;
            while let Sym::Rule(_) | Sym::Lex(_) = syms[i] {
                if let Sym::Lex(_) = syms[i] {
                    out[i] = tail_null(i);
                }
                i += 1;
            }
        }
    }
    out
}

/// FIRST/FOLLOW over bytes, then, for each lexeme position, the bytes that can follow the
/// lexeme. Falls back to "any byte" (always close) if the fixpoint takes too long: that is
/// only slower, never wrong.
pub(super) fn follow_bytes(
    syms: &[Sym],
    rule_alts: &[Vec<u32>],
    nullable: &[bool],
    lexemes: &[std::sync::Arc<Lexeme>],
) -> Vec<crate::byteset::ByteSet> {
    use crate::byteset::ByteSet;
    let n = rule_alts.len();
    let lex_first = |l: LexemeId| *lexemes[l.ix()].allowed(lexemes[l.ix()].start());
    let lex_null = |l: LexemeId| lexemes[l.ix()].accepting(lexemes[l.ix()].start());
    // FIRST of the suffix starting at `p` (up to End), and whether that suffix is nullable.
    let first_from = |p: usize, first: &[ByteSet]| -> (ByteSet, bool) {
        let mut acc = ByteSet::EMPTY;
        let mut i = p;
        loop {
            match syms[i] {
                Sym::End(_) => return (acc, true),
                Sym::Lex(l) => {
                    acc.union_with(&lex_first(l));
                    if !lex_null(l) {
                        return (acc, false);
                    }
                }
                Sym::Rule(r) => {
                    acc.union_with(&first[r.ix()]);
                    if !nullable[r.ix()] {
                        return (acc, false);
                    }
                }
            }
            i += 1;
        }
    };
    let all = ByteSet([u64::MAX; 4]);
    let mut first = vec![ByteSet::EMPTY; n];
    let mut ok = false;
    for _ in 0..64 {
        let mut changed = false;
        for r in 0..n {
            for &a in &rule_alts[r] {
                let (f, _) = first_from(a as usize, &first);
                let mut nf = first[r];
                nf.union_with(&f);
                if nf != first[r] {
                    first[r] = nf;
                    changed = true;
                }
            }
        }
        if !changed {
            ok = true;
            break;
        }
    }
    if !ok {
        first = vec![all; n];
    }
    let mut follow = vec![ByteSet::EMPTY; n];
    let mut ok = false;
    for _ in 0..64 {
        let mut changed = false;
        for r in 0..n {
            for &a in &rule_alts[r] {
                let mut i = a as usize;
                while let Sym::Rule(_) | Sym::Lex(_) = syms[i] {
                    if let Sym::Rule(x) = syms[i] {
                        let (mut f, null) = first_from(i + 1, &first);
                        if null {
                            f.union_with(&follow[r]);
                        }
                        let mut nf = follow[x.ix()];
                        nf.union_with(&f);
                        if nf != follow[x.ix()] {
                            follow[x.ix()] = nf;
                            changed = true;
                        }
                    }
                    i += 1;
                }
            }
        }
        if !changed {
            ok = true;
            break;
        }
    }
    if !ok {
        return vec![all; syms.len()];
    }
    let mut out = vec![ByteSet::EMPTY; syms.len()];
    for r in 0..n {
        for &a in &rule_alts[r] {
            let mut i = a as usize;
            while let Sym::Rule(_) | Sym::Lex(_) = syms[i] {
                if let Sym::Lex(_) = syms[i] {
                    let (mut f, null) = first_from(i + 1, &first);
                    if null {
                        f.union_with(&follow[r]);
                    }
                    out[i] = f;
                }
                i += 1;
            }
        }
    }
    out
}

impl Lowerer<'_> {
    pub(super) fn finish(self, root: u32) -> Result<CompiledGrammar, GrammarError> {
        let mut syms = Vec::with_capacity(self.total_syms + self.rules.len());
        let mut rule_alts = Vec::with_capacity(self.rules.len());
        let mut pos_rule = Vec::new();
        for (r, alts) in self.rules.iter().enumerate() {
            let mut starts = Vec::with_capacity(alts.len());
            for alt in alts {
                starts.push(syms.len() as u32);
                syms.extend_from_slice(alt);
                syms.push(Sym::End(EarleyRuleId(r as u32)));
                pos_rule.resize(syms.len(), EarleyRuleId(r as u32));
            }
            rule_alts.push(starts);
        }
        if syms.len() >= u32::MAX as usize / 2 {
            return Err(limit(
                "compiled grammar size",
                syms.len(),
                u32::MAX as usize / 2,
                crate::error::LimitKind::CompiledSymbols,
            ));
        }
        // Nullable rules, to a fixpoint.
        let lex_nullable: Vec<bool> = self
            .lexemes
            .iter()
            .map(|d| d.accepting(d.start()))
            .collect();
        let mut nullable = vec![false; self.rules.len()];
        loop {
            let mut changed = false;
            for (r, alts) in self.rules.iter().enumerate() {
                // A checked rule is never nullable: the parser's nullable shortcut would
                // skip its check (and no JSON value is empty).
                if nullable[r] || self.rule_check[r].is_some() {
                    continue;
                }
                let n = alts.iter().any(|alt| {
                    alt.iter().all(|s| match s {
                        Sym::Lex(l) => lex_nullable[l.ix()],
                        Sym::Rule(x) => nullable[x.ix()],
                        Sym::End(_) => true,
                    })
                });
                if n {
                    nullable[r] = true;
                    changed = true;
                }
            }
            if !changed {
                break;
            }
        }
        let lex_follow = follow_bytes(&syms, &rule_alts, &nullable, &self.lexemes);
        let lex_check_sensitive = check_sensitive(&syms, &rule_alts, &nullable, &self.rule_check);
        let nullable_check = self
            .rule_check
            .iter()
            .zip(&nullable)
            .any(|(c, &n)| c.is_some() && n);
        let total: usize = self.lexemes.iter().map(|d| d.num_states()).sum();
        Ok(CompiledGrammar {
            syms,
            rule_alts,
            rule_nullable: nullable,
            rule_name: self.rule_name,
            root: EarleyRuleId(root),
            lexemes: self.lexemes,
            lex_name: self.lex_name,
            n_lex_states: total,
            pos_rule,
            lex_follow,
            has_checks: self.rule_check.iter().any(|c| c.is_some()),
            nullable_check,
            lex_check_sensitive,
            rule_check: self.rule_check,
            shortest: std::sync::OnceLock::new(),
            completion_bytes: std::sync::OnceLock::new(),
            warnings: self.g.warnings.clone(),
        })
    }
}
