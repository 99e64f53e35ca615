//! One generation's decoding, whatever model computes the logits: jump-forward, the
//! mask, sampling, stop sequences, reasoning budgets and the result. Each backend
//! ([`crate::CandleBackend`], the llama.cpp backend) wraps a [`Decoder`] with its own KV
//! state and drives it through [`crate::BatchSequence`].
//!
//! # One decoding step
//!
//! ```text
//! forced text? ──yes──► commit its canonical tokens, one forward pass for all of them
//!      │no
//! mask (engine) ─► logits ─► sampler (mask, temperature, top-k, top-p, min-p, seed)
//!      ─► commit token ─► stop sequence? ─► forward pass for the token
//! ```
//!
//! * **Jump-forward.** When the grammar leaves exactly one way to continue (a key of a
//!   fixed-schema object, `":`, a closing bracket), the engine's `forced_tokens` gives the
//!   canonical tokens of that text minus any tail a longer token could extend; they are
//!   committed without sampling and the model reads them in the same forward pass as
//!   the last sampled token.
//! * **Early end.** When the output is complete and the grammar allows nothing more, the
//!   generation ends without asking the model for EOS.
//! * **Stop sequences** are matched on output bytes; text that could be the start of a stop
//!   sequence is held back from the stream until it is known not to be one.
//! * Forced tokens are kept only after the budget check (the matcher rolls back the rest
//!   before anything is fed), so a backend's KV memory never holds a token the output
//!   drops: decoding itself never rolls back KV state.

use std::sync::Arc;
use std::time::Instant;

use ruvllm_engine::{Constraint, Matcher};

use crate::api::{
    FinishReason, GenerateParams, Generation, OutputConstraint, Prompt, ResultPath, Usage,
};
use crate::error::{Result, RuntimeError};
use crate::front::Front;
use crate::json::ValidationStatus;
use crate::reasoning::ReasoningMarkers;
use crate::sampler::{Sampler, PENALTY_WINDOW};

/// Output bytes and how much of them has been handed to the caller.
struct Emitter {
    out: Vec<u8>,
    sent: usize,
    stop: Vec<String>,
    max_stop: usize,
    /// Under a constraint, a stop sequence ends the output only where the text before it
    /// is complete (else it is ordinary text of the constrained output: a `\n` stop
    /// cannot cut a JSON value in half). Matches that start before `ignored` were found
    /// incomplete.
    constraint: Option<Arc<Constraint>>,
    ignored: usize,
    /// A matcher fed the output up to the last stop match it judged (matches only move
    /// forward, so each byte is read once).
    checker: Option<(Matcher, usize)>,
}

impl Emitter {
    /// Appends bytes; sends what is safe to send. Returns `Ok(true)` when a stop sequence
    /// was completed (the output is cut before it), `Err(Cancelled)` when the consumer
    /// went away.
    fn push(&mut self, bytes: &[u8], on_text: &mut dyn FnMut(&str) -> bool) -> Result<bool> {
        self.out.extend_from_slice(bytes);
        loop {
            let from = self.sent.saturating_sub(self.max_stop).max(self.ignored);
            let mut cut = None;
            for s in &self.stop {
                if let Some(i) = find(&self.out[from.min(self.out.len())..], s.as_bytes()) {
                    let at = from + i;
                    cut = Some(cut.map_or(at, |c: usize| c.min(at)));
                }
            }
            let Some(at) = cut else { break };
            if let Some(c) = &self.constraint {
                let (m, fed) = match &mut self.checker {
                    Some((m, fed)) if *fed <= at => (m, fed),
                    slot => {
                        let m = slot.insert((Matcher::new(c)?, 0));
                        (&mut m.0, &mut m.1)
                    }
                };
                let verdict = m.check_bytes(&self.out[*fed..at])?;
                *fed = at;
                if let ruvllm_engine::CheckResult::Rejected { .. } = verdict {
                    // Not where the output is (it never leaves the grammar): start over.
                    self.checker = None;
                }
                if verdict != ruvllm_engine::CheckResult::Accepted {
                    self.ignored = at + 1;
                    continue;
                }
            }
            self.out.truncate(at);
            self.flush(self.out.len(), on_text)?;
            return Ok(true);
        }
        // Hold back a tail that may begin a stop sequence.
        let mut hold = 0;
        for s in &self.stop {
            let s = s.as_bytes();
            for k in (1..s.len()).rev() {
                if k > hold && self.out.ends_with(&s[..k]) {
                    hold = k;
                    break;
                }
            }
        }
        self.flush(self.out.len() - hold, on_text)?;
        Ok(false)
    }

