//! Sub-schemas the grammar cannot hold exactly: compiled as a relaxed grammar plus a
//! semantic check of the value (memoized per distinct sub-schema by a structural hash).
//!
//! Part of the schema compiler (`Compiler` in the parent module), split by concern;
//! it may use everything of the parent and nothing of its siblings but through it.

use super::*;

impl Compiler<'_> {
    /// A checked sub-schema, one rule per distinct value: references are pointers into
    /// the root, so equal values mean the same wherever they are. This also ends the
    /// recursion of a relaxed schema whose inlined references lead back to itself (a
    /// recursive `$ref` beside `unevaluatedProperties`).
    pub(super) fn compile_checked(
        &mut self,
        s: &Value,
        ptr: &str,
        depth: usize,
        keyword: &str,
        reason: &str,
    ) -> Result<Expr, SchemaError> {
        // At depth 0 (the root, or a `$ref` target, which `ref_rule` already compiles once
        // per pointer) a value does not recur: no key to compute.
        if depth == 0 {
            return self.compile_checked_once(s, ptr, depth, keyword, reason);
        }
        let name = format!("checkedv{}", ptr.replace('/', "-"));
        self.rule_per_value(PerValue::Checked, s, &name, |c| {
            c.compile_checked_once(s, ptr, depth, keyword, reason)
        })
    }

    pub(super) fn compile_checked_once(
        &mut self,
        s: &Value,
        ptr: &str,
        depth: usize,
        keyword: &str,
        reason: &str,
    ) -> Result<Expr, SchemaError> {
        if self.checks.len() >= MAX_CHECKS {
            let why = if reason.contains("semantic checks") {
                reason.to_string()
            } else {
                format!("{reason} (and the schema needs more than {MAX_CHECKS} semantic checks)")
            };
            return Err(unsupported(keyword, ptr, why));
        }
        let mut strip: Vec<&str> = REFUSED
            .iter()
            .chain(CHECK_ONLY_EXTRA)
            .copied()
            .filter(|k| relaxable(k, ""))
            .collect();
        strip.extend(strip_for(keyword, reason));
        let mut body = None;
        for _ in 0..4 {
            let relaxed = self.with_encoding(s, self.relax(s, &strip, 0));
            match self.compile_exact(&relaxed, ptr, depth) {
                Ok(b) => {
                    body = Some(b);
                    break;
                }
                Err(SchemaError::Unsupported {
                    keyword, reason, ..
                }) if relaxable(&keyword, &reason) => {
                    let more = strip_for(&keyword, &reason);
                    if more.iter().all(|k| strip.contains(k)) {
                        break;
                    }
                    strip.extend(more);
                }
                Err(e) => return Err(e),
            }
        }
        let relaxed_ok = body.is_some();
        let body = match body {
            Some(b) => b,
            // Last resort: any value of the declared types, everything else checked.
            None => {
                let loose = match s.get("type") {
                    Some(t) => serde_json::json!({ "type": t }),
                    None => Value::Bool(true),
                };
                self.compile_exact(&loose, ptr, depth)?
            }
        };
        // What the relaxation left out, when this module checks it without a validator.
        if let Some(m) = s.as_object().filter(|m| relaxed_ok && !has_combinator(m)) {
            let removed: Vec<&str> = m
                .keys()
                .map(|k| k.as_str())
                .filter(|k| strip.contains(k))
                .collect();
            // Only the encoding left out, and `with_encoding` put it in the grammar as a
            // pattern: the grammar is exact, nothing to check.
            let encoded = removed == ["contentEncoding"]
                && !["pattern", "format", "minLength", "maxLength"]
                    .iter()
                    .any(|k| m.contains_key(*k));
            if encoded {
                return Ok(body);
            }
            if let Some(c) = check::native(m, &removed, self.draft) {
                return Ok(self.checked_rule(
                    &format!("checked{}", ptr.replace('/', "-")),
                    body,
                    c,
                ));
            }
        }
        if self.check_builder.is_none() {
            self.check_builder = Some(
                check::CheckBuilder::new(self.root, self.draft)
                    .map_err(|e| invalid("", format!("cannot register the schema: {e}")))?,
            );
        }
        // One check per value: `compile_checked` already memoizes by value.
        let c = self.check_builder.as_mut().unwrap().build(s, ptr);
        Ok(self.checked_rule(&format!("checked{}", ptr.replace('/', "-")), body, c))
    }

    /// A copy of `s` without the keywords in `strip` (and `oneOf` read as `anyOf`), with
    /// references inlined (up to a depth, then any value): a superset of `s` for the
    /// grammar. Sub-schemas of properties and items are kept: they are compiled (and
    /// checked if need be) on their own.
    pub(super) fn relax(&self, s: &Value, strip: &[&str], depth: usize) -> Value {
        let m = match s {
            Value::Object(m) => m,
            other => return other.clone(),
        };
        if depth > 6 {
            return Value::Bool(true);
        }
        let mut out = Map::new();
        let mut all_of: Vec<Value> = Vec::new();
        if let Some(Value::String(r)) = m.get("$ref") {
            if let Some(t) = self.resolve(r, "").ok().and_then(|p| self.lookup(&p)) {
                let t = self.relax(t, strip, depth + 1);
                if self.draft <= 7 {
                    return t; // siblings of $ref are ignored before 2019-09
                }
                all_of.push(t);
            } else {
                out.insert("$ref".into(), Value::String(r.clone()));
            }
        }
        for (k, v) in m {
            let k = k.as_str();
            if k == "$ref" {
                continue;
            }
            if k == "oneOf" && strip.contains(&"oneOf") {
                let branches: Vec<Value> = v
                    .as_array()
                    .map(|a| a.iter().map(|b| self.relax(b, strip, depth + 1)).collect())
                    .unwrap_or_default();
                all_of.push(serde_json::json!({ "anyOf": branches }));
                continue;
            }
            if strip.contains(&k) {
                continue;
            }
            match k {
                "allOf" | "anyOf" => {
                    let branches: Vec<Value> = v
                        .as_array()
                        .map(|a| a.iter().map(|b| self.relax(b, strip, depth + 1)).collect())
                        .unwrap_or_default();
                    if k == "allOf" {
                        all_of.extend(branches);
                    } else {
                        out.insert(k.into(), Value::Array(branches));
                    }
                }
                // Keys a stripped patternProperties would have allowed.
                "additionalProperties"
                    if strip.contains(&"patternProperties")
                        && m.contains_key("patternProperties") => {}
                _ => {
                    out.insert(k.into(), v.clone());
                }
            }
        }
        if !all_of.is_empty() {
            out.insert("allOf".into(), Value::Array(all_of));
        }
        Value::Object(out)
    }
}
