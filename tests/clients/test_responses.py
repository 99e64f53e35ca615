"""The OpenAI SDK's Responses API (client.responses) against ruvllm serve."""

import json

import jsonschema
import openai
import pytest
from pydantic import BaseModel

ADD = {
    "type": "function",
    "name": "add",
    "description": "Add two integers.",
    "parameters": {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "required": ["a", "b"],
        "additionalProperties": False,
    },
}
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 30}},
        "required": ["city"],
        "additionalProperties": False,
    },
}
TOOLS = {"add": ADD, "get_weather": WEATHER}


def client(server):
    return openai.OpenAI(base_url=server + "/v1", api_key="x", max_retries=0)


def calls_of(r):
    calls = [o for o in r.output if o.type == "function_call"]
    for c in calls:
        jsonschema.validate(json.loads(c.arguments), TOOLS[c.name]["parameters"])
    return calls


class Person(BaseModel):
    name: str
    age: int


def test_parse_with_a_pydantic_model(server, model):
    r = client(server).responses.parse(
        model=model,
        input="Extract the person: John Smith is 30 years old.",
        text_format=Person,
        temperature=0,
    )
    assert r.status == "completed"
    assert isinstance(r.output_parsed, Person)


def test_required_tool_and_a_follow_up(server, model):
    c = client(server)
    r = c.responses.create(
        model=model,
        input="What is 2 plus 3?",
        tools=[ADD, WEATHER],
        tool_choice={"type": "function", "name": "add"},
        temperature=0,
    )
    (call,) = calls_of(r)
    assert call.name == "add" and call.call_id
    follow = c.responses.create(
        model=model,
        previous_response_id=r.id,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "5"}],
        tools=[ADD, WEATHER],
        tool_choice="required",
        max_output_tokens=60,
        temperature=0,
    )
    assert follow.status == "completed"
    assert len(calls_of(follow)) >= 1
    # The same conversation sent whole instead of by id.
    again = c.responses.create(
        model=model,
        input=[
            {"role": "user", "content": "What is 2 plus 3?"},
            {"type": "function_call", "call_id": call.call_id, "name": "add", "arguments": call.arguments},
            {"type": "function_call_output", "call_id": call.call_id, "output": "5"},
        ],
        text={"format": {"type": "json_schema", "name": "answer", "strict": True,
                         "schema": {"type": "object", "properties": {"sum": {"type": "integer"}}}}},
        max_output_tokens=40,
        temperature=0,
    )
    assert again.status == "completed"
    assert list(json.loads(again.output_text)) == ["sum"]


def test_streaming_events_rebuild_the_output(server, model):
    c = client(server)
    with c.responses.stream(
        model=model,
        input="Weather in Oslo?",
        tools=[WEATHER],
        tool_choice="required",
        parallel_tool_calls=False,
        temperature=0,
    ) as stream:
        kinds = [e.type for e in stream]
        final = stream.get_final_response()
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    assert "response.function_call_arguments.delta" in kinds
    assert [x.name for x in calls_of(final)] == ["get_weather"]
    # Text: a format makes the answer complete within the budget (an answer cut by
    # max_output_tokens ends with `response.incomplete`, which the SDK's helper rejects).
    fmt = {"format": {"type": "json_schema", "name": "hi", "strict": True, "schema": {
        "type": "object", "properties": {"greeting": {"type": "string", "maxLength": 20}}}}}
    with c.responses.stream(
        model=model, input="Say hi.", text=fmt, max_output_tokens=32, temperature=0
    ) as stream:
        deltas = "".join(e.delta for e in stream if e.type == "response.output_text.delta")
        final = stream.get_final_response()
    assert deltas and final.output_text == deltas


def test_unknown_previous_response_and_builtin_tools_are_400s(server, model):
    c = client(server)
    with pytest.raises(openai.BadRequestError) as e:
        c.responses.create(model=model, input="hi", previous_response_id="resp_nope")
    assert e.value.body["param"] == "previous_response_id"
    with pytest.raises(openai.BadRequestError) as e:
        c.responses.create(model=model, input="hi", tools=[{"type": "web_search"}])
    assert e.value.body["param"] == "tools[0].type"
