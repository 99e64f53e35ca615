//! The two local backends, each a model runner that owns a `Front`, behind the seam of
//! `crate::backend` ([`crate::ModelBackend`], [`crate::BatchBackend`]):
//!
//! * [`candle`]: [`crate::CandleBackend`], our own transformer over candle's tensors
//!   (pure Rust; Llama, Qwen2 and Phi-3 layouts);
//! * [`llama`]: [`crate::LlamaBackend`], llama.cpp in process (every architecture
//!   llama.cpp runs; the default).
//!
//! Both decode through the crate's one `Decoder` and keep their prompt caches with
//! `crate::prefix`; only the forward pass and where the keys and values live differ.
//! The scheduler ([`crate::Scheduler`]) and the server name neither.
//!
//! Owns: the backends. Uses: `front`, `decode`, `prefix`, `model` (candle), `ruvllm-llama`.

pub mod candle;
pub mod llama;
