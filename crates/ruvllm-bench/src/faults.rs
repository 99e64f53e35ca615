//! Fault injection for `ruvllm-bench load --faults N`: clients that misbehave while the
//! ordinary clients run. Each fault client loops over five kinds: a streamed request
//! dropped after its first event, a request whose connection closes before the answer,
//! malformed bodies (cut JSON, invalid UTF-8, wrong types, NaN, 1e999, 100k-deep nesting),
//! a body over the server's size limit, and hostile constraints (lookbehind, nested
//! repeats, `$ref` cycles, broken GBNF, empty languages, 100k repeats, unsupported
//! keywords). Written over raw TCP so that the faults are real: half-written bodies,
//! sockets closed mid-stream.
//!
//! Expected answers: 200 for the stream that is dropped (checked before dropping it), 4xx
//! for malformed, oversized and hostile requests. Anything else counts as unexpected.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use serde::Serialize;
use serde_json::{json, Value};

/// One fault kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Fault {
    /// A streamed chat request; the client reads the first event and closes the socket.
    StreamDisconnect,
    /// A non-streamed request; the client closes the socket right after sending it.
    EarlyClose,
    /// A body that is not a valid request (must be 400).
    Malformed,
    /// A body over the server's limit (must be 413).
    Oversized,
    /// A well-formed request with a hostile constraint (must be 400).
    Hostile,
}

/// The kinds in rotation.
pub const FAULTS: [Fault; 5] = [
    Fault::StreamDisconnect,
    Fault::EarlyClose,
    Fault::Malformed,
    Fault::Oversized,
    Fault::Hostile,
];

/// What a fault client saw.
#[derive(Debug, Clone, Default, Serialize)]
pub struct FaultCounts {
    /// Faults sent, per kind (in [`FAULTS`] order).
    pub sent: Vec<u64>,
    /// Answers other than the expected ones.
    pub unexpected: u64,
    /// The first unexpected answers.
    pub problems: Vec<String>,
}

fn chat(extra: Value) -> Value {
    let mut v = json!({

        "messages": [{"role": "user", "content": "Write a short story about a robot."}],
        "max_tokens": 48,
    });
    if let (Value::Object(m), Value::Object(e)) = (&mut v, extra) {
        m.extend(e);
    }
    v
}

