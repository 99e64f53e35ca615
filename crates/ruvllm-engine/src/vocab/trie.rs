//! The token trie: every non-special token's bytes in one preorder array, with per-node
//! summaries of what lies below (byte groups, character groups past ASCII, whether all of
//! it is plain JSON-string text) that let a table walk take a subtree whole. Built once
//! per vocabulary; knows nothing of grammars.
//!
//! Part of the vocabulary layer. Owns: `TokenTrie` and its per-node summaries. Uses:
//! `byteset` only.

/// A pre-order trie of token byte strings. Node 0 is the root (the empty prefix); node `n`'s
/// subtree is `n..end(n)`; its children are `n+1`, then `end(child)` for each next sibling.
/// Memory: about 41 bytes per node plus 4 per token, and one bitmap of the vocabulary per
/// `plain` language; a 128k vocabulary has ~300k nodes.
///
/// Nodes with many children (at least `WIDE_CHILDREN`; the root and a few hundred others)
/// also keep the set of their children's bytes and the children in byte order, so that a
/// walk that may read only a few bytes there (a DFA state inside a number) finds those
/// children without scanning all of them (see `TokenTrie::wide`).
#[derive(Debug, Clone)]
pub struct TokenTrie {
    pub(super) byte: Vec<u8>,
    pub(super) end: Vec<u32>,
    /// Per node: its parent (the root is its own).
    pub(super) parent: Vec<u32>,
    pub(super) tok_start: Vec<u32>,
    pub(super) toks: Vec<u32>,
    pub(super) depth: Vec<u16>,
    /// The longest token in bytes.
    pub(super) max_depth: usize,
    /// Per [`plain`] language and node: the state after its path ([`plain::BAD`] when
    /// the path is not in the language).
    pub(super) pstate: [Vec<u8>; 2],
    /// Per language and node: the depth of the deepest node of its subtree when every
    /// node of the subtree is in the language (0 otherwise; such a subtree is at least 1
    /// deep).
    pub(super) plain_depth: [Vec<u16>; 2],
    /// Per language: the bitmap (by token id, one bit per id of the vocabulary) of the
    /// tokens whose bytes are in it.
    pub(super) plain_tokens: [Vec<u32>; 2],
    /// Per language: the ids of its tokens, longest first, and for each length `d` how
    /// many of them are longer than `d` (see [`TokenTrie::plain_seed`]).
    pub(super) plain_by_len: [Vec<u32>; 2],
    pub(super) plain_longer: [Vec<u32>; 2],
    /// The same by characters started (bytes that are not UTF-8 continuation bytes, so a
    /// character a token splits counts): the ids, most characters first, and for each
    /// count `k` how many have more than `k` (see [`TokenTrie::plain_char_seed`]).
    pub(super) plain_by_chars: [Vec<u32>; 2],
    pub(super) plain_more_chars: [Vec<u32>; 2],
    /// Per node: its index in `wide`, or [`NOT_WIDE`].
    pub(super) wide_of: Vec<u16>,
    /// Per wide node: the bytes of its children, and where its children start in
    /// `wide_children` (one per byte of the set, in byte order).
    pub(super) wide: Vec<(crate::byteset::ByteSet, u32)>,
    pub(super) wide_children: Vec<u32>,
    /// Per node: the index in `below_sets` of the [`byte_group`]s of the bytes strictly
    /// below it (see [`TokenTrie::below`]), or [`BELOW_ANY`]. The sets are few (23,914
    /// distinct among Llama 3.1's 274,521 nodes, about 33,600 among Gemma 2's 502,618), so a 2-byte index
    /// and a table that stays in cache replace 16 bytes per node, whose loads were a
    /// cache miss per visited node and over a quarter of a table's walk.
    pub(super) below_ix: Vec<u16>,
    pub(super) below_sets: Vec<u128>,
    /// Per node: the index in `chars_sets` of the [`char_groups`] of the characters
    /// below it (see [`TokenTrie::chars_below`]), or [`BELOW_ANY`].
    pub(super) chars_ix: Vec<u16>,
    pub(super) chars_sets: Vec<u64>,
    /// The vocabulary's characters past ASCII, by group (see [`char_groups`]): group `g`'s
    /// are `group_chars[group_start[g]..group_start[g + 1]]`, in code point order.
    pub(super) group_chars: Vec<char>,
    pub(super) group_start: Vec<u32>,
}

/// `below_ix` of a node whose set did not get an index (past 65,535 distinct sets): read
/// as every group, which only makes the walks visit that subtree (exact, slower).
pub(super) const BELOW_ANY: u16 = u16::MAX;