    /// Sends whole UTF-8 characters up to `end`.
    fn flush(&mut self, end: usize, on_text: &mut dyn FnMut(&str) -> bool) -> Result<()> {
        if end <= self.sent {
            return Ok(());
        }
        let chunk = &self.out[self.sent..end];
        let valid = match std::str::from_utf8(chunk) {
            Ok(s) => s,
            Err(e) => {
                // An incomplete character at the end waits; an invalid one is replaced.
                if e.error_len().is_none() {
                    std::str::from_utf8(&chunk[..e.valid_up_to()]).unwrap_or("")
                } else {
                    let s = String::from_utf8_lossy(chunk).into_owned();
                    self.sent = end;
                    return if on_text(&s) {
                        Ok(())
                    } else {
                        Err(RuntimeError::Cancelled)
                    };
                }
            }
        };
        if valid.is_empty() {
            return Ok(());
        }
        self.sent += valid.len();
        if on_text(valid) {
            Ok(())
        } else {
            Err(RuntimeError::Cancelled)
        }
    }

    /// Sends everything left (at the end of the generation). A character cut in half by
    /// the token limit is dropped rather than sent as U+FFFD, which the constraint may
    /// not allow.
    fn finish(&mut self, on_text: &mut dyn FnMut(&str) -> bool) -> Result<()> {
        let keep = self.out.len() - incomplete_tail(&self.out);
        self.out.truncate(keep.max(self.sent));
        if self.sent < self.out.len() {
            let s = String::from_utf8_lossy(&self.out[self.sent..]).into_owned();
            self.sent = self.out.len();
            if !on_text(&s) {
                return Err(RuntimeError::Cancelled);
            }
        }
        Ok(())
    }
}

/// Bytes at the end of `b` that start a UTF-8 character without finishing it (0 to 3).
fn incomplete_tail(b: &[u8]) -> usize {
    for back in 1..=b.len().min(4) {
        let c = b[b.len() - back];
        if c & 0xC0 == 0x80 {
            continue; // a continuation byte: look further back for the lead
        }
        let need = match c {
            0xC0..=0xDF => 2,
            0xE0..=0xEF => 3,
            0xF0..=0xF7 => 4,
            _ => return 0,
        };
        return if back < need { back } else { 0 };
    }
    0
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() || hay.len() < needle.len() {
        return None;
    }
    hay.windows(needle.len()).position(|w| w == needle)
}

/// One generation's decoding state, whatever model computes its logits: everything the
/// decode loop carries between forward passes. Each backend's sequence type wraps one
/// with its own KV state.
///
/// The cycle is [`Decoder::prepare`] (jump-forward, end checks; says whether the model
/// must run), a forward pass over [`Decoder::feed`], then [`Decoder::advance`] with the
/// logits (mask, sample, commit, emit), until one of them reports the end; then
/// [`Decoder::finish`].
pub(crate) struct Decoder {
    front: Arc<Front>,
    params: GenerateParams,
    constraint: Option<Arc<Constraint>>,
    matcher: Option<Matcher>,
    sampler: Sampler,
    seed: u64,
    usage: Usage,
    mask: Vec<u32>,
    em: Emitter,
    finish: FinishReason,
    n_out: usize,
    max_tokens: usize,
    feed: Vec<u32>,
    /// The last tokens, for repetition penalties (empty when none is on).
    recent: std::collections::VecDeque<u32>,
    /// Prompt tokens still at the front of `feed`.
    prompt_left: usize,
    /// Budget-aware decoding is on: the output's shortest completion fitted in
    /// `max_tokens` at the start, and every step keeps it so (see
    /// [`GenerateParams::budget_aware`]).
    budget: bool,
    /// The reasoning section the output begins in, while it lasts.
    reason: Option<Reason>,
    /// Whether the prompt's last token is read in a pass of its own (see
    /// [`Decoder::pass_len`]); off where no prefix cache can resume a prompt.
    split_last: bool,
    t0: Instant,
}

