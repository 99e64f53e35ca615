//! The keyword tables: annotations (no effect on validity), keywords refused with their
//! reason, and the assertions each type's compiler reads.
//!
//! Data only; the parent module reads it.
//!
//! Part of the schema front end. Owns: the keyword tables. Uses: nothing of the crate.

/// Keywords with no effect on validation.
pub(super) const ANNOTATIONS: &[&str] = &[
    "title",
    "description",
    "examples",
    "default",
    "$comment",
    "$schema",
    "$id",
    "$defs",
    "definitions",
    "$anchor",
    "deprecated",
    "readOnly",
    "writeOnly",
    "contentMediaType",
    "contentEncoding",
    "contentSchema",
    "$vocabulary",
    "$dynamicAnchor",
    "$recursiveAnchor",
];

/// Validation keywords that are refused when they constrain anything.
pub(super) const REFUSED: &[&str] = &[
    "not",
    "if",
    "then",
    "else",
    // `contains` and `minContains` are counted in the grammar (`arrays.rs`); `maxContains`
    // needs the items that do not match, a complement, and is checked.
    "maxContains",
    "patternProperties",
    "propertyNames",
    "dependentRequired",
    "dependentSchemas",
    "dependencies",
    "unevaluatedProperties",
    "unevaluatedItems",
    "$dynamicRef",
    "$recursiveRef",
];

/// Keywords that constrain instances (all others are annotations or unknown, and ignored).
pub(super) const ASSERTIONS: &[&str] = &[
    "type",
    "enum",
    "const",
    "multipleOf",
    "maximum",
    "exclusiveMaximum",
    "minimum",
    "exclusiveMinimum",
    "maxLength",
    "minLength",
    "pattern",
    "format",
    "maxItems",
    "minItems",
    "uniqueItems",
    "maxContains",
    "minContains",
    "contains",
    "maxProperties",
    "minProperties",
    "required",
    "dependentRequired",
    "dependencies",
    "properties",
    "patternProperties",
    "additionalProperties",
    "propertyNames",
    "dependentSchemas",
    "items",
    "prefixItems",
    "additionalItems",
    "unevaluatedItems",
    "unevaluatedProperties",
    "allOf",
    "anyOf",
    "oneOf",
    "not",
    "if",
    "then",
    "else",
    "$ref",
    "$dynamicRef",
    "$recursiveRef",
];

pub(super) const TYPES: [&str; 7] = [
    "null", "boolean", "object", "array", "number", "string", "integer",
];
