//! `format`: each format the validator asserts, as grammar where its language is regular,
//! and a check where it is not.
//!
//! Every regex here is over decoded characters, anchored, and follows the RFC's ABNF:
//! RFC 3339 dates and times (leap seconds included), RFC 4291 IPv6 text forms (embedded
//! IPv4, any case), RFC 1123 host names, RFC 5321 e-mail addresses (quoted local parts and
//! address literals), RFC 3986 URIs and RFC 3987 IRIs (IP literals included). Where the
//! RFC says more than a regular language can (a leap second only at 23:59 UTC, a host name
//! of at most 253 characters, an A-label's punycode decoding to a valid U-label, IDNA
//! 2008's contextual rules), the regex is the regular superset and [`format_check`]
//! validates the decoded string when it completes: the closing quote of an invalid value
//! is refused. The check is the `jsonschema` crate's format validator, which reads the RFCs
//! as the JSON Schema Test Suite does (see docs/JSON_SCHEMA.md for the one place it does
//! not, and what ruvllm does there).
//!
//! Generation narrows a few of them to what the common readers take as well
//! ([`super::SchemaOptions::portable_values`]: no year 0000 or leap second, upper-case
//! `T`/`Z`, bounded fractions and durations, e-mail addresses as `email-validator` reads
//! them); those are subsets, never supersets, of the RFC's language.
//!
//! Part of the schema front end. Owns: the format grammars and checks. Uses: the IR.

use std::sync::{Arc, OnceLock};

use serde_json::{json, Value};

use crate::grammar::{Check, ValueCheck};

/// The decimal octet of an IPv4 address.
const OCTET: &str = r"(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])";

fn ipv4() -> String {
    format!(r"(?:{OCTET}\.){{3}}{OCTET}")
}

/// RFC 3986's `IPv6address`: every RFC 4291 text form, hex digits in either case.
fn ipv6() -> String {
    let h = "[0-9A-Fa-f]{1,4}";
    let ls32 = format!("(?:{h}:{h}|{})", ipv4());
    let forms = [
        format!("(?:{h}:){{6}}{ls32}"),
        format!("::(?:{h}:){{5}}{ls32}"),
        format!("(?:{h})?::(?:{h}:){{4}}{ls32}"),
        format!("(?:(?:{h}:){{0,1}}{h})?::(?:{h}:){{3}}{ls32}"),
        format!("(?:(?:{h}:){{0,2}}{h})?::(?:{h}:){{2}}{ls32}"),
        format!("(?:(?:{h}:){{0,3}}{h})?::{h}:{ls32}"),
        format!("(?:(?:{h}:){{0,4}}{h})?::{ls32}"),
        format!("(?:(?:{h}:){{0,5}}{h})?::{h}"),
        format!("(?:(?:{h}:){{0,6}}{h})?::"),
    ];
    format!("(?:{})", forms.join("|"))
}

/// An RFC 1123 label: letters, digits and inner hyphens, 1 to 63 characters.
const LABEL: &str = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?";

/// The regular superset of RFC 3986's `IP-literal` (`[` IPv6 or IPvFuture `]`) that the
/// URI formats' grammar takes: bracketed address characters. The exact IPv6 automaton
/// inside a URI's made every URI schema's lexeme twice as costly to build (8 ms of
/// compile time per schema), so the literal's exact form is left to the format check,
/// which runs only on values that have one.
fn ip_literal() -> &'static str {
    r"\[[\-0-9A-Za-z:._~!$&'()*+,;=]+\]"
}

/// RFC 3987's `ucschar` (`iri == true`), or nothing.
fn ucschar(iri: bool) -> String {
    if !iri {
        return String::new();
    }
    let mut s = String::from(r"\x{A0}-\x{D7FF}\x{F900}-\x{FDCF}\x{FDF0}-\x{FFEF}");
    for plane in 1..=13u32 {
        s.push_str(&format!(r"\x{{{plane:X}0000}}-\x{{{plane:X}FFFD}}"));
    }
    s.push_str(r"\x{E1000}-\x{EFFFD}");
    s
}

