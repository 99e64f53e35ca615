//! Key-complement lexemes built from their keys.
//!
//! An object schema that allows properties besides its declared ones needs a lexeme for
//! "a JSON string that is none of these keys" (`Expr::KeyComplement`, whose meaning is
//! the expression `grammar::json_string::key_complement_body` builds). Written as
//! a regex, that is a trie of the keys where every node may also end the string or leave
//! the trie by a character no key continues with, then anything. Through a Thompson NFA and
//! subset construction it cost 5-17 ms for a few hundred key characters (about half the
//! NFA, half the determinization), three quarters of all lexeme-building time on MaskBench,
//! and its DFA kept one copy of every partial UTF-8 and escape state per trie node,
//! because each node's "differing character" is its own piece of the NFA: 7,644 states for
//! a trie a tenth that size.
//!
//! Built here from the keys instead, in three kinds of states:
//!
//! * **trie states**: a key prefix read, at a character boundary (one per trie node), and
//!   the bytes read so far of a character that still may be a key's next one (a proper
//!   prefix of one of its encodings: `\`, the first bytes of a multi-byte character, ...);
//! * **the tail**: a copy of one small shared automaton, `dev`, for "one more character,
//!   then any string characters, then the closing quote";
//! * the start (before the opening quote) and the end (after the closing quote).
//!
//! From a trie state, a byte that continues some encoding of a next key character stays
//! in the trie. Any other byte goes where `dev` goes on the bytes of the character read so
//! far: they are then the start of a character no key continues with here, and `dev`
//! finishes it. `"` at a character boundary ends the string unless the prefix is a key.
//! The result has the language of the expansion (the tests check both automata against
//! each other on random key sets), with the tail shared by every trie node.
//!
//! Its token tables are not walked either: each trie state's is derived from the table of
//! a plain JSON string of the same characters (`crate::tables`), which every schema shares;
//! the lexeme keeps that string's lexeme for it (`base_expr`).
//!
//! Encodings come from `grammar::json_string` (`json_encodings`): the raw character where a
//! JSON string may hold it, its short escape, and its `\uXXXX` spellings (a surrogate pair
//! past U+FFFF) for the characters encoders escape (controls, non-ASCII, HTML-sensitive
//! punctuation); they are prefix-free, so a byte string completes at most one character.
//!
//! Part of the compiler (the parent module). Owns: the key trie of one complement. Uses:
//! the IR's key complements and JSON string encodings (`grammar::json_string`), the lexeme
//! automata and the subset construction.

use super::automata::dfa::{Dfa, DfaError};
use super::subset::Subset;
use crate::grammar::Expr;

/// The tail automaton's expression for string character `ch`: one character (any, as
/// `json_chars` writes it), then any string characters, then the closing quote.
pub(crate) fn dev_expr(ch: &Expr) -> Expr {
    then_string(
        crate::grammar::json_string::json_chars(&[('\0', char::MAX)]),
        ch,
    )
}

/// The expression of every JSON string of string character `ch`, quotes included: the
/// lexeme whose tables derive a key complement's (see `crate::tables`).
pub(crate) fn base_expr(ch: &Expr) -> Expr {
    then_string(Expr::Literal(b"\"".to_vec()), ch)
}

/// `first`, then any string characters `ch`, then the closing quote.
fn then_string(first: Expr, ch: &Expr) -> Expr {
    Expr::Seq(vec![
        first,
        Expr::Repeat {
            e: Box::new(ch.clone()),
            min: 0,
            max: None,
        },
        Expr::Literal(b"\"".to_vec()),
    ])
}

/// The first trie state of a DFA that [`key_complement`] built: the state after the
/// opening quote. The states from there on are the trie's (a key prefix read); those
/// below it are the start, the end and the tail's (`dev`), which behave as some state of
/// a plain JSON string. Cost: one step.
pub(crate) fn trie_start(kc: &Dfa) -> u32 {
    kc.next(kc.start(), b'"')
}

