//! Combinators: `anyOf`/`oneOf`/`allOf`/`not` and `if`/`then`/`else` flattened into
//! alternatives of simple schemas, content assertions, and the shape (types and keywords) a
//! branch allows.
//!
//! Part of the schema compiler (`Compiler` in the parent module), split by concern;
//! it may use everything of the parent and nothing of its siblings but through it.

use super::*;

impl Compiler<'_> {
    /// Resolves combinators into a list of combinator-free schemas (their union).
    pub(super) fn flatten(
        &self,
        m: &Map<String, Value>,
        ptr: &str,
        depth: usize,
    ) -> Result<Vec<Map<String, Value>>, SchemaError> {
        if depth > 16 {
            return Err(unsupported(
                "$ref",
                ptr,
                "recursive reference inside allOf/anyOf/oneOf with sibling keywords",
            ));
        }
        check_keywords(m, ptr)?;
        self.check_content(m, ptr)?;
        let mut base = Map::new();
        for (k, v) in m {
            if !matches!(k.as_str(), "allOf" | "anyOf" | "oneOf" | "$ref")
                && !ANNOTATIONS.contains(&k.as_str())
            {
                base.insert(k.clone(), v.clone());
            }
        }
        if let Some(n) = base.remove("not") {
            match not_types(&n) {
                Some(None) => {}
                Some(Some(mask)) => {
                    let names: Vec<Value> =
                        ["null", "boolean", "object", "array", "string", "integer"]
                            .iter()
                            .filter(|t| mask & type_bit(t) == type_bit(t))
                            .map(|t| {
                                Value::String(if *t == "integer" && mask & T_NUMBER != 0 {
                                    "number".into()
                                } else {
                                    t.to_string()
                                })
                            })
                            .collect();
                    if names.is_empty() {
                        return Ok(vec![]);
                    }
                    let restricted = Map::from_iter([("type".to_string(), Value::Array(names))]);
                    base = match merge(&base, &restricted, ptr)? {
                        Some(b) => b,
                        None => return Ok(vec![]),
                    };
                }
                None => {
                    return Err(unsupported(
                        "not",
                        ptr,
                        "only `not` of a boolean, {} or a type-only schema is supported yet",
                    ))
                }
            }
        }
        let mut cur = vec![base];
        let mut parts: Vec<Part> = Vec::new();
        if let Some(r) = m.get("$ref") {
            let r = r
                .as_str()
                .ok_or_else(|| invalid(ptr, "$ref must be a string"))?;
            let t = self.resolve(r, ptr)?;
            parts.push((
                self.flatten_value(self.lookup(&t).unwrap(), &t, depth + 1)?,
                None,
            ));
        }
        if let Some(list) = m.get("allOf") {
            let list = list
                .as_array()
                .filter(|l| !l.is_empty())
                .ok_or_else(|| invalid(ptr, "allOf must be a non-empty array"))?;
            for (i, x) in list.iter().enumerate() {
                parts.push((
                    self.flatten_value(x, &join(&join(ptr, "allOf"), &i.to_string()), depth + 1)?,
                    None,
                ));
            }
        }
        for key in ["anyOf", "oneOf"] {
            if let Some(list) = m.get(key) {
                let list = list
                    .as_array()
                    .filter(|l| !l.is_empty())
                    .ok_or_else(|| invalid(ptr, format!("{key} must be a non-empty array")))?;
                let mut alts = Vec::new();
                for (i, x) in list.iter().enumerate() {
                    alts.extend(self.flatten_value(
                        x,
                        &join(&join(ptr, key), &i.to_string()),
                        depth + 1,
                    )?);
                }
                parts.push((alts, (key == "oneOf").then(|| join(ptr, key))));
            }
        }
        for (alts, one_of) in parts {
            let mut next = Vec::new();
            for a in &cur {
                for b in &alts {
                    if let Some(x) = merge(a, b, ptr)? {
                        next.push(x);
                    }
                }
            }
            if let Some(p) = one_of {
                // Exclusivity holds for the merged branches if they are pairwise disjoint.
                let vals: Vec<Value> = next.iter().map(|m| Value::Object(m.clone())).collect();
                self.check_disjoint(vals.iter().collect(), &p)?;
            }
            if next.len() > MAX_BRANCHES {
                return Err(unsupported(
                    "anyOf",
                    ptr,
                    format!("the combination expands to more than {MAX_BRANCHES} alternatives"),
                ));
            }
            cur = next;
        }
        Ok(cur)
    }

    pub(super) fn flatten_value(
        &self,
        v: &Value,
        ptr: &str,
        depth: usize,
    ) -> Result<Vec<Map<String, Value>>, SchemaError> {
        match v {
            Value::Bool(true) => Ok(vec![Map::new()]),
            Value::Bool(false) => Ok(vec![]),
            Value::Object(m) => self.flatten(m, ptr, depth),
            _ => Err(invalid(ptr, "a schema must be an object or a boolean")),
        }
    }

    /// Draft 7 and earlier treat `contentMediaType`/`contentEncoding` as assertions (later
    /// drafts as annotations). The RFC 4648 encodings are enforced as grammar, the
    /// `application/json` media type by a check of the decoded text when the string
    /// completes (an `Unsupported` error [`relaxable`] reads as "check it"); another
    /// encoding is refused. Another media type is an annotation, as it is to the validator
    /// (no validator decides what a valid `image/png` is).
    pub(super) fn check_content(
        &self,
        m: &Map<String, Value>,
        ptr: &str,
    ) -> Result<(), SchemaError> {
        if self.draft > 7 {
            return Ok(());
        }
        let mut found = None;
        if let Some(e) = m.get("contentEncoding") {
            let e = e
                .as_str()
                .ok_or_else(|| invalid(&join(ptr, "contentEncoding"), "must be a string"))?;
            if format::encoding_regex(e).is_none() {
                return Err(unsupported(
                    "contentEncoding",
                    ptr,
                    format!("no validator knows the encoding {e:?} (known: base64, base64url, base32, base32hex, base16)"),
                ));
            }
            found = Some("contentEncoding");
        }
        if let Some(t) = m.get("contentMediaType") {
            let t = t
                .as_str()
                .ok_or_else(|| invalid(&join(ptr, "contentMediaType"), "must be a string"))?;
            // Any other media type is an annotation to every validator (none can say what
            // a valid `application/x-pem-file` is): the check judges as they do.
            if t == "application/json" {
                found = Some("contentMediaType");
            }
        }
        match found {
            Some(k) => Err(unsupported(k, ptr, CONTENT_CHECKED)),
            None => Ok(()),
        }
    }

    /// `relaxed` (the grammar's schema for `s`) with `s`'s draft-7 `contentEncoding` as a
    /// `pattern`, where nothing else constrains the string's text: the encoding is a
    /// regular language, so the grammar says it exactly.
    pub(super) fn with_encoding(&self, s: &Value, relaxed: Value) -> Value {
        let enc = s
            .get("contentEncoding")
            .and_then(Value::as_str)
            .filter(|_| self.draft <= 7)
            .and_then(format::encoding_regex);
        match (enc, relaxed) {
            (Some(re), Value::Object(mut m))
                if !["pattern", "format", "minLength", "maxLength"]
                    .iter()
                    .any(|k| m.contains_key(*k)) =>
            {
                m.insert("pattern".into(), Value::String(re));
                Value::Object(m)
            }
            (_, relaxed) => relaxed,
        }
    }

    /// Refuses a `oneOf` whose branches may overlap.
    pub(super) fn check_disjoint(&self, list: Vec<&Value>, ptr: &str) -> Result<(), SchemaError> {
        let shapes: Vec<Shape> = list.iter().map(|v| self.shape(v, 0)).collect();
        for i in 0..shapes.len() {
            for j in i + 1..shapes.len() {
                if !shapes[i].disjoint(&shapes[j]) {
                    return Err(unsupported(
                        "oneOf",
                        ptr,
                        format!("branches {i} and {j} may both match one instance; exclusive oneOf is only supported for provably disjoint branches"),
                    ));
                }
            }
        }
        Ok(())
    }

    pub(super) fn shape(&self, v: &Value, depth: usize) -> Shape {
        let mut sh = Shape {
            types: ALL_TYPES,
            values: None,
            props: Vec::new(),
        };
        let Value::Object(m) = v else {
            if v == &Value::Bool(false) {
                sh.types = 0;
            }
            return sh;
        };
        if depth > 8 {
            return sh;
        }
        if let Some(Value::String(r)) = m.get("$ref") {
            if let Ok(t) = self.resolve(r, "") {
                if let Some(tv) = self.lookup(&t) {
                    let inner = self.shape(tv, depth + 1);
                    sh = sh.and(inner);
                }
            }
        }
        if let Some(t) = m.get("type") {
            sh.types &= type_mask(t);
        }
        if let Some(c) = m.get("const") {
            sh.values = Some(vec![c.clone()]);
        }
        if let Some(Value::Array(e)) = m.get("enum") {
            sh.values = Some(e.clone());
        }
        if let Some(Value::Array(all)) = m.get("allOf") {
            for x in all {
                let inner = self.shape(x, depth + 1);
                sh = sh.and(inner);
            }
        }
        if let (Some(Value::Object(props)), Some(Value::Array(req))) =
            (m.get("properties"), m.get("required"))
        {
            for r in req {
                if let (Some(name), Some(p)) = (r.as_str(), r.as_str().and_then(|n| props.get(n))) {
                    sh.props.push((name.to_string(), self.shape(p, depth + 1)));
                }
            }
        }
        sh
    }

    pub(super) fn simple(
        &mut self,
        m: &Map<String, Value>,
        ptr: &str,
        depth: usize,
    ) -> Result<Expr, SchemaError> {
        let mut types = m.get("type").map(type_mask).unwrap_or(ALL_TYPES);
        if let Some(t) = m.get("type") {
            validate_type_keyword(t, ptr)?;
        }
        if types & T_NUMBER != 0 {
            types |= T_INTEGER;
        }
        // enum / const: the listed values that also pass the other keywords.
        let values: Option<Vec<Value>> = match (m.get("enum"), m.get("const")) {
            (Some(Value::Array(e)), None) => Some(e.clone()),
            (None, Some(c)) => Some(vec![c.clone()]),
            (Some(Value::Array(e)), Some(c)) => {
                Some(e.iter().filter(|x| json_eq(x, c)).cloned().collect())
            }
            (Some(_), _) => return Err(invalid(ptr, "enum must be an array")),
            (None, None) => None,
        };
        if let Some(values) = values {
            let mut alts = Vec::new();
            for v in values {
                if value_passes(&v, m, ptr, self.draft)? {
                    alts.push(self.literal_value(&v));
                }
            }
            if alts.len() < SHARED_ENUM {
                return Ok(Expr::Alt(alts));
            }
            // A long enum is one rule, the same for every copy of it: a schema lists its
            // country or region codes in many places, and each inline copy was lowered
            // (its regex built, printed and hashed) again.
            let body = Expr::Alt(alts);
            if let Some(&r) = self.enums.get(&body) {
                return Ok(Expr::Ref(r));
            }
            let r = self.reserve("enum");
            self.set(r, body.clone());
            self.enums.insert(body, r);
            return Ok(Expr::Ref(r));
        }
        let mut alts = Vec::new();
        if types & T_NULL != 0 {
            alts.push(Expr::Literal(b"null".to_vec()));
        }
        if types & T_BOOLEAN != 0 {
            alts.push(Expr::Alt(vec![
                Expr::Literal(b"true".to_vec()),
                Expr::Literal(b"false".to_vec()),
            ]));
        }
        if types & T_STRING != 0 {
            alts.push(self.string(m, ptr)?);
        }
        if types & (T_NUMBER | T_INTEGER) != 0 {
            alts.push(self.number(m, ptr, types & T_NUMBER == 0)?);
        }
        if types & T_ARRAY != 0 {
            alts.push(self.array(m, ptr, depth)?);
        }
        if types & T_OBJECT != 0 {
            alts.push(self.object(m, ptr, depth)?);
        }
        Ok(if alts.len() == 1 {
            alts.pop().unwrap()
        } else {
            Expr::Alt(alts)
        })
    }
}
