//! Continuous batching: many generations share one model, their decode steps batched.
//!
//! A [`Scheduler`] owns one worker thread. Each cycle it admits waiting generations up to
//! `max_batch`, lets every active one apply its forced text and end checks
//! ([`BatchSequence::prepare`]), runs **one** forward pass over all of their new tokens
//! ([`BatchBackend::forward`]; the candle backend reads the weights once for the whole
//! batch and runs attention per sequence on its own KV cache), then masks, samples and
//! emits for each ([`BatchSequence::advance`]). A generation joins or leaves between any two cycles, so a short
//! request never waits for a long one to finish.
//!
//! * **Prompts** are fed in chunks of `prefill_chunk` tokens, so a long prompt delays the
//!   others' next token by one chunk's worth of compute, not the whole prompt.
//! * **Admission** is bounded: [`Scheduler::try_reserve`] fails once `max_batch` running
//!   plus `max_waiting` queued generations are admitted (a server answers 503), so memory
//!   and latency stay bounded under overload.
//! * **Cancellation**: when the consumer drops its [`TextStream`] (a client that
//!   disconnects), the generation leaves the batch at the next cycle and frees its slot.
//!
//! Masks are computed on the worker thread, one sequence after another: they cost about
//! 0.1 ms per token against several milliseconds per forward pass.
//!
//! * **Faults**: a panic in a backend or decoder step ends the generations that step was
//!   running with a [`RuntimeError::Model`] naming it ("backend fault in the forward pass: ..."), and the
//!   worker goes on with the next cycle: one bad request never takes the server down.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use crate::api::{GenerateParams, Generation, Prompt, TextSink, TextStream};
use crate::backend::{BatchBackend, BatchSequence, ModelBackend};
use crate::error::{Result, RuntimeError};

/// Scheduler sizes.
#[derive(Debug, Clone)]
pub struct SchedulerOptions {
    /// Generations decoded together (default 8).
    pub max_batch: usize,
    /// Generations queued beyond the running ones before admission fails (default 64).
    pub max_waiting: usize,
    /// Prompt tokens fed per sequence per cycle (default 256).
    pub prefill_chunk: usize,
}

impl Default for SchedulerOptions {
    fn default() -> Self {
        SchedulerOptions {
            max_batch: 8,
            max_waiting: 64,
            prefill_chunk: 256,
        }
    }
}

/// Counters since the scheduler started (a snapshot).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SchedulerStats {
    /// Generations submitted.
    pub submitted: u64,
    /// Generations finished (any way).
    pub finished: u64,
    /// Generations ended because their consumer went away.
    pub cancelled: u64,
    /// Generations that failed.
    pub failed: u64,
    /// Prompt tokens read.
    pub prompt_tokens: u64,
    /// Output tokens produced.
    pub completion_tokens: u64,
    /// Seconds spent computing masks and forced text.
    pub mask_secs: f64,
    /// Forward passes run.
    pub forward_passes: u64,
    /// Sum over forward passes of the sequences in them (÷ passes = mean batch).
    pub batched_sequences: u64,
    /// Generations running now.
    pub active: usize,
    /// Generations queued now.
    pub waiting: usize,
}

#[derive(Default)]
struct Counters {
    submitted: AtomicU64,
    finished: AtomicU64,
    cancelled: AtomicU64,
    failed: AtomicU64,
    prompt_tokens: AtomicU64,
    completion_tokens: AtomicU64,
    mask_nanos: AtomicU64,
    forward_passes: AtomicU64,
    batched_sequences: AtomicU64,
    active: AtomicUsize,
}

struct Shared<B: BatchBackend> {
    backend: B,
    opts: SchedulerOptions,
    queue: Mutex<VecDeque<Job<B>>>,
    wake: Condvar,
    /// Generations admitted (shared with their tickets).
    admitted: Arc<AtomicUsize>,
    shutdown: AtomicBool,
    counters: Counters,
}

/// A place in the scheduler, held from admission to the end of the generation (or
/// dropped unused). See [`Scheduler::try_reserve`].
pub struct Ticket {
    admitted: Arc<AtomicUsize>,
}

