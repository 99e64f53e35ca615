//! Decimal integer ranges as grammar expressions: the strings `0`, `1`, ..., without leading
//! zeros, whose value lies in `[lo, hi]` (the classic digit-by-digit construction).
//!
//! Part of the schema front end. Owns: nothing. Uses: the IR.

use crate::grammar::Expr;

fn digits(lo: u8, hi: u8) -> Expr {
    Expr::Chars(vec![(lo as char, hi as char)])
}

fn any_digits(n: usize) -> Expr {
    Expr::Repeat {
        e: Box::new(digits(b'0', b'9')),
        min: n as u32,
        max: Some(n as u32),
    }
}

/// Strings of exactly `len` digits (leading zeros allowed) between `lo` and `hi`, which are
/// digit strings of that length.
fn fixed(lo: &[u8], hi: &[u8]) -> Expr {
    debug_assert_eq!(lo.len(), hi.len());
    if lo.is_empty() {
        return Expr::Empty;
    }
    if lo == hi {
        return Expr::Literal(lo.to_vec());
    }
    let n = lo.len();
    if lo.iter().all(|&c| c == b'0') && hi.iter().all(|&c| c == b'9') {
        return any_digits(n);
    }
    let (a, b) = (lo[0], hi[0]);
    if a == b {
        return Expr::Seq(vec![Expr::Literal(vec![a]), fixed(&lo[1..], &hi[1..])]);
    }
    let nines = vec![b'9'; n - 1];
    let zeros = vec![b'0'; n - 1];
    let mut alts = vec![Expr::Seq(vec![
        Expr::Literal(vec![a]),
        fixed(&lo[1..], &nines),
    ])];
    if b > a + 1 {
        alts.push(Expr::Seq(vec![digits(a + 1, b - 1), any_digits(n - 1)]));
    }
    alts.push(Expr::Seq(vec![
        Expr::Literal(vec![b]),
        fixed(&zeros, &hi[1..]),
    ]));
    Expr::Alt(alts)
}

/// Non-negative integers in `[lo, hi]` (`hi = None`: unbounded), written without leading
/// zeros. Empty alternation when the range is empty.
pub(crate) fn uint_range(lo: u128, hi: Option<u128>) -> Expr {
    if hi.is_some_and(|h| h < lo) {
        return Expr::Alt(vec![]);
    }
    let ls = lo.to_string().into_bytes();
    let mut alts = Vec::new();
    let max_len = hi.map(|h| h.to_string().len());
    let mut len = ls.len();
    loop {
        if max_len.is_some_and(|m| len > m) {
            break;
        }
        // Range of `len`-digit numbers intersected with [lo, hi].
        let first: Vec<u8> = if len == 1 {
            b"0".to_vec()
        } else {
            std::iter::once(b'1')
                .chain(std::iter::repeat_n(b'0', len - 1))
                .collect()
        };
        let last = vec![b'9'; len];
        let a = if len == ls.len() { ls.clone() } else { first };
        let b = match hi {
            Some(h) if h.to_string().len() == len => h.to_string().into_bytes(),
            _ => last,
        };
        if a <= b {
            alts.push(fixed(&a, &b));
        }
        if hi.is_none() {
            // Everything longer: [1-9][0-9]{len,}
            alts.push(Expr::Seq(vec![
                digits(b'1', b'9'),
                Expr::Repeat {
                    e: Box::new(digits(b'0', b'9')),
                    min: len as u32,
                    max: None,
                },
            ]));
            break;
        }
        len += 1;
    }
    if alts.len() == 1 {
        alts.pop().unwrap()
    } else {
        Expr::Alt(alts)
    }
}

/// Integers in `[lo, hi]` (either side open), as `-?digits`; `-0` is accepted where 0 is.
pub(crate) fn int_range(lo: Option<i128>, hi: Option<i128>) -> Expr {
    if let (Some(l), Some(h)) = (lo, hi) {
        if l > h {
            return Expr::Alt(vec![]);
        }
    }
    let mut alts = Vec::new();
    // Non-negative part: [max(lo,0), hi]
    let plo = lo.map(|l| l.max(0)).unwrap_or(0);
    if hi.is_none_or(|h| h >= 0) {
        alts.push(uint_range(plo as u128, hi.map(|h| h as u128)));
    }
    // Negative part: values -n with n in [max(-hi,1), -lo]
    if lo.is_none_or(|l| l < 0) {
        let nlo = hi
            .map(|h| if h < 0 { (-h) as u128 } else { 1 })
            .unwrap_or(1);
        let nhi = lo.map(|l| (-l) as u128);
        if nhi.is_none_or(|x| x >= nlo) {
            alts.push(Expr::Seq(vec![
                Expr::Literal(b"-".to_vec()),
                uint_range(nlo, nhi),
            ]));
        }
    }
    // -0 equals 0.
    if lo.is_none_or(|l| l <= 0) && hi.is_none_or(|h| h >= 0) {
        alts.push(Expr::Literal(b"-0".to_vec()));
    }
    Expr::Alt(alts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grammar::Grammar;
    use crate::Limits;

    fn compile(e: &Expr) -> std::sync::Arc<crate::handle::constraint::Constraint> {
        let g = Grammar::single("root", e.clone());
        let vocab =
            crate::vocab::Vocabulary::new("t", vec![b"\0".to_vec()], vec![true], vec![]).unwrap();
        crate::handle::constraint::Constraint::new(
            &g,
            std::sync::Arc::new(vocab),
            &Limits::default(),
        )
        .unwrap()
    }

    fn matches(c: &std::sync::Arc<crate::handle::constraint::Constraint>, s: &str) -> bool {
        let mut m = crate::matching::matcher::Matcher::new(c).unwrap();
        m.check_bytes(s.as_bytes()).unwrap() == crate::matching::matcher::CheckResult::Accepted
    }

    #[test]
    fn ranges_are_exact() {
        for (lo, hi) in [
            (0i128, 0i128),
            (0, 9),
            (3, 17),
            (-5, 5),
            (-120, -7),
            (99, 1001),
            (0, 255),
            (-1, 0),
            (10, 10),
        ] {
            let e = compile(&int_range(Some(lo), Some(hi)));
            for v in -1300i128..1300 {
                let want = v >= lo && v <= hi;
                assert_eq!(matches(&e, &v.to_string()), want, "[{lo},{hi}] {v}");
            }
            assert_eq!(matches(&e, "-0"), lo <= 0 && hi >= 0);
            assert!(!matches(&e, "007"));
        }
        let e = compile(&int_range(Some(42), None));
        for v in [41i128, 42, 43, 99, 100, 12345678901234] {
            assert_eq!(matches(&e, &v.to_string()), v >= 42, "{v}");
        }
        let e = compile(&int_range(None, Some(-3)));
        for v in [-2i128, -3, -4, -100, 0, 5] {
            assert_eq!(matches(&e, &v.to_string()), v <= -3, "{v}");
        }
    }
}
