"""The anthropic SDK against ruvllm serve's Messages API (/v1/messages)."""

import anthropic
import jsonschema
import pytest
from pydantic import BaseModel

WEATHER = {
    "name": "get_weather",
    "description": "The weather in a city.",
    "input_schema": {
        "type": "object",
        "properties": {
            "city": {"type": "string", "maxLength": 30},
            "unit": {"enum": ["celsius", "fahrenheit"]},
        },
        "required": ["city", "unit"],
        "additionalProperties": False,
    },
}
TIME = {
    "name": "get_time",
    "description": "The local time in a city.",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 30}},
        "required": ["city"],
        "additionalProperties": False,
    },
}
ANSWER = {
    "name": "answer",
    "description": "The final answer to the user.",
    "input_schema": {
        "type": "object",
        "properties": {
            "summary": {"type": "string", "maxLength": 80},
            "temperature_c": {"type": "integer", "minimum": -60, "maximum": 60},
        },
        "required": ["summary", "temperature_c"],
        "additionalProperties": False,
    },
}
TOOLS = {t["name"]: t for t in (WEATHER, TIME, ANSWER)}
# The SDK no longer sends sampling fields; the server still reads them.
GREEDY = {"temperature": 0}


def client(server):
    return anthropic.Anthropic(base_url=server, api_key="x", max_retries=0)


def calls_of(message):
    """The tool_use blocks, each validated against its tool's schema."""
    calls = [b for b in message.content if b.type == "tool_use"]
    for c in calls:
        jsonschema.validate(c.input, TOOLS[c.name]["input_schema"])
        assert c.id.startswith("toolu_")
    return calls


def test_named_and_any_tool_choice(server, model):
    c = client(server)
    m = c.messages.create(
        model=model,
        max_tokens=80,
        tools=[WEATHER, TIME],
        tool_choice={"type": "tool", "name": "get_weather"},
        messages=[{"role": "user", "content": "What is the weather in Paris?"}],
        extra_body=GREEDY,
    )
    assert m.stop_reason == "tool_use"
    assert [x.name for x in calls_of(m)] == ["get_weather"]
    m = c.messages.create(
        model=model,
        max_tokens=80,
        tools=[WEATHER, TIME],
        tool_choice={"type": "any", "disable_parallel_tool_use": True},
        messages=[{"role": "user", "content": "What time is it in Tokyo?"}],
        extra_body=GREEDY,
    )
    assert m.stop_reason == "tool_use"
    assert len(calls_of(m)) == 1
    assert m.usage.input_tokens > 0 and m.usage.output_tokens > 0


def test_streaming_rebuilds_the_call(server, model):
    c = client(server)
    with c.messages.stream(
        model=model,
        max_tokens=80,
        tools=[WEATHER],
        tool_choice={"type": "tool", "name": "get_weather"},
        messages=[{"role": "user", "content": "Weather in Oslo, in celsius?"}],
        extra_body=GREEDY,
    ) as stream:
        kinds = [e.type for e in stream]
        final = stream.get_final_message()
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert "content_block_start" in kinds and "content_block_stop" in kinds
    assert final.stop_reason == "tool_use"
    assert [x.name for x in calls_of(final)] == ["get_weather"]


def test_streaming_text(server, model):
    c = client(server)
    with c.messages.stream(
        model=model,
        max_tokens=24,
        messages=[{"role": "user", "content": "Say hello."}],
        extra_body=GREEDY,
    ) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text and final.content[0].text == text
    assert final.stop_reason in ("end_turn", "max_tokens")
    assert final.usage.output_tokens > 0


def test_tool_loop_with_a_json_answer_through_a_forced_tool(server, model):
    c = client(server)
    messages = [{"role": "user", "content": "How warm is it in Rome?"}]
    first = c.messages.create(
        model=model,
        max_tokens=80,
        tools=[WEATHER, ANSWER],
        tool_choice={"type": "tool", "name": "get_weather"},
        messages=messages,
        extra_body=GREEDY,
    )
    (call,) = calls_of(first)
    messages += [
        {"role": "assistant", "content": first.content},
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": call.id, "content": "24 C and sunny"}
            ],
        },
    ]
    final = c.messages.create(
        model=model,
        max_tokens=120,
        tools=[WEATHER, ANSWER],
        tool_choice={"type": "tool", "name": "answer"},
        messages=messages,
        extra_body=GREEDY,
    )
    assert final.stop_reason == "tool_use"
    (answer,) = calls_of(final)
    assert answer.name == "answer"


def test_errors_name_the_field(server, model):
    c = client(server)
    with pytest.raises(anthropic.BadRequestError) as e:
        c.messages.create(
            model=model,
            max_tokens=10,
            tools=[WEATHER],
            tool_choice={"type": "tool", "name": "nope"},
            messages=[{"role": "user", "content": "hi"}],
        )
    assert "tool_choice.name" in str(e.value)
    with pytest.raises(anthropic.NotFoundError):
        c.messages.create(model="claude-x", max_tokens=10, messages=[{"role": "user", "content": "hi"}])


def test_count_tokens(server, model):
    n = client(server).messages.count_tokens(
        model=model, messages=[{"role": "user", "content": "Hello there"}]
    )
    assert n.input_tokens > 2


class City(BaseModel):
    name: str
    country: str
    population_millions: int


def test_parse_with_a_pydantic_model(server, model):
    m = client(server).messages.parse(
        model=model,
        max_tokens=80,
        messages=[{"role": "user", "content": "Describe Paris as JSON."}],
        output_format=City,
        extra_body=GREEDY,
    )
    assert m.stop_reason == "end_turn"
    assert isinstance(m.parsed_output, City)