/// Each value's index in a table of the distinct values, in order of first appearance;
/// past `cap` distinct values, the rest get [`BELOW_ANY`]. Cost: a hash lookup per value
/// (once per vocabulary: 14 ms for Llama 3.1's trie, 25 ms for Gemma 2's, release build).
pub(super) fn index_sets<T: Copy + Eq + std::hash::Hash>(
    values: &[T],
    cap: usize,
) -> (Vec<u16>, Vec<T>) {
    let mut index: std::collections::HashMap<T, u16> = std::collections::HashMap::new();
    let mut sets: Vec<T> = Vec::new();
    let cap = cap.min(BELOW_ANY as usize);
    let ix = values
        .iter()
        .map(|&g| {
            if let Some(&i) = index.get(&g) {
                return i;
            }
            if sets.len() >= cap {
                return BELOW_ANY;
            }
            let i = sets.len() as u16;
            sets.push(g);
            index.insert(g, i);
            i
        })
        .collect();
    (ix, sets)
}

/// The bit of [`TokenTrie::chars_below`] that says some path below is not whole UTF-8
/// characters (the other 63 bits are [`char_groups`]).
pub(crate) const CHARS_IRREGULAR: u64 = 1 << 63;

/// The groups [`TokenTrie::chars_below`] has for characters past ASCII.
pub(super) const CHAR_GROUPS: usize = 63;

/// Splits a vocabulary's characters past ASCII (with the number of tokens each is in)
/// into at most 63 groups: by Unicode general category (letters, marks, numbers,
/// punctuation, symbols, separators, the rest), each category into runs of code points
/// of about equal weight, the groups shared out by weight (every category present gets
/// one). Returns each character's group and the characters by group (the group's start
/// in them, one more entry than groups).
///
/// Why: a token table takes a subtree of the trie whole when every character below it
/// keeps the lexeme in its loop, which is known per group, one check of its characters.
/// A class is mostly whole categories (`\p{L}`, `\w`) or a script's letters, so groups
/// that do not mix categories and split scripts apart are either wholly inside most
/// classes or wholly outside them (`Github_hard---o79409`'s class of letters, numbers
/// and spaces of every script leaves out only the groups of marks, punctuation, symbols
/// and control characters, in a model of Llama 3.1's trie). Cost: a sort of the
/// characters and a binary search of the category tables per character (once per
/// vocabulary).
pub(super) fn char_groups(
    weight: &std::collections::HashMap<char, u32>,
) -> (std::collections::HashMap<char, u8>, Vec<char>, Vec<u32>) {
    let tables: Vec<Vec<(char, char)>> = ["L", "M", "N", "P", "S", "Z"]
        .iter()
        .map(|c| category_ranges(c))
        .collect();
    let category = |ch: char| -> usize {
        tables
            .iter()
            .position(|r| {
                r.binary_search_by(|&(a, b)| {
                    if b < ch {
                        std::cmp::Ordering::Less
                    } else if a > ch {
                        std::cmp::Ordering::Greater
                    } else {
                        std::cmp::Ordering::Equal
                    }
                })
                .is_ok()
            })
            .unwrap_or(tables.len())
    };
    let mut by_cat: Vec<Vec<(char, u32)>> = vec![Vec::new(); tables.len() + 1];
    for (&ch, &w) in weight {
        by_cat[category(ch)].push((ch, w));
    }
    let present = by_cat.iter().filter(|v| !v.is_empty()).count();
    let total: u64 = weight.values().map(|&w| w as u64).sum();
    let spare = CHAR_GROUPS.saturating_sub(present) as u64;
    let mut group_of = std::collections::HashMap::with_capacity(weight.len());
    let mut groups: Vec<Vec<char>> = Vec::new();
    for chars in &mut by_cat {
        if chars.is_empty() {
            continue;
        }
        chars.sort_unstable();
        let w: u64 = chars.iter().map(|&(_, w)| w as u64).sum();
        let k = (1 + spare * w / total.max(1)) as usize;
        let k = k.min(CHAR_GROUPS - groups.len().min(CHAR_GROUPS)).max(1);
        let base = groups.len().min(CHAR_GROUPS - 1);
        let mut seen = 0u64;
        for &(ch, cw) in chars.iter() {
            let g = base + ((seen * k as u64 / w.max(1)) as usize).min(k - 1);
            let g = g.min(CHAR_GROUPS - 1);
            while groups.len() <= g {
                groups.push(Vec::new());
            }
            groups[g].push(ch);
            group_of.insert(ch, g as u8);
            seen += cw as u64;
        }
    }
    let mut start = vec![0u32];
    let mut flat = Vec::with_capacity(weight.len());
    for g in &mut groups {
        g.sort_unstable();
        flat.extend_from_slice(g);
        start.push(flat.len() as u32);
    }
    (group_of, flat, start)
}

