//! Exact decimal numbers: what the schema's numeric keywords and the instance's numbers are
//! compared as.
//!
//! JSON numbers are decimal literals of any length. Compared through `f64`, a `minimum` of
//! `9007199254740993` accepts `9007199254740992`, and `1e-7` is not exactly a multiple of
//! `1e-8`. Here a number is its exact decimal value ([`Dec`]: a digit string and a power of
//! ten), compared digit by digit, and `multipleOf` is decided with big integers
//! (`num-bigint`), their size bounded by the texts' lengths, never by the exponents (a
//! `1e999999999` costs no more than a `1`).
//!
//! A schema's numbers come from a [`serde_json::Number`]: an integer is exact; a float is
//! read as its shortest round-trip decimal, which is the literal whenever the literal has at
//! most 17 significant digits (what every JSON encoder writes). An instance's number is its
//! text, read exactly ([`Dec::parse`]).
//!
//! Part of the schema front end. Owns: the decimal type. Uses: the IR.

use std::cmp::Ordering;
use std::sync::Arc;

use num_bigint::BigUint;
use serde_json::Number;

use crate::grammar::{Check, ValueCheck};

/// Exponents are clamped to this magnitude: far beyond any digit string a text holds, so
/// comparisons stay exact, and sums of an exponent and a length cannot overflow.
const EXP_CLAMP: i64 = 1 << 50;

/// An exact decimal: `(-1)^neg × digits × 10^exp`, with `digits` (ASCII) free of leading
/// and trailing zeros; zero has no digits, `neg == false` and `exp == 0`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Dec {
    neg: bool,
    digits: Vec<u8>,
    exp: i64,
}

impl Dec {
    /// Zero.
    pub(crate) fn zero() -> Dec {
        Dec {
            neg: false,
            digits: Vec::new(),
            exp: 0,
        }
    }

    fn new(neg: bool, digits: &[u8], exp: i64) -> Dec {
        let start = digits
            .iter()
            .position(|&c| c != b'0')
            .unwrap_or(digits.len());
        let digits = &digits[start..];
        let end = digits.iter().rposition(|&c| c != b'0').map_or(0, |i| i + 1);
        if end == 0 {
            return Dec::zero();
        }
        let exp = exp.saturating_add((digits.len() - end) as i64);
        Dec {
            neg,
            digits: digits[..end].to_vec(),
            exp: exp.clamp(-EXP_CLAMP, EXP_CLAMP),
        }
    }

    /// Reads a JSON number text (`-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`, with
    /// surrounding JSON whitespace); `None` for anything else. Cost: O(text).
    pub(crate) fn parse(text: &[u8]) -> Option<Dec> {
        let t = text.trim_ascii();
        let (neg, t) = match t.strip_prefix(b"-") {
            Some(r) => (true, r),
            None => (false, t),
        };
        let int_len = t.iter().take_while(|c| c.is_ascii_digit()).count();
        if int_len == 0 || (int_len > 1 && t[0] == b'0') {
            return None;
        }
        let mut digits = t[..int_len].to_vec();
        let mut rest = &t[int_len..];
        let mut exp: i64 = 0;
        if let Some(r) = rest.strip_prefix(b".") {
            let n = r.iter().take_while(|c| c.is_ascii_digit()).count();
            if n == 0 {
                return None;
            }
            digits.extend_from_slice(&r[..n]);
            exp = -(n as i64);
            rest = &r[n..];
        }
        if let Some(r) = rest.strip_prefix(b"e").or_else(|| rest.strip_prefix(b"E")) {
            let (eneg, r) = match r {
                [b'-', r @ ..] => (true, r),
                [b'+', r @ ..] => (false, r),
                r => (false, r),
            };
            if r.is_empty() || !r.iter().all(|c| c.is_ascii_digit()) {
                return None;
            }
            let mut e: i64 = 0;
            for &c in r {
                e = (e * 10 + (c - b'0') as i64).min(EXP_CLAMP);
            }
            exp = exp.saturating_add(if eneg { -e } else { e });
            rest = &[];
        }
        if !rest.is_empty() {
            return None;
        }
        Some(Dec::new(neg, &digits, exp))
    }

    /// The value of a `serde_json` number: exact for an integer, the shortest round-trip
    /// decimal for a float (`None` for a non-finite one, which JSON cannot hold). Cost:
    /// O(digits).
    pub(crate) fn from_number(n: &Number) -> Option<Dec> {
        if let Some(i) = n.as_i64() {
            return Dec::parse(i.to_string().as_bytes());
        }
        if let Some(u) = n.as_u64() {
            return Dec::parse(u.to_string().as_bytes());
        }
        let f = n.as_f64().filter(|f| f.is_finite())?;
        Dec::parse(format!("{f:e}").as_bytes())
    }

