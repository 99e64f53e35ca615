//! Objects: `properties`, `required`, `additionalProperties`, `patternProperties`,
//! `propertyNames`, property counts, in declared or any order.
//!
//! Part of the schema compiler (`Compiler` in the parent module), split by concern;
//! it may use everything of the parent and nothing of its siblings but through it.

use super::*;

impl Compiler<'_> {
    pub(super) fn object(
        &mut self,
        m: &Map<String, Value>,
        ptr: &str,
        depth: usize,
    ) -> Result<Expr, SchemaError> {
        let props: Vec<(String, Cow<Value>)> = match m.get("properties") {
            Some(Value::Object(p)) => p
                .iter()
                .map(|(k, v)| (k.clone(), Cow::Borrowed(v)))
                .collect(),
            Some(_) => return Err(invalid(ptr, "properties must be an object")),
            None => vec![],
        };
        let required: Vec<String> = match m.get("required") {
            Some(Value::Array(r)) => r
                .iter()
                .map(|x| {
                    x.as_str()
                        .map(String::from)
                        .ok_or_else(|| invalid(ptr, "required must list strings"))
                })
                .collect::<Result<_, _>>()?,
            Some(_) => return Err(invalid(ptr, "required must be an array")),
            None => vec![],
        };
        let additional: Value = match m.get("additionalProperties") {
            Some(v) => v.clone(),
            None if self.opts.strict => Value::Bool(false),
            None if self.opts.closed_objects && m.contains_key("properties") => Value::Bool(false),
            None => Value::Bool(true),
        };
        // Required keys not in properties: they must come from additionalProperties.
        let mut props = props;
        for r in &required {
            if !props.iter().any(|(k, _)| k == r) {
                props.push((r.clone(), Cow::Owned(additional.clone())));
            }
        }
        let min_p = get_uint(m, "minProperties", ptr)?;
        let max_p = get_uint(m, "maxProperties", ptr)?;
        let n_req = props.iter().filter(|(k, _)| required.contains(k)).count();
        let addl_allowed = additional != Value::Bool(false);
        if self.opts.any_order {
            return self.object_any_order(
                &props,
                &required,
                &additional,
                (min_p, max_p),
                ptr,
                depth,
            );
        }
        if min_p.is_some_and(|x| x > n_req) {
            return Err(unsupported(
                "minProperties",
                ptr,
                "minProperties above the number of required properties",
            ));
        }
        if max_p.is_some_and(|x| addl_allowed || x < props.len()) {
            return Err(unsupported(
                "maxProperties",
                ptr,
                "maxProperties below the number of possible properties",
            ));
        }
        let ws = self.ws();
        let colon = self.colon();
        let sep = self.comma();
        let mut kvs = Vec::new();
        for (k, v) in &props {
            let vp = join(&join(ptr, "properties"), k);
            let val = self.compile(v, &vp, depth + 1)?;
            kvs.push(Expr::Seq(vec![
                self.literal_value(&Value::String(k.clone())),
                colon.clone(),
                val,
            ]));
        }
        let is_req: Vec<bool> = props.iter().map(|(k, _)| required.contains(k)).collect();
        // Additional properties: keys other than the declared ones.
        let addl_kv = if addl_allowed {
            let keys: Vec<&str> = props.iter().map(|(k, _)| k.as_str()).collect();
            let key = self.key_not_in(&keys, ptr)?;
            let val = self.compile(&additional, &join(ptr, "additionalProperties"), depth + 1)?;
            Some(self.rule("additional-kv", Expr::Seq(vec![key, colon.clone(), val])))
        } else {
            None
        };
        let addl_tail = addl_kv.as_ref().map(|kv| Expr::Repeat {
            e: Box::new(Expr::Seq(vec![sep.clone(), kv.clone()])),
            min: 0,
            max: None,
        });
        // after(i): properties i.. each preceded by a comma, then additional ones.
        let n = kvs.len();
        let mut after: Vec<Expr> = vec![Expr::Empty; n + 1];
        after[n] = addl_tail.clone().unwrap_or(Expr::Empty);
        for i in (0..n).rev() {
            let this = Expr::Seq(vec![sep.clone(), kvs[i].clone(), after[i + 1].clone()]);
            let e = if is_req[i] {
                this
            } else {
                Expr::Alt(vec![this, after[i + 1].clone()])
            };
            after[i] = self.rule("props", e);
        }
        // The first property written: j, with every property before j optional.
        let mut firsts = Vec::new();
        for j in 0..n {
            firsts.push(Expr::Seq(vec![kvs[j].clone(), after[j + 1].clone()]));
            if is_req[j] {
                break;
            }
        }
        let all_optional = !is_req.iter().any(|&r| r);
        if all_optional {
            if let Some(kv) = &addl_kv {
                firsts.push(Expr::Seq(vec![kv.clone(), addl_tail.clone().unwrap()]));
            }
        }
        let mut alts = Vec::new();
        if all_optional {
            alts.push(Expr::Seq(vec![
                Expr::Literal(b"{".to_vec()),
                ws.clone(),
                Expr::Literal(b"}".to_vec()),
            ]));
        }
        if !firsts.is_empty() {
            alts.push(Expr::Seq(vec![
                Expr::Literal(b"{".to_vec()),
                ws.clone(),
                Expr::Alt(firsts),
                ws.clone(),
                Expr::Literal(b"}".to_vec()),
            ]));
        }
        if addl_allowed && self.opts.unique_keys {
            // Additional keys may repeat each other: a check keeps them unique.
            let c = self.unique_keys_check();
            let name = format!("object{}", ptr.replace('/', "-"));
            return Ok(self.checked_rule(&name, Expr::Alt(alts), c));
        }
        Ok(Expr::Alt(alts))
    }

    /// The check that an object's keys are unique ([`SchemaOptions::unique_keys`]), one
    /// per schema.
    pub(super) fn unique_keys_check(&mut self) -> Check {
        let key = "object keys unique".to_string();
        if let Some(c) = self.check_memo.get(&key) {
            return c.clone();
        }
        let c = check::object_keys(Vec::new(), 0, usize::MAX, Vec::new());
        self.check_memo.insert(key, c.clone());
        c
    }

    /// Properties in any order: a repetition of "one of the declared key/value pairs, or an
    /// additional one", with a check that keys are unique, required ones present and the
    /// count within bounds.
    pub(super) fn object_any_order(
        &mut self,
        props: &[(String, Cow<Value>)],
        required: &[String],
        additional: &Value,
        (min_p, max_p): (Option<usize>, Option<usize>),
        ptr: &str,
        depth: usize,
    ) -> Result<Expr, SchemaError> {
        let ws = self.ws();
        let colon = Expr::Seq(vec![ws.clone(), lit(":"), ws.clone()]);
        let sep = Expr::Seq(vec![ws.clone(), lit(","), ws.clone()]);
        let mut kvs = Vec::new();
        for (k, v) in props {
            let vp = join(&join(ptr, "properties"), k);
            let val = self.compile(v, &vp, depth + 1)?;
            kvs.push(Expr::Seq(vec![
                self.literal_value(&Value::String(k.clone())),
                colon.clone(),
                val,
            ]));
        }
        if additional != &Value::Bool(false) {
            let keys: Vec<&str> = props.iter().map(|(k, _)| k.as_str()).collect();
            let key = self.key_not_in(&keys, ptr)?;
            let val = self.compile(additional, &join(ptr, "additionalProperties"), depth + 1)?;
            kvs.push(Expr::Seq(vec![key, colon.clone(), val]));
        }
        let required: Vec<String> = required
            .iter()
            .filter(|r| props.iter().any(|(k, _)| k == *r))
            .cloned()
            .collect();
        let min = min_p.unwrap_or(0).max(required.len());
        let max = max_p.unwrap_or(usize::MAX);
        if min > max || (kvs.is_empty() && min > 0) {
            return Ok(Expr::Alt(vec![]));
        }
        let body = if kvs.is_empty() {
            Expr::Seq(vec![lit("{"), ws.clone(), lit("}")])
        } else {
            let kv = self.rule("kv", Expr::Alt(kvs));
            let list = Expr::Seq(vec![kv.clone(), rep(Expr::Seq(vec![sep, kv]), 0, None)]);
            let inner = if min > 0 {
                list
            } else {
                rep(Expr::Seq(vec![list, ws.clone()]), 0, Some(1))
            };
            Expr::Seq(vec![lit("{"), ws.clone(), inner, ws.clone(), lit("}")])
        };
        let hints = super::hints::object_members(
            props.iter().map(|(k, v)| (k.as_str(), v.as_ref())),
            &required,
            self.root,
        );
        let key = format!("object keys\n{min}\n{max}\n{required:?}\n{hints:?}");
        let c = match self.check_memo.get(&key) {
            Some(c) => c.clone(),
            None => {
                let c = check::object_keys(required, min, max, hints);
                self.check_memo.insert(key, c.clone());
                c
            }
        };
        Ok(self.checked_rule(&format!("object{}", ptr.replace('/', "-")), body, c))
    }

    /// A JSON string other than the given keys (llama.cpp-style trie complement).
    pub(super) fn key_not_in(&mut self, keys: &[&str], ptr: &str) -> Result<Expr, SchemaError> {
        if let Some(k) = keys.iter().find(|k| k.chars().count() > MAX_KEY_CHARS) {
            return Err(unsupported(
                "additionalProperties",
                ptr,
                format!(
                    "a declared property name is longer than {MAX_KEY_CHARS} characters ({} bytes)",
                    k.len()
                ),
            ));
        }
        let ch = self.json_char();
        let q = || Expr::Literal(b"\"".to_vec());
        if keys.is_empty() {
            return Ok(Expr::Seq(vec![q(), rep(ch, 0, None), q()]));
        }
        // One rule per key set, which the compiler lowers to one lexeme built from the
        // keys (see `compile::keys`). (`ch` is the same rule for the whole schema.)
        let mut set: Vec<String> = keys.iter().map(|k| k.to_string()).collect();
        set.sort_unstable();
        set.dedup();
        if let Some(&r) = self.key_sets.get(&set) {
            return Ok(Expr::Ref(r));
        }
        let r = self.reserve("other-key");
        self.key_sets.insert(set, r);
        self.set(
            r,
            Expr::KeyComplement(Arc::new(KeyComplement::new(keys, ch))),
        );
        Ok(Expr::Ref(r))
    }
}