/// The code point ranges of Unicode general category `cat` (`L`, `M`, ...), in order,
/// from `regex-syntax`'s tables. Cost: one parse of `\p{cat}`.
pub(super) fn category_ranges(cat: &str) -> Vec<(char, char)> {
    use regex_syntax::hir::{Class, HirKind};
    match regex_syntax::parse(&format!("\\p{{{cat}}}")).map(|h| h.into_kind()) {
        Ok(HirKind::Class(Class::Unicode(c))) => {
            c.ranges().iter().map(|r| (r.start(), r.end())).collect()
        }
        _ => Vec::new(),
    }
}

/// The group of a byte in [`TokenTrie::below`]: every byte of plain ASCII text (the
/// space to DEL, `"` and `\\` aside) its own bit (94), the other ASCII bytes (controls,
/// `"`, `\\`) one bit, UTF-8 continuation bytes one, and the lead bytes by the scripts
/// they start (31 bits, up to bit 126). A lead byte that starts many of Llama 3.1's tokens
/// has a bit of its own (`0xc2`-`0xc5`, `0xce`, `0xcf`, `0xd0`, `0xd1`, `0xd8`, `0xd9`,
/// `0xe0`-`0xed`: 257 to 6,254 tokens each); the rare ones share (`0xc6-0xcd`,
/// `0xd2-0xd7`, `0xda-0xdb`, `0xdc-0xdf`, `0xee-0xef`, `0xf0-0xf4`, and the bytes UTF-8
/// never uses). A group shared by several bytes only makes a subtree look as if it held
/// all of them: with one group for `0xd0-0xdf`, a pattern whose class leaves out a few
/// characters of `0xd2` had every Cyrillic subtree (`0xd0`, `0xd1`) visited by its token
/// tables (`Github_hard---o79409`: 28,873 trie nodes per table, 16,361 with these groups).
pub(crate) const fn byte_group(b: u8) -> u128 {
    let bit = match b {
        b'"' | b'\\' | 0..=0x1f => 94,
        // 0x20..=0x7f but the two above: 94 bits.
        0x20..=0x7f => b - 0x20 - (b > b'"') as u8 - (b > b'\\') as u8,
        0x80..=0xbf => 95,
        0xc2 => 96,
        0xc3 => 97,
        0xc4 => 98,
        0xc5 => 108,
        0xc6..=0xcd => 109,
        0xce => 110,
        0xcf => 111,
        0xd0 => 99,
        0xd1 => 112,
        0xd2..=0xd7 => 113,
        0xd8 => 114,
        0xd9 => 115,
        0xda | 0xdb => 116,
        0xdc..=0xdf => 117,
        0xe0 => 100,
        0xe1 => 101,
        0xe2 => 102,
        0xe3 => 103,
        0xe4 => 104,
        0xe5 => 118,
        0xe6 => 119,
        0xe7 => 120,
        0xe8 => 121,
        0xe9 => 122,
        0xea => 105,
        0xeb => 123,
        0xec => 124,
        0xed => 125,
        0xee | 0xef => 126,
        0xf0..=0xf4 => 106,
        0xc0 | 0xc1 | 0xf5..=0xff => 107,
    };
    1 << bit
}

/// Children from which a node keeps an index of them (see [`TokenTrie`]).
pub(crate) const WIDE_CHILDREN: usize = 16;
/// `wide_of` of a node without the index.
pub(super) const NOT_WIDE: u16 = u16::MAX;

/// Plain JSON string text as a byte automaton: characters that need no escape (no `"`,
/// `\` or control character), as valid UTF-8 without surrogates, where a path may end
/// inside a character (tokens split characters). Token tables use it to accept whole
/// subtrees of the token trie at once where a lexeme state provably allows every plain
/// text of the subtree's depth (see [`crate::tables`]): most of a vocabulary is plain text,
/// and the inside of every JSON string allows it.
///
/// A second language, from [`plain::START_NO_LS`], is the same text without U+2028 and
/// U+2029: what a schema `pattern` with an ECMAScript `.` allows (the dot refuses the
/// line terminators, `\n` and `\r` being control characters already), so that strings
/// with patterns such as `^.*$` or `.{1,80}` get the shortcut too.
pub(crate) mod plain {
    /// Between characters (JSON string text).
    pub const START: u8 = 0;
    /// Between characters (JSON string text without U+2028 and U+2029).
    pub const START_NO_LS: u8 = 8;
    /// Number of states other than `BAD` (`0..STATES`), both languages.
    pub const STATES: u8 = 18;
    /// Not plain text.
    pub const BAD: u8 = 255;
    /// The start state of each language, by its index in the trie's per-language arrays.
    pub const STARTS: [u8; 2] = [START, START_NO_LS];