    /// Whether the value is zero.
    pub(crate) fn is_zero(&self) -> bool {
        self.digits.is_empty()
    }

    /// Whether the value is negative (zero is not).
    pub(crate) fn is_negative(&self) -> bool {
        self.neg
    }

    /// Whether the value is an integer.
    pub(crate) fn is_integer(&self) -> bool {
        self.exp >= 0
    }

    /// The value as an `i128` when it is an integer within ±10^36 (`None` otherwise).
    pub(crate) fn to_i128(&self) -> Option<i128> {
        if !self.is_integer() || self.digits.len() as i64 + self.exp > 36 {
            return None;
        }
        let mut v: i128 = 0;
        for &c in &self.digits {
            v = v * 10 + (c - b'0') as i128;
        }
        for _ in 0..self.exp {
            v *= 10;
        }
        Some(if self.neg { -v } else { v })
    }

    /// The greatest integer at most the value (`ceil == false`) or the least at least it
    /// (`ceil == true`), when within ±10^36. Cost: O(digits).
    pub(crate) fn round_to_i128(&self, ceil: bool) -> Option<i128> {
        if self.is_integer() {
            return self.to_i128();
        }
        // Drop the fraction (towards zero), then step away from zero when the rounding
        // direction is away from zero.
        let keep = self.digits.len() as i64 + self.exp;
        let trunc = if keep <= 0 {
            Dec::zero()
        } else {
            Dec::new(self.neg, &self.digits[..keep as usize], 0)
        };
        let t = trunc.to_i128()?;
        Some(match (self.neg, ceil) {
            (false, true) => t + 1,
            (true, false) => t - 1,
            _ => t,
        })
    }

    /// The plain decimal notation of the value: sign, integer digits (`"0"` below one)
    /// and fraction digits (empty for an integer), without trailing zeros.
    pub(crate) fn plain_parts(&self) -> (bool, String, String) {
        let digits = std::str::from_utf8(&self.digits).unwrap_or("0");
        if self.is_zero() {
            return (false, "0".into(), String::new());
        }
        if self.exp >= 0 {
            let int = format!("{digits}{}", "0".repeat(self.exp as usize));
            return (self.neg, int, String::new());
        }
        let frac_len = (-self.exp) as usize;
        if frac_len >= digits.len() {
            let frac = format!("{}{digits}", "0".repeat(frac_len - digits.len()));
            (self.neg, "0".into(), frac)
        } else {
            let cut = digits.len() - frac_len;
            (self.neg, digits[..cut].into(), digits[cut..].into())
        }
    }

    /// Magnitude order: how many digits stand before the decimal point (negative or zero
    /// for a value below 1).
    fn order(&self) -> i64 {
        self.digits.len() as i64 + self.exp
    }

    fn cmp_abs(&self, o: &Dec) -> Ordering {
        match (self.is_zero(), o.is_zero()) {
            (true, true) => return Ordering::Equal,
            (true, false) => return Ordering::Less,
            (false, true) => return Ordering::Greater,
            _ => {}
        }
        // No leading or trailing zeros: the order of magnitude, then the digits
        // (a prefix is the smaller, its missing digits being zeros).
        self.order()
            .cmp(&o.order())
            .then_with(|| self.digits.cmp(&o.digits))
    }

    /// Whether `self / m` is an integer (`m` positive). Cost: big-integer arithmetic on
    /// numbers of at most the two digit strings' lengths plus four digits per digit of `m`.
    pub(crate) fn is_multiple_of(&self, m: &Dec) -> bool {
        if self.is_zero() {
            return true;
        }
        if m.is_zero() {
            return false;
        }
        let big = |d: &[u8]| BigUint::parse_bytes(d, 10).unwrap_or_default();
        let (x, b) = (big(&self.digits), big(&m.digits));
        let d = self.exp - m.exp;
        if d >= 0 {
            // b | x·10^d. Write b = 2^i·5^j·r: once d ≥ max(i, j) more tens change
            // nothing, and max(i, j) < 4 × (digits of b) + 1.
            let d = d.min(4 * m.digits.len() as i64 + 4) as u32;
            (x * BigUint::from(10u32).pow(d)) % b == BigUint::ZERO
        } else {
            // b·10^-d | x: impossible once b·10^-d has more digits than x.
            let d = -d;
            if d > self.digits.len() as i64 {
                return false;
            }
            x % (b * BigUint::from(10u32).pow(d as u32)) == BigUint::ZERO
        }
    }

