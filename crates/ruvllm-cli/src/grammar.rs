//! `ruvllm grammar`: check text against a grammar, show the token mask or the shortest
//! completion after a prefix.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use ruvllm_engine::schema::SchemaRegistry;
use ruvllm_engine::{
    Builtin, CheckResult, Constraint, Engine, Grammar, Limits, Matcher, Source, Vocabulary,
};

use crate::schema::{grammar_of, schema_source};

#[derive(Subcommand)]
pub enum GrammarCmd {
    /// Check text against a grammar: accepted, incomplete, or rejected at byte N.
    /// Exit status 0 when accepted, 1 otherwise.
    Check {
        #[command(flatten)]
        grammar: GrammarArgs,
        /// The text to check.
        #[arg(long, conflicts_with = "file")]
        text: Option<String>,
        /// A file holding the text to check.
        #[arg(long)]
        file: Option<PathBuf>,
    },
    /// Print the tokens a grammar allows after a text prefix (count and a sample).
    Mask {
        #[command(flatten)]
        grammar: GrammarArgs,
        /// tokenizer.json, GGUF model, or *.tiktoken file.
        #[arg(long)]
        tokenizer: PathBuf,
        /// Output so far (raw text, need not end on a token boundary). Repeat it for the
        /// masks after several prefixes from one load of the grammar and the tokenizer:
        /// each block then starts with `prefix N: "..."`.
        #[arg(long)]
        prefix: Vec<String>,
        /// How many allowed tokens to list.
        #[arg(long, default_value_t = 20)]
        sample: usize,
    },
    /// Print the shortest completion after a text prefix: the fewest tokens of the
    /// vocabulary that make the output complete (what budget-aware decoding needs at
    /// least), and their text. Exit status 1 when none is found.
    Complete {
        #[command(flatten)]
        grammar: GrammarArgs,
        /// tokenizer.json, GGUF model, or *.tiktoken file.
        #[arg(long)]
        tokenizer: PathBuf,
        /// Output so far (raw text, need not end on a token boundary). Repeat it for the
        /// completions after several prefixes from one load of the grammar and the
        /// tokenizer: each block then starts with `prefix N: "..."`, and the exit status
        /// is 1 when any has none.
        #[arg(long)]
        prefix: Vec<String>,
    },
}

/// Where the grammar comes from: exactly one of these.
#[derive(Args)]
#[group(required = true, multiple = false)]
struct GrammarSource {
    /// A GBNF grammar file (llama.cpp format).
    #[arg(long)]
    gbnf: Option<PathBuf>,
    /// A regular expression the whole output must match.
    #[arg(long)]
    regex: Option<String>,
    /// Comma-separated literal choices.
    #[arg(long, value_delimiter = ',')]
    choice: Option<Vec<String>>,
    /// A built-in grammar: json, json_object, jsonl, csv, xml, xml:NAME,NAME.
    #[arg(long)]
    builtin: Option<String>,
    /// A JSON Schema file.
    #[arg(long)]
    schema: Option<PathBuf>,
}

/// A grammar source plus the options that apply to it.
#[derive(Args)]
pub struct GrammarArgs {
    #[command(flatten)]
    src: GrammarSource,
    /// With --schema: accept object properties in any order (default: schema order).
    #[arg(long, requires = "schema")]
    any_order: bool,
}

/// The grammar compiled against the tokenizer's vocabulary.
fn constraint_for(
    grammar: &GrammarArgs,
    tokenizer: &PathBuf,
    limits: &Limits,
    registry: Option<&Arc<SchemaRegistry>>,
) -> Result<(Arc<Vocabulary>, Arc<Constraint>)> {
    let g = grammar.load(limits, registry)?;
    let vocab = Arc::new(
        Vocabulary::from_file(tokenizer)
            .with_context(|| format!("loading {}", tokenizer.display()))?,
    );
    let c = Engine::new(vocab.clone()).constraint(&g, limits)?;
    Ok((vocab, c))
}

