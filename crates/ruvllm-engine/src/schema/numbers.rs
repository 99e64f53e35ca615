//! Numbers: `type: number`/`integer` with bounds and `multipleOf`, as exact digit grammars
//! where they can be, checked values otherwise.
//!
//! Part of the schema compiler (`Compiler` in the parent module), split by concern;
//! it may use everything of the parent and nothing of its siblings but through it.

use super::*;

impl Compiler<'_> {
    pub(super) fn number(
        &mut self,
        m: &Map<String, Value>,
        ptr: &str,
        integer_only: bool,
    ) -> Result<Expr, SchemaError> {
        // Every numeric keyword is read as an exact decimal (see `dec`): the grammar says
        // what it can, and a check on the exact value says the rest.
        let mut check = dec::NumberCheck {
            integer: integer_only,
            ..Default::default()
        };
        if let Some(mo) = m.get("multipleOf") {
            let x = mo
                .as_number()
                .and_then(dec::Dec::from_number)
                .filter(|x| !x.is_zero() && !x.is_negative())
                .ok_or_else(|| invalid(ptr, "multipleOf must be a positive number"))?;
            // Every integer is a multiple of 1, 0.5, 0.25...: nothing to check.
            let one = dec::Dec::parse(b"1").unwrap_or_else(dec::Dec::zero);
            if !(integer_only && one.is_multiple_of(&x)) {
                check.multiples.push(x);
            }
        }
        let num = |k: &str| -> Result<Option<dec::Dec>, SchemaError> {
            match m.get(k) {
                None => Ok(None),
                Some(Value::Number(n)) => dec::Dec::from_number(n)
                    .map(Some)
                    .ok_or_else(|| invalid(ptr, format!("{k} must be a finite number"))),
                Some(Value::Bool(_)) if k.starts_with("exclusive") => Ok(None), // draft-4 style handled below
                Some(_) => Err(invalid(ptr, format!("{k} must be a number"))),
            }
        };
        let tighten_lo = |lo: &mut Option<dec::Bound>, v: dec::Dec, ex: bool| {
            if lo
                .as_ref()
                .is_none_or(|(l, lex)| v > *l || (v == *l && ex && !lex))
            {
                *lo = Some((v, ex));
            }
        };
        let tighten_hi = |hi: &mut Option<dec::Bound>, v: dec::Dec, ex: bool| {
            if hi
                .as_ref()
                .is_none_or(|(h, hex)| v < *h || (v == *h && ex && !hex))
            {
                *hi = Some((v, ex));
            }
        };
        let (mut lo, mut hi) = (None, None);
        if let Some(v) = num("minimum")? {
            let ex = m.get("exclusiveMinimum") == Some(&Value::Bool(true));
            tighten_lo(&mut lo, v, ex);
        }
        if let Some(v) = num("maximum")? {
            let ex = m.get("exclusiveMaximum") == Some(&Value::Bool(true));
            tighten_hi(&mut hi, v, ex);
        }
        if let Some(v) = num("exclusiveMinimum")? {
            tighten_lo(&mut lo, v, true);
        }
        if let Some(v) = num("exclusiveMaximum")? {
            tighten_hi(&mut hi, v, true);
        }
        // OpenAPI's numeric formats: the range of the type they name (a `format` JSON Schema
        // defines says nothing of numbers; any other is an annotation, with a warning).
        if let Some(f) = m.get("format").and_then(Value::as_str) {
            let range = match f {
                _ if self.openapi_annotation(f) => None,
                "int32" => Some(("-2147483648", "2147483647")),
                "int64" => Some(("-9223372036854775808", "9223372036854775807")),
                "float" => Some((
                    "-340282346638528859811704183484516925440",
                    "340282346638528859811704183484516925440",
                )),
                "double" => Some(("-1.7976931348623157e308", "1.7976931348623157e308")),
                _ => None,
            };
            if let Some((a, b)) = range {
                let (a, b) = (dec::Dec::parse(a.as_bytes()), dec::Dec::parse(b.as_bytes()));
                if let Some((a, b)) = a.zip(b) {
                    tighten_lo(&mut lo, a, false);
                    tighten_hi(&mut hi, b, false);
                }
            } else if !KNOWN_FORMATS.contains(&f) || self.openapi_annotation(f) {
                self.unknown_format(f, ptr)?;
            }
        }
        check.lo = lo.clone();
        check.hi = hi.clone();
        // The bounds as integers a digit automaton can take: for `integer`, the least and
        // greatest integers allowed; for `number`, integral bounds only (a fraction's
        // digits at a non-integral bound are left to the check).
        let as_int = |b: &Option<dec::Bound>, upper: bool| -> Option<Option<i128>> {
            let Some((v, ex)) = b else {
                return Some(None);
            };
            if integer_only {
                let r = v.round_to_i128(!upper)?;
                let on_bound = v.is_integer() && *ex;
                Some(Some(match (on_bound, upper) {
                    (true, false) => r + 1,
                    (true, true) => r - 1,
                    _ => r,
                }))
            } else {
                v.to_i128().map(Some)
            }
        };
        let exact_bounds = as_int(&lo, false).zip(as_int(&hi, true));
        let exact_language = self.opts.number_digits.is_none() && !self.opts.grammar_only;
        let plain_int = integer_only && (self.draft == 4 || self.opts.plain_integers);
        let bounded = lo.is_some() || hi.is_some();
        let body = match exact_bounds {
            Some((lo_i, hi_i)) if bounded => {
                let lo_ex = lo.as_ref().is_some_and(|(_, e)| *e);
                let hi_ex = hi.as_ref().is_some_and(|(_, e)| *e);
                let plain = self.bounded_number(lo_i, hi_i, lo_ex, hi_ex, integer_only);
                if exact_language && !plain_int {
                    // Exponent spellings (`1e+30`, `1e-09`) of values within the bounds:
                    // which exponents do is not a regular language, so a check decides.
                    let exp_form = self.exponent_number();
                    let c = dec::NumberCheck {
                        multiples: Vec::new(),
                        ..check.clone()
                    };
                    let exp = self.checked_rule("number-exp", exp_form, c.into_check());
                    Expr::Alt(vec![plain, exp])
                } else {
                    plain
                }
            }
            Some(_) => self.open_number(integer_only),
            // Bounds no digit automaton here takes (beyond ±10^36, or a non-integral one
            // for a `number`): any number, the bounds checked on its exact value.
            None => {
                let open = self.open_number(integer_only);
                return Ok(self.wrap_number_check(open, ptr, check));
            }
        };
        if check.multiples.is_empty() {
            return Ok(body);
        }
        Ok(self.wrap_number_check(body, ptr, check))
    }

    /// `body` under a [`dec::NumberCheck`] of the exact value.
    pub(super) fn wrap_number_check(
        &mut self,
        body: Expr,
        ptr: &str,
        check: dec::NumberCheck,
    ) -> Expr {
        self.checked_rule(
            &format!("number{}", ptr.replace('/', "-")),
            body,
            check.into_check(),
        )
    }

    /// A number written with an exponent: `-?(0|[1-9][0-9]*)(\.[0-9]+)?[eE][+-]?[0-9]+`.
    pub(super) fn exponent_number(&mut self) -> Expr {
        self.common("number-exp", |_| {
            let d = || Expr::Chars(vec![('0', '9')]);
            Expr::Seq(vec![
                rep(lit("-"), 0, Some(1)),
                Expr::Alt(vec![
                    lit("0"),
                    Expr::Seq(vec![Expr::Chars(vec![('1', '9')]), rep(d(), 0, None)]),
                ]),
                rep(Expr::Seq(vec![lit("."), rep(d(), 1, None)]), 0, Some(1)),
                Expr::Chars(vec![('E', 'E'), ('e', 'e')]),
                rep(Expr::Chars(vec![('+', '+'), ('-', '-')]), 0, Some(1)),
                rep(d(), 1, None),
            ])
        })
    }

    /// Any number (`integer_only`: any integral one, as the options spell integers).
    pub(super) fn open_number(&mut self, integer_only: bool) -> Expr {
        let frac0 = zero_fraction;
        let cap = self.opts.number_digits;
        let digits = move |min: u32| Expr::Repeat {
            e: Box::new(Expr::Chars(vec![('0', '9')])),
            min,
            max: cap.map(|c| c.max(min)),
        };
        // Exponent digits: two at most when digits are capped (see
        // `SchemaOptions::number_digits`).
        let exp_digits = move || Expr::Repeat {
            e: Box::new(Expr::Chars(vec![('0', '9')])),
            min: 1,
            max: cap.map(|_| 2),
        };
        let uint = move || {
            let rest = Expr::Repeat {
                e: Box::new(Expr::Chars(vec![('0', '9')])),
                min: 0,
                max: cap.map(|c| c.saturating_sub(1)),
            };
            Expr::Alt(vec![
                Expr::Literal(b"0".to_vec()),
                Expr::Seq(vec![Expr::Chars(vec![('1', '9')]), rest]),
            ])
        };
        {
            // One rule per schema for each unbounded kind (a big schema has thousands of
            // numbers; the lowering reads a rule's structure once and copies it).
            let minus = Expr::Repeat {
                e: Box::new(Expr::Literal(b"-".to_vec())),
                min: 0,
                max: Some(1),
            };
            if integer_only && (self.draft == 4 || self.opts.plain_integers) {
                // Draft 4 (or plain integers asked for): no fraction, no exponent.
                return self.common("int-plain", move |_| Expr::Seq(vec![minus, uint()]));
            }
            if integer_only {
                // Integral values: an integer, optionally `.0…`, optionally a non-negative exponent.
                let exp = Expr::Repeat {
                    e: Box::new(Expr::Seq(vec![
                        Expr::Chars(vec![('E', 'E'), ('e', 'e')]),
                        Expr::Repeat {
                            e: Box::new(Expr::Literal(b"+".to_vec())),
                            min: 0,
                            max: Some(1),
                        },
                        exp_digits(),
                    ])),
                    min: 0,
                    max: Some(1),
                };
                let exact_language = self.opts.number_digits.is_none() && !self.opts.grammar_only;
                return self.common("integer", move |c| {
                    let plain = Expr::Seq(vec![minus, uint(), frac0(), exp]);
                    if !exact_language {
                        return plain;
                    }
                    // Integral values in other spellings (`150e-1`, `1.5e1`): which is
                    // integral is not a regular language, so a check decides.
                    let exp_form = c.exponent_number();
                    let check = dec::NumberCheck {
                        integer: true,
                        ..Default::default()
                    };
                    let other = c.checked_rule("integer-exp", exp_form, check.into_check());
                    Expr::Alt(vec![plain, other])
                });
            }
            let frac = Expr::Repeat {
                e: Box::new(Expr::Seq(vec![Expr::Literal(b".".to_vec()), digits(1)])),
                min: 0,
                max: Some(1),
            };
            let exp = Expr::Repeat {
                e: Box::new(Expr::Seq(vec![
                    Expr::Chars(vec![('E', 'E'), ('e', 'e')]),
                    Expr::Repeat {
                        e: Box::new(Expr::Chars(vec![('+', '+'), ('-', '-')])),
                        min: 0,
                        max: Some(1),
                    },
                    exp_digits(),
                ])),
                min: 0,
                max: Some(1),
            };
            self.common("number", move |_| Expr::Seq(vec![minus, uint(), frac, exp]))
        }
    }

    /// Numbers within integral bounds, in plain decimal notation (`integer_only`: integers,
    /// with a `.0…` fraction unless the options want plain digits): exact digit automata.
    // Long (177 lines): the digit automata of a bounded range (lengths, first digits,
    // fractions, exponents), built in order; each step is commented.
    pub(super) fn bounded_number(
        &mut self,
        lo_i: Option<i128>,
        hi_i: Option<i128>,
        lo_ex: bool,
        hi_ex: bool,
        integer_only: bool,
    ) -> Expr {
        let frac0 = zero_fraction;
        let cap = self.opts.number_digits;
        let digits = move |min: u32| Expr::Repeat {
            e: Box::new(Expr::Chars(vec![('0', '9')])),
            min,
            max: cap.map(|c| c.max(min)),
        };
        if integer_only {
            if self.draft == 4 || self.opts.plain_integers {
                return self.capped(num::int_range(lo_i, hi_i));
            }
            return Expr::Seq(vec![self.capped(num::int_range(lo_i, hi_i)), frac0()]);
        }
        // number in a range with integer bounds: integer part ranges, with care at the
        // bounds for the fraction.
        let frac_any = Expr::Repeat {
            e: Box::new(Expr::Seq(vec![Expr::Literal(b".".to_vec()), digits(1)])),
            min: 0,
            max: Some(1),
        };
        // A fraction with a non-zero digit: zeros, the first non-zero digit, any digits
        // (each run capped alone: a DFA of `[0-9]{0,n}[1-9][0-9]{0,n}` would be
        // quadratic in `n`).
        let frac_nonzero = Expr::Seq(vec![
            Expr::Literal(b".".to_vec()),
            Expr::Repeat {
                e: Box::new(Expr::Literal(b"0".to_vec())),
                min: 0,
                max: cap,
            },
            Expr::Chars(vec![('1', '9')]),
            digits(0),
        ]);
        // Values x = ±(n + f). Build: for non-negative x, n in [a, b] with any fraction
        // where safe, plus exact handling at bound integers.
        let mut alts = Vec::new();
        let (l, h) = (lo_i, hi_i);
        // Positive side (x >= 0): n + f, f in [0,1).
        if h.is_none_or(|h| h >= 0) && !(h == Some(0) && hi_ex) {
            // x >= lo: if lo <= 0 any n >= 0; else n >= lo, and n == lo needs f > 0 when exclusive.
            let n_min: i128 = match l {
                Some(l) if l > 0 => l,
                _ => 0,
            };
            // x <= hi: n < hi any fraction; n == hi only f == 0 (and not if exclusive).
            match h {
                None => {
                    if l.is_some_and(|l| l > 0) && lo_ex {
                        alts.push(Expr::Seq(vec![
                            self.capped(num::uint_range(n_min as u128 + 1, None)),
                            frac_any.clone(),
                        ]));
                        alts.push(Expr::Seq(vec![
                            Expr::Literal(n_min.to_string().into_bytes()),
                            frac_nonzero.clone(),
                        ]));
                    } else if l.is_some_and(|l| l == 0) && lo_ex {
                        alts.push(Expr::Seq(vec![
                            self.capped(num::uint_range(1, None)),
                            frac_any.clone(),
                        ]));
                        alts.push(Expr::Seq(vec![
                            Expr::Literal(b"0".to_vec()),
                            frac_nonzero.clone(),
                        ]));
                    } else {
                        alts.push(Expr::Seq(vec![
                            self.capped(num::uint_range(n_min as u128, None)),
                            frac_any.clone(),
                        ]));
                    }
                }
                Some(h) => {
                    let low_int = if l.is_some_and(|l| l >= 0) && lo_ex {
                        n_min + 1
                    } else {
                        n_min
                    };
                    if low_int < h {
                        alts.push(Expr::Seq(vec![
                            self.capped(num::uint_range(low_int as u128, Some((h - 1) as u128))),
                            frac_any.clone(),
                        ]));
                    }
                    if l.is_some_and(|l| l >= 0) && lo_ex && n_min < h {
                        alts.push(Expr::Seq(vec![
                            Expr::Literal(n_min.to_string().into_bytes()),
                            frac_nonzero.clone(),
                        ]));
                    }
                    if !hi_ex && h >= n_min && !(l == Some(h) && lo_ex) {
                        alts.push(Expr::Seq(vec![
                            Expr::Literal(h.to_string().into_bytes()),
                            frac0(),
                        ]));
                    }
                }
            }
        }
        // Negative side (x < 0): x = -(n + f) with n + f > 0.
        if l.is_none_or(|l| l < 0) {
            // -(n+f) <= hi  <=>  n + f >= -hi ; -(n+f) >= lo <=> n + f <= -lo.
            let neg_hi_excl = hi_ex; // x < hi  <=> n + f > -hi
            let m_lo = h.map(|h| -h); // lower bound on n+f (could be <= 0)
            let m_hi = l.map(|l| -l); // upper bound on n+f
            let m_lo_ex = neg_hi_excl;
            let m_hi_ex = lo_ex;
            // n + f in (0 or m_lo, m_hi]
            let nlo: i128 = m_lo.map(|v| v.max(0)).unwrap_or(0);
            let strict_low = m_lo.is_none_or(|v| v <= 0) || m_lo_ex; // need n+f > nlo when true and nlo is the bound
            let mut neg = Vec::new();
            match m_hi {
                None => {
                    if strict_low {
                        neg.push(Expr::Seq(vec![
                            self.capped(num::uint_range(nlo as u128 + 1, None)),
                            frac_any.clone(),
                        ]));
                        neg.push(Expr::Seq(vec![
                            Expr::Literal(nlo.to_string().into_bytes()),
                            frac_nonzero.clone(),
                        ]));
                    } else {
                        neg.push(Expr::Seq(vec![
                            self.capped(num::uint_range(nlo as u128, None)),
                            frac_any.clone(),
                        ]));
                    }
                }
                Some(mh) => {
                    let first_full = if strict_low { nlo + 1 } else { nlo };
                    if first_full < mh {
                        neg.push(Expr::Seq(vec![
                            self.capped(num::uint_range(
                                first_full as u128,
                                Some((mh - 1) as u128),
                            )),
                            frac_any.clone(),
                        ]));
                    }
                    if strict_low && nlo < mh {
                        neg.push(Expr::Seq(vec![
                            Expr::Literal(nlo.to_string().into_bytes()),
                            frac_nonzero.clone(),
                        ]));
                    }
                    if !m_hi_ex && mh > 0 && (mh > nlo || (mh == nlo && !strict_low)) {
                        neg.push(Expr::Seq(vec![
                            Expr::Literal(mh.to_string().into_bytes()),
                            frac0(),
                        ]));
                    }
                }
            }
            if !neg.is_empty() {
                alts.push(Expr::Seq(vec![
                    Expr::Literal(b"-".to_vec()),
                    Expr::Alt(neg),
                ]));
            }
        }
        // -0 and -0.0 equal 0.
        let zero_ok = l.is_none_or(|l| l < 0 || (l == 0 && !lo_ex))
            && h.is_none_or(|h| h > 0 || (h == 0 && !hi_ex));
        if zero_ok {
            alts.push(Expr::Seq(vec![Expr::Literal(b"-0".to_vec()), frac0()]));
        }
        Expr::Alt(alts)
    }

    /// The JSON text of a value, in the accepted serialization (whitespace per policy;
    /// integral numbers also as `n.0`).
    /// Every JSON spelling of the number `d` (a `const`/`enum` value compared by value):
    /// its plain decimal notation with any trailing zeros (`100`, `100.0`, `-0.0` for 0) as
    /// grammar, and exponent spellings (`1e2`, `10E+1`) through a check of the exact value.
    pub(super) fn number_literal(&mut self, d: dec::Dec) -> Expr {
        if let Some(e) = self.number_literals.get(&d) {
            return e.clone();
        }
        let (neg, int, frac) = d.plain_parts();
        let zeros = || rep(lit("0"), 1, None);
        let mut plain = Vec::new();
        if neg {
            plain.push(lit("-"));
        } else if d.is_zero() {
            plain.push(rep(lit("-"), 0, Some(1)));
        }
        if frac.is_empty() {
            plain.push(lit(&int));
            plain.push(rep(Expr::Seq(vec![lit("."), zeros()]), 0, Some(1)));
        } else {
            plain.push(lit(&format!("{int}.{frac}")));
            plain.push(rep(lit("0"), 0, None));
        }
        let exp_form = self.exponent_number();
        let c = dec::NumberCheck {
            one_of: Some(vec![d.clone()]),
            ..Default::default()
        };
        let exp = self.checked_rule("number-value", exp_form, c.into_check());
        let e = Expr::Alt(vec![Expr::Seq(plain), exp]);
        self.number_literals.insert(d, e.clone());
        e
    }
}