    /// Least common multiple of two positive decimals, when its digits stay within
    /// `max_digits` (`None` otherwise). Cost: a big-integer gcd.
    pub(crate) fn lcm(&self, o: &Dec, max_digits: usize) -> Option<Dec> {
        use num_integer::Integer;
        let g = self.exp.min(o.exp);
        let scaled = |d: &Dec| -> Option<BigUint> {
            let shift = u32::try_from(d.exp - g).ok().filter(|&s| s <= 64)?;
            Some(BigUint::parse_bytes(&d.digits, 10)? * BigUint::from(10u32).pow(shift))
        };
        let l = scaled(self)?.lcm(&scaled(o)?);
        let s = l.to_str_radix(10);
        (s.len() <= max_digits).then(|| Dec::new(false, s.as_bytes(), g))
    }

    /// The value as a `serde_json` number, when one holds it exactly (an integer within
    /// 64 bits, or a float whose shortest decimal is this value).
    pub(crate) fn to_number(&self) -> Option<Number> {
        if let Some(i) = self.to_i128() {
            if let Ok(i) = i64::try_from(i) {
                return Some(Number::from(i));
            }
            if let Ok(u) = u64::try_from(i) {
                return Some(Number::from(u));
            }
        }
        let f: f64 = self.to_string().parse().ok()?;
        let n = Number::from_f64(f)?;
        (Dec::from_number(&n).as_ref() == Some(self)).then_some(n)
    }
}

impl Ord for Dec {
    fn cmp(&self, o: &Dec) -> Ordering {
        let sign = |d: &Dec| {
            if d.is_zero() {
                0
            } else if d.neg {
                -1
            } else {
                1
            }
        };
        match sign(self).cmp(&sign(o)) {
            Ordering::Equal if self.neg => o.cmp_abs(self),
            Ordering::Equal => self.cmp_abs(o),
            other => other,
        }
    }
}

impl PartialOrd for Dec {
    fn partial_cmp(&self, o: &Dec) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}

impl std::fmt::Display for Dec {
    /// Scientific notation of the exact value (`-12e-3`), or `0`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.is_zero() {
            return f.write_str("0");
        }
        let sign = if self.neg { "-" } else { "" };
        let digits = std::str::from_utf8(&self.digits).unwrap_or("?");
        write!(f, "{sign}{digits}e{}", self.exp)
    }
}

/// A bound: the value and whether it is exclusive.
pub(crate) type Bound = (Dec, bool);

/// What an instance's number must satisfy, decided on its exact value: the semantic check
/// of the numeric keywords a grammar does not say (non-integer or huge bounds,
/// `multipleOf`, exponent spellings, and value equality for `const`/`enum`).
#[derive(Debug, Clone, Default)]
pub(crate) struct NumberCheck {
    /// An integral value (`type: integer`).
    pub integer: bool,
    /// Lower bound.
    pub lo: Option<Bound>,
    /// Upper bound.
    pub hi: Option<Bound>,
    /// Every one of these divides the value.
    pub multiples: Vec<Dec>,
    /// The value is one of these (`const`/`enum`); `None`: any value.
    pub one_of: Option<Vec<Dec>>,
}

impl NumberCheck {
    /// Whether the exact value `x` passes. Cost: comparisons, plus `multipleOf`'s
    /// big-integer division.
    pub(crate) fn passes(&self, x: &Dec) -> bool {
        (!self.integer || x.is_integer())
            && self
                .lo
                .as_ref()
                .is_none_or(|(l, ex)| if *ex { x > l } else { x >= l })
            && self
                .hi
                .as_ref()
                .is_none_or(|(h, ex)| if *ex { x < h } else { x <= h })
            && self.multiples.iter().all(|m| x.is_multiple_of(m))
            && self.one_of.as_ref().is_none_or(|v| v.contains(x))
    }

    /// As a grammar check.
    pub(crate) fn into_check(self) -> Check {
        Check(Arc::new(self))
    }
}

/// `units × 10^exp` written without an exponent (`plain(-125, -2)` is `-1.25`); `exp`
/// is a multiple's, bounded by the parser's clamp.
fn plain(units: i128, exp: i64) -> String {
    let sign = if units < 0 { "-" } else { "" };
    let digits = units.unsigned_abs().to_string();
    if exp >= 0 {
        return format!("{sign}{digits}{}", "0".repeat(exp.min(64) as usize));
    }
    let frac = (-exp).min(64) as usize;
    let padded = format!("{digits:0>w$}", w = frac + 1);
    let (int, dec) = padded.split_at(padded.len() - frac);
    format!("{sign}{int}.{dec}")
}