/// RFC 3986 URIs (`iri == false`) or RFC 3987 IRIs: `(absolute, relative reference)`.
fn uri_parts(iri: bool) -> (String, String) {
    let u = ucschar(iri);
    let private = if iri {
        r"\x{E000}-\x{F8FF}\x{F0000}-\x{FFFFD}\x{100000}-\x{10FFFD}"
    } else {
        ""
    };
    let pct = "%[0-9A-Fa-f]{2}";
    // `-` first: anywhere else in a class it could start a range.
    let unreserved_sub = format!("\\-A-Za-z0-9._~!$&'()*+,;={u}");
    let pchar = format!("(?:[{unreserved_sub}:@]|{pct})");
    let userinfo = format!("(?:(?:[{unreserved_sub}:]|{pct})*@)?");
    let reg_name = format!("(?:[{unreserved_sub}]|{pct})*");
    let host = format!("(?:{}|{reg_name})", ip_literal());
    let auth = format!("//{userinfo}{host}(?::[0-9]*)?");
    let query = format!(r"(?:\?(?:{pchar}|[/?{private}])*)?");
    let fragment = format!(r"(?:#(?:{pchar}|[/?])*)?");
    let abempty = format!("(?:/{pchar}*)*");
    // "//" authority path-abempty, path-absolute, path-rootless, or empty.
    let hier = format!(r"(?:{auth}{abempty}|/(?:{pchar}+{abempty})?|{pchar}+{abempty}|)");
    let absolute = format!(r"[A-Za-z][A-Za-z0-9+.-]*:{hier}{query}{fragment}");
    // "//" authority path-abempty, path-absolute, path-noscheme (no colon in the first
    // segment), or empty.
    let noscheme = format!("(?:[{unreserved_sub}@]|{pct})+{abempty}");
    let relative =
        format!(r"(?:{auth}{abempty}|/(?:{pchar}+{abempty})?|{noscheme}|){query}{fragment}");
    (absolute, relative)
}

/// RFC 6570 URI templates (levels 1-4): literals (any character but controls, space,
/// `"%<>\^`{|}`, except as `%HH`) and expressions `{op var,var:3,list*}`. `'` is a
/// literal: the published ABNF leaves it out (`%x26 / %x28-3B`), which verified erratum
/// 6937 corrects to `%x26-3B` (the RFC's own example `'{var}'` needs it; the JSON Schema
/// Test Suite has "an apostrophe in a literal is valid").
fn uri_template() -> String {
    let pct = "%[0-9A-Fa-f]{2}";
    let literal = format!(
        r"(?:[\x21\x23\x24\x26-\x3B\x3D\x3F-\x5B\x5D\x5F\x61-\x7A\x7E{}\x{{E000}}-\x{{F8FF}}\x{{F0000}}-\x{{FFFFD}}\x{{100000}}-\x{{10FFFD}}]|{pct})",
        ucschar(true)
    );
    let varchar = format!("(?:[A-Za-z0-9_]|{pct})");
    let varspec = format!(r"{varchar}(?:\.?{varchar})*(?::[1-9][0-9]{{0,3}}|\*)?");
    let expression = format!(r"\{{[+#./;?&=,!@|]?{varspec}(?:,{varspec})*\}}");
    format!("(?:{literal}|{expression})*")
}

