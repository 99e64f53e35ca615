//! The post-validation backend against a real HTTP server on loopback that plays a model
//! with scripted answers: validation, repair, retries, grammar checks, errors.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};

use ruvllm_runtime::{
    GenerateParams, HttpBackend, JsonModeConfig, JsonSchema, LlmBackend, OutputConstraint, Prompt,
    ResultPath,
};
use serde_json::{json, Value};

/// Serves `answers` in order (status, content) and records each request body.
fn server(answers: Vec<(u16, &'static str)>) -> (String, Arc<Mutex<Vec<Value>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let seen2 = seen.clone();
    std::thread::spawn(move || {
        for (status, content) in answers {
            let (stream, _) = listener.accept().unwrap();
            let mut r = BufReader::new(stream.try_clone().unwrap());
            let mut len = 0usize;
            loop {
                let mut line = String::new();
                r.read_line(&mut line).unwrap();
                let l = line.to_ascii_lowercase();
                if let Some(v) = l.strip_prefix("content-length:") {
                    len = v.trim().parse().unwrap();
                }
                if line == "\r\n" || line.is_empty() {
                    break;
                }
            }
            let mut body = vec![0; len];
            r.read_exact(&mut body).unwrap();
            seen2
                .lock()
                .unwrap()
                .push(serde_json::from_slice::<Value>(&body).unwrap());
            let answer = if status == 200 {
                json!({"id": "x", "object": "chat.completion", "choices": [{"index": 0,
                    "message": {"role": "assistant", "content": content},
                    "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}})
            } else {
                json!({"error": {"message": content, "type": "server_error"}})
            };
            let b = answer.to_string();
            let mut w = stream;
            write!(
                w,
                "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{b}",
                b.len()
            )
            .unwrap();
        }
    });
    (format!("http://{addr}/v1"), seen)
}

fn person() -> JsonSchema {
    JsonSchema::from_str(
        r#"{"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"}},
            "required":["name","age"]}"#,
    )
    .unwrap()
}

fn json_params(repair: bool) -> GenerateParams {
    GenerateParams {
        json_mode: Some(JsonModeConfig {
            schema: Some(person()),
            repair,
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[test]
fn valid_answer_is_taken_as_is() {
    let (url, seen) = server(vec![(200, r#"{"name":"Ann","age":3}"#)]);
    let b = HttpBackend::new(&url, "m", Some("k".into())).unwrap();
    let g = b
        .complete(&Prompt::User("p".into()), &json_params(false), &mut |_| {
            true
        })
        .unwrap();
    assert_eq!(g.path, ResultPath::Valid);
    assert_eq!(g.json.unwrap().value.unwrap()["age"], 3);
    let req = &seen.lock().unwrap()[0];
    assert_eq!(req["response_format"]["type"], "json_schema");
    assert_eq!(req["messages"][0]["content"], "p");
}

#[test]
fn invalid_answer_is_retried_with_the_reason() {
    let (url, seen) = server(vec![
        (200, r#"{"name":"Ann"}"#),
        (200, r#"{"name":"Ann","age":3}"#),
    ]);
    let b = HttpBackend::new(&url, "m", None).unwrap();
    let g = b
        .complete(&Prompt::User("p".into()), &json_params(false), &mut |_| {
            true
        })
        .unwrap();
    assert_eq!(g.path, ResultPath::Retried(1));
    let second = &seen.lock().unwrap()[1];
    let msgs = second["messages"].as_array().unwrap();
    assert_eq!(msgs.len(), 3);
    assert!(
        msgs[2]["content"].as_str().unwrap().contains("age"),
        "{}",
        msgs[2]
    );
}

#[test]
fn malformed_answer_is_repaired() {
    let (url, _) = server(vec![(
        200,
        "Sure! ```json\n{'name': 'Ann', 'age': 3,}\n```",
    )]);
    let b = HttpBackend::new(&url, "m", None).unwrap();
    let g = b
        .complete(&Prompt::User("p".into()), &json_params(true), &mut |_| true)
        .unwrap();
    assert_eq!(g.path, ResultPath::Repaired);
    let v: Value = serde_json::from_str(&g.text).unwrap();
    assert_eq!(v, json!({"name": "Ann", "age": 3}));
}

#[test]
fn retries_are_bounded() {
    let (url, seen) = server(vec![(200, "no"), (200, "no"), (200, "no")]);
    let b = HttpBackend::new(&url, "m", None).unwrap();
    let e = b
        .complete(&Prompt::User("p".into()), &json_params(false), &mut |_| {
            true
        })
        .unwrap_err();
    assert!(e.to_string().contains("after 3 attempts"), "{e}");
    assert_eq!(seen.lock().unwrap().len(), 3);
}

#[test]
fn grammar_constraints_are_checked_too() {
    let (url, _) = server(vec![(200, "maybe"), (200, "yes")]);
    let b = HttpBackend::new(&url, "m", None).unwrap();
    let p = GenerateParams {
        constraint: Some(OutputConstraint::Choice(vec!["yes".into(), "no".into()])),
        ..Default::default()
    };
    let g = b
        .complete(&Prompt::User("p".into()), &p, &mut |_| true)
        .unwrap();
    assert_eq!((g.text.as_str(), g.path), ("yes", ResultPath::Retried(1)));
}

#[test]
fn server_errors_are_reported() {
    let (url, _) = server(vec![(500, "model exploded")]);
    let b = HttpBackend::new(&url, "m", None).unwrap();
    let e = b
        .complete(
            &Prompt::User("p".into()),
            &GenerateParams::default(),
            &mut |_| true,
        )
        .unwrap_err();
    assert!(e.to_string().contains("HTTP 500: model exploded"), "{e}");
}
