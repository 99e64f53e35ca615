#!/usr/bin/env python3
"""Tool calling with `tool_choice: auto` on a running `ruvllm serve`: over N runs of a
two-tool prompt (even seeds: the question; odd seeds: after a tool result), how many calls,
how many malformed ones, how many answers carry `<tool...>` markup, how many were cut by
max_tokens. docs/SERVER.md quotes its output.

    ./target/release/ruvllm serve --port 18182 &
    python3 scripts/measure-auto-tools.py http://127.0.0.1:18182 50
"""

import json
import sys
import urllib.request

TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Current weather in a city.",
     "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
    {"type": "function", "function": {"name": "get_time", "description": "Local time in a city.",
     "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
]
MARKUP = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<tools>"]


def main():
    base, runs = sys.argv[1].rstrip("/"), int(sys.argv[2])
    stats = {"runs": 0, "calls": 0, "malformed": 0, "markup": 0, "length": 0}
    for seed in range(runs):
        msgs = [{"role": "user", "content": "What is the weather in Paris right now?"}]
        if seed % 2:
            msgs += [
                {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function",
                 "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
                {"role": "tool", "tool_call_id": "call_1", "content": "18 C and sunny"},
            ]
        body = {"messages": msgs, "tools": TOOLS, "tool_choice": "auto", "temperature": 0.7,
                "seed": seed, "max_tokens": 120}
        req = urllib.request.Request(base + "/v1/chat/completions", json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
        v = json.load(urllib.request.urlopen(req))
        choice = v["choices"][0]
        m = choice["message"]
        stats["runs"] += 1
        stats["length"] += choice["finish_reason"] == "length"
        for c in m.get("tool_calls") or []:
            stats["calls"] += 1
            try:
                json.loads(c["function"]["arguments"])
            except ValueError:
                stats["malformed"] += 1
        stats["markup"] += any(k in (m.get("content") or "") for k in MARKUP)
    print(stats)


if __name__ == "__main__":
    main()