/// A reasoning section in progress (see [`crate::reasoning`]).
struct Reason {
    markers: ReasoningMarkers,
    /// Whether the end marker has not been written yet.
    open: bool,
    /// Reasoning tokens written so far.
    tokens: usize,
    /// Most reasoning tokens before the end marker is forced.
    budget: Option<usize>,
    /// The end marker (and, unconstrained, the separator) as tokens, forced at the budget.
    close: Vec<u32>,
    /// Where in the output to look for the end marker next.
    from: usize,
}

/// Sampled tokens refused in one step (see [`Decoder::advance`]) before the first token
/// of the shortest completion is taken instead.
const MAX_REFUSALS: usize = 8;

impl std::fmt::Debug for Decoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Decoder")
            .field("prompt_tokens", &self.usage.prompt_tokens)
            .field("n_out", &self.n_out)
            .finish_non_exhaustive()
    }
}

impl Decoder {
    /// Tokens the model must read next (the prompt at first, then the last sampled token
    /// plus any forced ones).
    pub(crate) fn feed(&self) -> &[u32] {
        &self.feed
    }

    /// How many feed tokens the next forward pass should read, at most `cap`. The prompt
    /// is read in passes of at most `cap` tokens, and its **last** token goes in a pass of
    /// its own (with any forced tokens after it; unless [`Decoder::set_split_last`] turned
    /// that off for a backend without a prefix cache): a prompt read whole and the same
    /// prompt resumed from the prefix cache then compute its final logits identically,
    /// so a seed reproduces its output whatever the cache held. When this is less than
    /// [`Decoder::feed`]'s length, call [`Decoder::consumed`] after the pass (its
    /// logits are not needed); otherwise [`Decoder::advance`].
    pub(crate) fn pass_len(&self, cap: usize) -> usize {
        let cap = cap.max(1);
        if self.prompt_left > 1 && self.split_last {
            (self.prompt_left - 1).min(cap)
        } else {
            self.feed.len().min(cap)
        }
    }

    /// Marks the first `n` feed tokens as read (a prompt fed in passes); the logits of a
    /// partial feed are not used.
    pub(crate) fn consumed(&mut self, n: usize) {
        let n = n.min(self.feed.len());
        self.feed.drain(..n);
        self.prompt_left = self.prompt_left.saturating_sub(n);
    }

    /// Counters so far.
    pub(crate) fn usage(&self) -> &Usage {
        &self.usage
    }

    fn remember(&mut self, toks: &[u32]) {
        if self.recent.is_empty() {
            return;
        }
        for &t in toks {
            if self.recent.len() == PENALTY_WINDOW {
                self.recent.pop_front();
            }
            self.recent.push_back(t);
        }
    }

    fn first(&mut self) {
        if self.usage.first_token_secs == 0.0 {
            self.usage.first_token_secs = self.t0.elapsed().as_secs_f64();
        }
    }

    /// Applies forced text (jump-forward) and the end checks. Returns `Ok(true)` when the
    /// model must run on [`Decoder::feed`], `Ok(false)` when the generation is over.
    /// Cost: the engine's forced-token and end checks (microseconds).
    pub(crate) fn prepare(&mut self, on_text: &mut dyn FnMut(&str) -> bool) -> Result<bool> {
        if self.close_reasoning(on_text)? {
            self.finish = FinishReason::Stop;
            return Ok(false);
        }
        let vocab = self.front.engine.vocab().clone();
        if let (Some(m), true) = (self.matcher.as_mut(), self.params.jump_forward) {
            let tm = Instant::now();
            let forced = m.forced_tokens()?;
            let mut take = forced.len().min(self.max_tokens - self.n_out);
            for &t in &forced[..take] {
                m.commit_token(t)?;
            }
            if self.budget && take > 0 {
                // Forced tokens count against the budget: keep as many as leave room for
                // a completion (the canonical split of forced text may take more tokens
                // than the shortest completion's).
                let mut held = false;
                loop {
                    let left = self.max_tokens - self.n_out - take;
                    if m.shortest_completion()?.is_some_and(|w| w.len() <= left) || take == 0 {
                        break;
                    }
                    m.rollback(1)?;
                    take -= 1;
                    held = true;
                }
                self.usage.budget_steps += held as usize;
            }
            self.usage.mask_secs += tm.elapsed().as_secs_f64();
            if take > 0 {
                let bytes: Vec<u8> = forced[..take]
                    .iter()
                    .flat_map(|&t| vocab.token_bytes(t).iter().copied())
                    .collect();
                // Forced text rides along with the tokens the model reads next: the
                // prompt at the start, the last sampled token afterwards. So jump-forward
                // costs no extra pass.
                self.feed.extend_from_slice(&forced[..take]);
                self.remember(&forced[..take]);
                self.n_out += take;
                self.usage.forced_tokens += take;
                self.first();
                if self.em.push(&bytes, on_text)? {
                    self.finish = FinishReason::Stop;
                    return Ok(false);
                }
            }
        }
        if let Some(m) = self.matcher.as_mut() {
            let tm = Instant::now();
            let done = m.is_accepting() && m.next_bytes()?.is_empty();
            self.usage.mask_secs += tm.elapsed().as_secs_f64();
            if done {
                self.finish = FinishReason::Stop;
                return Ok(false);
            }
        }
        Ok(self.n_out < self.max_tokens)
    }