/// The state of `dev` that state `s` of a DFA [`key_complement`] built from `dev` is a
/// copy of (the same transitions, moved up), if `s` is in its tail: between its end and
/// `trie0`, its first trie state ([`trie_start`]). Cost: O(1).
pub(crate) fn tail_state(s: u32, trie0: u32) -> Option<u32> {
    (s > END && s < trie0).then(|| s - END)
}

/// The start state of a DFA [`key_complement`] builds (before the opening quote).
const START: u32 = 1;
/// Its end state (after the closing quote); its tail's states follow.
const END: u32 = 2;

/// The DFA of the JSON strings, quotes included, other than `keys`, where a key
/// character is read in any of its `encodings` and `dev` is the automaton of "one
/// character in any of its encodings, then any string characters, then `"`".
/// [`DfaError::TooBig`] past `max_states` states or `max_bytes` of transition table (the
/// limits of a lexeme built through an NFA). Cost: O(states x byte classes), the states
/// being about the trie's nodes plus `dev`'s.
// Long (155 lines): the trie of keys and its complement automaton in one construction
// over shared state tables.
pub(crate) fn key_complement(
    keys: &[Vec<char>],
    encodings: impl Fn(char) -> Vec<Vec<u8>>,
    dev: &Dfa,
    max_states: usize,
    max_bytes: usize,
) -> Result<Dfa, DfaError> {
    let too_big = DfaError::TooBig { cost: max_states };
    if !dev.is_flat() {
        return Err(too_big);
    }
    // The character trie: node 0 is the root.
    let mut is_key = vec![false];
    let mut children: Vec<Vec<(char, u32)>> = vec![Vec::new()];
    // Child lookup by (node, character): a node may have thousands of children (keys
    // with distinct first characters), and a scan per insertion would be quadratic.
    let mut child: crate::util::FastMap<(usize, char), usize> = Default::default();
    for k in keys {
        let mut n = 0usize;
        for &c in k {
            n = match child.get(&(n, c)) {
                Some(&m) => m,
                None => {
                    let m = is_key.len();
                    if m > max_states {
                        return Err(too_big);
                    }
                    is_key.push(false);
                    children.push(Vec::new());
                    children[n].push((c, m as u32));
                    child.insert((n, c), m);
                    m
                }
            };
        }
        is_key[n] = true;
    }
    // State numbers: 0 dead, 1 start, 2 end, then `dev`'s live states, then one trie
    // state per node, then the partial characters.
    let dev_n = dev.num_states() as u32;
    let from_dev = |d: u32| if d == 0 { 0 } else { END + d };
    let trie0 = END + dev_n;
    let nodes = is_key.len() as u32;
    // For each trie state (node's, then partial ones): its node, the dev state after the
    // bytes of the character begun so far, and its byte edges.
    struct TrieState {
        node: u32,
        dev_at: u32,
        edges: Vec<(u8, u32)>,
    }
    let mut ts: Vec<TrieState> = (0..nodes)
        .map(|n| TrieState {
            node: n,
            dev_at: dev.start(),
            edges: Vec::new(),
        })
        .collect();
    let mut special = [false; 256];
    special[b'"' as usize] = true;
    for (n, kids) in children.iter().enumerate() {
        for &(c, m) in kids {
            for enc in encodings(c) {
                let mut at = n; // index into `ts`
                for (i, &b) in enc.iter().enumerate() {
                    special[b as usize] = true;
                    let last = i + 1 == enc.len();
                    let found = ts[at].edges.iter().find(|&&(x, _)| x == b).map(|e| e.1);
                    at = match found {
                        Some(t) => (t - trie0) as usize,
                        None => {
                            let t = if last {
                                m as usize
                            } else {
                                if (trie0 as usize + ts.len()) > max_states {
                                    return Err(too_big);
                                }
                                let dev_at = dev.next(ts[at].dev_at, b);
                                ts.push(TrieState {
                                    node: n as u32,
                                    dev_at,
                                    edges: Vec::new(),
                                });
                                ts.len() - 1
                            };
                            ts[at].edges.push((b, trie0 + t as u32));
                            t
                        }
                    };
                }
            }
        }
    }
    let states = trie0 as usize + ts.len();
    if states > max_states {
        return Err(too_big);
    }
    // Byte classes: `dev`'s, with every byte of a key encoding (and `"`) on its own.
    let mut classes = [0u8; 256];
    let mut reps: Vec<u8> = Vec::new();
    // The class of each of `dev`'s classes whose bytes are not special, by that class
    // (a direct table, where a hash map of 256 lookups was a tenth of this function).
    let mut plain_class: [Option<u8>; 256] = [None; 256];
    for b in 0..=255u8 {
        let next = reps.len() as u8;
        let c = if special[b as usize] {
            reps.push(b);
            next
        } else {
            *plain_class[dev.class_of(b) as usize].get_or_insert_with(|| {
                reps.push(b);
                next
            })
        };
        // At most 256 distinct classes, so `next` fits in a u8.
        classes[b as usize] = c;
    }
    let stride = reps.len();
    if states.saturating_mul(stride).saturating_mul(4) > max_bytes {
        return Err(too_big);
    }
    let mut trans = vec![0u32; states * stride];
    let mut accepting = vec![false; states];
    accepting[END as usize] = true;
    trans[START as usize * stride + classes[b'"' as usize] as usize] = trie0;
    for d in 1..dev_n {
        let row = (END + d) as usize * stride;
        for (k, &b) in reps.iter().enumerate() {
            trans[row + k] = from_dev(dev.next(d, b));
        }
        accepting[(END + d) as usize] = dev.accepting(d);
    }
    for (i, t) in ts.iter().enumerate() {
        let row = (trie0 as usize + i) * stride;
        for (k, &b) in reps.iter().enumerate() {
            trans[row + k] = if let Some(&(_, to)) = t.edges.iter().find(|e| e.0 == b) {
                to
            } else if b == b'"' && i < nodes as usize {
                if is_key[t.node as usize] {
                    0
                } else {
                    END
                }
            } else {
                from_dev(dev.next(t.dev_at, b))
            };
        }
    }
    Ok(Dfa::from_subset(Subset {
        classes,
        stride,
        trans,
        accepting,
        start: START,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grammar::json_string::{json_encodings, key_trie_inline, BuildExpr};
    use crate::grammar::KeyComplement;
    use crate::schema::{schema_to_grammar, SchemaOptions};
    use crate::Limits;
    use std::collections::{HashSet, VecDeque};
    use std::sync::Arc;

    /// Whether `a` and `b` have the same language. Both keep only states that can still
    /// complete (dead is 0), so it is enough that paired states agree on accepting and on
    /// which bytes keep them alive.
    fn same_language(a: &Dfa, b: &Dfa) -> Result<(), String> {
        let mut seen = HashSet::new();
        let mut todo = VecDeque::from([(a.start(), b.start(), Vec::<u8>::new())]);
        while let Some((x, y, path)) = todo.pop_front() {
            if !seen.insert((x, y)) {
                continue;
            }
            if a.accepting(x) != b.accepting(y) {
                return Err(format!(
                    "accepting differs after {:?}",
                    String::from_utf8_lossy(&path)
                ));
            }
            for byte in 0..=255u8 {
                let (nx, ny) = (a.next(x, byte), b.next(y, byte));
                if (nx == 0) != (ny == 0) {
                    let mut p = path.clone();
                    p.push(byte);
                    return Err(format!("byte {byte:#x} alive in one only after {p:?}"));
                }
                if nx != 0 && !seen.contains(&(nx, ny)) {
                    let mut p = path.clone();
                    p.push(byte);
                    todo.push_back((nx, ny, p));
                }
            }
        }
        Ok(())
    }

    /// Builds the key complement of `{"properties": keys}` from the keys and through the
    /// NFA, of both rule body forms, and compares them; returns whether the rule body
    /// was the plain trie complement (a sequence).
    fn check(keys: &[String]) -> bool {
        let props: serde_json::Map<String, serde_json::Value> = keys
            .iter()
            .map(|k| (k.clone(), serde_json::json!({})))
            .collect();
        let schema = serde_json::json!({"type": "object", "properties": props});
        let opts = SchemaOptions {
            strict: false,
            ..SchemaOptions::default()
        };
        let g = schema_to_grammar(&schema, &opts).unwrap();
        let sets = key_complements(&g);
        assert_eq!(sets.len(), 1, "{keys:?}");
        let limits = Limits::default();
        let caches = super::super::cache::Caches::private();
        let mut low = super::super::Lowerer::new(&g, &limits, &caches);
        // The public constructor takes an empty key set too (any string).
        let none = Arc::new(KeyComplement::new::<&str>(&[], sets[0].ch().clone()));
        for ks in sets.iter().chain([&none]) {
            let hir = low.hir(&ks.expand()).unwrap();
            let via_nfa = Dfa::build(&hir, limits.max_lexeme_states, limits.max_dfa_bytes).unwrap();
            let dev_hir = low.hir(&dev_expr(ks.ch())).unwrap();
            let dev = Dfa::build(&dev_hir, 1 << 20, 256 << 20).unwrap();
            let direct =
                key_complement(ks.keys(), json_encodings, &dev, 1 << 20, 256 << 20).unwrap();
            if let Err(e) = same_language(&via_nfa, &direct) {
                panic!("{keys:?}: {e}");
            }
            assert!(direct.num_states() <= via_nfa.num_states());
            // The plain trie complement (the expansion of key sets over 400 trie nodes, too
            // big for the NFA route at that size) has the same language too.
            let q = Expr::Literal(b"\"".to_vec());
            let inline = Expr::Seq(vec![
                q,
                key_trie_inline(ks.keys(), 0, &mut BuildExpr(ks.ch())),
            ]);
            let hir = low.hir(&inline).unwrap();
            let via_nfa = Dfa::build(&hir, limits.max_lexeme_states, limits.max_dfa_bytes).unwrap();
            if let Err(e) = same_language(&via_nfa, &direct) {
                panic!("{keys:?} (plain trie complement): {e}");
            }
        }
        matches!(sets[0].expand(), Expr::Seq(_))
    }

    /// The key complements that are rule bodies of `g`.
    fn key_complements(g: &crate::grammar::Grammar) -> Vec<Arc<KeyComplement>> {
        g.rules
            .iter()
            .filter_map(|r| match &r.body {
                Expr::KeyComplement(k) => Some(k.clone()),
                _ => None,
            })
            .collect()
    }

    /// A schema's "other key" rule too heavy to inline is lowered to the lexeme built from
    /// its keys, not to its expansion (a light one is inlined into its neighbours' lexeme).
    #[test]
    fn schema_key_complements_are_built_from_their_keys() {
        // 400 keys: past the shared-tail trie size, too heavy to inline.
        let props: serde_json::Map<String, serde_json::Value> = (0..400)
            .map(|i| (format!("key{i}"), serde_json::json!({"type": "string"})))
            .collect();
        let schema = serde_json::json!({
            "type": "object",
            "properties": props,
            "additionalProperties": {"type": "integer"},
        });
        let g = schema_to_grammar(&schema, &SchemaOptions::default()).unwrap();
        let c = super::super::CompiledGrammar::new(&g, &Limits::default()).unwrap();
        assert!(
            c.lex_name
                .iter()
                .any(|l| l.starts_with("(?:a key other than")),
            "{:?}",
            c.lex_name
        );
    }

    /// The compiler weighs a key complement without building its expansion; the weight and
    /// depth must be the expansion's, or the node would be lowered differently from it.
    #[test]
    fn measured_as_its_expansion() {
        use super::super::{expr_depth, expr_weight, measure_keys, Measure};
        let alphabet = ["a", "b", "ab", "\"", "\\", "/", "\n", "é", "😀", "xyzw"];
        let mut rnd = super::super::test_rng(0x9e37_79b9_7f4a_7c15u64);
        // The string character as a reference to a rule of some weight and depth (the
        // node's measure is computed once and must hold for any of them).
        let chs = [(0, 0), (7, 3), (1, 1), (1000, 50)];
        let mut inline_seen = false;
        for round in 0..200 {
            // Some sets past 400 trie nodes, whose expansion is the plain trie complement.
            let n = if round % 10 == 0 {
                60 + rnd(60)
            } else {
                rnd(8)
            };
            let keys: Vec<String> = (0..n)
                .map(|_| {
                    (0..1 + rnd(12))
                        .map(|_| alphabet[rnd(alphabet.len() as u64) as usize])
                        .collect()
                })
                .collect();
            let k = KeyComplement::new(&keys, Expr::Ref(1));
            let e = k.expand();
            inline_seen |= matches!(e, Expr::Seq(_));
            let node = Expr::KeyComplement(Arc::new(k.clone()));
            for &(cw, cd) in &chs {
                let (w, d) = ([0, cw], [0, cd]);
                assert_eq!(
                    measure_keys(&k, Measure::Weight(w[1])),
                    expr_weight(&e, &w),
                    "{keys:?} {w:?}"
                );
                assert_eq!(
                    measure_keys(&k, Measure::Depth(d[1])),
                    expr_depth(&e, &d),
                    "{keys:?} {d:?}"
                );
                assert_eq!(expr_weight(&node, &w), expr_weight(&e, &w));
                assert_eq!(expr_depth(&node, &d), expr_depth(&e, &d));
            }
        }
        assert!(inline_seen);
    }

    #[test]
    fn direct_construction_equals_the_rule_body() {
        let alphabet = [
            "a", "b", "ab", "\"", "\\", "/", "\n", "\u{1}", "\u{1f}", "\u{b}", "\u{7f}", "é", "è",
            "€", "😀", " ", "\u{ffff}",
        ];
        check(&["".into()]);
        check(&["a".into(), "ab".into(), "abc".into()]);
        check(&[
            "\"".into(),
            "\\".into(),
            "/".into(),
            "\n".into(),
            "é".into(),
        ]);
        let mut rnd = super::super::test_rng(0x2545_f491_4f6c_dd1du64);
        for _ in 0..150 {
            let n = 1 + rnd(6);
            let keys: Vec<String> = (0..n)
                .map(|_| {
                    (0..rnd(5))
                        .map(|_| alphabet[rnd(alphabet.len() as u64) as usize])
                        .collect()
                })
                .collect();
            assert!(!check(&keys));
        }
    }

    #[test]
    fn over_the_limits_it_falls_back_to_the_rule() {
        let g = crate::grammar::Grammar::single("x", Expr::Empty);
        let limits = Limits::default();
        let caches = super::super::cache::Caches::private();
        let mut low = super::super::Lowerer::new(&g, &limits, &caches);
        let ch = Expr::Chars(vec![(' ', '!'), ('#', '['), (']', char::MAX)]);
        let dev = Dfa::build(&low.hir(&dev_expr(&ch)).unwrap(), 1 << 16, 16 << 20).unwrap();
        let keys: Vec<Vec<char>> = vec!["alpha".chars().collect(), "beta".chars().collect()];
        assert!(key_complement(&keys, json_encodings, &dev, 1 << 16, 16 << 20).is_ok());
        let too_big = |r: Result<Dfa, DfaError>| matches!(r, Err(DfaError::TooBig { .. }));
        assert!(too_big(key_complement(
            &keys,
            json_encodings,
            &dev,
            20,
            16 << 20
        )));
        assert!(too_big(key_complement(
            &keys,
            json_encodings,
            &dev,
            1 << 16,
            4096
        )));

        // A grammar compiled with a state limit the direct automaton passes keeps its
        // language (the rule is lowered as before).
        let schema = serde_json::json!({"type": "object",
            "properties": {"a": {"type": "integer"}, "ab": {"type": "string"}},
            "additionalProperties": {"type": "boolean"}});
        let opts = SchemaOptions {
            strict: false,
            ..SchemaOptions::default()
        };
        let g = schema_to_grammar(&schema, &opts).unwrap();
        let mut toks: Vec<Vec<u8>> = (0..=255u8).map(|b| vec![b]).collect();
        toks.push(b"<eos>".to_vec());
        let mut special = vec![false; 257];
        special[256] = true;
        let vocab = std::sync::Arc::new(
            crate::vocab::Vocabulary::new("bytes", toks, special, vec![256]).unwrap(),
        );
        // The direct automaton of this key set has more states than this.
        let ks = &key_complements(&g)[0];
        let caches = super::super::cache::Caches::private();
        let mut low = super::super::Lowerer::new(&g, &limits, &caches);
        let dev = Dfa::build(&low.hir(&dev_expr(ks.ch())).unwrap(), 1 << 16, 16 << 20).unwrap();
        let direct = key_complement(ks.keys(), json_encodings, &dev, 1 << 16, 16 << 20).unwrap();
        let small = Limits {
            max_lexeme_states: 40,
            ..Limits::default()
        };
        assert!(direct.num_states() > small.max_lexeme_states);
        let accepts = |limits: &Limits, text: &str| {
            let c = crate::handle::constraint::Constraint::new(&g, vocab.clone(), limits).unwrap();
            let mut m = crate::matching::matcher::Matcher::new(&c).unwrap();
            text.bytes().all(|b| m.commit_token(b as u32).is_ok()) && m.is_accepting()
        };
        for (text, ok) in [
            (r#"{"a": 1}"#, true),
            (r#"{"a": true}"#, false),
            (r#"{"ab": "x"}"#, true),
            (r#"{"ab": true}"#, false),
            (r#"{"abc": true}"#, true),
            (r#"{"abc": 1}"#, false),
            (r#"{"": false}"#, true),
            (r#"{"\u0061": true}"#, false),
            (r#"{"b\n": true}"#, true),
        ] {
            assert_eq!(accepts(&limits, text), ok, "{text}");
            assert_eq!(accepts(&small, text), ok, "{text} (small lexemes)");
        }
    }

    #[test]
    fn encodings_are_what_json_chars_matches() {
        let limits = Limits::default();
        let g = crate::grammar::Grammar::single("x", Expr::Empty);
        let caches = super::super::cache::Caches::private();
        let mut low = super::super::Lowerer::new(&g, &limits, &caches);
        for c in (0u32..0x300).chain([0x7ff, 0x800, 0xd7ff, 0xe000, 0xffff, 0x10000, 0x10ffff]) {
            let c = char::from_u32(c).unwrap();
            let hir = low
                .hir(&crate::grammar::json_string::json_chars(&[(c, c)]))
                .unwrap();
            let d = Dfa::build(&hir, 1 << 16, 16 << 20).unwrap();
            let encs = json_encodings(c);
            // Each encoding is accepted, and the DFA accepts no other string: count the
            // accepted strings (the language is finite).
            for e in &encs {
                let s = e.iter().fold(d.start(), |s, &b| d.next(s, b));
                assert!(d.accepting(s), "{c:?}: {e:?}");
            }
            fn count(d: &Dfa, s: u32) -> usize {
                (d.accepting(s) as usize)
                    + (0..=255u8)
                        .map(|b| d.next(s, b))
                        .filter(|&t| t != 0)
                        .map(|t| count(d, t))
                        .sum::<usize>()
            }
            assert_eq!(count(&d, d.start()), encs.len(), "{c:?}");
        }
    }
}
