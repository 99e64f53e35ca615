"""The official OpenAI Python SDK against ruvllm serve."""

import json

import jsonschema
import openai
import pytest
from pydantic import BaseModel


class Person(BaseModel):
    name: str
    age: int


class City(BaseModel):
    city: str
    country: str


def client(server):
    return openai.OpenAI(base_url=server + "/v1", api_key="x", max_retries=0)


def test_models_lists_the_served_model(server, model):
    ids = [m.id for m in client(server).models.list().data]
    assert ids == [model]


def test_parse_with_a_pydantic_model(server, model):
    c = client(server)
    r = c.chat.completions.parse(
        model=model,
        messages=[{"role": "user", "content": "Extract the person: John Smith is 30 years old."}],
        response_format=Person,
        temperature=0,
    )
    msg = r.choices[0].message
    assert r.choices[0].finish_reason == "stop"
    assert isinstance(msg.parsed, Person)
    assert "John" in msg.parsed.name
    assert msg.parsed.age == 30
    # parse() sends a strict json_schema; the raw text validates against that schema.
    jsonschema.validate(json.loads(msg.content), Person.model_json_schema())


WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}
TIME = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "Current time in a timezone",
        "parameters": {
            "type": "object",
            "properties": {"tz": {"type": "string"}},
            "required": ["tz"],
        },
    },
}


def test_named_tool_choice_streamed_and_rebuilt_from_deltas(server, model):
    stream = client(server).chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "What is the weather in Paris, in celsius?"}],
        tools=[WEATHER, TIME],
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    calls = {}
    finish = None
    usage = None
    ids = set()
    for chunk in stream:
        ids.add(chunk.id)
        if chunk.usage is not None:
            usage = chunk.usage
        for ch in chunk.choices:
            if ch.finish_reason:
                finish = ch.finish_reason
            for tc in ch.delta.tool_calls or []:
                slot = calls.setdefault(tc.index, {"id": None, "name": None, "args": "", "names": 0})
                if tc.id:
                    assert slot["id"] is None, "id sent twice"
                    slot["id"] = tc.id
                if tc.function and tc.function.name:
                    slot["names"] += 1
                    slot["name"] = tc.function.name
                if tc.function and tc.function.arguments:
                    slot["args"] += tc.function.arguments
    assert len(ids) == 1, "every chunk carries the same id"
    assert finish == "tool_calls"
    assert usage is not None and usage.completion_tokens > 0
    assert list(calls) == [0]
    call = calls[0]
    assert call["name"] == "get_weather" and call["names"] == 1, "the name comes once"
    assert call["id"].startswith("call_")
    args = json.loads(call["args"])
    jsonschema.validate(args, WEATHER["function"]["parameters"])


def test_required_tool_choice_without_parallel_calls_gives_one_valid_call(server, model):
    r = client(server).chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "What time is it in Tokyo?"}],
        tools=[WEATHER, TIME],
        tool_choice="required",
        parallel_tool_calls=False,
        temperature=0,
    )
    ch = r.choices[0]
    assert ch.finish_reason == "tool_calls"
    assert len(ch.message.tool_calls) == 1
    tc = ch.message.tool_calls[0]
    spec = {"get_weather": WEATHER, "get_time": TIME}[tc.function.name]
    jsonschema.validate(json.loads(tc.function.arguments), spec["function"]["parameters"])


def test_auto_tool_choice_answers_text_or_a_valid_call(server, model):
    r = client(server).chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "Say hello."}],
        tools=[WEATHER],
        tool_choice="auto",
        temperature=0,
        max_tokens=40,
    )
    ch = r.choices[0]
    if ch.message.tool_calls:
        assert ch.finish_reason == "tool_calls"
        for tc in ch.message.tool_calls:
            jsonschema.validate(json.loads(tc.function.arguments), WEATHER["function"]["parameters"])
    else:
        assert ch.message.content
        assert "<tool_call>" not in ch.message.content


def test_json_object_mode_gives_an_object(server, model):
    r = client(server).chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "Describe Paris as a JSON object."}],
        response_format={"type": "json_object"},
        temperature=0,
        max_tokens=200,
    )
    ch = r.choices[0]
    if ch.finish_reason == "stop":
        assert isinstance(json.loads(ch.message.content), dict)
    else:
        assert ch.finish_reason == "length"
        assert ch.message.content.startswith("{")


def test_invalid_schema_raises_bad_request(server, model):
    with pytest.raises(openai.BadRequestError) as e:
        client(server).chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": "hi"}],
            response_format={
                "type": "json_schema",
                "json_schema": {"name": "x", "schema": {"type": "object", "minProperties": "three"}},
            },
        )
    err = e.value.body
    assert e.value.status_code == 400
    assert err["param"] == "response_format.json_schema.schema"
    assert err["type"] == "invalid_request_error"


def test_unsupported_keyword_is_a_400_naming_it(server, model):
    with pytest.raises(openai.BadRequestError) as e:
        client(server).chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": "hi"}],
            response_format={
                "type": "json_schema",
                "json_schema": {
                    "name": "x",
                    # Draft 7 asserts the encoding; no validator knows this one.
                    "schema": {
                        "$schema": "http://json-schema.org/draft-07/schema#",
                        "type": "object",
                        "properties": {"page": {"contentEncoding": "uuencode"}},
                    },
                },
            },
        )
    assert e.value.body["param"] == "response_format.json_schema.schema"
    assert "`contentEncoding`" in e.value.body["message"]
    assert "/properties/page" in e.value.body["message"]


def test_tiny_max_tokens_gives_length(server, model):
    c = client(server)
    r = c.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "Write a long story about a dragon."}],
        max_tokens=3,
        temperature=0,
    )
    assert r.choices[0].finish_reason == "length"
    assert r.usage.completion_tokens == 3
    # parse() turns a cut answer into an exception, as with OpenAI.
    with pytest.raises(openai.LengthFinishReasonError):
        c.chat.completions.parse(
            model=model,
            messages=[{"role": "user", "content": "Extract: John is 30."}],
            response_format=Person,
            max_tokens=3,
        )


def test_legacy_completions_and_streaming_text(server, model):
    c = client(server)
    r = c.completions.create(model=model, prompt="1, 2, 3,", max_tokens=5, temperature=0)
    assert r.object == "text_completion"
    assert r.choices[0].finish_reason in ("stop", "length")
    text = "".join(
        ch.choices[0].delta.content or ""
        for ch in c.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": "Name a color."}],
            temperature=0,
            max_tokens=10,
            stream=True,
        )
        if ch.choices
    )
    whole = c.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "Name a color."}],
        temperature=0,
        max_tokens=10,
    )
    assert text == whole.choices[0].message.content


def test_vllm_and_sglang_extensions(server, model):
    c = client(server)
    r = c.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "Is the sky blue?"}],
        temperature=0,
        extra_body={"structured_outputs": {"choice": ["yes", "no"]}},
    )
    assert r.choices[0].message.content in ("yes", "no")
    r = c.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "Give a date."}],
        temperature=0,
        extra_body={"guided_regex": r"\d{4}-\d{2}-\d{2}"},
    )
    import re

    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", r.choices[0].message.content)
    r = c.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "Pick a fruit."}],
        temperature=0,
        extra_body={"ebnf": 'root ::= "apple" | "pear"'},
    )
    assert r.choices[0].message.content in ("apple", "pear")


def test_wrong_model_is_404(server):
    with pytest.raises(openai.NotFoundError):
        client(server).chat.completions.create(
            model="gpt-nonexistent", messages=[{"role": "user", "content": "hi"}]
        )