    /// At the reasoning budget, forces the end marker (its tokens ride along with the next
    /// pass). Returns `Ok(true)` when a stop sequence ended the output. A character cut
    /// in half by the last token is finished first (the marker must follow whole text).
    fn close_reasoning(&mut self, on_text: &mut dyn FnMut(&str) -> bool) -> Result<bool> {
        let Some(r) = self.reason.as_mut() else {
            return Ok(false);
        };
        let due = r.open
            && r.budget.is_some_and(|b| r.tokens >= b)
            && incomplete_tail(&self.em.out) == 0
            && self.n_out + r.close.len() <= self.max_tokens;
        if !due {
            return Ok(false);
        }
        r.open = false;
        r.tokens += r.close.len();
        let close = r.close.clone();
        if let Some(m) = self.matcher.as_mut() {
            for &t in &close {
                m.commit_token(t)?;
            }
        }
        let vocab = self.front.engine.vocab().clone();
        let bytes: Vec<u8> = close
            .iter()
            .flat_map(|&t| vocab.token_bytes(t).iter().copied())
            .collect();
        self.feed.extend_from_slice(&close);
        self.remember(&close);
        self.n_out += close.len();
        self.usage.forced_tokens += close.len();
        self.first();
        self.em.push(&bytes, on_text)
    }

    /// Counts a reasoning token and notices the end marker in the output.
    fn track_reasoning(&mut self) {
        let Some(r) = self.reason.as_mut() else {
            return;
        };
        if !r.open {
            return;
        }
        r.tokens += 1;
        let end = r.markers.end.as_bytes();
        let out = &self.em.out;
        if find(&out[r.from.min(out.len())..], end).is_some() {
            r.open = false;
        } else {
            r.from = out.len().saturating_sub(end.len() - 1);
        }
    }