/// RFC 5321's `Local-part` (`idn`: RFC 6531's, with UTF-8 beyond ASCII) and the address
/// literals of its `Domain`.
fn email(idn: bool) -> String {
    let wide = if idn { r"\x{80}-\x{10FFFF}" } else { "" };
    let atext = format!("[A-Za-z0-9!#$%&'*+/=?^_`{{|}}~{wide}-]");
    let dot_atom = format!(r"{atext}+(?:\.{atext}+)*");
    let quoted = format!(r#""(?:[\x20\x21\x23-\x5B\x5D-\x7E{wide}]|\\[\x20-\x7E])*""#);
    // Address literals (`[127.0.0.1]`, `[IPv6:::1]`) as a bracketed superset, which the
    // format check decides: the exact IPv6 automaton in every e-mail's lexeme made its
    // first masks slow (see `ip_literal`).
    let literal = r"\[[\-0-9A-Za-z:.]+\]";
    let domain = if idn {
        idn_hostname()
    } else {
        format!(r"{LABEL}(?:\.{LABEL})*")
    };
    format!("(?:{dot_atom}|{quoted})@(?:{domain}|{literal})")
}

/// The e-mail addresses that the common readers take as well as RFC 5321 (the portable
/// subset, [`super::SchemaOptions::portable_values`]): what Pydantic's `EmailStr` (the
/// `email-validator` package, whose JSON Schema is `format: email`) accepts besides the
/// RFC: a dot-atom local part (no quoted one), a domain name (no address literal) of at
/// least two labels, no label with `--` in its third and fourth places but an A-label's
/// `xn--`, and a top-level label of letters that is not a special-use name (`arpa`,
/// `invalid`, `local`, `localhost`, `onion`, `test`). Lengths stay the format check's.
fn portable_email() -> String {
    let atext = "[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]";
    let (a, h) = ("[A-Za-z0-9]", "[A-Za-z0-9-]");
    // Labels of 1-3, 4 and 5-63 characters; from 5 on the third and fourth are not both
    // hyphens unless the label starts with `xn`.
    let label = format!(
        "(?:{a}(?:{h}?{a})?|{a}{h}{h}{a}|{a}{h}(?:-{a}|{a}{h}){h}{{0,58}}{a}|[xX][nN]--{h}{{0,58}}{a})"
    );
    let tld = letters_except(&["arpa", "invalid", "local", "localhost", "onion", "test"]);
    format!(r"{atext}+(?:\.{atext}+)*@(?:{label}\.)+{tld}")
}

/// A regex of the nonempty strings of ASCII letters that are none of `words` (lower case;
/// compared in any case). Cost: one alternative per node of the words' trie.
fn letters_except(words: &[&str]) -> String {
    fn node(words: &[&[u8]], root: bool) -> String {
        let ends = words.iter().any(|w| w.is_empty());
        let mut firsts: Vec<u8> = words.iter().filter_map(|w| w.first().copied()).collect();
        firsts.sort_unstable();
        firsts.dedup();
        let others: String = (b'a'..=b'z')
            .filter(|c| !firsts.contains(c))
            .flat_map(|c| [c as char, c.to_ascii_uppercase() as char])
            .collect();
        let mut alts = vec![format!("[{others}][A-Za-z]*")];
        for &c in &firsts {
            let rest: Vec<&[u8]> = words
                .iter()
                .filter(|w| w.first() == Some(&c))
                .map(|w| &w[1..])
                .collect();
            let (lo, up) = (c as char, c.to_ascii_uppercase() as char);
            alts.push(format!("[{lo}{up}]{}", node(&rest, false)));
        }
        let optional = if ends || root { "" } else { "?" };
        format!("(?:{}){optional}", alts.join("|"))
    }
    let words: Vec<&[u8]> = words.iter().map(|w| w.as_bytes()).collect();
    node(&words, true)
}

/// The regular superset of IDNA 2008 host names: labels of letters, digits, hyphens and
/// characters beyond ASCII, separated by the four dots IDNA maps to `.`.
fn idn_hostname() -> String {
    let ch = r"[A-Za-z0-9\x{80}-\x{3001}\x{3003}-\x{FF0D}\x{FF0F}-\x{FF60}\x{FF62}-\x{10FFFF}]";
    let label = format!(r"(?:{ch}|-)*{ch}(?:{ch}|-)*|{ch}");
    format!(r"(?:{label})(?:[.\x{{3002}}\x{{FF0E}}\x{{FF61}}](?:{label}))*")
}

/// The regex (over decoded characters, anchored) of each format enforced by grammar;
/// `None` for a format it cannot say at all (`regex`: a check of the whole value then) or
/// an unknown one.
///
/// `portable` ([`super::SchemaOptions::portable_values`]): years from 0001, at most 9
/// digits of fractional seconds, `T` and `Z` in upper case and no leap second, at most 6
/// digits in each number of a duration, e-mail addresses as `email-validator` takes them
/// ([`portable_email`]) and relative JSON pointers as python-jsonschema reads them.
/// `grammar_only` ([`super::SchemaOptions::grammar_only`]): `time` and `date-time`
/// without leap seconds, so that they need no check ([`format_check`]).
pub(super) fn format_regex(f: &str, portable: bool, grammar_only: bool) -> Option<String> {
    let year = if portable {
        "(?:[0-9]{3}[1-9]|[0-9]{2}[1-9]0|[0-9][1-9]00|[1-9]000)"
    } else {
        "[0-9]{4}"
    };
    let fraction = if portable { "{1,9}" } else { "+" };
    // The centuries (first two digits) of the years divisible by 400, which have 29 February.
    let centuries = if portable {
        "0[48]|[2468][048]|[13579][26]"
    } else {
        "[02468][048]|[13579][26]"
    };
    let date = r"(?:YEAR-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)|02-(?:0[1-9]|1[0-9]|2[0-8]))|(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:CENTURIES)00)-02-29)"
        .replace("YEAR", year)
        .replace("CENTURIES", centuries);
    // Seconds up to 60: a leap second, which the check allows at 23:59 UTC only (and
    // which Python's `time` and Pydantic refuse: not in the portable subset).
    let leap = if grammar_only || portable { "" } else { "|60" };
    // `t` and `z` in either case, as RFC 3339 allows; Python's `fromisoformat` reads
    // upper case only.
    let (t, z) = if portable {
        ("T", "Z")
    } else {
        ("[Tt]", "[Zz]")
    };
    let time = r"(?:(?:[01][0-9]|2[0-3]):[0-5][0-9]:(?:[0-5][0-9]LEAP)(?:\.[0-9]FRACTION)?(?:ZULU|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9]))"
        .replace("FRACTION", fraction)
        .replace("LEAP", leap)
        .replace("ZULU", z);
    Some(match f {
        "date" => date.clone(),
        "time" => time.clone(),
        "date-time" => format!("{date}{t}{time}"),
        "uuid" => {
            "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}".into()
        }
        "ipv4" => ipv4(),
        "ipv6" => ipv6(),
        "hostname" => format!(r"{LABEL}(?:\.{LABEL})*"),
        "idn-hostname" => idn_hostname(),
        "email" if portable => portable_email(),
        "email" => email(false),
        "idn-email" => email(true),
        "uri" => uri_parts(false).0,
        "iri" => uri_parts(true).0,
        "uri-reference" => {
            let (a, r) = uri_parts(false);
            format!("(?:{a}|{r})")
        }
        "iri-reference" => {
            let (a, r) = uri_parts(true);
            format!("(?:{a}|{r})")
        }
        "json-pointer" => r"(?:/(?:[^~/]|~[01])*)*".into(),
        "uri-template" => uri_template(),
        // OpenAPI's `byte`: base64 (RFC 4648, padded), as `contentEncoding` reads it.
        "byte" => encoding_regex("base64")?,
        // Portable: no digit after a 0 in the number (python-jsonschema refuses `100/a`:
        // it reads any 0 before a digit as a leading zero).
        "relative-json-pointer" => {
            let n = if portable { "[1-9]+0?" } else { "[1-9][0-9]*" };
            format!(r"(?:0|{n})(?:#|(?:/(?:[^~/]|~[01])*)*)")
        }
        // RFC 3339 appendix A durations; portable: each number at most 6 digits, which
        // keeps every duration within Python's `timedelta` (999,999,999 days; Pydantic
        // also refuses 8 digits of hours).
        "duration" => {
            let time = r"T(?:[0-9]+H(?:[0-9]+M(?:[0-9]+S)?)?|[0-9]+M(?:[0-9]+S)?|[0-9]+S)";
            let d = format!(
                r"P(?:(?:[0-9]+Y(?:[0-9]+M(?:[0-9]+D)?)?|[0-9]+M(?:[0-9]+D)?|[0-9]+D)(?:{time})?|{time}|[0-9]+W)"
            );
            if portable {
                d.replace("[0-9]+", "[0-9]{1,6}")
            } else {
                d
            }
        }
        _ => return None,
    })
}

/// Validates a string value (its JSON text, quotes included) against one format.
struct FormatCheck {
    format: String,
    validator: jsonschema::Validator,
}

impl std::fmt::Debug for FormatCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "FormatCheck({})", self.format)
    }
}

