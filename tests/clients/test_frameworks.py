"""instructor, LangChain and the Ollama client against ruvllm serve."""

import json
import urllib.request

import instructor
import jsonschema
import ollama
import openai
import pytest
from langchain_openai import ChatOpenAI
from pydantic import BaseModel


class Person(BaseModel):
    name: str
    age: int


PROMPT = "Extract the person: John Smith is 30 years old."


@pytest.mark.parametrize("mode", ["TOOLS", "TOOLS_STRICT", "JSON", "JSON_SCHEMA", "MD_JSON"])
def test_instructor_modes(server, model, mode):
    c = instructor.from_openai(
        openai.OpenAI(base_url=server + "/v1", api_key="x", max_retries=0),
        mode=getattr(instructor.Mode, mode),
    )
    # JSON and MD_JSON put the schema in the prompt only: the request turns on the
    # prompt-declared schema rule (off by default) with `prompt_schema`.
    extra = {"extra_body": {"prompt_schema": True}} if mode in ("JSON", "MD_JSON") else {}
    p = c.chat.completions.create(
        model=model,
        response_model=Person,
        messages=[{"role": "user", "content": PROMPT}],
        temperature=0,
        max_retries=0,
        **extra,
    )
    assert isinstance(p, Person)
    assert "John" in p.name
    assert isinstance(p.age, int)


@pytest.mark.parametrize("method", ["json_schema", "function_calling", "json_mode"])
def test_langchain_with_structured_output(server, model, method):
    llm = ChatOpenAI(base_url=server + "/v1", api_key="x", model=model, temperature=0, max_retries=0)
    structured = llm.with_structured_output(Person, method=method)
    # json_mode sends no schema: the prompt names the keys, as LangChain's docs advise.
    p = structured.invoke('Extract the person as JSON with keys "name" and "age": John Smith is 30 years old.')
    assert isinstance(p, Person)
    assert "John" in p.name


def test_ollama_chat_with_a_schema_format(server, model):
    c = ollama.Client(host=server)
    r = c.chat(
        model=model,
        messages=[{"role": "user", "content": PROMPT}],
        format=Person.model_json_schema(),
        options={"temperature": 0},
    )
    p = Person.model_validate_json(r.message.content)
    assert "John" in p.name
    assert r.done and r.done_reason == "stop"
    assert r.eval_count > 0


def test_ollama_streaming_generate_and_tags(server, model):
    c = ollama.Client(host=server)
    assert any(m.model.startswith(model) for m in c.list().models)
    parts = list(c.generate(model=model, prompt="Name a color.", stream=True, options={"temperature": 0, "num_predict": 8}))
    assert parts[-1].done
    assert all(not p.done for p in parts[:-1])
    text = "".join(p.response for p in parts)
    whole = c.generate(model=model, prompt="Name a color.", options={"temperature": 0, "num_predict": 8})
    assert text == whole.response


WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


def test_ollama_tools_auto_never_leak_call_markup(server, model):
    c = ollama.Client(host=server)
    r = c.chat(
        model=model,
        messages=[{"role": "user", "content": "What is the weather in Rome?"}],
        tools=[WEATHER],
        options={"temperature": 0, "num_predict": 40},
    )
    if r.message.tool_calls:
        for tc in r.message.tool_calls:
            jsonschema.validate(tc.function.arguments, WEATHER["function"]["parameters"])
    else:
        assert "<tool_call>" not in r.message.content


def test_ollama_tool_call_arguments_are_objects(server, model):
    # The Ollama API has no tool_choice; ruvllm accepts OpenAI's as an extension.
    body = {
        "model": model,
        "stream": False,
        "messages": [{"role": "user", "content": "What is the weather in Rome?"}],
        "tools": [WEATHER],
        "tool_choice": "required",
        "options": {"temperature": 0},
    }
    req = urllib.request.Request(server + "/api/chat", data=json.dumps(body).encode(), method="POST")
    with urllib.request.urlopen(req, timeout=120) as resp:
        r = json.load(resp)
    calls = r["message"]["tool_calls"]
    assert len(calls) >= 1
    for tc in calls:
        assert tc["function"]["name"] == "get_weather"
        assert isinstance(tc["function"]["arguments"], dict)
        jsonschema.validate(tc["function"]["arguments"], WEATHER["function"]["parameters"])
    # The ollama client reads the same answer back (a conversation with the call in it).
    follow = ollama.Client(host=server).chat(
        model=model,
        messages=[
            {"role": "user", "content": "What is the weather in Rome?"},
            r["message"],
            {"role": "tool", "content": "18 C and sunny"},
        ],
        options={"temperature": 0, "num_predict": 30},
    )
    assert follow.message.content


def test_ollama_json_format(server, model):
    c = ollama.Client(host=server)
    r = c.generate(
        model=model,
        prompt="A JSON object describing a cat.",
        format="json",
        options={"temperature": 0, "num_predict": 300},
    )
    # Budget-aware decoding closes a constrained answer within num_predict: it is
    # complete (an answer cut by the limit would be a failure, not a pass).
    assert r.done_reason == "stop"
    json.loads(r.response)


def test_langchain_bind_tools_strict(server, model):
    from langchain_core.tools import tool

    @tool
    def get_weather(city: str, unit: str = "celsius") -> str:
        """The weather in a city."""
        return "sunny"

    llm = ChatOpenAI(base_url=server + "/v1", api_key="x", model=model, temperature=0, max_retries=0)
    # strict: objects closed and every declared property present, the optional `unit` too.
    bound = llm.bind_tools([get_weather], strict=True, tool_choice="get_weather")
    msg = bound.invoke("What is the weather in Paris?")
    (call,) = msg.tool_calls
    assert call["name"] == "get_weather"
    assert set(call["args"]) == {"city", "unit"}
    assert isinstance(call["args"]["city"], str) and isinstance(call["args"]["unit"], str)
