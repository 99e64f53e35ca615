//! The recursion bench: mask time along deep right, left and middle recursion.
//!
//! Each family is a grammar whose output grows one level per token: a string spelled by a
//! right-recursive rule (`chars ::= [a-z] chars | ""`, the way many hand-written GBNF and
//! EBNF grammars spell strings), the same by left recursion, nested brackets (middle
//! recursion), and a hand-written JSON grammar whose string rule recurses once per
//! character. The run commits a prefix, then one token per level up to the depth, timing
//! every mask; a family is flat when the last masks cost what the first did (the ratio of
//! the medians of the last and the first ten). An Earley parser without Leo's items or
//! an equivalent pays a right-recursive level on every later byte, so there the ratio
//! grows with the depth (issue 66: 80-360 ms per mask after 1,000 characters).

use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use ruvllm_engine::{Engine, Grammar, Limits, Matcher, Vocabulary};
use serde::Serialize;

/// One grammar family: its GBNF, the text before the recursion and the text of one level.
pub struct Family {
    /// The row's name.
    pub name: &'static str,
    /// The grammar.
    pub gbnf: &'static str,
    /// Committed first.
    pub prefix: &'static str,
    /// One level, committed `depth` times (one token).
    pub unit: &'static str,
}

/// The families of the bench.
pub const FAMILIES: &[Family] = &[
    Family {
        name: "right",
        gbnf: "root ::= \"\\\"\" chars \"\\\"\"\nchars ::= [a-z] chars | \"\"\n",
        prefix: "\"",
        unit: "a",
    },
    Family {
        name: "left",
        gbnf: "root ::= \"\\\"\" chars \"\\\"\"\nchars ::= chars [a-z] | \"\"\n",
        prefix: "\"",
        unit: "a",
    },
    Family {
        name: "middle",
        gbnf: "root ::= nest\nnest ::= \"[\" nest \"]\" | \"x\"\n",
        prefix: "",
        unit: "[",
    },
    Family {
        name: "json-right",
        gbnf: JSON_RIGHT,
        prefix: "{\"k\": \"",
        unit: "a",
    },
];

/// JSON as many users write it by hand: every string character one level of recursion.
const JSON_RIGHT: &str = r#"root ::= value
value ::= object | array | string | number | "true" | "false" | "null"
object ::= "{" ws ( member ( "," ws member )* )? "}"
member ::= string ws ":" ws value ws
array ::= "[" ws ( value ws ( "," ws value ws )* )? "]"
string ::= "\"" string-chars "\""
string-chars ::= char string-chars | ""
char ::= [^"\\\x00-\x1f] | "\\" ["\\/bfnrt]
number ::= "-"? [0-9]+ ( "." [0-9]+ )?
ws ::= [ ]?
"#;

/// One family at one depth.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub family: String,
    pub depth: usize,
    /// Median of the first ten masks, µs.
    pub first_us: f64,
    /// Median of the last ten masks, µs.
    pub last_us: f64,
    /// The slowest mask, µs.
    pub max_us: f64,
    /// `last_us / first_us`.
    pub ratio: f64,
    /// The mask error that ended the walk early (its level and message), if one did.
    pub error: Option<String>,
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Runs `family` to `depth` levels on `vocab` (each level one token, the unit's own). A
/// mask error (the parser's item budget, the mask time budget) ends the walk and is
/// recorded in the row; the figures are then those of the levels before it.
/// Cost: `depth` masks and commits.
pub fn run_one(
    engine: &Engine,
    vocab: &Vocabulary,
    family: &Family,
    depth: usize,
    limits: &Limits,
) -> Result<Row> {
    let g = Grammar::from_gbnf(family.gbnf, limits)
        .with_context(|| format!("{}: the grammar", family.name))?;
    let c = engine.constraint(&g, limits)?;
    let mut m = Matcher::new(&c)?;
    let token = |text: &str| {
        vocab
            .token_id(text.as_bytes())
            .with_context(|| format!("the vocabulary has no token {text:?}"))
    };
    for ch in family.prefix.chars() {
        m.commit_token(token(&ch.to_string())?)?;
    }
    let unit = token(family.unit)?;
    let mut mask = vec![0u32; vocab.mask_words()];
    let mut times = Vec::with_capacity(depth);
    let mut error = None;
    for level in 0..depth {
        let t = Instant::now();
        if let Err(e) = m.compute_mask(&mut mask) {
            error = Some(format!("level {level}: {e}"));
            break;
        }
        times.push(t.elapsed().as_secs_f64() * 1e6);
        if mask[(unit >> 5) as usize] >> (unit & 31) & 1 == 0 {
            bail!(
                "{}: level {level} does not allow {:?}",
                family.name,
                family.unit
            );
        }
        m.commit_token(unit)?;
    }
    if times.is_empty() {
        times.push(f64::NAN);
    }
    let k = times.len().min(10);
    let max_us = times.iter().copied().fold(0.0, f64::max);
    let first_us = median(&mut times[..k].to_vec());
    let n = times.len();
    let last_us = median(&mut times[n - k..]);
    Ok(Row {
        family: family.name.to_string(),
        depth,
        first_us,
        last_us,
        max_us,
        ratio: last_us / first_us.max(1e-3),
        error,
    })
}

/// Every family at every depth.
pub fn run(vocab: Arc<Vocabulary>, depths: &[usize], limits: &Limits) -> Result<Vec<Row>> {
    let engine = Engine::new(vocab.clone());
    let mut rows = Vec::new();
    for f in FAMILIES {
        for &d in depths {
            rows.push(run_one(&engine, &vocab, f, d, limits)?);
        }
    }
    Ok(rows)
}

/// The rows as a Markdown table.
pub fn table(rows: &[Row]) -> String {
    let mut s = String::from(
        "| family | depth | first masks (median µs) | last masks (median µs) | slowest (µs) | last / first | error |\n|---|---|---|---|---|---|---|\n",
    );
    for r in rows {
        s.push_str(&format!(
            "| {} | {} | {:.1} | {:.1} | {:.1} | {:.2} | {} |\n",
            r.family,
            r.depth,
            r.first_us,
            r.last_us,
            r.max_us,
            r.ratio,
            r.error.as_deref().unwrap_or("")
        ));
    }
    s
}