    /// Takes the logits of the last fed token: masks, samples, commits and emits the next
    /// token. Returns `Ok(true)` to go on, `Ok(false)` at the end. Cost: one mask and one
    /// sampling pass over the vocabulary.
    pub(crate) fn advance(
        &mut self,
        logits: &mut [f32],
        on_text: &mut dyn FnMut(&str) -> bool,
    ) -> Result<bool> {
        let inner = self.front.clone();
        let vocab = inner.engine.vocab();
        if self.usage.prompt_secs == 0.0 {
            self.usage.prompt_secs = self.t0.elapsed().as_secs_f64();
        } else {
            self.usage.forward_passes += 1;
        }
        self.feed.clear();
        self.prompt_left = 0;
        let n_vocab = vocab.len().min(logits.len());
        let remaining = self.max_tokens - self.n_out;
        let mut tentative = false;
        if let Some(m) = self.matcher.as_mut() {
            let tm = Instant::now();
            if self.budget {
                let info = m.compute_budget_mask(&mut self.mask, remaining)?;
                self.usage.budget_steps += info.narrowed as usize;
                tentative = info.tentative;
                let secs = tm.elapsed().as_secs_f32();
                self.usage.mask_steps.push((secs, info.shortest.is_some()));
            } else {
                m.compute_mask(&mut self.mask)?;
            }
            self.usage.mask_secs += tm.elapsed().as_secs_f64();
        }
        if self.params.ignore_eos && self.matcher.is_none() {
            for &t in &inner.special_or_eos {
                if let Some(l) = logits[..n_vocab].get_mut(t as usize) {
                    *l = f32::NEG_INFINITY;
                }
            }
        }
        if !self.recent.is_empty() {
            let cfg = self.params.sampler();
            cfg.penalize(&mut logits[..n_vocab], self.recent.make_contiguous());
        }
        let mut refusals = 0;
        let t = loop {
            let allowed = self.matcher.is_some().then_some(&self.mask[..]);
            let t = match self.sampler.sample(&logits[..n_vocab], allowed) {
                Some(t) => t,
                None if self.matcher.is_some() => {
                    return Err(RuntimeError::Model(
                        "the grammar allows no token here (a semantic check closed every \
                         continuation); the output so far cannot be completed"
                            .into(),
                    ))
                }
                None => {
                    return Err(RuntimeError::Model(
                        "the model produced no finite logit".into(),
                    ))
                }
            };
            let Some(m) = self.matcher.as_mut() else {
                break t;
            };
            if inner.eos.contains(&t) {
                break t;
            }
            m.commit_token(t)?;
            if !tentative {
                break t;
            }
            // A token allowed on the syntax alone under a semantic check: keep it only
            // when a completion still fits after it.
            let tm = Instant::now();
            let fits = m
                .shortest_completion()?
                .is_some_and(|w| w.len() < remaining);
            self.usage.mask_secs += tm.elapsed().as_secs_f64();
            if fits {
                break t;
            }
            m.rollback(1)?;
            self.usage.budget_refusals += 1;
            refusals += 1;
            self.mask[(t >> 5) as usize] &= !(1 << (t & 31));
            if refusals >= MAX_REFUSALS {
                // The first token of the shortest completion always fits.
                let w = m.shortest_completion()?.ok_or_else(|| {
                    RuntimeError::Model("no completion fits in the tokens left".into())
                })?;
                let Some(&first) = w.tokens().first() else {
                    return Err(RuntimeError::Model(
                        "no completion fits in the tokens left".into(),
                    ));
                };
                m.commit_token(first)?;
                break first;
            }
        };
        if inner.eos.contains(&t) || (self.matcher.is_none() && vocab.is_special(t)) {
            if let Some(m) = self.matcher.as_mut() {
                m.commit_token(t)?;
            }
            self.finish = FinishReason::Stop;
            return Ok(false);
        }
        self.n_out += 1;
        self.first();
        let stopped = self.em.push(vocab.token_bytes(t), on_text)?;
        self.track_reasoning();
        if stopped {
            self.finish = FinishReason::Stop;
            return Ok(false);
        }
        self.feed.push(t);
        self.remember(&[t]);
        Ok(true)
    }

    /// Whether the output is a text answer where tools were offered (no call in it): a
    /// budget that narrowed the mask closed no value there (it only kept a call from
    /// starting too late). Cost: a parse of the output.
    fn text_answer(&self) -> bool {
        matches!(
            &self.params.constraint,
            Some(OutputConstraint::Tools { .. })
        ) && crate::tools::parse_output_as(
            self.front.call_format,
            &String::from_utf8_lossy(&self.em.out),
        )
        .1
        .is_empty()
    }

