//! JSON repair on arbitrary text: whatever it returns is valid JSON (it re-serializes and
//! parses back), and it never panics.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Ok((v, _)) = ruvllm_runtime::repair_json(&text) {
        let s = serde_json::to_string(&v).expect("a value serializes");
        let back: serde_json::Value = serde_json::from_str(&s).expect("repair output is JSON");
        assert_eq!(back, v);
    }
});