    /// The state after byte `b` in state `p`.
    #[inline]
    pub const fn next(p: u8, b: u8) -> u8 {
        if p >= START_NO_LS {
            return next_no_ls(p, b);
        }
        match p {
            START => match b {
                b'"' | b'\\' => BAD,
                0x20..=0x7f => START,
                0xc2..=0xdf => 1,
                0xe0 => 3,
                0xe1..=0xec | 0xee..=0xef => 2,
                0xed => 4,
                0xf0 => 6,
                0xf1..=0xf3 => 5,
                0xf4 => 7,
                _ => BAD,
            },
            1 if matches!(b, 0x80..=0xbf) => START,
            2 if matches!(b, 0x80..=0xbf) => 1,
            3 if matches!(b, 0xa0..=0xbf) => 1,
            4 if matches!(b, 0x80..=0x9f) => 1,
            5 if matches!(b, 0x80..=0xbf) => 2,
            6 if matches!(b, 0x90..=0xbf) => 2,
            7 if matches!(b, 0x80..=0x8f) => 2,
            _ => BAD,
        }
    }

    /// [`next`] in the language without U+2028 and U+2029 (E2 80 A8, E2 80 A9): states
    /// 8..18 mirror 0..8, plus 16 (after E2) and 17 (after E2 80).
    const fn next_no_ls(p: u8, b: u8) -> u8 {
        let cont = matches!(b, 0x80..=0xbf);
        match p {
            8 => match b {
                b'"' | b'\\' => BAD,
                0x20..=0x7f => 8,
                0xc2..=0xdf => 9,
                0xe0 => 11,
                0xe2 => 16,
                0xe1 | 0xe3..=0xec | 0xee..=0xef => 10,
                0xed => 12,
                0xf0 => 14,
                0xf1..=0xf3 => 13,
                0xf4 => 15,
                _ => BAD,
            },
            9 if cont => 8,
            10 if cont => 9,
            11 if matches!(b, 0xa0..=0xbf) => 9,
            12 if matches!(b, 0x80..=0x9f) => 9,
            13 if cont => 10,
            14 if matches!(b, 0x90..=0xbf) => 10,
            15 if matches!(b, 0x80..=0x8f) => 10,
            16 if b == 0x80 => 17,
            16 if cont => 9,
            17 if b == 0xa8 || b == 0xa9 => BAD,
            17 if cont => 8,
            _ => BAD,
        }
    }
}

impl TokenTrie {
    /// Approximate heap bytes.
    pub fn memory(&self) -> usize {
        self.byte.len()
            + (self.end.len() + self.tok_start.len() + self.toks.len()) * 4
            + self.depth.len() * 2
            + self.pstate.iter().map(Vec::len).sum::<usize>()
            + self.plain_depth.iter().map(|v| v.len() * 2).sum::<usize>()
            + self.plain_tokens.iter().map(|v| v.len() * 4).sum::<usize>()
            + self.plain_by_len.iter().map(|v| v.len() * 4).sum::<usize>()
            + self.plain_longer.iter().map(|v| v.len() * 4).sum::<usize>()
            + self
                .plain_by_chars
                .iter()
                .map(|v| v.len() * 4)
                .sum::<usize>()
            + self
                .plain_more_chars
                .iter()
                .map(|v| v.len() * 4)
                .sum::<usize>()
            + self.parent.len() * 4
            + self.wide_of.len() * 2
            + self.wide.len() * 36
            + self.wide_children.len() * 4
            + self.below_ix.len() * 2
            + self.below_sets.len() * 16
            + self.chars_ix.len() * 2
            + self.chars_sets.len() * 8
            + self.group_chars.len() * 4
            + self.group_start.len() * 4
    }