    /// Ends the generation: sends what was held back, validates JSON mode output, and
    /// returns the result.
    pub(crate) fn finish(mut self, on_text: &mut dyn FnMut(&str) -> bool) -> Result<Generation> {
        self.em.finish(on_text)?;
        // Out of tokens with the output complete: not a cut-off, where budget-aware
        // decoding closed it in time or nothing but the end may follow (a whole JSON
        // value). Where more may follow (a text answer under `tool_choice: auto`, which
        // is complete after any character) the answer was cut: `length`, as without a
        // constraint.
        if self.finish == FinishReason::Length {
            let closed = self.usage.budget_steps > 0 && !self.text_answer();
            if let Some(m) = self.matcher.as_mut() {
                let ended = m.next_bytes().is_ok_and(|b| b.is_empty());
                if m.is_accepting() && (closed || ended) {
                    self.finish = FinishReason::Stop;
                }
            }
        }
        let mut usage = self.usage;
        usage.completion_tokens = self.n_out;
        if let Some(r) = &self.reason {
            usage.reasoning_tokens = r.tokens;
        }
        usage.total_secs = self.t0.elapsed().as_secs_f64();
        if usage.first_token_secs == 0.0 {
            usage.first_token_secs = usage.total_secs;
        }
        let mut text = String::from_utf8_lossy(&self.em.out).into_owned();
        let reasoning = self.reason.as_ref().map(|r| {
            let (think, answer) = r.markers.split(&text);
            let think = think.to_string();
            text = answer.to_string();
            think
        });
        let mut json = None;
        let mut path = if self.constraint.is_some() {
            ResultPath::Constrained
        } else {
            ResultPath::Unchecked
        };
        // Output cut by max_tokens is reported as such, not validated (it cannot be
        // complete); callers see `finish == Length`.
        let cut = self.finish == FinishReason::Length && self.constraint.is_some();
        if let (Some(j), false) = (&self.params.json_mode, cut) {
            let v = j.validator().validate(&text)?;
            if self.constraint.is_none() {
                path = match v.status {
                    ValidationStatus::Valid => ResultPath::Valid,
                    ValidationStatus::Repaired => ResultPath::Repaired,
                    ValidationStatus::Unchecked => ResultPath::Unchecked,
                };
            }
            if v.status == ValidationStatus::Repaired {
                text = v.text.clone();
            }
            json = Some(v);
        }
        Ok(Generation {
            text,
            finish: self.finish,
            budget_closed: usage.budget_steps > 0 && self.finish != FinishReason::Length,
            usage,
            seed: self.seed,
            json,
            path,
            reasoning,
            warnings: self
                .constraint
                .as_ref()
                .map(|c| c.warnings().iter().map(ToString::to_string).collect())
                .unwrap_or_default(),
        })
    }
}

impl Decoder {
    /// Starts a generation without running the model: validates the parameters, renders
    /// and encodes the prompt, compiles (or fetches) the constraint; the whole prompt is
    /// the first feed (see [`Decoder::skip_cached`]). `ctx` is the context length of the
    /// model that runs it. Errors here are the caller's (bad parameters, a bad schema, a
    /// prompt over the context). Cost: prompt tokenization plus constraint compilation
    /// on a cache miss.
    pub(crate) fn begin(
        front: &Arc<Front>,
        prompt: &Prompt,
        params: &GenerateParams,
        ctx: usize,
    ) -> Result<Decoder> {
        params.validate()?;
        let t0 = Instant::now();
        let inner = &**front;
        let markers = front.reasoning_for(prompt, params).cloned();
        let think = match prompt {
            Prompt::Raw(_) => None,
            _ => params.thinking.enabled,
        };
        let text = front.render_with(prompt, think)?;
        // No token is longer than `max_token_bytes`: a text that long cannot fit in the
        // budget, and is refused before the tokenizer spends time on it.
        let lower_bound = text.len() / inner.max_token_bytes.max(1);
        if lower_bound > inner.max_prompt_tokens {
            return Err(RuntimeError::PromptTooLong {
                tokens: lower_bound,
                at_least: true,
                limit: inner.max_prompt_tokens,
            });
        }
        let ids = front.encode(&text)?;
        if ids.is_empty() {
            return Err(RuntimeError::Params {
                param: "prompt",
                msg: "the prompt encodes to no tokens".into(),
            });
        }
        if ids.len() > inner.max_prompt_tokens {
            return Err(RuntimeError::PromptTooLong {
                tokens: ids.len(),
                at_least: false,
                limit: inner.max_prompt_tokens,
            });
        }
        if ids.len() >= ctx {
            return Err(RuntimeError::ContextFull {
                needed: ids.len() + 1,
                limit: ctx,
            });
        }
        let mut answer = params.effective_constraint()?;
        if let Some(OutputConstraint::Tools { calling, .. }) = &mut answer {
            calling.format = inner.call_format;
        }
        let constrained = answer.is_some();
        let constraint = match (&markers, answer) {
            (Some(m), Some(c)) => Some(OutputConstraint::Reasoned {
                end: m.end.clone(),
                inner: Box::new(c),
            }),
            (_, c) => c,
        }
        .map(|c| front.constraint(&c))
        .transpose()?
        .flatten();
        let reason = match markers {
            Some(m) => {
                // Under a constraint the grammar forces the separator after the marker.
                let close_text = if constrained {
                    m.end.clone()
                } else {
                    format!("{}{}", m.end, crate::reasoning::SEPARATOR)
                };
                let close = inner.tokenizer.encode(close_text.as_str())?;
                Some(Reason {
                    markers: m,
                    open: true,
                    tokens: 0,
                    budget: params.thinking.budget,
                    close,
                    from: 0,
                })
            }
            None => None,
        };
        let mut matcher = match &constraint {
            Some(c) => Some(Matcher::new(c)?),
            None => None,
        };
        let max_tokens = params.max_tokens.min(ctx - ids.len());
        // Budget-aware decoding keeps a promise only a budget at least the shortest
        // completion can keep; below it, the output ends `length`, as without it.
        let start_completion = match (&mut matcher, params.budget_aware) {
            (Some(m), true) => m.shortest_completion()?.map(|w| w.len()),
            _ => None,
        };
        let budget = start_completion.is_some_and(|n| n <= max_tokens);
        let seed = params.seed.unwrap_or_else(rand::random);
        let prompt_tokens = ids.len();
        Ok(Decoder {
            front: front.clone(),
            sampler: Sampler::new(params.sampler(), seed),
            seed,
            usage: Usage {
                prompt_tokens,
                start_completion,
                ..Default::default()
            },
            mask: vec![0u32; inner.engine.vocab().mask_words()],
            em: Emitter {
                out: Vec::new(),
                sent: 0,
                stop: params.stop.clone(),
                max_stop: params.stop.iter().map(|s| s.len()).max().unwrap_or(0),
                constraint: constraint.clone(),
                ignored: 0,
                checker: None,
            },
            finish: FinishReason::Length,
            n_out: 0,
            max_tokens,
            budget,
            reason,
            recent: if params.sampler().penalizes() {
                ids[ids.len().saturating_sub(PENALTY_WINDOW)..]
                    .iter()
                    .copied()
                    .collect()
            } else {
                Default::default()
            },
            feed: ids,
            prompt_left: prompt_tokens,
            split_last: true,
            constraint,
            matcher,
            params: params.clone(),
            t0,
        })
    }