impl std::fmt::Debug for Ticket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Ticket")
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.admitted.fetch_sub(1, Ordering::AcqRel);
    }
}

struct Job<B: BatchBackend> {
    seq: B::Sequence,
    sink: TextSink,
    /// Feed tokens left over from a chunked prompt: run the model again before sampling.
    chunking: bool,
    _ticket: Ticket,
}

/// Runs generations of one backend in batches on a worker thread.
pub struct Scheduler<B: BatchBackend> {
    shared: Arc<Shared<B>>,
}

impl<B: BatchBackend> std::fmt::Debug for Scheduler<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scheduler")
            .field("opts", &self.shared.opts)
            .finish_non_exhaustive()
    }
}

impl<B: BatchBackend> Scheduler<B> {
    /// Starts the worker thread. Cost: one thread.
    pub fn new(backend: B, opts: SchedulerOptions) -> Scheduler<B> {
        let opts = SchedulerOptions {
            max_batch: opts.max_batch.max(1),
            prefill_chunk: opts.prefill_chunk.max(1),
            ..opts
        };
        let shared = Arc::new(Shared {
            backend,
            opts,
            queue: Mutex::new(VecDeque::new()),
            wake: Condvar::new(),
            admitted: Arc::new(AtomicUsize::new(0)),
            shutdown: AtomicBool::new(false),
            counters: Counters::default(),
        });
        let s = shared.clone();
        std::thread::Builder::new()
            .name("ruvllm-scheduler".into())
            .spawn(move || worker(s))
            .expect("spawning the scheduler thread");
        Scheduler { shared }
    }

    /// The backend the generations run on.
    pub fn backend(&self) -> &B {
        &self.shared.backend
    }

    /// The sizes in force.
    pub fn options(&self) -> &SchedulerOptions {
        &self.shared.opts
    }

    /// Admits one more generation if there is room (`max_batch + max_waiting` admitted
    /// at most); `None` when full. O(1).
    pub fn try_reserve(&self) -> Option<Ticket> {
        let cap = self.shared.opts.max_batch + self.shared.opts.max_waiting;
        let mut n = self.shared.admitted.load(Ordering::Acquire);
        loop {
            if n >= cap {
                return None;
            }
            match self.shared.admitted.compare_exchange_weak(
                n,
                n + 1,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => {
                    return Some(Ticket {
                        admitted: self.shared.admitted.clone(),
                    })
                }
                Err(now) => n = now,
            }
        }
    }

    /// Queues a started generation (see [`BatchBackend::start`]) and returns its stream.
    pub fn submit(&self, ticket: Ticket, seq: B::Sequence) -> TextStream {
        let (sink, stream) = TextStream::channel();
        self.shared
            .counters
            .submitted
            .fetch_add(1, Ordering::Relaxed);
        let job = Job {
            seq,
            sink,
            chunking: false,
            _ticket: ticket,
        };
        self.shared
            .queue
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push_back(job);
        self.shared.wake.notify_one();
        stream
    }

    /// Admission, start and submission in one call: [`RuntimeError::Busy`] when full,
    /// the start's error (bad parameters, bad constraint) otherwise.
    pub fn generate(&self, prompt: &Prompt, params: &GenerateParams) -> Result<TextStream> {
        let ticket = self.try_reserve().ok_or(RuntimeError::Busy {
            limit: self.shared.opts.max_batch + self.shared.opts.max_waiting,
        })?;
        let seq = self.shared.backend.start(prompt, params)?;
        Ok(self.submit(ticket, seq))
    }

    /// Runs one generation to the end (blocking) through the batch.
    pub fn complete(&self, prompt: &Prompt, params: &GenerateParams) -> Result<Generation> {
        let mut s = self.generate(prompt, params)?;
        for chunk in s.by_ref() {
            chunk?;
        }
        s.outcome().unwrap_or_else(|| {
            Err(RuntimeError::Model(
                "the generation ended without a result".into(),
            ))
        })
    }