    /// Builds the trie over the non-special, non-empty tokens. Cost: sort + O(total bytes).
    pub fn build(tokens: &[Vec<u8>], special: &[bool]) -> Self {
        let mut ids: Vec<u32> = (0..tokens.len() as u32)
            .filter(|&i| !special[i as usize] && !tokens[i as usize].is_empty())
            .collect();
        ids.sort_by(|&a, &b| tokens[a as usize].cmp(&tokens[b as usize]).then(a.cmp(&b)));
        let mut t = TokenTrie {
            byte: vec![0],
            end: vec![0],
            parent: vec![0],
            tok_start: vec![0],
            toks: Vec::with_capacity(ids.len()),
            depth: vec![0],
            max_depth: 0,
            pstate: plain::STARTS.map(|p| vec![p]),
            plain_depth: [Vec::new(), Vec::new()],
            plain_tokens: [Vec::new(), Vec::new()],
            plain_by_len: [Vec::new(), Vec::new()],
            plain_longer: [Vec::new(), Vec::new()],
            plain_by_chars: [Vec::new(), Vec::new()],
            plain_more_chars: [Vec::new(), Vec::new()],
            wide_of: Vec::new(),
            wide: Vec::new(),
            wide_children: Vec::new(),
            below_ix: Vec::new(),
            below_sets: Vec::new(),
            chars_ix: Vec::new(),
            chars_sets: Vec::new(),
            group_chars: Vec::new(),
            group_start: Vec::new(),
        };
        // Stack of open nodes: path[d] is the node at depth d (path[0] = root).
        let mut path: Vec<u32> = vec![0];
        let mut prev: &[u8] = &[];
        for &id in &ids {
            let cur = tokens[id as usize].as_slice();
            let lcp = prev.iter().zip(cur).take_while(|(a, b)| a == b).count();
            // Close nodes deeper than the common prefix.
            while path.len() > lcp + 1 {
                let n = path.pop().unwrap();
                t.end[n as usize] = t.byte.len() as u32;
            }
            for (d, &b) in cur.iter().enumerate().skip(lcp) {
                let n = t.byte.len() as u32;
                t.byte.push(b);
                t.end.push(0);
                t.parent.push(*path.last().unwrap());
                t.tok_start.push(t.toks.len() as u32);
                t.depth.push((d + 1).min(u16::MAX as usize) as u16);
                for ps in &mut t.pstate {
                    let parent = ps[*path.last().unwrap() as usize];
                    ps.push(if parent == plain::BAD {
                        plain::BAD
                    } else {
                        plain::next(parent, b)
                    });
                }
                path.push(n);
            }
            t.toks.push(id);
            prev = cur;
        }
        while let Some(n) = path.pop() {
            t.end[n as usize] = t.byte.len() as u32;
        }
        t.tok_start.push(t.toks.len() as u32);
        t.max_depth = t.depth.iter().copied().max().unwrap_or(0) as usize;
        // Plain subtrees, bottom-up: a node's subtree is its own node then its children's
        // subtrees, so in reverse pre-order every child is done before its parent.
        let n = t.byte.len();
        // Characters started on each node's path (parents come first in pre-order).
        let mut chars = vec![0u16; n];
        for v in 1..n {
            let started = !(0x80..=0xbf).contains(&t.byte[v]);
            chars[v] = chars[t.parent[v] as usize].saturating_add(started as u16);
        }
        for lang in 0..2 {
            let pstate = &t.pstate[lang];
            let mut plain_depth = vec![0u16; n];
            for v in (1..n).rev() {
                if pstate[v] == plain::BAD {
                    continue;
                }
                let mut deepest = t.depth[v];
                let mut all = true;
                let mut c = v + 1;
                while c < t.end[v] as usize {
                    if plain_depth[c] == 0 {
                        all = false;
                        break;
                    }
                    deepest = deepest.max(plain_depth[c]);
                    c = t.end[c] as usize;
                }
                if all {
                    plain_depth[v] = deepest.max(1);
                }
            }
            let mut bits = vec![0u32; tokens.len().div_ceil(32)];
            for (v, &p) in pstate.iter().enumerate().skip(1) {
                if p != plain::BAD {
                    for &id in &t.toks[t.tok_start[v] as usize..t.tok_start[v + 1] as usize] {
                        bits[(id >> 5) as usize] |= 1 << (id & 31);
                    }
                }
            }
            t.plain_depth[lang] = plain_depth;
            t.plain_tokens[lang] = bits;
            let mut by_len: Vec<(u16, u32)> = Vec::new();
            for (v, &p) in pstate.iter().enumerate().skip(1) {
                if p != plain::BAD {
                    for &id in &t.toks[t.tok_start[v] as usize..t.tok_start[v + 1] as usize] {
                        by_len.push((t.depth[v], id));
                    }
                }
            }
            by_len.sort_unstable_by(|a, b| b.cmp(a));
            t.plain_longer[lang] = (0..=t.max_depth)
                .map(|d| by_len.partition_point(|&(len, _)| len as usize > d) as u32)
                .collect();
            t.plain_by_len[lang] = by_len.into_iter().map(|(_, id)| id).collect();
            let mut by_chars: Vec<(u16, u32)> = Vec::new();
            for (v, &p) in pstate.iter().enumerate().skip(1) {
                if p != plain::BAD {
                    for &id in &t.toks[t.tok_start[v] as usize..t.tok_start[v + 1] as usize] {
                        by_chars.push((chars[v], id));
                    }
                }
            }
            by_chars.sort_unstable_by(|a, b| b.cmp(a));
            t.plain_more_chars[lang] = (0..=t.max_depth)
                .map(|k| by_chars.partition_point(|&(c, _)| c as usize > k) as u32)
                .collect();
            t.plain_by_chars[lang] = by_chars.into_iter().map(|(_, id)| id).collect();
        }
        t.index_wide_nodes();
        // Children before parents (reverse pre-order), so a node's set is complete when
        // it is added to its parent's.
        let mut below = vec![0u128; n];
        for v in (1..n).rev() {
            below[t.parent[v] as usize] |= below[v] | byte_group(t.byte[v]);
        }
        (t.below_ix, t.below_sets) = index_sets(&below, BELOW_ANY as usize);
        t.index_chars(tokens, &ids);
        t
    }