impl ValueCheck for NumberCheck {
    fn accepts(&self, text: &[u8]) -> bool {
        Dec::parse(text).is_some_and(|x| self.passes(&x))
    }

    /// Candidates built near the bounds and from the multiples (0, ±1, each bound, the
    /// first value past a bound at 0 to 9 decimal places, the first multiples past the
    /// lower bound), kept when [`NumberCheck::passes`] says so exactly; shortest first,
    /// at most 8. Cost: a few dozen candidates parsed and checked.
    fn value_examples(&self) -> Vec<String> {
        let mut cands: Vec<String> = vec!["0".into(), "1".into(), "-1".into()];
        if let Some(v) = &self.one_of {
            cands.extend(v.iter().map(Dec::to_string));
        }
        let as_f64 = |d: &Dec| d.to_string().parse::<f64>().ok().filter(|x| x.is_finite());
        let lo = self.lo.as_ref().and_then(|(d, _)| as_f64(d));
        let hi = self.hi.as_ref().and_then(|(d, _)| as_f64(d));
        for (b, _) in self.lo.iter().chain(self.hi.iter()) {
            cands.push(b.to_string());
        }
        for k in 0..=9i32 {
            let scale = 10f64.powi(k);
            let k = k as usize;
            if let Some(l) = lo {
                let c = (l * scale).floor() / scale;
                cands.push(format!("{:.k$}", c + 1.0 / scale));
                cands.push(format!("{c:.k$}"));
            }
            if let Some(h) = hi {
                let c = (h * scale).ceil() / scale;
                cands.push(format!("{:.k$}", c - 1.0 / scale));
                cands.push(format!("{c:.k$}"));
            }
        }
        for m in &self.multiples {
            // m = digits × 10^exp: the multiples n·m past the lower bound, exactly.
            let Ok(units) = std::str::from_utf8(&m.digits)
                .unwrap_or("x")
                .parse::<u128>()
            else {
                continue;
            };
            let step = as_f64(m).unwrap_or(1.0).abs();
            let n0 = lo
                .map_or(0.0, |l| (l / step).ceil() - 1.0)
                .clamp(-1e15, 1e15) as i128;
            for n in n0..n0 + 4 {
                let Some(p) = (units as i128).checked_mul(n) else {
                    continue;
                };
                cands.push(plain(p, m.exp));
            }
        }
        let mut out: Vec<String> = Vec::new();
        for c in cands {
            let ok = Dec::parse(c.as_bytes()).is_some_and(|x| self.passes(&x));
            if ok && !out.contains(&c) {
                out.push(c);
            }
        }
        out.sort_by_key(String::len);
        out.truncate(8);
        out
    }

