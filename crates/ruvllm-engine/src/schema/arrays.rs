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
        let need = contains_need(m, ptr)?;
        if m.get("uniqueItems") == Some(&Value::Bool(true)) {
            if need.is_some() {
                return Err(unsupported(
                    "contains",
                    ptr,
                    "contains beside uniqueItems is checked, not counted in the grammar",
                ));
            }
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
        if need.is_some() && !prefix.is_empty() {
            return Err(unsupported(
                "contains",
                ptr,
                "contains beside prefixItems is checked, not counted in the grammar",
            ));
        }
        let mut prefix_e = Vec::new();
        for (x, p) in &prefix {
            prefix_e.push(self.compile(x, p, depth + 1)?);
        }
        let rest_empty = matches!(rest, Some((Value::Bool(false), _)));
        let rest_value = rest.as_ref().map(|(x, _)| (*x).clone());
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
        if let Some(need) = need {
            let items = rest_value.unwrap_or(Value::Bool(true));
            let bounds = (min, max_total);
            return self.contains_array(m, items, rest_e, need, bounds, ptr, depth);
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

    /// An array of `items` with at least `need` of them valid against `contains` too
    /// (`minContains`, 1 by default), exactly in the grammar: a rule per (items written,
    /// matches still needed), each offering any item or, while matches are needed, an item
    /// of `items ∧ contains`. Every valid array parses (its matching items in the second
    /// role), and the shortest completion writes the matches it needs instead of stopping
    /// at an array a check would refuse. `maxContains` stays a semantic check (it needs
    /// the items that do not match, a complement). Cost: at most
    /// [`MAX_CONTAINS_STATES`] rules, else the old relaxed grammar and a check.
    #[allow(clippy::too_many_arguments)]
    fn contains_array(
        &mut self,
        m: &Map<String, Value>,
        items: Value,
        item: Expr,
        need: usize,
        (min, max): (usize, Option<usize>),
        ptr: &str,
        depth: usize,
    ) -> Result<Expr, SchemaError> {
        if max.is_some_and(|x| need > x) {
            return Ok(Expr::Alt(vec![]));
        }
        // Items written, capped where the count stops mattering: at maxItems, or (no
        // maxItems) at minItems and at least 1 (from there on an item follows a comma).
        let cap = max.unwrap_or(min.max(1));
        let states = (cap + 1).saturating_mul(need);
        if states > MAX_CONTAINS_STATES {
            return Err(unsupported(
                "minContains",
                ptr,
                format!(
                    "counting {need} contains matches among {cap} items needs {states} rules \
                     (at most {MAX_CONTAINS_STATES} in the grammar; checked instead)"
                ),
            ));
        }
        let contains = m.get("contains").cloned().unwrap_or(Value::Bool(true));
        let matching = self.compile(
            &intersect::and_schema(items, contains),
            &join(ptr, "contains"),
            depth + 1,
        )?;
        // Each is referenced from every counting rule: one rule each, not copies.
        let item = self.rule("contains-any", item);
        let matching = self.rule("contains-match", matching);
        let sep = self.comma();
        let next = |i: usize| {
            if max.is_some() {
                i + 1
            } else {
                (i + 1).min(cap)
            }
        };
        let pre = |i: usize, e: Expr| {
            if i == 0 {
                e
            } else {
                Expr::Seq(vec![sep.clone(), e])
            }
        };
        // done(i): the rest once no match is needed, `i` items written.
        let done = |i: usize| -> Expr {
            let more = max.map(|x| (x - i) as u32);
            let rmin = min.saturating_sub(i) as u32;
            let rest = |lo: u32, hi: Option<u32>| Expr::Repeat {
                e: Box::new(Expr::Seq(vec![sep.clone(), item.clone()])),
                min: lo,
                max: hi,
            };
            if i > 0 {
                return rest(rmin, more);
            }
            let mut alts = Vec::new();
            if min == 0 {
                alts.push(Expr::Empty);
            }
            if more != Some(0) {
                let one = Expr::Seq(vec![
                    item.clone(),
                    rest(rmin.saturating_sub(1), more.map(|x| x - 1)),
                ]);
                alts.push(one);
            }
            Expr::Alt(alts)
        };
        // rule[(i, c)]: the rest with `i` items written and `c` >= 1 matches needed.
        let mut rule = HashMap::new();
        for c in 1..=need {
            for i in 0..=cap {
                if max.is_none_or(|x| x - i >= c) {
                    rule.insert((i, c), self.reserve("contains-items"));
                }
            }
        }
        let state = |i: usize, c: usize| -> Expr {
            if c == 0 {
                return done(i);
            }
            rule.get(&(i, c))
                .map_or(Expr::Alt(vec![]), |&r| Expr::Ref(r))
        };
        let mut bodies = Vec::with_capacity(rule.len());
        for (&(i, c), &r) in &rule {
            let j = next(i);
            let any = pre(i, Expr::Seq(vec![item.clone(), state(j, c)]));
            let hit = pre(i, Expr::Seq(vec![matching.clone(), state(j, c - 1)]));
            bodies.push((r, Expr::Alt(vec![any, hit])));
        }
        for (r, body) in bodies {
            self.set(r, body);
        }
        let ws = self.ws();
        Ok(array_frame(&ws, false, Some(state(0, need))))
    }

    /// `uniqueItems` over a small set of values, exactly in the grammar: one rule per set
    /// of values already used, offering only the unused ones. Unlike a semantic check,
    /// this never lets the output reach a point where every continuation repeats a value
    /// (`["en","fr","en"` under `maxItems: 3` had no valid next token). Cost: at most
    /// 2^`MAX_UNIQUE_VALUES` (`values.rs`) rules.
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

/// Most rules [`Compiler::contains_array`] makes for one array (items written times
/// matches needed); past it, `contains` is a semantic check over a relaxed grammar.
const MAX_CONTAINS_STATES: usize = 4096;

/// How many items must match `contains` (`minContains`, 1 by default), or `None` when
/// `contains` asks nothing of the grammar: absent, or `minContains: 0` (then only
/// `maxContains` constrains, and it is refused into a check). `minContains` is a keyword
/// from 2019-09 on; the draft filter has removed it from older schemas.
fn contains_need(m: &Map<String, Value>, ptr: &str) -> Result<Option<usize>, SchemaError> {
    if !m.contains_key("contains") {
        return Ok(None);
    }
    let need = get_uint(m, "minContains", ptr)?.unwrap_or(1);
    Ok((need > 0).then_some(need))
}