/// The malformed bodies, in rotation.
fn malformed(i: u64) -> Vec<u8> {
    match i % 8 {
        0 => br#"{ "messages": [{"role": "user", "content": "hi"#.to_vec(),
        1 => {
            let mut b = br#"{"messages":[{"role":"user","content":""#.to_vec();
            b.extend_from_slice(&[0xff, 0xfe, 0xc3]);
            b.extend_from_slice(br#""}]}"#);
            b
        }
        2 => br#"{"messages":5}"#.to_vec(),
        3 => br#"{"messages":[{"role":"user","content":"x"}],"temperature":NaN}"#.to_vec(),
        4 => br#"{"messages":[{"role":"user","content":"x"}],"max_tokens":1e999}"#.to_vec(),
        5 => {
            let mut b =
                br#"{"messages":[{"role":"user","content":"x"}],"response_format":"#.to_vec();
            b.extend(std::iter::repeat_n(b'[', 100_000));
            b
        }
        6 => br#"[1,2,3]"#.to_vec(),
        _ => br#"{"messages":[{"role":"wizard","content":"x"}]}"#.to_vec(),
    }
}

/// The hostile constraints, in rotation.
fn hostile(i: u64) -> Value {
    match i % 8 {
        0 => chat(json!({"guided_regex": "(?<=a)b(a|aa)*"})),
        1 => chat(json!({"guided_regex": "((((a{1,100}){1,100}){1,100}){1,100})"})),
        2 => chat(
            json!({"response_format": {"type": "json_schema", "json_schema": {
            "name": "x", "schema": {"$ref": "#/$defs/a", "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}}}}}),
        ),
        3 => chat(json!({"grammar": "root ::= [a-"})),
        4 => chat(json!({"grammar": "root ::= \"x\" root"})),
        5 => chat(json!({"guided_regex": "[a-z]{1,100000}"})),
        6 => chat(
            json!({"response_format": {"type": "json_schema", "json_schema": {
            "name": "x", "schema": {"type": "string", "minLength": 3, "maxLength": 2}}}}),
        ),
        _ => chat(
            json!({"response_format": {"type": "json_schema", "json_schema": {
            "name": "x", "schema": {"type": "object", "$dynamicRef": "#x"}}}}),
        ),
    }
}

/// Writes an HTTP/1.1 POST (closing the connection after the answer).
fn write_request(s: &mut TcpStream, host: &str, path: &str, body: &[u8]) -> std::io::Result<()> {
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes())?;
    // In pieces, so an early answer (413) can stop the writing.
    for chunk in body.chunks(64 << 10) {
        s.write_all(chunk)?;
    }
    Ok(())
}

fn connect(host: &str) -> std::io::Result<TcpStream> {
    let s = TcpStream::connect(host)?;
    s.set_read_timeout(Some(Duration::from_secs(120)))?;
    s.set_write_timeout(Some(Duration::from_secs(30)))?;
    Ok(s)
}

/// Reads until `want` appears in the answer or the connection ends; returns what was read.
fn read_until(s: &mut TcpStream, want: &[u8]) -> Vec<u8> {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => return got,
            Ok(n) => {
                got.extend_from_slice(&buf[..n]);
                if got.windows(want.len()).any(|w| w == want) {
                    return got;
                }
            }
        }
    }
}

fn status_of(answer: &[u8]) -> u16 {
    let text = String::from_utf8_lossy(&answer[..answer.len().min(64)]);
    text.split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

/// Sends fault number `i` of kind `f` to `host` (`127.0.0.1:port`). `Err` describes an
/// unexpected answer.
pub fn send(f: Fault, i: u64, host: &str, max_body: usize) -> Result<(), String> {
    let mut s = connect(host).map_err(|e| format!("connect: {e}"))?;
    match f {
        Fault::StreamDisconnect => {
            let body = chat(json!({"stream": true, "max_tokens": 64, "seed": i})).to_string();
            write_request(&mut s, host, "/v1/chat/completions", body.as_bytes())
                .map_err(|e| format!("write: {e}"))?;
            let got = read_until(&mut s, b"data: ");
            let st = status_of(&got);
            drop(s); // mid-stream
            if st != 200 {
                return Err(format!("stream: status {st}"));
            }
        }
        Fault::EarlyClose => {
            let body = chat(json!({"seed": i})).to_string();
            write_request(&mut s, host, "/v1/chat/completions", body.as_bytes())
                .map_err(|e| format!("write: {e}"))?;
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
        Fault::Malformed | Fault::Hostile | Fault::Oversized => {
            let body = match f {
                Fault::Malformed => malformed(i),
                Fault::Hostile => hostile(i).to_string().into_bytes(),
                _ => {
                    let mut b = br#"{"messages":[{"role":"user","content":""#.to_vec();
                    b.extend(std::iter::repeat_n(b'a', max_body + 1024));
                    b.extend_from_slice(br#""}]}"#);
                    b
                }
            };
            // A write error after an early 413 is expected: read the answer regardless.
            let _ = write_request(&mut s, host, "/v1/chat/completions", &body);
            let got = read_until(&mut s, b"\r\n\r\n");
            let st = status_of(&got);
            let want = if f == Fault::Oversized { 413 } else { 400 };
            if st != want {
                return Err(format!(
                    "{f:?} #{}: status {st}, expected {want}: {}",
                    i % 8,
                    String::from_utf8_lossy(&got[..got.len().min(200)])
                ));
            }
        }
    }
    Ok(())
}
