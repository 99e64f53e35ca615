//! Built-in grammars, written in GBNF and compiled like any user grammar.
//!
//! * `json`: any JSON value (RFC 8259). Whitespace between tokens is bounded: nothing, one
//!   space or tab, or a newline plus up to 20 spaces/tabs of indentation, so compact and
//!   pretty-printed JSON are both accepted but a model cannot loop on whitespace; no
//!   whitespace before the value or after it, so EOS is allowed right after the value.
//! * `json_object`: the same, but the value must be an object.
//! * `jsonl`: one or more JSON values, one per line (no newlines inside a value), the last
//!   newline optional.
//! * `csv`: RFC 4180 records (quoted fields with `""` escapes); lines may end in CRLF or LF
//!   and unquoted fields may hold any character but `,`, `"`, CR and LF (RFC 4180 allows
//!   only printable ASCII).
//! * `xml`: a well-formed XML subset: optional declaration, one root element, attributes
//!   with quoted values, character and entity references, comments, self-closing tags.
//!   Matching end-tag names to start-tag names is not context-free, so `xml` leaves the end
//!   tag's name free; `xml:a,b,c` restricts elements to the listed names and then enforces
//!   the match exactly. CDATA sections and DOCTYPE are not part of the subset.

use super::ir::Grammar;
use crate::error::GrammarError;
use crate::Limits;

/// A built-in format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Builtin {
    /// Any JSON value.
    Json,
    /// A JSON object.
    JsonObject,
    /// JSON Lines.
    Jsonl,
    /// RFC 4180 CSV.
    Csv,
    /// Well-formed XML subset; with names, end tags must match start tags exactly.
    Xml(Option<Vec<String>>),
}

impl Builtin {
    /// Parses `json`, `json_object`, `jsonl`, `csv`, `xml` or `xml:name1,name2`.
    pub fn from_name(name: &str) -> Result<Builtin, GrammarError> {
        Ok(match name {
            "json" => Builtin::Json,
            "json_object" | "json-object" => Builtin::JsonObject,
            "jsonl" => Builtin::Jsonl,
            "csv" => Builtin::Csv,
            "xml" => Builtin::Xml(None),
            n if n.starts_with("xml:") => {
                let names: Vec<String> = n[4..].split(',').map(|s| s.trim().to_string()).collect();
                for t in &names {
                    let ok = t.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
                        && t.chars().all(|c| c.is_ascii_alphanumeric() || "_:.-".contains(c));
                    if !ok {
                        return Err(GrammarError::Invalid(format!("invalid XML name {t:?}")));
                    }
                }
                Builtin::Xml(Some(names))
            }
            other => {
                return Err(GrammarError::Invalid(format!(
                    "unknown built-in grammar {other:?} (json, json_object, jsonl, csv, xml, xml:NAMES)"
                )))
            }
        })
    }

    /// The GBNF text of the built-in grammar.
    pub fn gbnf(&self) -> String {
        match self {
            Builtin::Json => format!("root ::= value\n{JSON_RULES}{JSON_WS}"),
            Builtin::JsonObject => format!("root ::= object\n{JSON_RULES}{JSON_WS}"),
            Builtin::Jsonl => format!("root ::= value (\"\\n\" value)* \"\\n\"?\n{JSON_RULES}ws ::= [ \\t]?\n"),
            Builtin::Csv => CSV.to_string(),
            Builtin::Xml(None) => format!("{XML_COMMON}element ::= \"<\" name attrs ws? \"/>\" | \"<\" name attrs ws? \">\" content \"</\" name ws? \">\"\n"),
            Builtin::Xml(Some(names)) => {
                let mut s = XML_COMMON.to_string();
                s.push_str("element ::= ");
                for (i, n) in names.iter().enumerate() {
                    if i > 0 {
                        s.push_str(" | ");
                    }
                    s.push_str(&format!(
                        "\"<{n}\" attrs ws? \"/>\" | \"<{n}\" attrs ws? \">\" content \"</{n}\" ws? \">\""
                    ));
                }
                s.push('\n');
                s
            }
        }
    }
}

const JSON_RULES: &str = r#"value ::= object | array | string | number | "true" | "false" | "null"
object ::= "{" ws "}" | "{" ws member (ws "," ws member)* ws "}"
member ::= string ws ":" ws value
array ::= "[" ws "]" | "[" ws value (ws "," ws value)* ws "]"
string ::= "\"" char* "\""
char ::= [^"\\\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4})
number ::= "-"? ("0" | [1-9] [0-9]*) ("." [0-9]+)? ([eE] [-+]? [0-9]+)?
"#;

const JSON_WS: &str = "ws ::= ([ \\t] | \"\\n\" [ \\t]{0,20})?\n";

const CSV: &str = r#"root ::= record (eol record)* eol?
record ::= field ("," field)*
field ::= "\"" ([^"] | "\"\"")* "\"" | [^,"\r\n]*
eol ::= "\r\n" | "\n"
"#;

const XML_COMMON: &str = r#"root ::= decl? ws? (comment ws?)* element ws? (comment ws?)*
decl ::= "<?xml" attrs ws? "?>"
attrs ::= (ws name ws? "=" ws? attvalue)*
attvalue ::= "\"" ([^<&"] | ref)* "\"" | "'" ([^<&'] | ref)* "'"
content ::= ([^<&] | element | ref | comment)*
ref ::= "&" name ";" | "&#" [0-9]+ ";" | "&#x" [0-9a-fA-F]+ ";"
comment ::= "<!--" ([^-] | "-" [^-])* "-->"
name ::= [A-Za-z_:] [A-Za-z0-9_:.-]*
ws ::= [ \t\r\n]{1,16}
"#;

pub(crate) fn grammar(which: Builtin, limits: &Limits) -> Result<Grammar, GrammarError> {
    Grammar::from_gbnf(&which.gbnf(), limits)
}