    /// A snapshot of the counters. O(1).
    pub fn stats(&self) -> SchedulerStats {
        let c = &self.shared.counters;
        let waiting = self
            .shared
            .queue
            .lock()
            .map(|q| q.len())
            .unwrap_or_default();
        SchedulerStats {
            submitted: c.submitted.load(Ordering::Relaxed),
            finished: c.finished.load(Ordering::Relaxed),
            cancelled: c.cancelled.load(Ordering::Relaxed),
            failed: c.failed.load(Ordering::Relaxed),
            prompt_tokens: c.prompt_tokens.load(Ordering::Relaxed),
            completion_tokens: c.completion_tokens.load(Ordering::Relaxed),
            mask_secs: c.mask_nanos.load(Ordering::Relaxed) as f64 / 1e9,
            forward_passes: c.forward_passes.load(Ordering::Relaxed),
            batched_sequences: c.batched_sequences.load(Ordering::Relaxed),
            active: c.active.load(Ordering::Relaxed),
            waiting,
        }
    }
}

/// What a server needs of a scheduler, whatever its backend (object safe: a server holds
/// an `Arc<dyn Serving>` and is written once for every backend).
pub trait Serving: Send + Sync + std::fmt::Debug {
    /// The backend, as the model it serves.
    fn model(&self) -> &dyn ModelBackend;
    /// The sizes in force.
    fn options(&self) -> &SchedulerOptions;
    /// A snapshot of the counters.
    fn stats(&self) -> SchedulerStats;
    /// Admits one more generation if there is room (see [`Scheduler::try_reserve`]).
    fn try_reserve(&self) -> Option<Ticket>;
    /// Starts a generation (blocking: renders, tokenizes, compiles the constraint) and
    /// queues it under `ticket`.
    fn start(&self, ticket: Ticket, prompt: &Prompt, params: &GenerateParams)
        -> Result<TextStream>;
}

impl<B: BatchBackend> Serving for Scheduler<B> {
    fn model(&self) -> &dyn ModelBackend {
        &self.shared.backend
    }
    fn options(&self) -> &SchedulerOptions {
        Scheduler::options(self)
    }
    fn stats(&self) -> SchedulerStats {
        Scheduler::stats(self)
    }
    fn try_reserve(&self) -> Option<Ticket> {
        Scheduler::try_reserve(self)
    }
    fn start(
        &self,
        ticket: Ticket,
        prompt: &Prompt,
        params: &GenerateParams,
    ) -> Result<TextStream> {
        let seq = self.shared.backend.start(prompt, params)?;
        Ok(self.submit(ticket, seq))
    }
}

impl<B: BatchBackend> Drop for Scheduler<B> {
    fn drop(&mut self) {
        self.shared.shutdown.store(true, Ordering::Release);
        self.shared.wake.notify_all();
    }
}

/// Ends a job: its result goes to its stream, its counters to the totals.
fn end<B: BatchBackend>(shared: &Shared<B>, job: Job<B>, r: Result<Option<Generation>>) {
    let c = &shared.counters;
    c.finished.fetch_add(1, Ordering::Relaxed);
    let Job {
        seq,
        sink,
        _ticket: ticket,
        ..
    } = job;
    let u = seq.usage().clone();
    c.prompt_tokens
        .fetch_add(u.prompt_tokens as u64, Ordering::Relaxed);
    // The sequence (its KV cache) goes before the place is given back below.
    let r = match r {
        Ok(None) => seq.finish(&mut |s| sink.send(s)),
        Ok(Some(g)) => {
            drop(seq);
            Ok(g)
        }
        Err(e) => {
            drop(seq);
            Err(e)
        }
    };
    match &r {
        Ok(g) => {
            c.completion_tokens
                .fetch_add(g.usage.completion_tokens as u64, Ordering::Relaxed);
            c.mask_nanos
                .fetch_add((g.usage.mask_secs * 1e9) as u64, Ordering::Relaxed);
        }
        Err(RuntimeError::Cancelled) => {
            c.cancelled.fetch_add(1, Ordering::Relaxed);
        }
        Err(_) => {
            c.failed.fetch_add(1, Ordering::Relaxed);
        }
    }
    // The place is given back before the client hears the end: a client that sends its
    // next request as soon as this one answers must find the place free (the ticket used
    // to be dropped after `finish`, and the hostile test's next request then got a 503).
    drop(ticket);
    sink.finish(r);
}

