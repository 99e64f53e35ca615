//! JSON types as bits (`type` keyword sets, the type of a value) and the shape of a
//! schema by its types, which the combinators use to prove branches disjoint.
//!
//! Part of the schema compiler (the parent module); it uses nothing but `serde_json`.

use super::*;

pub(super) const T_NULL: u8 = 1;

pub(super) const T_BOOLEAN: u8 = 2;

pub(super) const T_OBJECT: u8 = 4;

pub(super) const T_ARRAY: u8 = 8;

pub(super) const T_NUMBER: u8 = 16;

pub(super) const T_STRING: u8 = 32;

pub(super) const T_INTEGER: u8 = 64;

pub(super) const ALL_TYPES: u8 = 127;

pub(super) fn type_bit(t: &str) -> u8 {
    match t {
        "null" => T_NULL,
        "boolean" => T_BOOLEAN,
        "object" => T_OBJECT,
        "array" => T_ARRAY,
        "number" => T_NUMBER | T_INTEGER,
        "string" => T_STRING,
        "integer" => T_INTEGER,
        _ => 0,
    }
}

pub(super) fn type_mask(t: &Value) -> u8 {
    match t {
        Value::String(s) => type_bit(s),
        Value::Array(a) => a
            .iter()
            .filter_map(|x| x.as_str())
            .map(type_bit)
            .fold(0, |x, y| x | y),
        _ => ALL_TYPES,
    }
}

pub(super) fn validate_type_keyword(t: &Value, ptr: &str) -> Result<(), SchemaError> {
    let ok = |s: &str| TYPES.contains(&s);
    match t {
        Value::String(s) if ok(s) => Ok(()),
        Value::Array(a) if a.iter().all(|x| x.as_str().is_some_and(ok)) => Ok(()),
        _ => Err(invalid(ptr, format!("invalid type {t}"))),
    }
}

pub(super) fn type_of(v: &Value) -> u8 {
    match v {
        Value::Null => T_NULL,
        Value::Bool(_) => T_BOOLEAN,
        Value::Object(_) => T_OBJECT,
        Value::Array(_) => T_ARRAY,
        Value::String(_) => T_STRING,
        Value::Number(n) => {
            if n.is_i64() || n.is_u64() || n.as_f64().is_some_and(|f| f.fract() == 0.0) {
                T_NUMBER | T_INTEGER
            } else {
                T_NUMBER
            }
        }
    }
}

/// Summary of a schema for disjointness checks.
pub(super) struct Shape {
    pub(super) types: u8,
    pub(super) values: Option<Vec<Value>>,
    pub(super) props: Vec<(String, Shape)>,
}

impl Shape {
    pub(super) fn and(mut self, o: Shape) -> Shape {
        self.types &= o.types;
        if o.values.is_some() {
            self.values = o.values;
        }
        self.props.extend(o.props);
        self
    }

    pub(super) fn effective_types(&self) -> u8 {
        let mut t = self.types;
        if t & T_NUMBER != 0 {
            t |= T_INTEGER;
        }
        match &self.values {
            Some(v) => t & v.iter().map(type_of).fold(0, |a, b| a | b),
            None => t,
        }
    }

    pub(super) fn disjoint(&self, o: &Shape) -> bool {
        let (a, b) = (self.effective_types(), o.effective_types());
        // integer is a subset of number: compare with that in mind.
        let overlap = a & b;
        if overlap == 0 {
            return true;
        }
        if let (Some(x), Some(y)) = (&self.values, &o.values) {
            if !x.iter().any(|v| y.iter().any(|w| json_eq(v, w))) {
                return true;
            }
        }
        if overlap == T_OBJECT {
            for (k, s) in &self.props {
                for (k2, s2) in &o.props {
                    if k == k2 && s.disjoint(s2) {
                        return true;
                    }
                }
            }
        }
        false
    }
}

/// The types a `not` leaves: `Some(None)` when it constrains nothing (`not: false`),
/// `Some(Some(mask))` for `not` of `true`, `{}` or a type-only schema, `None` otherwise (and
/// when the rest would be "numbers but not integers", which a type cannot say).
pub(super) fn not_types(v: &Value) -> Option<Option<u8>> {
    match v {
        Value::Bool(false) => Some(None),
        Value::Bool(true) => Some(Some(0)),
        Value::Object(o) => {
            if o.keys()
                .any(|k| k != "type" && !ANNOTATIONS.contains(&k.as_str()))
            {
                return None;
            }
            let excluded = o.get("type").map(type_mask).unwrap_or(ALL_TYPES);
            if o.get("type").is_some() && validate_type_keyword(&o["type"], "").is_err() {
                return None;
            }
            let left = ALL_TYPES & !excluded;
            if left & T_NUMBER != 0 && left & T_INTEGER == 0 {
                return None;
            }
            Some(Some(left))
        }
        _ => None,
    }
}