/// A matcher of `c` that has read `prefix`; an error when the grammar rejects it.
fn matcher_at(c: &Arc<Constraint>, prefix: &str) -> Result<Matcher> {
    let mut m = Matcher::new(c)?;
    if let CheckResult::Rejected { at, expected } = m.check_bytes(prefix.as_bytes())? {
        bail!(
            "the prefix {prefix:?} is rejected at byte {at}; expected: {}",
            expected.join(" | ")
        );
    }
    Ok(m)
}

impl GrammarArgs {
    /// The grammar the flags name, as its [`Source`] compiles it under `limits` (a file's
    /// errors name the file).
    fn load(&self, limits: &Limits, registry: Option<&Arc<SchemaRegistry>>) -> Result<Grammar> {
        if let Some(p) = &self.src.gbnf {
            let text =
                std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
            return grammar_of(&Source::Gbnf(text), p, limits);
        }
        if let Some(p) = &self.src.schema {
            let source = schema_source(p, false, self.any_order, registry, false)?;
            return grammar_of(&source, p, limits);
        }
        let source = if let Some(r) = &self.src.regex {
            Source::Regex(r.clone())
        } else if let Some(c) = &self.src.choice {
            Source::Choices(c.clone())
        } else if let Some(b) = &self.src.builtin {
            Source::Builtin(Builtin::from_name(b)?)
        } else {
            bail!("no grammar given")
        };
        Ok(source.to_grammar(limits)?)
    }
}

/// Runs a `ruvllm grammar` command.
pub fn run(
    cmd: GrammarCmd,
    limits: &Limits,
    reg: Option<&Arc<SchemaRegistry>>,
) -> Result<ExitCode> {
    match cmd {
        GrammarCmd::Check {
            grammar,
            text,
            file,
        } => check(&grammar, text, file, limits, reg),
        GrammarCmd::Mask {
            grammar,
            tokenizer,
            prefix,
            sample,
        } => mask(&grammar, &tokenizer, &prefix, sample, limits, reg),
        GrammarCmd::Complete {
            grammar,
            tokenizer,
            prefix,
        } => complete(&grammar, &tokenizer, &prefix, limits, reg),
    }
}

/// `ruvllm grammar check`: exit status 0 when accepted, 1 otherwise.
fn check(
    grammar: &GrammarArgs,
    text: Option<String>,
    file: Option<PathBuf>,
    limits: &Limits,
    reg: Option<&Arc<SchemaRegistry>>,
) -> Result<ExitCode> {
    let text = match (text, file) {
        (Some(t), _) => t.into_bytes(),
        (None, Some(f)) => std::fs::read(&f).with_context(|| format!("reading {}", f.display()))?,
        (None, None) => bail!("give --text or --file"),
    };
    let g = grammar.load(limits, reg)?;
    // Checking text needs no vocabulary: a one-token dummy one will do.
    let vocab = Vocabulary::new("none", vec![b"\0".to_vec()], vec![true], vec![])?;
    let c = Engine::new(Arc::new(vocab)).constraint(&g, limits)?;
    let mut m = Matcher::new(&c)?;
    match m.check_bytes(&text)? {
        CheckResult::Accepted => {
            println!("accepted ({} bytes)", text.len());
            Ok(ExitCode::SUCCESS)
        }
        CheckResult::Incomplete { expected } => {
            println!(
                "incomplete: all {} bytes fit, but the text cannot end here",
                text.len()
            );
            println!("next byte must be one of {}", m.next_bytes()?.describe());
            println!("expected next: {}", expected.join(" | "));
            Ok(ExitCode::from(1))
        }
        CheckResult::Rejected { at, expected } => {
            let before = &text[..at];
            let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
            let col = before.len()
                - before
                    .iter()
                    .rposition(|&b| b == b'\n')
                    .map(|p| p + 1)
                    .unwrap_or(0)
                + 1;
            let found = String::from_utf8_lossy(&text[at..(at + 4).min(text.len())]).into_owned();
            println!("rejected at byte {at} (line {line}, column {col}), found {found:?}");
            println!(
                "the byte there must be one of {}",
                m.next_bytes()?.describe()
            );
            println!("expected: {}", expected.join(" | "));
            Ok(ExitCode::from(1))
        }
    }
}