    fn describe(&self) -> String {
        let mut parts = Vec::new();
        if self.integer {
            parts.push("an integer".to_string());
        }
        if let Some((l, ex)) = &self.lo {
            parts.push(format!("{} {l}", if *ex { ">" } else { ">=" }));
        }
        if let Some((h, ex)) = &self.hi {
            parts.push(format!("{} {h}", if *ex { "<" } else { "<=" }));
        }
        for m in &self.multiples {
            parts.push(format!("a multiple of {m}"));
        }
        if let Some(v) = &self.one_of {
            let v: Vec<String> = v.iter().map(|d| d.to_string()).collect();
            parts.push(format!("one of [{}]", v.join(", ")));
        }
        format!("number (exact decimal): {}", parts.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(s: &str) -> Dec {
        Dec::parse(s.as_bytes()).unwrap()
    }

    #[test]
    fn parses_every_spelling_to_one_value() {
        for same in [
            &["100", "100.0", "1e2", "1E+2", "10e1", "1000e-1", "0.1e3"][..],
            &["0", "-0", "0.0", "-0.0", "0e5", "-0E-7"],
            &["-1.5", "-15e-1", "-0.15E1"],
        ] {
            for s in same {
                assert_eq!(d(s), d(same[0]), "{s}");
            }
        }
        for bad in [
            "", "-", "01", "1.", ".5", "1e", "1e+", "+1", "1x", "NaN", "0x10",
        ] {
            assert!(Dec::parse(bad.as_bytes()).is_none(), "{bad}");
        }
    }

    #[test]
    fn compares_beyond_a_double() {
        assert!(d("9007199254740992") < d("9007199254740993"));
        assert!(d("-9007199254740992") > d("-9007199254740993"));
        assert!(
            d("972783798187987123879878123.188781371") > d("972783798187987123879878123.18878137")
        );
        assert!(d("1e-400") > d("0"));
        assert!(d("-1e-400") < d("0"));
        assert!(d("1e999999999999999999999") > d("9e300"));
        assert!(d("0.1") < d("0.10000000000000001"));
        assert_eq!(d("-0"), Dec::zero());
    }

    #[test]
    fn multiples_exactly() {
        assert!(d("0.0075").is_multiple_of(&d("0.0001")));
        assert!(d("1e-7").is_multiple_of(&d("1e-8")));
        assert!(!d("0.00751").is_multiple_of(&d("0.0001")));
        assert!(d("1e308").is_multiple_of(&d("0.5")));
        assert!(!d("1e308").is_multiple_of(&d("0.123456789")));
        assert!(d("1e999999999").is_multiple_of(&d("8")));
        assert!(!d("1e999999999").is_multiple_of(&d("3")));
        assert!(!d("4.5").is_multiple_of(&d("2")));
        assert!(d("-4").is_multiple_of(&d("2")));
        assert!(!d("1e-999999").is_multiple_of(&d("1e-5")));
        assert_eq!(d("0.2").lcm(&d("0.3"), 40), Some(d("0.6")));
        assert_eq!(d("4").lcm(&d("6"), 40), Some(d("12")));
    }

    #[test]
    fn rounds_and_converts() {
        assert_eq!(d("2.5").round_to_i128(true), Some(3));
        assert_eq!(d("2.5").round_to_i128(false), Some(2));
        assert_eq!(d("-2.5").round_to_i128(true), Some(-2));
        assert_eq!(d("-2.5").round_to_i128(false), Some(-3));
        assert_eq!(d("-0.5").round_to_i128(true), Some(0));
        assert_eq!(d("0.5").round_to_i128(false), Some(0));
        assert_eq!(d("1e40").to_i128(), None);
        let n: Number = serde_json::from_str("9007199254740993").unwrap();
        assert_eq!(Dec::from_number(&n), Some(d("9007199254740993")));
        let n: Number = serde_json::from_str("0.1").unwrap();
        assert_eq!(Dec::from_number(&n), Some(d("0.1")));
        assert_eq!(
            d("0.1").to_number().map(|n| n.to_string()),
            Some("0.1".into())
        );
        let c = NumberCheck {
            integer: true,
            lo: Some((d("9007199254740993"), false)),
            ..Default::default()
        };
        assert!(!c.accepts(b"9007199254740992"));
        assert!(c.accepts(b"9007199254740993"));
        assert!(c.accepts(b"1e+30"));
        assert!(!c.accepts(b"9007199254740993.5"));
        assert!(!c.accepts(b"90071992547409935e-1"));
    }

    #[test]
    fn value_examples_pass_exactly_and_come_shortest_first() {
        let check = |lo: Option<(&str, bool)>, hi: Option<(&str, bool)>, m: &[&str], int: bool| {
            NumberCheck {
                integer: int,
                lo: lo.map(|(x, ex)| (d(x), ex)),
                hi: hi.map(|(x, ex)| (d(x), ex)),
                multiples: m.iter().map(|x| d(x)).collect(),
                one_of: None,
            }
        };
        for (c, first) in [
            (
                check(Some(("0.5", true)), Some(("0.75", false)), &[], false),
                "0.6",
            ),
            (
                check(Some(("-4e3", false)), Some(("-3e3", false)), &[], false),
                "-4e3",
            ),
            (
                check(Some(("100", true)), Some(("1e3", true)), &[], true),
                "101",
            ),
            (check(Some(("0", true)), None, &["0.25"], false), "1"),
            (check(Some(("10", false)), None, &["7", "3"], true), ""),
            (
                check(Some(("1e-4", false)), Some(("1e-1", false)), &[], false),
                "0.1",
            ),
        ] {
            let ex = c.value_examples();
            assert!(ex.iter().all(|x| c.accepts(x.as_bytes())), "{ex:?}");
            assert!(ex.windows(2).all(|w| w[0].len() <= w[1].len()), "{ex:?}");
            if !first.is_empty() {
                assert_eq!(ex.first().map(String::as_str), Some(first), "{ex:?}");
            }
        }
        assert_eq!(plain(-125, -2), "-1.25");
        assert_eq!(plain(5, -3), "0.005");
        assert_eq!(plain(12, 2), "1200");
    }
}
