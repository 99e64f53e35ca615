//! JSON strings at the byte level: how each character may be written (raw or escaped),
//! the string-character expressions the schema compiler builds strings from, and the
//! complement of a set of object keys as a key trie (what `additionalProperties` and
//! `propertyNames` leave to other keys). The grammar IR expands `Expr::KeyComplement`
//! with it, the compiler weighs that expansion without building it (through
//! [`KeySink`]), and the token tables walk keys with the same encodings, so all three
//! agree by construction. Uses only the grammar IR.

use super::Expr;

fn rep(e: Expr, min: u32, max: Option<u32>) -> Expr {
    Expr::Repeat {
        e: Box::new(e),
        min,
        max,
    }
}

/// The code points not in `cs` (sorted ascending), as ranges that skip the surrogates.
pub(crate) fn complement_chars(cs: &[char]) -> Vec<(char, char)> {
    let mut out = Vec::new();
    let mut next = 0u32;
    for &c in cs {
        let c = c as u32;
        if c > next {
            push_range(&mut out, next, c - 1);
        }
        next = c + 1;
    }
    push_range(&mut out, next, 0x10FFFF);
    out
}

fn push_range(out: &mut Vec<(char, char)>, a: u32, b: u32) {
    for (x, y) in [(a, b.min(0xD7FF)), (a.max(0xE000), b)] {
        if x <= y {
            if let (Some(x), Some(y)) = (char::from_u32(x), char::from_u32(y)) {
                out.push((x, y));
            }
        }
    }
}

/// The pieces a key complement's expansion is made of, built by [`key_complement_body`]:
/// the expression itself ([`BuildExpr`]) or, in the compiler, its weight and depth without
/// building it (one traversal, so the two cannot disagree).
pub(crate) trait KeySink {
    /// What one piece becomes.
    type E;
    /// `Expr::Literal(b)`.
    fn lit(&mut self, b: &[u8]) -> Self::E;
    /// An expression with no reference to `ch` (a character class, an escape).
    fn expr(&mut self, e: Expr) -> Self::E;
    /// `ch*`.
    fn any(&mut self) -> Self::E;
    /// `Expr::Seq(v)`.
    fn seq(&mut self, v: Vec<Self::E>) -> Self::E;
    /// `Expr::Alt(v)`.
    fn alt(&mut self, v: Vec<Self::E>) -> Self::E;
}

/// Builds the expansion itself, with tails of the string character it holds.
pub(crate) struct BuildExpr<'a>(pub &'a Expr);

impl KeySink for BuildExpr<'_> {
    type E = Expr;
    fn lit(&mut self, b: &[u8]) -> Expr {
        Expr::Literal(b.to_vec())
    }
    fn expr(&mut self, e: Expr) -> Expr {
        e
    }
    fn any(&mut self) -> Expr {
        rep(self.0.clone(), 0, None)
    }
    fn seq(&mut self, v: Vec<Expr>) -> Expr {
        Expr::Seq(v)
    }
    fn alt(&mut self, v: Vec<Expr>) -> Expr {
        Expr::Alt(v)
    }
}

