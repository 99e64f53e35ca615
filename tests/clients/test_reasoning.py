"""Reasoning through the real SDKs: a server whose chat template has a `<think>` section;
the reasoning comes apart from the answer in each dialect, and the answer validates."""

import json

import anthropic
import jsonschema
import ollama
import openai

SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 16}},
    "required": ["city"],
    "additionalProperties": False,
}
ASK = [{"role": "user", "content": "What is the capital of France? Answer in JSON."}]


def test_openai_reasoning_content_streamed_apart(thinking_server):
    c = openai.OpenAI(base_url=thinking_server + "/v1", api_key="none")
    fmt = {"type": "json_schema", "json_schema": {"name": "c", "schema": SCHEMA}}
    stream = c.chat.completions.create(
        model="m", messages=ASK, max_tokens=80, seed=3, response_format=fmt, stream=True,
        extra_body={"reasoning_budget": 12},
    )
    reasoning, content, finish = "", "", None
    for chunk in stream:
        d = chunk.choices[0].delta
        reasoning += getattr(d, "reasoning_content", None) or ""
        content += d.content or ""
        finish = chunk.choices[0].finish_reason or finish
    assert finish == "stop"
    assert reasoning.strip() and "</think>" not in reasoning
    jsonschema.validate(json.loads(content), SCHEMA)


def test_anthropic_thinking_blocks(thinking_server):
    c = anthropic.Anthropic(base_url=thinking_server, api_key="none")
    # Greedy: the Messages API has no seed, and at temperature 1 Gemma 3 sometimes closes
    # its reasoning at once (no thinking block: one failure in a fresh-clone run). The SDK
    # takes no `temperature` beside `thinking` (Anthropic forbids changing it there), so it
    # goes in the body.
    with c.messages.stream(
        model="m", max_tokens=80, messages=ASK, extra_body={"temperature": 0},
        thinking={"type": "enabled", "budget_tokens": 12},
        tools=[{"name": "answer", "input_schema": SCHEMA}],
        tool_choice={"type": "tool", "name": "answer"},
    ) as s:
        final = s.get_final_message()
    kinds = [b.type for b in final.content]
    assert kinds == ["thinking", "tool_use"], kinds
    assert final.content[0].thinking.strip()
    jsonschema.validate(final.content[1].input, SCHEMA)
    assert final.stop_reason == "tool_use"


def test_ollama_think(thinking_server):
    c = ollama.Client(host=thinking_server)
    r = c.chat(model="m", messages=ASK, think=True, format=SCHEMA,
               options={"num_predict": 80, "seed": 3, "reasoning_budget": 12})
    assert r.message.thinking and r.message.thinking.strip()
    jsonschema.validate(json.loads(r.message.content), SCHEMA)
    r = c.chat(model="m", messages=ASK, think=False, format=SCHEMA,
               options={"num_predict": 80, "seed": 3})
    assert not r.message.thinking
    jsonschema.validate(json.loads(r.message.content), SCHEMA)