/// A host name as the `hostname` format means it: RFC 1123 labels (letters, digits and
/// hyphens, not at either end, at most 63 characters; at most 253 in all), and every label
/// with the ACE prefix (`xn--`, any case) a valid A-label, which `a_label` (the
/// `jsonschema` crate's `hostname` validator, given that one label) judges: punycode of a
/// valid IDNA 2008 U-label, the prefix in lower case (the JSON Schema Test Suite refuses
/// `XN--aa---o47jg78q`).
/// Unlike that validator alone, a label with `--` in its third and fourth places that is
/// not an A-label is accepted, as RFC 1123 does (RFC 5891 reserves such labels for IDNA
/// but does not make them invalid host names; the JSON Schema Test Suite and
/// python-jsonschema accept them). Cost: linear in the name.
fn is_hostname(name: &str, a_label: &jsonschema::Validator) -> bool {
    let ldh = |l: &str| {
        (1..=63).contains(&l.len())
            && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    name.len() <= 253
        && name.split('.').all(|label| {
            ldh(label)
                && (!label
                    .get(..4)
                    .is_some_and(|p| p.eq_ignore_ascii_case("xn--"))
                    || a_label.is_valid(&Value::String(label.to_string())))
        })
}

/// The `hostname` format check that ruvllm's validators use (the same as the grammar's), for
/// `jsonschema`'s `ValidationOptions::with_format("hostname", ...)`, so that what the
/// grammar allows and what post-validation accepts are one language. Cost: nothing until
/// the first call, which builds a small validator (every schema's check validator is
/// built with this format, and most never read a hostname); then linear in the name.
pub fn hostname_format() -> impl Fn(&str) -> bool + Send + Sync + 'static {
    let a_label = OnceLock::new();
    move |name: &str| {
        let a_label = a_label.get_or_init(|| {
            jsonschema::options()
                .should_validate_formats(true)
                .build(&json!({ "format": "hostname" }))
                .expect("the format schema is valid")
        });
        is_hostname(name, a_label)
    }
}

