//! The `ruvllm` binary end to end.

use std::path::PathBuf;
use std::process::Command;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn ruvllm(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_ruvllm"))
        .args(args)
        .current_dir(repo())
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Runs `ruvllm` with `input` on stdin.
fn ruvllm_stdin(args: &[&str], input: &str) -> (i32, String, String) {
    use std::io::Write;
    let mut child = Command::new(env!("CARGO_BIN_EXE_ruvllm"))
        .args(args)
        .current_dir(repo())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // A command may fail (and exit) before it reads its input: a broken pipe then.
    if let Err(e) = child.stdin.take().unwrap().write_all(input.as_bytes()) {
        assert_eq!(e.kind(), std::io::ErrorKind::BrokenPipe, "{e}");
    }
    let out = child.wait_with_output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

const JSON: &str = "../shared/data/gbnf/llama.cpp/json.gbnf";

#[test]
fn grammar_check_verdicts() {
    assert!(repo().join(JSON).exists(), "../shared/data is missing");
    let (code, out, _) = ruvllm(&[
        "grammar",
        "check",
        "--gbnf",
        JSON,
        "--text",
        r#"{"a": [1, 2]}"#,
    ]);
    assert_eq!(code, 0, "{out}");
    assert!(out.starts_with("accepted"));
    let (code, out, _) = ruvllm(&[
        "grammar",
        "check",
        "--gbnf",
        JSON,
        "--text",
        r#"{"a": [1, 2"#,
    ]);
    assert_eq!(code, 1);
    assert!(out.starts_with("incomplete"), "{out}");
    assert!(out.contains("array"), "names the rule expected: {out}");
    let (code, out, _) = ruvllm(&[
        "grammar",
        "check",
        "--gbnf",
        JSON,
        "--text",
        "{\"a\": [1, 2}",
    ]);
    assert_eq!(code, 1);
    assert!(out.contains("rejected at byte 11"), "{out}");
    let (code, out, _) = ruvllm(&["grammar", "check", "--regex", "[0-9]+", "--text", "123"]);
    assert_eq!(code, 0, "{out}");
    let (code, out, _) = ruvllm(&[
        "grammar",
        "check",
        "--builtin",
        "csv",
        "--text",
        "a,b\n1,2\n",
    ]);
    assert_eq!(code, 0, "{out}");
}

#[test]
fn grammar_errors_are_reported() {
    let dir = std::env::temp_dir().join(format!("ruvllm-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad.gbnf");
    std::fs::write(&bad, "root ::= \"a\"\nitem ::= [a-").unwrap();
    let (code, _, err) = ruvllm(&[
        "grammar",
        "check",
        "--gbnf",
        bad.to_str().unwrap(),
        "--text",
        "a",
    ]);
    assert_eq!(code, 2);
    assert!(
        err.contains("2:10") && err.contains("unterminated character class"),
        "{err}"
    );
}

/// The lines of a mask or completion report without their timing.
fn strip_time(t: &str) -> Vec<String> {
    t.lines()
        .map(|l| l.split("; computed").next().unwrap().to_string())
        .collect()
}

#[test]
fn grammar_mask_lists_tokens() {
    let tok = repo().join("assets/tokenizers/llama3_1/tokenizer.json");
    assert!(tok.exists(), "run scripts/fetch-assets.sh");
    let (code, out, err) = ruvllm(&[
        "grammar",
        "mask",
        "--gbnf",
        JSON,
        "--tokenizer",
        tok.to_str().unwrap(),
        "--prefix",
        r#"{"a": tr"#,
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.starts_with("2 of 128256 tokens allowed; EOS not allowed"),
        "{out}"
    );
    assert!(out.contains("\"ue\""), "{out}");
    // Several prefixes from one load: one block each, in order, each as the single-prefix
    // run prints it.
    let (code, many, err) = ruvllm(&[
        "grammar",
        "mask",
        "--gbnf",
        JSON,
        "--tokenizer",
        tok.to_str().unwrap(),
        "--prefix",
        r#"{"a": tr"#,
        "--prefix",
        r#"{"a": true}"#,
    ]);
    assert_eq!(code, 0, "{err}");
    let blocks: Vec<&str> = many.split("prefix ").skip(1).collect();
    assert_eq!(blocks.len(), 2, "{many}");
    assert!(
        blocks[0].starts_with("1: \"{\\\"a\\\": tr\"\n2 of 128256"),
        "{many}"
    );
    assert_eq!(strip_time(blocks[0])[1..], strip_time(&out)[..]);
    assert!(
        blocks[1].starts_with("2: ") && blocks[1].contains("EOS allowed"),
        "{many}"
    );
    // A prefix the grammar rejects is named.
    let (code, _, err) = ruvllm(&[
        "grammar",
        "mask",
        "--gbnf",
        JSON,
        "--tokenizer",
        tok.to_str().unwrap(),
        "--prefix",
        "{",
        "--prefix",
        "]",
    ]);
    assert_eq!(code, 2);
    assert!(
        err.contains("the prefix \"]\" is rejected at byte 0"),
        "{err}"
    );
}

#[test]
fn grammar_complete_after_several_prefixes() {
    let tok = repo().join("assets/tokenizers/llama3_1/tokenizer.json");
    assert!(tok.exists(), "run scripts/fetch-assets.sh");
    let args = |prefixes: &[&str]| {
        let mut a = vec![
            "grammar".to_string(),
            "complete".into(),
            "--regex".into(),
            "(ab|cd)+!".into(),
            "--tokenizer".into(),
            tok.to_str().unwrap().into(),
        ];
        for p in prefixes {
            a.push("--prefix".into());
            a.push(p.to_string());
        }
        a
    };
    let run = |prefixes: &[&str]| {
        let a = args(prefixes);
        ruvllm(&a.iter().map(String::as_str).collect::<Vec<_>>())
    };
    let (code, one, err) = run(&["abc"]);
    assert_eq!(code, 0, "{err}");
    assert!(one.contains("\nd!\n"), "{one}");
    // One block per prefix, each as the single-prefix run prints it.
    let (code, many, err) = run(&["abc", "ab!"]);
    assert_eq!(code, 0, "{err}");
    let blocks: Vec<&str> = many.split("prefix ").skip(1).collect();
    assert_eq!(blocks.len(), 2, "{many}");
    assert_eq!(strip_time(blocks[0])[1..], strip_time(&one)[..]);
    assert!(
        blocks[1].starts_with("2: \"ab!\"\nshortest completion: 0 tokens"),
        "{many}"
    );
}

#[test]
fn schema_compile_and_to_gbnf() {
    let dir = std::env::temp_dir().join(format!("ruvllm-cli-schema-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let good = dir.join("person.json");
    std::fs::write(
        &good,
        r#"{"type": "object", "properties": {"name": {"type": "string", "maxLength": 20}, "age": {"type": "integer", "minimum": 0}}, "required": ["name"], "additionalProperties": false}"#,
    )
    .unwrap();
    let (code, out, err) = ruvllm(&["schema", "compile", good.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("ok: "), "{out}");
    let (code, gbnf, err) = ruvllm(&["schema", "to-gbnf", good.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(gbnf.starts_with("root ::= "), "{gbnf}");
    // The printed GBNF checks text like the schema does.
    let gfile = dir.join("person.gbnf");
    std::fs::write(&gfile, &gbnf).unwrap();
    for (text, want) in [
        (r#"{"name": "Ada", "age": 36}"#, 0),
        (r#"{"name": "Ada", "age": -1}"#, 1),
        (r#"{"age": 3}"#, 1),
    ] {
        let (c1, _, _) = ruvllm(&[
            "grammar",
            "check",
            "--gbnf",
            gfile.to_str().unwrap(),
            "--text",
            text,
        ]);
        let (c2, _, _) = ruvllm(&[
            "grammar",
            "check",
            "--schema",
            good.to_str().unwrap(),
            "--text",
            text,
        ]);
        assert_eq!((c1, c2), (want, want), "{text}");
    }
    // A keyword no grammar expresses: compiled with a semantic check, which GBNF cannot
    // carry.
    let checked = dir.join("checked.json");
    std::fs::write(
        &checked,
        r#"{"properties": {"a": {"not": {"enum": [1, 2]}}}}"#,
    )
    .unwrap();
    let (code, out, err) = ruvllm(&["schema", "compile", checked.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("semantic checks (1)") && out.contains("#/properties/a"),
        "{out}"
    );
    for (text, want) in [(r#"{"a": 3}"#, 0), (r#"{"a": 2}"#, 1)] {
        let (c, _, _) = ruvllm(&[
            "grammar",
            "check",
            "--schema",
            checked.to_str().unwrap(),
            "--text",
            text,
        ]);
        assert_eq!(c, want, "{text}");
    }
    let (code, _, err) = ruvllm(&["schema", "to-gbnf", checked.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(err.contains("semantic check"), "{err}");
    // Formats: `date-time` is exported without leap seconds (the one thing its check
    // decides); `email` keeps a check, refused with what it checks.
    let when = dir.join("when.json");
    std::fs::write(&when, r#"{"type": "string", "format": "date-time"}"#).unwrap();
    let (code, gbnf, err) = ruvllm(&["schema", "to-gbnf", when.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let wfile = dir.join("when.gbnf");
    std::fs::write(&wfile, &gbnf).unwrap();
    for (text, want) in [
        (r#""2024-05-01T12:30:00Z""#, 0),
        (r#""2024-05-01T23:59:60Z""#, 1),
        (r#""2024-02-30T12:30:00Z""#, 1),
    ] {
        let (c, _, _) = ruvllm(&[
            "grammar",
            "check",
            "--gbnf",
            wfile.to_str().unwrap(),
            "--text",
            text,
        ]);
        assert_eq!(c, want, "{text}");
    }
    let mail = dir.join("mail.json");
    std::fs::write(&mail, r#"{"type": "string", "format": "email"}"#).unwrap();
    let (code, _, err) = ruvllm(&["schema", "to-gbnf", mail.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(
        err.contains("format \"email\": the domain's host-name rules"),
        "{err}"
    );
    // A reference to a document not in the registry is refused with its URI and pointer.
    let bad = dir.join("bad.json");
    std::fs::write(
        &bad,
        r#"{"properties": {"a": {"$ref": "https://example.com/a.json"}}}"#,
    )
    .unwrap();
    let (code, _, err) = ruvllm(&["schema", "compile", bad.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(
        err.contains("https://example.com/a.json") && err.contains("#/properties/a"),
        "{err}"
    );
    // A dynamic reference whose target depends on the path compiles (one copy per
    // dynamic scope).
    let dynamic = dir.join("dynamic.json");
    std::fs::write(
        &dynamic,
        r##"{"$defs": {"a": {"$id": "a", "$dynamicAnchor": "n", "items": {"$dynamicRef": "#n"}},
                      "b": {"$id": "b", "$dynamicAnchor": "n", "$ref": "a"}},
             "anyOf": [{"$ref": "a"}, {"$ref": "b"}]}"##,
    )
    .unwrap();
    let (code, out, err) = ruvllm(&["schema", "compile", dynamic.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}{err}");
    // What cannot be enforced at all is refused with the keyword and its pointer.
    let encoded = dir.join("encoded.json");
    std::fs::write(
        &encoded,
        r##"{"$schema": "http://json-schema.org/draft-07/schema#",
             "properties": {"page": {"contentEncoding": "uuencode"}}}"##,
    )
    .unwrap();
    let (code, _, err) = ruvllm(&["schema", "compile", encoded.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(
        err.contains("`contentEncoding`") && err.contains("#/properties/page"),
        "{err}"
    );
}

#[test]
fn validate_and_repair() {
    let dir = std::env::temp_dir().join(format!("ruvllm-cli-vr-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let schema = dir.join("person.json");
    std::fs::write(
        &schema,
        r#"{"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0}}, "required": ["name", "age"]}"#,
    )
    .unwrap();
    let s = schema.to_str().unwrap();
    let doc = dir.join("doc.json");
    std::fs::write(&doc, r#"{"name": "Ada", "age": 36}"#).unwrap();
    let (code, out, _) = ruvllm(&["validate", "--schema", s, doc.to_str().unwrap()]);
    assert_eq!((code, out.trim()), (0, "valid"));
    std::fs::write(&doc, r#"{"name": "Ada", "age": -2}"#).unwrap();
    let (code, out, _) = ruvllm(&["validate", "--schema", s, doc.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert!(
        out.contains("/age") && out.contains("/properties/age/minimum"),
        "{out}"
    );
    // Repair from stdin.
    let (code, out, err) = ruvllm_stdin(
        &["repair", "--schema", s],
        "Sure! ```json\n{name: 'Ada', age: 36,}\n```",
    );
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v, serde_json::json!({"name": "Ada", "age": 36}));
    assert!(
        err.contains("CodeFence") && err.contains("UnquotedKey"),
        "{err}"
    );
    // Repaired but invalid: refused.
    let (code, _, err) = ruvllm_stdin(&["repair", "--schema", s], "{'name': 'Ada', 'age': -1}");
    assert_eq!(code, 1);
    assert!(err.contains("/age"), "{err}");
    let (code, _, _) = ruvllm_stdin(&["repair"], "no JSON at all");
    assert_eq!(code, 1);
    // A number cut by the end of the output may have been longer: dropped, never passed
    // off as complete (then the required `age` is missing).
    let (code, _, err) = ruvllm_stdin(&["repair", "--schema", s], r#"{"name": "Ada", "age": 3"#);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("age"), "{err}");
    // A missing schema file is an error (exit 2).
    let (code, _, err) = ruvllm(&["validate", "--schema", "/nonexistent.json", "-"]);
    assert_eq!(code, 2, "{err}");
    validate_lines(s);
}

/// `validate --lines`: one verdict per document line, numbered by input line, and each
/// written before the next line is read (asked one at a time through open pipes).
fn validate_lines(schema: &str) {
    use std::io::{BufRead, BufReader, Write};
    let input =
        "{\"name\": \"Ada\", \"age\": 36}\n\n{\"name\": \"Ada\", \"age\": -2}\n{\"name\": \n";
    let (code, out, err) = ruvllm_stdin(&["validate", "--lines", "--schema", schema], input);
    assert_eq!(code, 1, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3, "{out}");
    assert_eq!(lines[0], "1: valid");
    assert!(
        lines[1].starts_with("3: invalid: /age: ") && lines[1].contains("/properties/age/minimum"),
        "{out}"
    );
    assert!(lines[2].starts_with("4: invalid: invalid JSON"), "{out}");
    let (code, out, _) = ruvllm_stdin(
        &["validate", "--lines", "--schema", schema],
        "{\"name\": \"A\", \"age\": 1}\n{\"name\": \"B\", \"age\": 2}",
    );
    assert_eq!((code, out.as_str()), (0, "1: valid\n2: valid\n"));
    // Line by line through open pipes: each answer comes before the next question.
    let mut child = Command::new(env!("CARGO_BIN_EXE_ruvllm"))
        .args(["validate", "--lines", "--schema", schema])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    for (i, (doc, want)) in [
        ("{\"name\": \"Ada\", \"age\": 36}", "valid"),
        ("{\"age\": 36}", "invalid: (root): "),
    ]
    .into_iter()
    .enumerate()
    {
        writeln!(stdin, "{doc}").unwrap();
        stdin.flush().unwrap();
        let mut answer = String::new();
        stdout.read_line(&mut answer).unwrap();
        assert!(
            answer.starts_with(&format!("{}: {want}", i + 1)),
            "{answer}"
        );
    }
    drop(stdin);
    assert_eq!(child.wait().unwrap().code(), Some(1));
}

#[test]
fn generate_prints_only_the_output_on_stdout() {
    let (code, out, err) = ruvllm(&[
        "generate",
        "--seed",
        "1",
        "-v",
        "--choice",
        "yes,no",
        "Is water wet?",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out == "yes\n" || out == "no\n", "stdout: {out:?}");
    assert!(err.contains("finish=stop"), "stderr: {err}");
    assert!(err.contains("cpu: built for "), "stderr: {err}");
    // On the llama.cpp backend, -v names the kernels linked: never AMX (compiled out, as
    // some VMs grant the tiles' permission and still fault in ggml's AMX matmul).
    let (code, out, err) = ruvllm(&[
        "generate",
        "--backend",
        "llama",
        "--seed",
        "1",
        "-v",
        "--choice",
        "yes,no",
        "Is water wet?",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out == "yes\n" || out == "no\n", "stdout: {out:?}");
    let line = err
        .lines()
        .find(|l| l.starts_with("llama.cpp: "))
        .unwrap_or_else(|| panic!("no llama.cpp line: {err}"));
    assert!(line.contains("CPU :"), "{line}");
    assert!(!line.contains("AMX_INT8 = 1"), "{line}");
    let (code, out, err) = ruvllm(&[
        "generate",
        "--temperature",
        "0",
        "--raw",
        "--max-tokens",
        "20",
        "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n",
    ]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, "The capital of France is Paris.\n");
}

#[test]
fn generate_validates_schema_output() {
    let dir = std::env::temp_dir().join(format!("ruvllm-cli-gen-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let schema = dir.join("s.json");
    std::fs::write(
        &schema,
        r#"{"type":"object","properties":{"n":{"type":"integer","minimum":1,"maximum":9}},"required":["n"],"additionalProperties":false}"#,
    )
    .unwrap();
    let s = schema.to_str().unwrap();
    let (code, out, err) = ruvllm(&["generate", "--seed", "3", "--schema", s, "Pick n."]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    let n = v["n"].as_i64().unwrap();
    assert!((1..=9).contains(&n), "{v}");
    std::fs::remove_dir_all(&dir).ok();
}

/// Budget-aware decoding: a schema whose values run on is closed within --max-tokens, and
/// the output is complete; below the shortest completion, or with --no-budget, the output
/// is cut and the command says so with exit status 3.
#[test]
fn generate_keeps_max_tokens_complete() {
    let dir = std::env::temp_dir().join(format!("ruvllm-cli-budget-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let schema = dir.join("s.json");
    std::fs::write(
        &schema,
        r#"{"type":"object","properties":{"title":{"type":"string"},"story":{"type":"string"},"tags":{"type":"array","items":{"type":"string"}}},"required":["title","story","tags"]}"#,
    )
    .unwrap();
    let s = schema.to_str().unwrap();
    let prompt = "Write a very long story as JSON with a title, the story and many tags.";
    let (code, out, err) = ruvllm(&[
        "generate",
        "--seed",
        "2",
        "-v",
        "--max-tokens",
        "24",
        "--schema",
        s,
        prompt,
    ]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).expect("complete JSON");
    assert!(v["story"].is_string() && v["tags"].is_array(), "{v}");
    assert!(
        err.contains("finish=stop") && err.contains("budget_closed=true"),
        "{err}"
    );
    // The shortest completion, and a budget below it.
    let (code, out, err) = ruvllm(&[
        "grammar",
        "complete",
        "--schema",
        s,
        "--tokenizer",
        "assets/models/SmolLM2-135M-Instruct.Q4_1.gguf",
    ]);
    assert_eq!(code, 0, "{err}");
    let n: usize = out
        .split("shortest completion: ")
        .nth(1)
        .and_then(|x| x.split(' ').next())
        .and_then(|x| x.parse().ok())
        .unwrap_or_else(|| panic!("{out}"));
    assert!(
        out.contains(r#"{"title":"","story":"","tags":[]}"#),
        "{out}"
    );
    let below = (n - 1).to_string();
    let (code, _, err) = ruvllm(&[
        "generate",
        "--seed",
        "2",
        "--max-tokens",
        &below,
        "--schema",
        s,
        prompt,
    ]);
    assert_eq!(code, 3, "{err}");
    assert!(
        err.contains("incomplete")
            && err.contains("below the shortest completion")
            && err.contains(&format!("({n} tokens)")),
        "{err}"
    );
    // One token above it: complete with the budget, cut without.
    let above = (n + 1).to_string();
    let (code, out, err) = ruvllm(&[
        "generate",
        "--seed",
        "2",
        "--max-tokens",
        &above,
        "--schema",
        s,
        prompt,
    ]);
    assert_eq!(code, 0, "{err}");
    serde_json::from_str::<serde_json::Value>(out.trim()).expect("complete JSON");
    let (code, _, err) = ruvllm(&[
        "generate",
        "--seed",
        "2",
        "--max-tokens",
        &above,
        "--no-budget",
        "--schema",
        s,
        prompt,
    ]);
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("--no-budget"), "{err}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn generate_errors_are_clear() {
    let out = Command::new(env!("CARGO_BIN_EXE_ruvllm"))
        .args(["generate", "hi"])
        .env("RUVLLM_MODEL", "/nonexistent/model.gguf")
        .current_dir(repo())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("RUVLLM_MODEL=/nonexistent/model.gguf does not exist"),
        "{err}"
    );
    let (code, _, err) = ruvllm(&["generate", "--temperature", "-1", "hi"]);
    assert_eq!(code, 2);
    assert!(err.contains("temperature"), "{err}");
    let (code, _, err) = ruvllm(&["generate", "--regex", "(", "hi"]);
    assert_eq!(code, 2);
    assert!(err.contains("regex") || err.contains("grammar"), "{err}");
}

/// Every limit an engine error names ([`ruvllm_engine::LimitKind`]) is rewritten by the
/// server to a flag that `ruvllm serve` really has, so a refused caller is never pointed
/// at a setting that does not exist.
#[test]
fn every_limit_kind_names_a_serve_flag() {
    let (code, help, _) = ruvllm(&["serve", "--help"]);
    assert_eq!(code, 0);
    assert!(ruvllm_engine::LimitKind::ALL.len() >= 10);
    for k in ruvllm_engine::LimitKind::ALL {
        let flag = ruvllm_server::error::limit_flag(k.field());
        assert!(
            help.contains(&format!("{flag} ")) || help.contains(&format!("{flag}=")),
            "{k} becomes {flag}, which `ruvllm serve` lacks"
        );
    }
}

/// `--schema-registry`: a folder of schemas by `$id` or `URI=FILE`; every subcommand that
/// reads a schema resolves references through it, and one that names nothing there is an
/// error naming its URI and pointer on every path (never the validator crate's internals).
#[test]
fn schema_registry_on_every_path() {
    let dir = std::env::temp_dir().join(format!("ruvllm-cli-reg-{}", std::process::id()));
    let reg = dir.join("reg");
    std::fs::create_dir_all(&reg).unwrap();
    std::fs::write(
        reg.join("person.json"),
        r#"{"$id": "https://example.com/person.json", "type": "object",
            "properties": {"n": {"type": "integer", "minimum": 1, "maximum": 9}},
            "required": ["n"], "additionalProperties": false}"#,
    )
    .unwrap();
    let team = dir.join("team.json");
    std::fs::write(
        &team,
        r#"{"type": "object", "properties": {"lead": {"$ref": "https://example.com/person.json"}},
            "required": ["lead"], "additionalProperties": false}"#,
    )
    .unwrap();
    let (t, r) = (team.to_str().unwrap(), reg.to_str().unwrap());
    let pair = format!(
        "https://example.com/person.json={}",
        reg.join("person.json").display()
    );
    for args in [
        vec!["schema", "compile", t],
        vec!["validate", "--schema", t, "-"],
        vec!["generate", "--max-tokens", "8", "--schema", t, "Pick."],
    ] {
        // Only `validate` reads stdin (the others may exit before a write to it).
        let (code, _, err) = if args[0] == "validate" {
            ruvllm_stdin(&args, "{}")
        } else {
            ruvllm(&args)
        };
        assert_ne!(code, 0, "{args:?}");
        assert!(
            err.contains("https://example.com/person.json") && err.contains("#/properties/lead"),
            "{args:?}: {err}"
        );
        assert!(!err.contains("resolve-http"), "{err}");
    }
    for registry in [r, pair.as_str()] {
        let (code, out, err) = ruvllm(&["schema", "compile", "--schema-registry", registry, t]);
        assert_eq!(code, 0, "{err}");
        assert!(out.starts_with("ok:"), "{out}");
        let (code, _, _) = ruvllm_stdin(
            &[
                "validate",
                "--schema-registry",
                registry,
                "--schema",
                t,
                "-",
            ],
            r#"{"lead": {"n": 12}}"#,
        );
        assert_eq!(code, 1);
    }
    let (code, out, err) = ruvllm(&[
        "generate",
        "--seed",
        "3",
        "--schema-registry",
        r,
        "--schema",
        t,
        "Pick the lead's n.",
    ]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert!((1..=9).contains(&v["lead"]["n"].as_i64().unwrap()), "{v}");
    std::fs::remove_dir_all(&dir).ok();
}

/// A CPU without a feature the build was compiled for (simulated with `RUVLLM_CPU_HIDE`)
/// gets a message naming it and exit status 2, never a signal; each compiled-in feature in
/// turn, and all at once. With nothing hidden, the same command runs, and on the llama.cpp
/// backend `-v` names the kernels linked (AMX compiled out: see .cargo/config.toml).
#[test]
fn a_cpu_without_a_built_feature_is_refused_with_a_message() {
    use std::os::unix::process::ExitStatusExt;
    let built: Vec<&str> = ruvllm_engine::cpu::features()
        .into_iter()
        .filter(|f| f.built)
        .map(|f| f.name)
        .collect();
    let run = |hide: &str| {
        Command::new(env!("CARGO_BIN_EXE_ruvllm"))
            .args(["grammar", "check", "--regex", "a+", "--text", "aaa"])
            .env("RUVLLM_CPU_HIDE", hide)
            .output()
            .unwrap()
    };
    let ok = run("");
    assert_eq!(ok.status.code(), Some(0), "{ok:?}");
    if cfg!(target_arch = "x86_64") {
        // The workspace builds with target-cpu=native: x86-64 always has some.
        assert!(!built.is_empty());
    }
    for hide in built.iter().copied().chain(["all"]) {
        let out = run(hide);
        assert_eq!(out.status.signal(), None, "{hide}: {out:?}");
        assert_eq!(out.status.code(), Some(2), "{hide}: {out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("was built for a CPU with"), "{err}");
        if hide != "all" {
            assert!(err.contains(hide), "{hide}: {err}");
        }
        assert!(out.stdout.is_empty());
    }
}
