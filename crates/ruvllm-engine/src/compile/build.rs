//! Building a lexeme's DFA from its regex: composed from cached smaller DFAs where the
//! regex's structure allows ([`super::compose`]), else through a Thompson NFA and the
//! subset construction ([`super::subset`]), within budgets that turn pathological regexes
//! into errors instead of hangs.
//!
//! Owns: nothing (the build functions of [`Dfa`]). Uses: the automata, the compile
//! caches (the reused NFA compiler), composition and the subset construction.

use regex_automata::nfa::thompson;
use regex_syntax::hir::Hir;

use super::automata::dfa::{Dfa, DfaError};
use super::cache::Caches;
use super::subset::Stop;

/// NFA states up to which a lexeme's determinization gets the whole `max_dfa_bytes` budget.
const NFA_FULL_BUDGET: usize = 512;
/// The least determinization budget of a large NFA (when `max_dfa_bytes` is larger).
const DETERMINIZE_FLOOR: usize = 256 << 10;

impl Dfa {
    /// Builds the DFA of `hir` (anchored, all matches), within `max_states` states and
    /// `max_bytes` of determinization memory.
    #[cfg(test)]
    pub(crate) fn build(hir: &Hir, max_states: usize, max_bytes: usize) -> Result<Dfa, DfaError> {
        Self::build_until(&Caches::private(), hir, max_states, max_bytes, None)
    }

    /// Builds the DFA of `hir` (anchored, all matches) the fastest way: composed from
    /// cached smaller DFAs when its structure suits (see [`super::compose`]), else through
    /// an NFA ([`Dfa::build_until`]). Same limits and errors as [`Dfa::build_until`].
    pub(crate) fn build_lexeme(
        caches: &Caches,
        hir: &Hir,
        max_states: usize,
        max_bytes: usize,
        deadline: Option<std::time::Instant>,
    ) -> Result<Dfa, DfaError> {
        match super::compose::compose(caches, hir, max_states, max_bytes, deadline) {
            Some(built) => built,
            None => Self::build_until(caches, hir, max_states, max_bytes, deadline),
        }
    }

    /// Builds the DFA of `hir` (anchored, all matches) through a Thompson NFA, within
    /// `max_states` states and `max_bytes` of determinization memory, stopping with
    /// [`DfaError::Deadline`] once `deadline` has passed.
    pub(crate) fn build_until(
        caches: &Caches,
        hir: &Hir,
        max_states: usize,
        max_bytes: usize,
        deadline: Option<std::time::Instant>,
    ) -> Result<Dfa, DfaError> {
        let config = thompson::Config::new()
            .utf8(false)
            .shrink(false)
            .which_captures(thompson::WhichCaptures::None)
            .nfa_size_limit(Some(max_bytes));
        // The engine's Thompson compiler, reused (see `Caches::with_nfa_compiler`).
        let nfa = caches
            .with_nfa_compiler(|c| c.configure(config.clone()).build_from_hir(hir).ok())
            .ok_or(DfaError::TooBig { cost: max_states })?;
        // Determinization costs about (DFA states) x (NFA states per DFA state); the
        // second factor is what the set budget bounds (the NFA-state sets kept per DFA
        // state, and the memoized closures). A memory limit alone let a large NFA with big
        // sets spend seconds (found by fuzzing: `(?:\S+…|s+){0,99}…`, 3,000 NFA states,
        // 1.3 s per attempt at 4 MiB, 77 ms at 256 KiB). Past `NFA_FULL_BUDGET` NFA states
        // the set budget shrinks with the square of the ratio, down to a floor of
        // `DETERMINIZE_FLOOR`; the table keeps the whole budget. Bounded repeats of a JSON
        // string character (the common large NFA: 6,600 NFA states for 200 characters)
        // have small sets and fit in 256 KiB, so they still get their DFA; shrinking the
        // table budget too had split `maxLength: 60` strings into per-character lexemes,
        // which cost seconds per mask in the parser. The state limit is exact and stops
        // the construction when it is passed (a fuzz-found `(-?[0-9]{1,16})*` had been
        // determinized to 65,000 states before being refused).
        let n = nfa.states().len().max(1);
        let set_bytes = if n > NFA_FULL_BUDGET {
            let f = NFA_FULL_BUDGET as u128;
            let scaled = (max_bytes as u128 * f * f / (n as u128 * n as u128)) as usize;
            scaled.max(DETERMINIZE_FLOOR).min(max_bytes)
        } else {
            max_bytes
        };
        let d = super::subset::determinize(&nfa, max_states, set_bytes, max_bytes, deadline)
            .map_err(|stop| match stop {
                Stop::Time => DfaError::Deadline,
                Stop::Memory => DfaError::TooBig {
                    cost: (max_states as u128 * set_bytes as u128 / max_bytes.max(1) as u128).max(1)
                        as usize,
                },
                Stop::States | Stop::Look => DfaError::TooBig { cost: max_states },
            })?;
        Ok(Dfa::from_subset(d))
    }
}