    /// Drops the first `n` prompt tokens from the feed: the backend holds their KV state
    /// already (a prefix cache hit). At least the prompt's last token stays. Cost: O(n).
    pub(crate) fn skip_cached(&mut self, n: usize) {
        let n = n.min(self.prompt_left.saturating_sub(1));
        self.feed.drain(..n);
        self.prompt_left -= n;
        self.usage.cached_prompt_tokens = n;
    }

    /// Reads the prompt's last token with the rest of the prompt (when `false`): for a
    /// backend without a prefix cache, where no run resumes a prompt from a cache and the
    /// separate pass would only cost a forward pass.
    pub(crate) fn set_split_last(&mut self, split: bool) {
        self.split_last = split;
    }

    /// Whether the prompt has been read (the first [`Decoder::advance`] has run).
    pub(crate) fn prompt_read(&self) -> bool {
        self.usage.prompt_secs != 0.0
    }

    /// The whole prompt, while it is still the feed (before any pass or skip).
    pub(crate) fn prompt_ids(&self) -> Option<&[u32]> {
        (self.usage.cached_prompt_tokens == 0 && self.prompt_left == self.usage.prompt_tokens)
            .then_some(&self.feed[..])
    }
}

#[cfg(test)]
mod tests {
    use super::incomplete_tail;

    #[test]
    fn incomplete_tail_finds_cut_characters() {
        let e = "é".as_bytes(); // C3 A9
        let euro = "€".as_bytes(); // E2 82 AC
        let emoji = "😀".as_bytes(); // F0 9F 98 80
        assert_eq!(incomplete_tail(b""), 0);
        assert_eq!(incomplete_tail(b"abc"), 0);
        assert_eq!(incomplete_tail(e), 0);
        assert_eq!(incomplete_tail(&e[..1]), 1);
        assert_eq!(incomplete_tail(&euro[..2]), 2);
        assert_eq!(incomplete_tail(&[b"x", &emoji[..3]].concat()), 3);
        assert_eq!(incomplete_tail(emoji), 0);
        assert_eq!(incomplete_tail(&[0x80, 0x80]), 0); // stray continuation bytes: not a cut
    }
}