    /// Groups the characters past ASCII of the tokens `ids` (see [`char_groups`]) and
    /// gives every node the groups of the characters below it, [`CHARS_IRREGULAR`] where
    /// some token below does not read as whole UTF-8 characters from there. Cost: a UTF-8
    /// decode of every token, then a pass over the nodes in which each reads the nodes of
    /// the characters that start at its children (at most three levels down).
    fn index_chars(&mut self, tokens: &[Vec<u8>], ids: &[u32]) {
        let mut weight: std::collections::HashMap<char, u32> = std::collections::HashMap::new();
        let mut seen: Vec<char> = Vec::new();
        for &id in ids {
            let Ok(text) = std::str::from_utf8(&tokens[id as usize]) else {
                continue;
            };
            seen.clear();
            seen.extend(text.chars().filter(|c| !c.is_ascii()));
            seen.sort_unstable();
            seen.dedup();
            for &c in &seen {
                *weight.entry(c).or_insert(0) += 1;
            }
        }
        let (group_of, group_chars, group_start) = char_groups(&weight);
        self.group_chars = group_chars;
        self.group_start = group_start;
        let n = self.byte.len();
        let mut chars = vec![0u64; n];
        // The groups of what starts at child `c`: an ASCII byte and the characters below
        // it; a lead byte, the character it starts (read down to where it ends) and the
        // characters below there; anything else cannot start a character.
        let mut frontier: Vec<(u32, u8, Vec<u8>)> = Vec::new();
        for v in (0..n).rev() {
            let mut acc = 0u64;
            let mut c = v as u32 + 1;
            while c < self.end[v] {
                let b = self.byte[c as usize];
                let len = match b {
                    0..=0x7f => 1,
                    0xc2..=0xdf => 2,
                    0xe0..=0xef => 3,
                    0xf0..=0xf4 => 4,
                    _ => 0,
                };
                if len == 0 {
                    acc |= CHARS_IRREGULAR;
                } else if len == 1 {
                    acc |= chars[c as usize];
                } else {
                    frontier.clear();
                    frontier.push((c, 1, vec![b]));
                    while let Some((m, read, bytes)) = frontier.pop() {
                        if read == len {
                            acc |= match std::str::from_utf8(&bytes)
                                .ok()
                                .and_then(|t| t.chars().next())
                                .and_then(|ch| group_of.get(&ch))
                            {
                                Some(&g) => 1 << g | chars[m as usize],
                                None => CHARS_IRREGULAR,
                            };
                            continue;
                        }
                        // Inside the character: a token that ends here splits it.
                        if !self.tokens_at(m).is_empty() {
                            acc |= CHARS_IRREGULAR;
                        }
                        let mut d = m + 1;
                        while d < self.end[m as usize] {
                            let mut more = bytes.clone();
                            more.push(self.byte[d as usize]);
                            frontier.push((d, read + 1, more));
                            d = self.end[d as usize];
                        }
                    }
                }
                c = self.end[c as usize];
            }
            chars[v] = acc;
        }
        let (ix, sets) = index_sets(&chars, BELOW_ANY as usize);
        self.chars_ix = ix;
        self.chars_sets = sets;
    }