/// The `uri-template` format check for ruvllm's validators: RFC 6570's grammar (with
/// erratum 6937), the same regex as the grammar's, so that what the mask allows and what
/// post-validation accepts are one language. Cost: nothing until the first call, which
/// builds the regex (see [`hostname_format`]); then linear in the text.
pub fn uri_template_format() -> impl Fn(&str) -> bool + Send + Sync + 'static {
    let re = OnceLock::new();
    move |s: &str| {
        re.get_or_init(|| {
            regex_automata::meta::Regex::new(&format!(r"\A(?:{})\z", uri_template()))
                .expect("the URI template regex is valid")
        })
        .is_match(s)
    }
}

impl ValueCheck for FormatCheck {
    fn accepts(&self, text: &[u8]) -> bool {
        // The URI formats' grammar is exact but for IP literals (see `ip_literal`).
        let uri = matches!(
            self.format.as_str(),
            "uri" | "uri-reference" | "iri" | "iri-reference"
        );
        if uri && !text.contains(&b'[') {
            return true;
        }
        match serde_json::from_slice::<Value>(text) {
            Ok(Value::String(name)) if self.format == "hostname" => {
                is_hostname(&name, &self.validator)
            }
            Ok(v @ Value::String(_)) => self.validator.is_valid(&v),
            _ => false,
        }
    }