/// Runs one step of the worker, turning a panic inside it into an error that names the
/// step and the panic's message: the generations of that step fail, the worker lives on.
fn guarded<T>(step: &str, f: impl FnOnce() -> Result<T>) -> Result<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or_else(|panic| {
        let msg = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic without a message".into());
        Err(RuntimeError::Model(format!(
            "backend fault in {step}: {msg}"
        )))
    })
}

fn worker<B: BatchBackend>(shared: Arc<Shared<B>>) {
    let opts = shared.opts.clone();
    let mut active: Vec<Job<B>> = Vec::new();
    let mut gone: Vec<Job<B>> = Vec::new();
    loop {
        // What is still running (0 once the last one ended, before the wait below).
        shared
            .counters
            .active
            .store(active.len(), Ordering::Relaxed);
        {
            let mut q = shared.queue.lock().unwrap_or_else(|e| e.into_inner());
            while active.is_empty() && q.is_empty() {
                if shared.shutdown.load(Ordering::Acquire) {
                    return;
                }
                q = shared.wake.wait(q).unwrap_or_else(|e| e.into_inner());
            }
            // A waiting generation whose client left gives its place back now, not when
            // it reaches the batch (else abandoned requests can fill the queue: 503s).
            let mut i = 0;
            while i < q.len() {
                if q[i].sink.is_closed() {
                    gone.extend(q.remove(i));
                } else {
                    i += 1;
                }
            }
            while active.len() < opts.max_batch {
                match q.pop_front() {
                    Some(j) => active.push(j),
                    None => break,
                }
            }
        }
        for job in gone.drain(..) {
            end(&shared, job, Err(RuntimeError::Cancelled));
        }
        shared
            .counters
            .active
            .store(active.len(), Ordering::Relaxed);
        // Forced text and end checks; drop what is over or abandoned.
        let mut ready = Vec::with_capacity(active.len());
        for mut job in active.drain(..) {
            if job.sink.is_closed() {
                end(&shared, job, Err(RuntimeError::Cancelled));
                continue;
            }
            if job.chunking {
                ready.push(job);
                continue;
            }
            let Job { seq, sink, .. } = &mut job;
            match guarded("preparing a step", || seq.prepare(&mut |s| sink.send(s))) {
                Ok(true) => ready.push(job),
                Ok(false) => end(&shared, job, Ok(None)),
                Err(e) => end(&shared, job, Err(e)),
            }
        }
        if ready.is_empty() {
            continue;
        }
        // One forward pass for every ready sequence.
        let taken: Vec<usize> = ready
            .iter()
            .map(|j| j.seq.pass_len(opts.prefill_chunk))
            .collect();
        let result = {
            let mut batch: Vec<(&mut B::Sequence, usize)> = ready
                .iter_mut()
                .zip(&taken)
                .map(|(j, &n)| (&mut j.seq, n))
                .collect();
            guarded("the forward pass", || shared.backend.forward(&mut batch))
        };
        shared
            .counters
            .forward_passes
            .fetch_add(1, Ordering::Relaxed);
        shared
            .counters
            .batched_sequences
            .fetch_add(ready.len() as u64, Ordering::Relaxed);
        let logits = match result {
            Ok(l) => l,
            Err(e) => {
                let msg = e.to_string();
                for job in ready {
                    end(&shared, job, Err(RuntimeError::Model(msg.clone())));
                }
                continue;
            }
        };
        for ((mut job, mut l), n) in ready.into_iter().zip(logits).zip(taken) {
            if n < job.seq.feed_len() {
                job.seq.consumed(n);
                job.chunking = true;
                active.push(job);
                continue;
            }
            job.chunking = false;
            let Job { seq, sink, .. } = &mut job;
            match guarded("sampling", || seq.advance(&mut l, &mut |s| sink.send(s))) {
                Ok(true) => active.push(job),
                Ok(false) => end(&shared, job, Ok(None)),
                Err(e) => end(&shared, job, Err(e)),
            }
        }
    }
}