/// The expansion of a [`crate::grammar::KeyComplement`] of `keys` (sorted, no duplicates; none gives any
/// string),
/// built by `s`: the JSON strings, quotes included, other than the keys, each written the
/// way `json_chars` writes it. Cost: O(total key characters x trie depth).
///
/// This is the node's meaning, and what a compiler without the keys lowers; the
/// compiler builds the automaton from the keys instead (`compile::keys`), which is
/// smaller and faster to build than either form below.
pub(crate) fn key_complement_body<S: KeySink>(keys: &[Vec<char>], s: &mut S) -> S::E {
    // A string differs from every key iff it is a proper prefix of the key trie that
    // is no key (`e`), or leaves the trie: a key prefix, then a character no key
    // continues with, then anything (`d`). `d` *ends* at the differing character, and
    // one shared `char*` follows it (and one shared escape tail follows a `\` that
    // differs whatever escape it starts, at nodes where no key character needs
    // escaping). With the tail inside every trie node, as in a plain trie complement,
    // the DFA held a copy of the string-character automaton per node: 5,000 states
    // and 40 ms to build for a few hundred key characters.
    //
    // The top level is one alternative per first character, each with the opening
    // quote: when the whole complement is too big for one DFA, the compiler splits it
    // there, and every part still reads a key from its quote to the end (a split
    // between `e` and `d`, or after the differing character, would put a lexeme
    // boundary inside every additional key: 30x slower masks on a schema with 100 keys).
    //
    // Trie nodes: the distinct non-empty key prefixes, counted on the sorted keys.
    let nodes: usize = keys
        .iter()
        .enumerate()
        .map(|(i, k)| {
            let shared = i.checked_sub(1).map_or(0, |p| {
                keys[p].iter().zip(k).take_while(|(a, b)| a == b).count()
            });
            k.len() - shared
        })
        .sum();
    if nodes > MAX_SHARED_TAIL_NODES {
        // Large key sets: the shared tails make a DFA too big to build at once (about 30
        // NFA states per trie node), and split in pieces they would put lexeme boundaries
        // inside keys. The plain trie complement, tails in every node, splits per
        // character instead, into pieces that each read a key to its end.
        let q = s.lit(b"\"");
        let t = key_trie_inline(keys, 0, s);
        return s.seq(vec![q, t]);
    }
    let (root, children) = key_trie_node(keys, 0, s);
    let mut top = Vec::new();
    for x in close_parts(root, s) {
        let q = s.lit(b"\"");
        top.push(s.seq(vec![q, x]));
    }
    for (c0, lo, hi) in children {
        let sub = key_trie(&keys[lo..hi], 1, s);
        let rest = close_parts(sub, s);
        if !rest.is_empty() {
            let q = s.lit(b"\"");
            let c = s.expr(json_chars(&[(c0, c0)]));
            let rest = s.alt(rest);
            top.push(s.seq(vec![q, c, rest]));
        }
    }
    s.alt(top)
}

/// The three parts of a trie node with their tails attached: `e`, `d ch* "`, and
/// `d_esc <escape tail> ch* "`.
fn close_parts<S: KeySink>(p: Parts<S::E>, s: &mut S) -> Vec<S::E> {
    let mut v = Vec::new();
    v.extend(p.e);
    if let Some(d) = p.d {
        let (any, q) = (s.any(), s.lit(b"\""));
        v.push(s.seq(vec![d, any, q]));
    }
    if let Some(d) = p.d_esc {
        // What may follow a differing `\`: every escape `json_chars` writes.
        let mut escapes = vec![short_escapes()];
        escapes.extend(u_spellings(&U_ESCAPED));
        let tail = s.expr(Expr::Alt(escapes));
        let (any, q) = (s.any(), s.lit(b"\""));
        v.push(s.seq(vec![d, tail, any, q]));
    }
    v
}

/// The byte strings `json_chars(&[(c, c)])` matches: `c` raw where a JSON string may hold
/// it unescaped, its two-character escape if it has one, and its `\uXXXX` spellings (hex
/// letters in either case; a surrogate pair past U+FFFF) when [`u_escaped`] holds it.
/// Cost: O(number of spellings): at most 16, or 256 for a character past U+FFFF.
pub(crate) fn json_encodings(c: char) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let u = c as u32;
    if u >= 0x20 && c != '"' && c != '\\' {
        out.push(c.to_string().into_bytes());
    }
    let short = match c {
        '"' => Some(b'"'),
        '\\' => Some(b'\\'),
        '/' => Some(b'/'),
        '\u{8}' => Some(b'b'),
        '\u{c}' => Some(b'f'),
        '\n' => Some(b'n'),
        '\r' => Some(b'r'),
        '\t' => Some(b't'),
        _ => None,
    };
    if let Some(e) = short {
        out.push(vec![b'\\', e]);
    }
    if u_escaped(c) {
        // `\uXXXX` (a surrogate pair past U+FFFF), every hex letter in either case.
        let units: Vec<u32> = if u > 0xFFFF {
            vec![
                0xD800 + ((u - 0x10000) >> 10),
                0xDC00 + ((u - 0x10000) & 0x3FF),
            ]
        } else {
            vec![u]
        };
        let mut spellings: Vec<Vec<u8>> = vec![Vec::new()];
        for unit in units {
            spellings
                .iter_mut()
                .for_each(|v| v.extend_from_slice(b"\\u"));
            for shift in [12, 8, 4, 0] {
                let d = (unit >> shift) & 15;
                let upper = digit(d) as u8;
                let lower = upper.to_ascii_lowercase();
                let mut next = Vec::new();
                for v in &spellings {
                    for b in if upper == lower {
                        vec![upper]
                    } else {
                        vec![upper, lower]
                    } {
                        let mut w = v.clone();
                        w.push(b);
                        next.push(w);
                    }
                }
                spellings = next;
            }
        }
        out.extend(spellings);
    }
    out
}