    fn describe(&self) -> String {
        let what = match self.format.as_str() {
            "time" | "date-time" => "a leap second (:60) only at 23:59 UTC",
            "hostname" => "at most 253 characters in all, and A-labels (xn--) that decode to valid IDNA labels",
            "idn-hostname" => "IDNA 2008's contextual rules, A-labels and length",
            "email" | "idn-email" => "the domain's host-name rules (length, A-labels)",
            _ => "the IP literals (IPv6, IPvFuture) of its authority",
        };
        format!("format {:?}: {what}", self.format)
    }
}

/// The check of what `f`'s regex does not say (`None`: the regex says it all, which it
/// does for `time` and `date-time` without leap seconds: `no_leap`, under
/// `grammar_only` or `portable_values`). Cost: one small validator build.
pub(super) fn format_check(f: &str, no_leap: bool) -> Option<Check> {
    if no_leap && matches!(f, "time" | "date-time") {
        return None;
    }
    if !matches!(
        f,
        "time"
            | "date-time"
            | "hostname"
            | "idn-hostname"
            | "email"
            | "idn-email"
            | "uri"
            | "uri-reference"
            | "iri"
            | "iri-reference"
    ) {
        return None;
    }
    let validator = jsonschema::options()
        .should_validate_formats(true)
        .build(&json!({ "format": f }))
        .ok()?;
    Some(Check(Arc::new(FormatCheck {
        format: f.to_string(),
        validator,
    })))
}

/// The RFC 4648 encodings a draft 4-7 `contentEncoding` asserts, as the validator
/// decodes them: padded to whole groups, and the bits past the last byte zero (so every
/// byte string has one spelling). `None` for an encoding nobody defines.
///
/// Each is a regular language: whole groups, then one short group whose last character
/// may only carry the bits left over. Cost: a string of a few hundred bytes.
pub(super) fn encoding_regex(encoding: &str) -> Option<String> {
    // The alphabet, and for a short final group (characters written, padding) the
    // characters whose unused low bits are zero.
    let (alphabet, group, tails): (&str, usize, &[(usize, usize)]) = match encoding {
        "base64" | "base64url" => ("", 4, &[(2, 4), (3, 2)]),
        "base32" | "base32hex" => ("", 8, &[(2, 2), (4, 4), (5, 1), (7, 3)]),
        // The validator reads hex in either case.
        "base16" => ("0123456789ABCDEFabcdef", 2, &[]),
        _ => return None,
    };
    let alphabet: String = match encoding {
        "base64" => "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".into(),
        "base64url" => "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".into(),
        "base32" => "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567".into(),
        "base32hex" => "0123456789ABCDEFGHIJKLMNOPQRSTUV".into(),
        _ => alphabet.into(),
    };
    let class = |chars: &mut dyn Iterator<Item = char>| {
        let mut s = String::from("[");
        for c in chars {
            if matches!(c, '-' | '/' | '+' | '_') {
                s.push('\\');
            }
            s.push(c);
        }
        s.push(']');
        s
    };
    let any = class(&mut alphabet.chars());
    let mut out = format!("^(?:{any}{{{group}}})*");
    if !tails.is_empty() {
        let short: Vec<String> = tails
            .iter()
            .map(|&(n, zero_bits)| {
                let last = class(
                    &mut alphabet
                        .chars()
                        .enumerate()
                        .filter(|(i, _)| i % (1 << zero_bits) == 0)
                        .map(|(_, c)| c),
                );
                format!("{any}{{{}}}{last}={{{}}}", n - 1, group - n)
            })
            .collect();
        out.push_str(&format!("(?:{})?", short.join("|")));
    }
    out.push('$');
    Some(out)
}