/// `ruvllm grammar mask`: the allowed tokens after a prefix.
fn mask(
    grammar: &GrammarArgs,
    tokenizer: &PathBuf,
    prefixes: &[String],
    sample: usize,
    limits: &Limits,
    reg: Option<&Arc<SchemaRegistry>>,
) -> Result<ExitCode> {
    let (vocab, c) = constraint_for(grammar, tokenizer, limits, reg)?;
    for_each_prefix(&c, prefixes, |m| {
        print_mask(&vocab, m, sample)?;
        Ok(true)
    })
}

/// Runs `f` on a matcher after each prefix (after the empty output when there is none),
/// each block headed `prefix N: "..."` when there are several. Exit status 1 when `f`
/// returned false for any.
fn for_each_prefix(
    c: &Arc<Constraint>,
    prefixes: &[String],
    mut f: impl FnMut(Matcher) -> Result<bool>,
) -> Result<ExitCode> {
    let mut all = true;
    if prefixes.len() < 2 {
        let prefix = prefixes.first().map_or("", String::as_str);
        all = f(matcher_at(c, prefix)?)?;
    } else {
        for (i, prefix) in prefixes.iter().enumerate() {
            println!("prefix {}: {prefix:?}", i + 1);
            all &= f(matcher_at(c, prefix)?)?;
        }
    }
    Ok(if all {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// Prints the count of allowed tokens, whether EOS is among them, the mask's time and the
/// first `sample` allowed tokens.
fn print_mask(vocab: &Vocabulary, mut m: Matcher, sample: usize) -> Result<()> {
    let mut mask = vec![0u32; vocab.mask_words()];
    let t0 = std::time::Instant::now();
    m.compute_mask(&mut mask)?;
    let elapsed = t0.elapsed();
    let allowed: Vec<u32> = (0..vocab.len() as u32)
        .filter(|&t| mask[(t >> 5) as usize] >> (t & 31) & 1 == 1)
        .collect();
    let eos = vocab.eos_tokens().iter().any(|e| allowed.contains(e));
    println!(
        "{} of {} tokens allowed; EOS {}; computed in {:.1} us",
        allowed.len(),
        vocab.len(),
        if eos { "allowed" } else { "not allowed" },
        elapsed.as_secs_f64() * 1e6
    );
    for &t in allowed.iter().take(sample) {
        println!(
            "{t:>8}  {:?}",
            String::from_utf8_lossy(vocab.token_bytes(t))
        );
    }
    if allowed.len() > sample {
        println!("... and {} more", allowed.len() - sample);
    }
    Ok(())
}

/// `ruvllm grammar complete`: the shortest completion after each prefix.
fn complete(
    grammar: &GrammarArgs,
    tokenizer: &PathBuf,
    prefixes: &[String],
    limits: &Limits,
    reg: Option<&Arc<SchemaRegistry>>,
) -> Result<ExitCode> {
    let (vocab, c) = constraint_for(grammar, tokenizer, limits, reg)?;
    for_each_prefix(&c, prefixes, |m| print_completion(&vocab, m))
}

/// Prints the shortest completion from `m` (its token count, bytes and time, its text on
/// one line, its tokens), or that none was found (then false).
fn print_completion(vocab: &Vocabulary, mut m: Matcher) -> Result<bool> {
    let t0 = std::time::Instant::now();
    let w = m.shortest_completion()?;
    let elapsed = t0.elapsed();
    let Some(w) = w else {
        println!(
            "no completion found (a semantic check closes every way on, or the \
             search past one gave up); {:.1} us",
            elapsed.as_secs_f64() * 1e6
        );
        return Ok(false);
    };
    println!(
        "shortest completion: {} tokens, {} bytes; computed in {:.1} us",
        w.len(),
        w.text().len(),
        elapsed.as_secs_f64() * 1e6
    );
    println!("{}", String::from_utf8_lossy(w.text()));
    let pieces: Vec<String> = w
        .tokens()
        .iter()
        .map(|&t| format!("{:?}", String::from_utf8_lossy(vocab.token_bytes(t))))
        .collect();
    println!("tokens: {}", pieces.join(" "));
    Ok(true)
}