/// The characters that may follow `\` in a two-character JSON escape.
pub(crate) fn short_escapes() -> Expr {
    Expr::Chars(
        ['"', '/', '\\', 'b', 'f', 'n', 'r', 't']
            .iter()
            .map(|&c| (c, c))
            .collect(),
    )
}

/// Key tries with more nodes than this are complemented with a tail in every node (see
/// `key_not_in`).
const MAX_SHARED_TAIL_NODES: usize = 400;

/// The strings (the rest of a key, up to the closing quote) that differ from every key in
/// `keys` (sorted, no duplicates), all of which share their first `depth` characters: the
/// plain trie complement, with the free tail (`ch* "`) written in every node.
pub(crate) fn key_trie_inline<S: KeySink>(keys: &[Vec<char>], depth: usize, s: &mut S) -> S::E {
    let mut alts = Vec::new();
    let (ends_here, children) = trie_children(keys, depth);
    // End here, unless one of the keys ends here.
    if !ends_here {
        alts.push(s.lit(b"\""));
    }
    // A character no key continues with (raw or escaped), then anything.
    let next: Vec<char> = children.iter().map(|&(c, _, _)| c).collect();
    let others = complement_chars(&next);
    if !others.is_empty() {
        let (d, any, q) = (s.expr(json_chars(&others)), s.any(), s.lit(b"\""));
        alts.push(s.seq(vec![d, any, q]));
    }
    for (c0, lo, hi) in children {
        let rest = key_trie_inline(&keys[lo..hi], depth + 1, s);
        let c = s.expr(json_chars(&[(c0, c0)]));
        alts.push(s.seq(vec![c, rest]));
    }
    s.alt(alts)
}

/// A child of a key-trie node: the next character and the range of the (sorted) keys
/// that continue with it.
type TrieChild = (char, usize, usize);

/// For the trie node of `keys` (sorted, no duplicates, all sharing their first `depth`
/// characters): whether a key ends there, and each next character (ascending) with the
/// range of the keys that continue with it. Cost: O(keys).
fn trie_children(keys: &[Vec<char>], depth: usize) -> (bool, Vec<TrieChild>) {
    // The key that ends here, if any, sorts first.
    let ends_here = keys.first().is_some_and(|k| k.len() == depth);
    let mut children: Vec<TrieChild> = Vec::new();
    for (i, k) in keys.iter().enumerate().skip(ends_here as usize) {
        match children.last_mut() {
            Some((c, _, hi)) if *c == k[depth] => *hi = i + 1,
            _ => children.push((k[depth], i, i + 1)),
        }
    }
    (ends_here, children)
}

/// The parts of a key-trie complement below one trie node (see `key_complement_body`):
/// strings that end inside the trie (`e`), that end right after a character no key
/// continues with (`d`), and that end right after a `\` that differs whatever escape
/// follows (`d_esc`).
struct Parts<E> {
    e: Option<E>,
    d: Option<E>,
    d_esc: Option<E>,
}

/// `v` as one alternation (`None` when empty).
fn alt_of<S: KeySink>(v: Vec<S::E>, s: &mut S) -> Option<S::E> {
    match v.len() {
        0 => None,
        1 => v.into_iter().next(),
        _ => Some(s.alt(v)),
    }
}

