"""Agent frameworks against a real `ruvllm serve` on the default model.

Each test asserts structure, not the model's judgement: calls parse and validate against
the tool's own schema, outputs validate, and runs end. The default model (SmolLM2-135M)
rarely chooses a tool on its own, so each test requires one the framework's way
(`tool_choice` "required" or a named tool) and ends the run after the tool (the
framework's stop-after-tool setting), as docs/AGENTS.md explains.
"""

import asyncio
import json
import os

import jsonschema
import pytest
from pydantic import BaseModel

os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")
os.environ.setdefault("CREWAI_DISABLE_TELEMETRY", "true")
os.environ.setdefault("CREWAI_TRACING_ENABLED", "false")
os.environ.setdefault("OTEL_SDK_DISABLED", "true")


class City(BaseModel):
    city: str
    country: str


def get_weather(city: str) -> str:
    """Current weather in a city."""
    return f"Sunny in {city}"


def add(a: int, b: int) -> int:
    """Adds two integers."""
    return a + b


WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string"}},
    "required": ["city"],
}
ADD = {
    "type": "object",
    "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
    "required": ["a", "b"],
}
SCHEMAS = {"get_weather": WEATHER, "add": ADD}


def check_call(name, arguments):
    assert name in SCHEMAS, name
    args = json.loads(arguments) if isinstance(arguments, str) else arguments
    jsonschema.validate(args, SCHEMAS[name])
    return args


@pytest.mark.parametrize("api", ["chat_completions", "responses"])
def test_openai_agents_sdk_two_tools(server, model, api):
    from agents import (
        Agent,
        ModelSettings,
        OpenAIChatCompletionsModel,
        OpenAIResponsesModel,
        Runner,
        function_tool,
        set_tracing_disabled,
    )
    from agents.items import ToolCallItem, ToolCallOutputItem
    from openai import AsyncOpenAI

    set_tracing_disabled(True)
    client = AsyncOpenAI(base_url=server + "/v1", api_key="none")
    cls = OpenAIChatCompletionsModel if api == "chat_completions" else OpenAIResponsesModel
    agent = Agent(
        name="helper",
        instructions="Use the tools to answer.",
        model=cls(model=model, openai_client=client),
        tools=[function_tool(get_weather), function_tool(add)],
        model_settings=ModelSettings(tool_choice="required", temperature=0, max_tokens=96),
        tool_use_behavior="stop_on_first_tool",
    )
    result = asyncio.run(Runner.run(agent, "What is the weather in Paris?", max_turns=3))
    calls = [i for i in result.new_items if isinstance(i, ToolCallItem)]
    outputs = [i for i in result.new_items if isinstance(i, ToolCallOutputItem)]
    assert calls and outputs
    raw = calls[0].raw_item
    args = check_call(raw.name, raw.arguments)
    expected = get_weather(**args) if raw.name == "get_weather" else add(**args)
    assert str(result.final_output) == str(expected)


def test_crewai_agent_with_a_tool_and_a_pydantic_output(server, model):
    from crewai import LLM, Agent, Crew, Task
    from crewai.tools import tool

    calls = []

    @tool("get_weather")
    def weather(city: str) -> str:
        """Current weather in a city."""
        calls.append(city)
        return get_weather(city)

    llm = LLM(model="openai/" + model, base_url=server + "/v1", api_key="none",
              temperature=0, max_tokens=128)
    agent = Agent(role="Travel assistant", goal="Answer travel questions",
                  backstory="You know cities.", tools=[weather], llm=llm, max_iter=2,
                  verbose=False)
    task = Task(description="Which country is Paris in?",
                expected_output="The city and its country.", agent=agent,
                output_pydantic=City)
    out = Crew(agents=[agent], tasks=[task], verbose=False).kickoff()
    assert isinstance(out.pydantic, City), out.raw
    City.model_validate(out.pydantic.model_dump())
    for c in calls:
        assert isinstance(c, str)


def test_autogen_assistant_agent_with_a_tool(server, model):
    from autogen_agentchat.agents import AssistantAgent
    from autogen_agentchat.messages import ToolCallExecutionEvent, ToolCallRequestEvent
    from autogen_ext.models.openai import OpenAIChatCompletionClient

    class RequiredTools(OpenAIChatCompletionClient):
        """AssistantAgent passes no tool_choice; the client's own parameter requires one."""

        async def create(self, messages, *, tools=(), tool_choice="auto", **kw):
            choice = "required" if tools else tool_choice
            return await super().create(messages, tools=tools, tool_choice=choice, **kw)

    client = RequiredTools(
        model=model, base_url=server + "/v1", api_key="none", temperature=0, max_tokens=96,
        model_info={"vision": False, "function_calling": True, "json_output": True,
                    "structured_output": True, "family": "unknown"},
    )
    agent = AssistantAgent("helper", model_client=client, tools=[get_weather, add],
                           system_message="Use the tools.")

    async def run():
        try:
            return await agent.run(task="What is 2 plus 3?")
        finally:
            await client.close()

    result = asyncio.run(run())
    requests = [m for m in result.messages if isinstance(m, ToolCallRequestEvent)]
    executions = [m for m in result.messages if isinstance(m, ToolCallExecutionEvent)]
    assert requests and executions
    for call in requests[0].content:
        check_call(call.name, call.arguments)
    assert all(not r.is_error for r in executions[0].content), executions[0]


def test_langgraph_react_agent_uses_its_tools(server, model):
    from langchain_core.messages import ToolMessage
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI
    from langgraph.prebuilt import create_react_agent

    @tool(return_direct=True)
    def weather(city: str) -> str:
        """Current weather in a city."""
        return get_weather(city)

    llm = ChatOpenAI(model=model, base_url=server + "/v1", api_key="none", temperature=0,
                     max_tokens=96)
    # The model bound with its tools and a required call; return_direct ends the run with
    # the tool's answer.
    graph = create_react_agent(llm.bind_tools([weather], tool_choice="required"), [weather])
    out = graph.invoke({"messages": [("user", "What is the weather in Rome?")]})
    msgs = out["messages"]
    ai = [m for m in msgs if getattr(m, "tool_calls", None)]
    assert ai, msgs
    for c in ai[0].tool_calls:
        assert c["name"] == "weather"
        jsonschema.validate(c["args"], WEATHER)
    assert isinstance(msgs[-1], ToolMessage)
    assert msgs[-1].content.startswith("Sunny in ")


def test_pydantic_ai_structured_output_and_a_tool(server, model):
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    m = OpenAIChatModel(model, provider=OpenAIProvider(base_url=server + "/v1", api_key="none"))
    # The structured output is pydantic-ai's output tool (required when text is not an
    # allowed output), so the answer is a call whose arguments must validate as City.
    agent = Agent(m, output_type=City, model_settings={"temperature": 0, "max_tokens": 96})
    r = agent.run_sync("Which country is Paris in?")
    assert isinstance(r.output, City)
    used = []
    tool_agent = Agent(m, output_type=City, model_settings={"temperature": 0, "max_tokens": 96})

    @tool_agent.tool_plain
    def lookup(city: str) -> str:
        """Looks up the country of a city."""
        used.append(city)
        return "France"

    r = tool_agent.run_sync("Which country is Paris in?")
    assert isinstance(r.output, City)