    /// The [`char_groups`] of the characters past ASCII below `n` (in the paths from `n`
    /// to each token below it, read as UTF-8 from `n` on), with [`CHARS_IRREGULAR`] set
    /// when one of those paths is not whole characters (a token that ends inside a
    /// character, a continuation byte first, bytes UTF-8 never uses). The ASCII bytes
    /// below are in [`TokenTrie::below`]. A trie with over 65,535 distinct sets answers
    /// every bit for the nodes past them. Cost: two loads, the second from a small table.
    #[inline]
    pub(crate) fn chars_below(&self, n: u32) -> u64 {
        match self.chars_ix[n as usize] {
            BELOW_ANY => u64::MAX,
            i => self.chars_sets[i as usize],
        }
    }

    /// The characters of group `g` (see [`char_groups`]), in code point order. Cost: O(1).
    pub(crate) fn group_chars(&self, g: u32) -> &[char] {
        match (
            self.group_start.get(g as usize),
            self.group_start.get(g as usize + 1),
        ) {
            (Some(&a), Some(&b)) => &self.group_chars[a as usize..b as usize],
            _ => &[],
        }
    }

    /// The [`byte_group`]s of the bytes in `n`'s subtree below `n` (not `n`'s own byte):
    /// a subtree holds no byte of a set `X` when this and the groups of `X` are disjoint.
    /// A trie with over 65,535 distinct sets answers every group for the nodes past them
    /// (a superset: the walks then visit those subtrees). Cost: two loads, the second
    /// from a small table.
    #[inline]
    pub(crate) fn below(&self, n: u32) -> u128 {
        match self.below_ix[n as usize] {
            BELOW_ANY => u128::MAX,
            i => self.below_sets[i as usize],
        }
    }

    /// Builds the children index of the wide nodes. Cost: one pass over the nodes.
    fn index_wide_nodes(&mut self) {
        let n = self.byte.len();
        self.wide_of = vec![NOT_WIDE; n];
        let mut kids: Vec<u32> = Vec::new();
        for v in 0..n {
            kids.clear();
            let mut c = v as u32 + 1;
            while c < self.end[v] {
                kids.push(c);
                c = self.end[c as usize];
            }
            // Indices past u16 are left unindexed (a walk then scans their children).
            if kids.len() < WIDE_CHILDREN || self.wide.len() >= NOT_WIDE as usize {
                continue;
            }
            let mut present = crate::byteset::ByteSet::EMPTY;
            for &c in &kids {
                present.insert(self.byte[c as usize]);
            }
            self.wide_of[v] = self.wide.len() as u16;
            self.wide.push((present, self.wide_children.len() as u32));
            self.wide_children.extend_from_slice(&kids);
        }
    }

    /// For a node with at least [`WIDE_CHILDREN`] children: the set of its children's
    /// bytes and the children in byte order (the child for byte `b` is at index
    /// `set.rank(b)`). `None` for other nodes, whose children are found by scanning
    /// `n + 1`, then `end` of each. Cost: a load.
    #[inline]
    pub(crate) fn wide(&self, n: u32) -> Option<(crate::byteset::ByteSet, &[u32])> {
        let w = self.wide_of[n as usize];
        if w == NOT_WIDE {
            return None;
        }
        let (set, first) = self.wide[w as usize];
        let first = first as usize;
        Some((set, &self.wide_children[first..first + set.len() as usize]))
    }

    /// The state of [`plain`] language `lang` (0: JSON string text, 1: the same without
    /// U+2028 and U+2029) after node `n`'s path.
    #[inline]
    pub(crate) fn plain_state(&self, lang: usize, n: u32) -> u8 {
        self.pstate[lang][n as usize]
    }

    /// When every node below and at `n` is in [`plain`] language `lang`: the depth of the
    /// deepest (else 0).
    #[inline]
    pub(crate) fn plain_depth(&self, lang: usize, n: u32) -> usize {
        self.plain_depth[lang][n as usize] as usize
    }