/// The exits of the trie node of `keys` (sorted, sharing their first `depth` characters),
/// and its children: each next character with the range of keys that continue with it.
fn key_trie_node<S: KeySink>(
    keys: &[Vec<char>],
    depth: usize,
    s: &mut S,
) -> (Parts<S::E>, Vec<TrieChild>) {
    let (mut e, mut d, mut d_esc) = (None, None, None);
    let (ends_here, children) = trie_children(keys, depth);
    if !ends_here {
        e = Some(s.lit(b"\""));
    }
    let next: Vec<char> = children.iter().map(|&(c, _, _)| c).collect();
    let others = complement_chars(&next);
    if next.iter().any(|&c| !spelled_raw_only(c)) {
        // An escape may continue a key here: the differing ones, spelled out.
        if !others.is_empty() {
            d = Some(s.expr(json_chars(&others)));
        }
    } else {
        d = Some(s.expr(Expr::Chars(json_raw_chars(&others))));
        d_esc = Some(s.lit(b"\\"));
    }
    (Parts { e, d, d_esc }, children)
}

/// The parts of the trie complement below the node of `keys` (sorted, sharing their first
/// `depth` characters) at `depth`, its subtree included.
fn key_trie<S: KeySink>(keys: &[Vec<char>], depth: usize, s: &mut S) -> Parts<S::E> {
    let (own, children) = key_trie_node(keys, depth, s);
    let mut e: Vec<S::E> = own.e.into_iter().collect();
    let mut d: Vec<S::E> = own.d.into_iter().collect();
    let mut d_esc: Vec<S::E> = own.d_esc.into_iter().collect();
    for (c0, lo, hi) in children {
        let child = key_trie(&keys[lo..hi], depth + 1, s);
        let c = json_chars(&[(c0, c0)]);
        for (part, out) in [
            (child.e, &mut e),
            (child.d, &mut d),
            (child.d_esc, &mut d_esc),
        ] {
            if let Some(x) = part {
                let c = s.expr(c.clone());
                out.push(s.seq(vec![c, x]));
            }
        }
    }
    Parts {
        e: alt_of(e, s),
        d: alt_of(d, s),
        d_esc: alt_of(d_esc, s),
    }
}

/// The characters of `ranges` that a JSON string may hold unescaped (not `"`, `\` or
/// controls), as ranges.
fn json_raw_chars(ranges: &[(char, char)]) -> Vec<(char, char)> {
    let mut raw = Vec::new();
    for &(a, b) in ranges {
        let (a32, b32) = (a as u32, b as u32);
        for (x, y) in [
            (a32.max(0x20), b32.min(0x21)),
            (a32.max(0x23), b32.min(0x5B)),
            (a32.max(0x5D), b32),
        ] {
            if x <= y {
                push_range(&mut raw, x, y);
            }
        }
    }
    raw
}

/// Whether JSON encoders write `c` as a `\uXXXX` escape, so that [`json_chars`] spells it
/// that way too: controls, every non-ASCII character (an `ensure_ascii` encoder: Python's
/// `json.dumps` by default, Java's and .NET's defaults), and the ASCII punctuation that
/// HTML-safe encoders escape (Go's `<`, `>`, `&`; .NET's `"`, `'`, `+`, `` ` `` too; `/`
/// and `\`). ASCII letters, digits, the space and the other punctuation are never
/// escaped by an encoder, and written raw only: string constants and keys made of them
/// stay one literal each. Cost: O(1).
pub(crate) fn u_escaped(c: char) -> bool {
    let u = c as u32;
    !(0x20..0x7F).contains(&u) || matches!(c, '"' | '&' | '\'' | '+' | '/' | '<' | '>' | '\\' | '`')
}

/// The code points [`u_escaped`] holds, as ranges (the surrogates excluded).
const U_ESCAPED: [(u32, u32); 11] = [
    (0x00, 0x1F),
    (0x22, 0x22),
    (0x26, 0x27),
    (0x2B, 0x2B),
    (0x2F, 0x2F),
    (0x3C, 0x3C),
    (0x3E, 0x3E),
    (0x5C, 0x5C),
    (0x60, 0x60),
    (0x7F, 0xD7FF),
    (0xE000, 0x10FFFF),
];

