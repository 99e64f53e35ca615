//! Grammars of free text that avoids some words: the text of an `auto` tool answer (which
//! must not begin a call's markup) and the reasoning section of a reasoning model (which
//! ends at its first end marker).
//!
//! The language is the complement of `Σ* (w1|w2|...) Σ*`, written as a regular
//! expression over the trie of the words' proper prefixes, so the engine compiles it to
//! one lexeme and its masks cost what any free-text lexeme costs. All words must begin
//! with the same character (true of every marker we use: `<` for tags, `{` for a JSON
//! call, `[` for Mistral's); that first character is what "starts over" a match.

use super::Expr;

fn lit(s: &str) -> Expr {
    Expr::Literal(s.as_bytes().to_vec())
}

/// Free text that never contains any of `words`, which all begin with the same character
/// `c` (the caller's words; `words` must be non-empty and each at least one character):
///
/// ```text
/// ( [^c] | (c P)* c (p x) )*  (c P)*
/// ```
///
/// where `P` is any proper prefix of a word's rest (after its `c`), and `p x` such a
/// prefix followed by a character that continues no word from it and is not `c`. A `c`
/// after a prefix starts over, so `"<too<x"` is text; a word is never completed. Exact:
/// the complement of `Σ* (w1|w2|...) Σ*`. Cost: a few dozen alternatives per word.
///
/// # Panics
///
/// Never: words that do not share the first character of `words[0]` are ignored
/// (callers pass constant marker lists; the tests check them).
pub fn text_without(words: &[&str]) -> Expr {
    let Some(first) = words.first().and_then(|w| w.chars().next()) else {
        return Expr::repeat(Expr::Chars(vec![('\0', char::MAX)]), 0, None);
    };
    let rests: Vec<Vec<char>> = words
        .iter()
        .filter_map(|w| w.strip_prefix(first))
        .map(|r| r.chars().collect())
        .collect();
    // Proper prefixes (trie nodes) and, for each, the characters that continue a word.
    let mut nodes: Vec<(String, Vec<char>)> = Vec::new();
    for r in &rests {
        for k in 0..r.len() {
            let prefix: String = r[..k].iter().collect();
            match nodes.iter_mut().find(|(p, _)| *p == prefix) {
                Some((_, next)) => {
                    if !next.contains(&r[k]) {
                        next.push(r[k]);
                    }
                }
                None => nodes.push((prefix, vec![r[k]])),
            }
        }
    }
    let c = first.to_string();
    if nodes.is_empty() {
        // A one-character word: the text is everything without that character.
        return Expr::repeat(Expr::chars_except(&[first]), 0, None);
    }
    let any_prefix = Expr::Alt(nodes.iter().map(|(p, _)| lit(p)).collect());
    let broken = Expr::Alt(
        nodes
            .iter()
            .map(|(p, next)| {
                let mut not = next.clone();
                not.push(first);
                Expr::Seq(vec![lit(p), Expr::chars_except(&not)])
            })
            .collect(),
    );
    let restarts = Expr::Repeat {
        e: Box::new(Expr::Seq(vec![lit(&c), any_prefix])),
        min: 0,
        max: None,
    };
    let unit = Expr::Alt(vec![
        Expr::chars_except(&[first]),
        Expr::Seq(vec![restarts.clone(), lit(&c), broken]),
    ]);
    Expr::Seq(vec![
        Expr::Repeat {
            e: Box::new(unit),
            min: 0,
            max: None,
        },
        restarts,
    ])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grammar::Grammar;
    use crate::handle::constraint::Constraint;
    use crate::matching::matcher::CheckResult;
    use crate::matching::matcher::Matcher;
    use crate::vocab::Vocabulary;
    use crate::Limits;
    use std::sync::Arc;

    fn constraint(words: &[&str]) -> Arc<Constraint> {
        let mut toks: Vec<Vec<u8>> = (0..=255u8).map(|b| vec![b]).collect();
        toks.push(b"<eos>".to_vec());
        let mut special = vec![false; 256];
        special.push(true);
        let v = Arc::new(Vocabulary::new("bytes", toks, special, vec![256]).unwrap());
        let g = Grammar::single("root", text_without(words));
        Constraint::new(&g, v, &Limits::default()).unwrap()
    }

    fn accepts(c: &Arc<Constraint>, text: &str) -> bool {
        let mut m = Matcher::new(c).unwrap();
        matches!(
            m.check_bytes(text.as_bytes()).unwrap(),
            CheckResult::Accepted
        )
    }

    /// The grammar against the definition (no word is a substring) on every string of
    /// length up to 5 over an alphabet that exercises prefixes and restarts.
    #[test]
    fn exactly_the_texts_without_the_words() {
        for words in [
            &["</think>"][..],
            &["<ab", "<ac", "</a"][..],
            &["{\"n"][..],
            &["[T"][..],
        ] {
            let c = constraint(words);
            let mut alphabet: Vec<char> = words.iter().flat_map(|w| w.chars()).collect();
            alphabet.sort_unstable();
            alphabet.dedup();
            alphabet.truncate(4);
            alphabet.push('x');
            let first = words[0].chars().next().unwrap();
            if !alphabet.contains(&first) {
                alphabet.push(first);
            }
            let mut level = vec![String::new()];
            let mut all = level.clone();
            for _ in 0..5 {
                level = level
                    .iter()
                    .flat_map(|t| alphabet.iter().map(move |ch| format!("{t}{ch}")))
                    .collect();
                all.extend(level.iter().cloned());
            }
            for t in &all {
                let want = !words.iter().any(|w| t.contains(w));
                assert_eq!(accepts(&c, t), want, "{words:?} {t:?}");
            }
        }
    }

    #[test]
    fn long_words_are_refused_anywhere() {
        let c = constraint(&["</think>"]);
        assert!(accepts(&c, "I think </thinking> <</think"));
        assert!(!accepts(&c, "done </think> then"));
        assert!(!accepts(&c, "<</think>"));
        assert!(accepts(&c, ""));
    }

    /// Words beginning next to the surrogate gap: the complement keeps every other code
    /// point on both sides of it.
    #[test]
    fn words_next_to_the_surrogate_gap() {
        let c = constraint(&["\u{E000}x"]);
        assert!(accepts(&c, "\u{D7FF}\u{E001}\u{E000}y"));
        assert!(!accepts(&c, "a\u{E000}x"));
    }
}
