//! Request decoding of every dialect (the field-by-field readers behind the OpenAI, Ollama
//! and llama.cpp endpoints) on arbitrary bodies: a value or a 400 naming a field, never a
//! panic.
#![no_main]
use libfuzzer_sys::fuzz_target;
use ruvllm_server::params::{self, Fields};

fuzz_target!(|data: &[u8]| {
    let body = ruvllm_server::json_body(Ok(data.to_vec().into()), ruvllm_server::Dialect::OpenAi);
    let Ok(v) = body else { return };
    let Ok(f) = Fields::of(&v, "") else { return };
    let _ = params::refuse_unsupported(&f);
    let _ = params::constraint(&f, false);
    let _ = params::constraint(&f, true);
    let _ = params::tools(&f);
    if let Ok(msgs) = params::messages(&f) {
        let _ = params::prompt_schema(&msgs);
        let _ = params::apply_prompt_schema(&msgs, None, true, &ruvllm_engine::Limits::default());
    }
    for k in ["temperature", "top_p", "min_p"] {
        let _ = f.num(k, 0.0, 2.0);
    }
    let _ = f.int("max_tokens", 1, 1 << 20);
    let _ = f.seed("seed");
    let _ = f.stop("stop");
});