/// Whether [`json_chars`] spells `c` as itself alone: held raw by a JSON string, with no
/// short or `\u` escape. Cost: O(1).
pub(crate) fn spelled_raw_only(c: char) -> bool {
    c >= ' ' && !u_escaped(c)
}

/// Hex digits `a..=b` (values 0 to 15), letters in either case.
fn hex_digits(a: u32, b: u32) -> Expr {
    let mut r: Vec<(char, char)> = Vec::new();
    if a <= 9 {
        r.push((digit(a), digit(b.min(9))));
    }
    if b >= 10 {
        let (x, y) = (a.max(10), b);
        r.push((digit(x), digit(y)));
        r.push((digit(x).to_ascii_lowercase(), digit(y).to_ascii_lowercase()));
    }
    if r.len() == 1 && r[0].0 == r[0].1 {
        return Expr::Literal(r[0].0.to_string().into_bytes());
    }
    Expr::Chars(r)
}

fn digit(v: u32) -> char {
    char::from_digit(v, 16).map_or('0', |c| c.to_ascii_uppercase())
}

/// The `digits`-digit hex spellings of the values `lo..=hi`: one alternative per run of
/// shared leading digits (at most `2 * digits - 1`), as in a decimal range automaton.
fn hex_range(lo: u32, hi: u32, digits: u32) -> Vec<Expr> {
    if digits == 0 {
        return vec![];
    }
    let w = 16u32.pow(digits - 1);
    let (dl, dh, rl, rh) = (lo / w, hi / w, lo % w, hi % w);
    // The digits after the first: values `lo..=hi` of `digits - 1` digits.
    let rest = |lo: u32, hi: u32| -> Vec<Expr> {
        if digits == 1 {
            vec![]
        } else if lo == 0 && hi == w - 1 {
            (1..digits).map(|_| hex_digits(0, 15)).collect()
        } else {
            vec![hex_alt(lo, hi, digits - 1)]
        }
    };
    let with = |first: Expr, tail: Vec<Expr>| {
        if tail.is_empty() {
            return first;
        }
        let mut v = vec![first];
        v.extend(tail);
        Expr::Seq(v)
    };
    if dl == dh {
        return vec![with(hex_digits(dl, dl), rest(rl, rh))];
    }
    let mut alts = Vec::new();
    let (mut a, mut b) = (dl, dh);
    if rl != 0 {
        alts.push(with(hex_digits(dl, dl), rest(rl, w - 1)));
        a += 1;
    }
    if rh != w - 1 {
        alts.push(with(hex_digits(dh, dh), rest(0, rh)));
        b -= 1;
    }
    if a <= b {
        alts.push(with(hex_digits(a, b), rest(0, w - 1)));
    }
    alts
}

/// [`hex_range`] as one expression.
fn hex_alt(lo: u32, hi: u32, digits: u32) -> Expr {
    let mut v = hex_range(lo, hi, digits);
    if v.len() == 1 {
        v.pop().unwrap_or(Expr::Seq(vec![]))
    } else {
        Expr::Alt(v)
    }
}

/// The escapes after a `\` that spell the code points of `ranges` (`lo..=hi`, none a
/// surrogate) as `u` and four hex digits, or a surrogate pair for those past U+FFFF.
fn u_spellings(ranges: &[(u32, u32)]) -> Vec<Expr> {
    let mut out = Vec::new();
    let u = || Expr::Literal(b"u".to_vec());
    for &(lo, hi) in ranges {
        if lo <= 0xFFFF {
            out.push(Expr::Seq(vec![u(), hex_alt(lo, hi.min(0xFFFF), 4)]));
        }
        if hi >= 0x10000 {
            let split = |c: u32| {
                (
                    0xD800 + ((c - 0x10000) >> 10),
                    0xDC00 + ((c - 0x10000) & 0x3FF),
                )
            };
            let ((h1, l1), (h2, l2)) = (split(lo.max(0x10000)), split(hi));
            let pair = |h: (u32, u32), l: (u32, u32)| {
                Expr::Seq(vec![
                    u(),
                    hex_alt(h.0, h.1, 4),
                    Expr::Literal(b"\\u".to_vec()),
                    hex_alt(l.0, l.1, 4),
                ])
            };
            if h1 == h2 {
                out.push(pair((h1, h1), (l1, l2)));
            } else {
                out.push(pair((h1, h1), (l1, 0xDFFF)));
                if h1 + 1 < h2 {
                    out.push(pair((h1 + 1, h2 - 1), (0xDC00, 0xDFFF)));
                }
                out.push(pair((h2, h2), (0xDC00, l2)));
            }
        }
    }
    out
}