    /// The tokens of at most `d` bytes whose bytes are in [`plain`] language `lang`, as a
    /// bitmap of `words` words over the vocabulary's ids. Cost: a copy of the bitmap of
    /// all plain tokens, then one bit cleared per plain token longer than `d` (Llama 3.1
    /// has at most 27,000 tokens longer than 8 bytes, 5,000 longer than 12, 200 longer
    /// than 40).
    pub(crate) fn plain_seed(&self, lang: usize, d: usize, words: usize) -> Vec<u32> {
        let longer = self.plain_longer[lang].get(d).map_or(0, |&n| n as usize);
        self.plain_but(lang, &self.plain_by_len[lang][..longer], words)
    }

    /// The bitmap of [`plain`] language `lang`'s tokens but `drop`, `words` words long.
    /// Cost: a copy of the bitmap, then one bit cleared per dropped token.
    fn plain_but(&self, lang: usize, drop: &[u32], words: usize) -> Vec<u32> {
        let mut bits = self.plain_tokens[lang].clone();
        for &id in drop {
            bits[(id >> 5) as usize] &= !(1 << (id & 31));
        }
        bits.resize(words, 0);
        bits
    }

    /// The tokens that start at most `k` characters (see `plain_by_chars`) and whose bytes
    /// are in [`plain`] language `lang`, as a bitmap of `words` words. Cost: one bit set per
    /// such token, or, when they are most of the plain tokens, a copy of the bitmap of all
    /// plain tokens and one bit cleared per plain token with more.
    pub(crate) fn plain_char_seed(&self, lang: usize, k: usize, words: usize) -> Vec<u32> {
        let all = &self.plain_by_chars[lang];
        let more = self.plain_more_chars[lang]
            .get(k)
            .map_or(0, |&n| n as usize);
        if all.len() - more >= more {
            return self.plain_but(lang, &all[..more], words);
        }
        // Few tokens start at most `k` characters (a small `k`): set theirs.
        let mut bits = vec![0u32; words];
        for &id in &all[more..] {
            bits[(id >> 5) as usize] |= 1 << (id & 31);
        }
        bits
    }

    /// The ids of the tokens [`TokenTrie::plain_char_seed`] holds, as a slice. Cost: O(1).
    pub(crate) fn plain_char_ids(&self, lang: usize, k: usize) -> &[u32] {
        let more = self.plain_more_chars[lang]
            .get(k)
            .map_or(0, |&n| n as usize);
        &self.plain_by_chars[lang][more..]
    }

    /// The longest token, in bytes (the trie's depth).
    pub fn max_depth(&self) -> usize {
        self.max_depth
    }

    /// Number of nodes, the root included.
    pub fn len(&self) -> usize {
        self.byte.len()
    }

    /// Whether the trie holds no token.
    pub fn is_empty(&self) -> bool {
        self.toks.is_empty()
    }

    /// The byte on the edge into node `n`.
    #[inline]
    pub fn byte(&self, n: u32) -> u8 {
        self.byte[n as usize]
    }

    /// The parent of node `n` (the root's is the root).
    #[inline]
    pub fn parent(&self, n: u32) -> u32 {
        self.parent[n as usize]
    }

    /// One past the last node of `n`'s subtree.
    #[inline]
    pub fn end(&self, n: u32) -> u32 {
        self.end[n as usize]
    }

    /// The tokens whose bytes end exactly at node `n`.
    #[inline]
    pub fn tokens_at(&self, n: u32) -> &[u32] {
        &self.toks[self.tok_start[n as usize] as usize..self.tok_start[n as usize + 1] as usize]
    }

    /// The tokens of every node in `lo..hi` (a contiguous slice: tokens are stored in
    /// node order).
    #[inline]
    pub fn tokens_in(&self, lo: u32, hi: u32) -> &[u32] {
        &self.toks[self.tok_start[lo as usize] as usize..self.tok_start[hi as usize] as usize]
    }

    /// Depth (byte length) of node `n`.
    #[inline]
    pub fn depth(&self, n: u32) -> usize {
        self.depth[n as usize] as usize
    }

    /// The child of `n` along byte `b`. O(1) for a node with many children (the root),
    /// O(children) for the others.
    pub fn child(&self, n: u32, b: u8) -> Option<u32> {
        if let Some((set, kids)) = self.wide(n) {
            return set.contains(b).then(|| kids[set.rank(b) as usize]);
        }
        let mut c = n + 1;
        let e = self.end(n);
        while c < e {
            if self.byte(c) == b {
                return Some(c);
            }
            c = self.end(c);
        }
        None
    }

    /// The node for `bytes`, if it is a prefix of some token.
    pub fn find(&self, bytes: &[u8]) -> Option<u32> {
        let mut n = 0;
        for &b in bytes {
            n = self.child(n, b)?;
        }
        Some(n)
    }
}
