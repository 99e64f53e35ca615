//! Arrays: `items`/`prefixItems`, `minItems`/`maxItems`, `contains`, `uniqueItems`.
//!
//! Part of the schema compiler (`Compiler` in the parent module), split by concern;
//! it may use everything of the parent and nothing of its siblings but through it.

use super::*;

impl Compiler<'_> {
    pub(super) fn array(
        &mut self,
        m: &Map<String, Value>,
        ptr: &str,
        depth: usize,
    ) -> Result<Expr, SchemaError> {
        let min = get_uint(m, "minItems", ptr)?.unwrap_or(0);
        let max = get_uint(m, "maxItems", ptr)?;
        if m.get("uniqueItems") == Some(&Value::Bool(true)) {
            if let Some(values) = small_value_set(m) {
                return self.unique_array(&values, min, max, ptr, depth);
            }
            return Err(unsupported(
                "uniqueItems",
                ptr,
                "uniqueItems is not supported yet",
            ));
        }
        if max.is_some_and(|x| x < min) {
            return Ok(Expr::Alt(vec![]));
        }
        if min > 10_000 {
            return Err(unsupported("minItems", ptr, "minItems above 10000"));
        }
        // prefixItems (2020-12) or items-as-array (draft-07) + additionalItems.
        let (prefix, rest): (Vec<Located>, Option<Located>) =
            match (m.get("prefixItems"), m.get("items")) {
                (Some(Value::Array(p)), items) => (
                    p.iter()
                        .enumerate()
                        .map(|(i, x)| (x, join(&join(ptr, "prefixItems"), &i.to_string())))
                        .collect(),
                    items.map(|x| (x, join(ptr, "items"))),
                ),
                (Some(_), _) => return Err(invalid(ptr, "prefixItems must be an array")),
                (None, Some(Value::Array(p))) => (
                    p.iter()
                        .enumerate()
                        .map(|(i, x)| (x, join(&join(ptr, "items"), &i.to_string())))
                        .collect(),
                    m.get("additionalItems")
                        .map(|x| (x, join(ptr, "additionalItems"))),
                ),
                (None, Some(x)) => (vec![], Some((x, join(ptr, "items")))),
                (None, None) => (vec![], None),
            };
        let mut prefix_e = Vec::new();
        for (x, p) in &prefix {
            prefix_e.push(self.compile(x, p, depth + 1)?);
        }
        let rest_empty = matches!(rest, Some((Value::Bool(false), _)));
        let rest_e = match rest {
            Some((x, p)) => self.compile(x, &p, depth + 1)?,
            None => self.any_value(),
        };
        let ws = self.ws();
        let sep = self.comma();
        // elems(i): the items from index i on (item i preceded by a comma when i > 0).
        let k = prefix_e.len();
        let max_total = if rest_empty {
            Some(max.map_or(k, |x| x.min(k)))
        } else {
            max
        };
        if min > max_total.unwrap_or(usize::MAX) {
            return Ok(Expr::Alt(vec![]));
        }
        let item_at = |i: usize| {
            if i < k {
                prefix_e[i].clone()
            } else {
                rest_e.clone()
            }
        };
        // Tail after the prefix: rest items, count in [min-k, max-k].
        let mut tail: Option<Expr> = None; // expression for "items k.. preceded by commas"
        if max_total.is_none_or(|x| x > k) {
            let rmin = min.saturating_sub(k) as u32;
            let rmax = max_total.map(|x| (x - k) as u32);
            tail = Some(Expr::Repeat {
                e: Box::new(Expr::Seq(vec![sep.clone(), rest_e.clone()])),
                min: rmin,
                max: rmax,
            });
        }
        // Build from the end: after(i) = what may follow item i-1.
        let mut after: Expr = match &tail {
            Some(t) => t.clone(),
            None => Expr::Empty,
        };
        for i in (1..k).rev() {
            let this = Expr::Seq(vec![sep.clone(), item_at(i), after.clone()]);
            after = if i >= min {
                Expr::Alt(vec![Expr::Empty, this])
            } else {
                this
            };
            after = self.rule("items", after);
        }
        let first = if k > 0 {
            Some(Expr::Seq(vec![item_at(0), after]))
        } else if tail.is_some() && max_total.is_none_or(|x| x > 0) {
            let rmin = min.saturating_sub(1) as u32;
            let rmax = max_total.map(|x| (x - 1) as u32);
            Some(Expr::Seq(vec![
                rest_e.clone(),
                Expr::Repeat {
                    e: Box::new(Expr::Seq(vec![sep.clone(), rest_e])),
                    min: rmin,
                    max: rmax,
                },
            ]))
        } else {
            None
        };
        Ok(array_frame(&ws, min == 0, first))
    }

    /// `uniqueItems` over a small set of values, exactly in the grammar: one rule per set
    /// of values already used, offering only the unused ones. Unlike a semantic check,
    /// this never lets the output reach a point where every continuation repeats a value
    /// (`["en","fr","en"` under `maxItems: 3` had no valid next token). Cost: at most
    /// 2^[`MAX_UNIQUE_VALUES`] rules.
    pub(super) fn unique_array(
        &mut self,
        values: &[Value],
        min: usize,
        max: Option<usize>,
        ptr: &str,
        depth: usize,
    ) -> Result<Expr, SchemaError> {
        let k = values.len();
        let max = max.map_or(k, |x| x.min(k));
        if min > max {
            return Ok(Expr::Alt(vec![]));
        }
        let items = join(ptr, "items");
        let mut vals = Vec::with_capacity(k);
        for v in values {
            vals.push(self.compile(&serde_json::json!({ "const": v }), &items, depth + 1)?);
        }
        let ws = self.ws();
        let sep = self.comma();
        // after[used]: what may follow once the values in `used` (a bit set) are written;
        // built from the largest sets down, so every successor exists.
        let mut after: Vec<Option<Expr>> = vec![None; 1 << k];
        let mut masks: Vec<usize> = (1..1usize << k)
            .filter(|u| u.count_ones() as usize <= max)
            .collect();
        masks.sort_by_key(|u| std::cmp::Reverse(u.count_ones()));
        for used in masks {
            let n = used.count_ones() as usize;
            let mut alts = Vec::new();
            if n >= min {
                alts.push(Expr::Empty);
            }
            if n < max {
                for (i, v) in vals.iter().enumerate() {
                    if used & (1 << i) == 0 {
                        let next = after[used | (1 << i)].clone().unwrap_or(Expr::Alt(vec![]));
                        alts.push(Expr::Seq(vec![sep.clone(), v.clone(), next]));
                    }
                }
            }
            after[used] = Some(self.rule("unique-items", Expr::Alt(alts)));
        }
        let first = (max > 0).then(|| {
            Expr::Alt(
                vals.iter()
                    .enumerate()
                    .map(|(i, v)| {
                        let next = after[1 << i].clone().unwrap_or(Expr::Alt(vec![]));
                        Expr::Seq(vec![v.clone(), next])
                    })
                    .collect(),
            )
        });
        Ok(array_frame(&ws, min == 0, first))
    }
}