/// The code points of `ranges` in `u_set`, as ranges.
fn u_escaped_in(ranges: &[(char, char)], u_set: &[(u32, u32)]) -> Vec<(u32, u32)> {
    let mut out = Vec::new();
    for &(a, b) in ranges {
        for &(x, y) in u_set {
            let (lo, hi) = ((a as u32).max(x), (b as u32).min(y));
            if lo <= hi {
                out.push((lo, hi));
            }
        }
    }
    out
}

/// Characters of `ranges` in their JSON string encodings: raw where allowed, their short
/// escapes (`\"`, `\\`, `\/`, `\n`...), and `\uXXXX` (a surrogate pair past U+FFFF,
/// hex digits in either case) for the characters encoders escape ([`u_escaped`]).
pub(crate) fn json_chars(ranges: &[(char, char)]) -> Expr {
    json_chars_with(ranges, &U_ESCAPED)
}

/// The code points a `pattern`'s characters may be written as `\uXXXX`: the controls
/// only. A class like `\S` spans most of Unicode, and its every `\uXXXX` spelling would
/// multiply the states of a repeated class (a word-count pattern's DFA went from one
/// lexeme to six, 1.5 MB); a pattern's string spells other characters raw or with their
/// short escapes (a known gap: `"\u00e9"` does not match `^é$` here).
pub(crate) const PATTERN_U_ESCAPED: [(u32, u32); 1] = [(0x00, 0x1F)];

/// [`json_chars`] with `\uXXXX` spellings for the code points of `u_set` only.
pub(crate) fn json_chars_with(ranges: &[(char, char)], u_set: &[(u32, u32)]) -> Expr {
    let raw = json_raw_chars(ranges);
    // Bytes after `\` of the two-byte escapes: one character class rather than one
    // alternative per character, which keeps the NFA of a key-trie complement (every
    // node has the complement of a few characters) small.
    let mut short: Vec<(char, char)> = Vec::new();
    for &(a, b) in ranges {
        let (a32, b32) = (a as u32, b as u32);
        let has = |c: u32| a32 <= c && c <= b32;
        for (c, e) in [(0x22, '"'), (0x5C, '\\'), (0x2F, '/')] {
            if has(c) {
                short.push((e, e));
            }
        }
        for (c, e) in [
            (0x08, 'b'),
            (0x0C, 'f'),
            (0x0A, 'n'),
            (0x0D, 'r'),
            (0x09, 't'),
        ] {
            if has(c) {
                short.push((e, e));
            }
        }
    }
    let mut after_backslash = Vec::new();
    if !short.is_empty() {
        after_backslash.push(Expr::Chars(short));
    }
    after_backslash.extend(u_spellings(&u_escaped_in(ranges, u_set)));
    let mut alts = Vec::new();
    if !raw.is_empty() {
        alts.push(Expr::Chars(raw));
    }
    match after_backslash.len() {
        0 => {}
        1 => alts.push(Expr::Seq(vec![
            Expr::Literal(b"\\".to_vec()),
            after_backslash.pop().unwrap_or(Expr::Seq(vec![])),
        ])),
        _ => alts.push(Expr::Seq(vec![
            Expr::Literal(b"\\".to_vec()),
            Expr::Alt(after_backslash),
        ])),
    }
    if let [Expr::Chars(r)] = &alts[..] {
        if r.len() == 1 && r[0].0 == r[0].1 {
            return Expr::Literal(r[0].0.to_string().into_bytes());
        }
    }
    if alts.len() == 1 {
        alts.pop().unwrap()
    } else {
        Expr::Alt(alts)
    }
}
