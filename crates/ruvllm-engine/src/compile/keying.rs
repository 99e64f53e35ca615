//! Structural lexeme keys: a byte string per expression (rule references inlined) of
//! which its regex is a function, so that a lexeme is found in the cache without
//! building or printing its regex.
//!
//! Part of the lowering (the parent module); it owns the key format and uses only the
//! IR and the parent's `Lowerer` state.

use super::*;

/// How [`Lowerer::lexeme_of`] joins its expressions (the tag of the key's group).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Group {
    /// One after the other, as [`Expr::Seq`] (the same tag).
    Seq = 4,
    /// Any one of them, as [`Expr::Alt`] (the same tag).
    Alt = 5,
}

/// The first byte of every structural lexeme key: never the first byte of a printed
/// regex (UTF-8 text), so the two kinds of keys share the lexeme maps without meeting.
pub(super) const STRUCTURAL_KEY: u8 = 0xFF;

/// The end tag of a group in a structural key.
pub(super) const END: u8 = 8;

/// What a structural key (see [`Lowerer::expr_key`]) is, as its group writer needs to
/// know: the empty string, a literal (tag, 4-byte length, bytes), a group of `n` items,
/// or anything else.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum KeyKind {
    Empty,
    Literal,
    Group(Group, usize),
    Other,
}

/// Appends a literal's key: tag, length as 4 bytes (so that a merge can rewrite it in
/// place), bytes.
pub(super) fn literal_key(l: &[u8], out: &mut Vec<u8>) {
    out.push(1);
    out.extend_from_slice(&(l.len().min(u32::MAX as usize) as u32).to_le_bytes());
    out.extend_from_slice(l);
}

/// Appends `n` to a structural key as a LEB128 varint (self-delimiting).
pub(super) fn put_len(out: &mut Vec<u8>, mut n: usize) {
    while n >= 0x80 {
        out.push((n as u8) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

impl Lowerer<'_> {
    /// Appends the key of `items` joined by `group` (as [`Expr::Seq`] or [`Expr::Alt`] of
    /// them would be written, see [`Lowerer::expr_key`]).
    pub(super) fn group_key<'e>(
        &mut self,
        group: Group,
        items: impl Iterator<Item = &'e Expr>,
        out: &mut Vec<u8>,
    ) -> KeyKind {
        let start = out.len();
        let tag = group as u8;
        out.push(tag);
        let mut n = 0;
        // Where the last item starts, when it is a literal (the next one merges into it).
        let mut last_lit: Option<usize> = None;
        // The kind of the last item (what the group is when it is its only item).
        let mut single = KeyKind::Other;
        for x in items {
            let at = out.len();
            match self.expr_key(x, out) {
                KeyKind::Empty if group == Group::Seq => out.truncate(at),
                KeyKind::Group(g, k) if g == group => {
                    // Spliced: its items become this group's.
                    out.remove(at);
                    out.pop();
                    n += k;
                    last_lit = None;
                }
                KeyKind::Literal if group == Group::Seq => {
                    if let Some(prev) = last_lit {
                        // Merged: `prev` holds tag, length (4 bytes), bytes.
                        let add = out.len() - at - 5;
                        let len = u32::from_le_bytes(out[prev + 1..prev + 5].try_into().unwrap());
                        let len = len.saturating_add(add as u32);
                        out[prev + 1..prev + 5].copy_from_slice(&len.to_le_bytes());
                        out.drain(at..at + 5);
                    } else {
                        last_lit = Some(at);
                        n += 1;
                        single = KeyKind::Literal;
                    }
                }
                kind => {
                    n += 1;
                    last_lit = None;
                    single = kind;
                }
            }
        }
        out.push(END);
        match (group, n) {
            (Group::Seq, 0) => {
                out.truncate(start);
                out.push(0);
                KeyKind::Empty
            }
            (_, 1) => {
                out.remove(start);
                out.pop();
                single
            }
            _ => KeyKind::Group(group, n),
        }
    }

    /// Appends the structural key of `e` to `out`: a tag per node, explicit lengths, each
    /// group closed by an end tag, and the key of a referenced rule's body in place of
    /// the reference (written once per rule and copied after). Written normalized the
    /// way [`Hir::concat`] and [`Hir::alternation`] normalize: nested sequences
    /// (alternations) flattened, empty items of sequences dropped, adjacent literals
    /// merged, single items unwrapped, and one-character classes written as literals, so
    /// that expressions that make the same regex that way get the same key. Two
    /// expressions get the same key only when their regexes are the same (see
    /// [`Lowerer::hir`]). Returns what the key is. Cost: O(key bytes), plus the shifts
    /// of spliced groups.
    pub(super) fn expr_key(&mut self, e: &Expr, out: &mut Vec<u8>) -> KeyKind {
        match e {
            Expr::Empty => {
                out.push(0);
                KeyKind::Empty
            }
            Expr::Literal(l) if l.is_empty() => {
                out.push(0);
                KeyKind::Empty
            }
            Expr::Literal(l) => {
                literal_key(l, out);
                KeyKind::Literal
            }
            Expr::Chars(r) if r.len() == 1 && r[0].0 == r[0].1 => {
                literal_key(r[0].0.encode_utf8(&mut [0; 4]).as_bytes(), out);
                KeyKind::Literal
            }
            Expr::Chars(r) => {
                out.push(2);
                put_len(out, r.len());
                for &(a, b) in r {
                    out.extend_from_slice(&u32::from(a).to_le_bytes());
                    out.extend_from_slice(&u32::from(b).to_le_bytes());
                }
                KeyKind::Other
            }
            Expr::Bytes(r) if r.len() == 1 && r[0].0 == r[0].1 => {
                literal_key(&[r[0].0], out);
                KeyKind::Literal
            }
            Expr::Bytes(r) => {
                out.push(3);
                put_len(out, r.len());
                for &(a, b) in r {
                    out.extend_from_slice(&[a, b]);
                }
                KeyKind::Other
            }
            Expr::Ref(r) => {
                if let Some((k, kind)) = &self.key_cache[*r as usize] {
                    out.extend_from_slice(k);
                    return *kind;
                }
                let g = self.g;
                let start = out.len();
                let kind = self.expr_key(&g.rules[*r as usize].body, out);
                self.key_cache[*r as usize] = Some((out[start..].into(), kind));
                kind
            }
            Expr::Seq(v) => self.group_key(Group::Seq, v.iter(), out),
            Expr::Alt(v) => self.group_key(Group::Alt, v.iter(), out),
            Expr::Repeat {
                e,
                min: 1,
                max: Some(1),
            } => self.expr_key(e, out),
            Expr::Repeat {
                min: 0,
                max: Some(0),
                ..
            } => {
                out.push(0);
                KeyKind::Empty
            }
            Expr::Repeat { e, min, max } => {
                out.push(6);
                out.extend_from_slice(&min.to_le_bytes());
                match max {
                    Some(m) => {
                        out.push(1);
                        out.extend_from_slice(&m.to_le_bytes());
                    }
                    None => out.push(0),
                }
                self.expr_key(e, out);
                KeyKind::Other
            }
            Expr::KeyComplement(k) => {
                out.push(7);
                put_len(out, k.keys().len());
                for key in k.keys() {
                    put_len(out, key.len());
                    for &c in key {
                        out.extend_from_slice(&u32::from(c).to_le_bytes());
                    }
                }
                self.expr_key(k.ch(), out);
                KeyKind::Other
            }
        }
    }
}
