"""The SGLang grammar backend driven by the real `sglang` package (0.5.23, installed without
its CUDA dependencies), as far as SGLang runs on a CPU: its plugin loader (the
`sglang.srt.plugins` entry point adds `--grammar-backend ruvllm`), its backend registry,
its compile-and-cache path (`get_cached_or_future_value`, `copy`), its batch mask fill
(`SamplingBatchInfo.update_regex_vocab_mask`, `GrammarMask.apply`) and its speculative
draft-tree walk (`traverse_tree`: accept, fill, rollback per node). Logits come from the
default model through transformers; SGLang's own model runner needs a GPU
(scripts/gpu-check.sh runs `sglang.launch_server` there). Outputs must end with EOS within
the token limit and pass independent validators."""

from __future__ import annotations

import json
import re
from types import SimpleNamespace

import jsonschema
import torch

import ruvllm
from conftest import CITY_SCHEMA, chat_ids, next_logits
from ruvllm.sglang import RuvllmGrammarBackend, RuvllmGrammarObject

MAX_NEW = 96
SCHEMA = CITY_SCHEMA
WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 30}},
    "required": ["city"],
    "additionalProperties": False,
}
TAG = {
    "type": "structural_tag",
    "structures": [{"begin": "<function=get_weather>", "schema": WEATHER, "end": "</function>"}],
    "triggers": ["<function="],
}


def backend_from_plugin(tok, model) -> RuvllmGrammarBackend:
    from sglang.srt.arg_groups.choices import GRAMMAR_BACKEND_CHOICES
    from sglang.srt.constrained.base_grammar_backend import GRAMMAR_BACKEND_REGISTRY
    from sglang.srt.plugins import load_plugins

    load_plugins()  # SGLang's start-up step: runs the installed general plugins
    assert "ruvllm" in GRAMMAR_BACKEND_CHOICES
    factory = GRAMMAR_BACKEND_REGISTRY["ruvllm"]
    server_args = SimpleNamespace(constrained_json_disable_any_whitespace=False)
    backend = factory(server_args, tok, model.config.vocab_size, {tok.eos_token_id})
    assert isinstance(backend, RuvllmGrammarBackend)
    return backend


def request_grammar(backend, key):
    """What SGLang's grammar manager does per request: the cached template's copy, or a
    compile on the backend's thread pool, cached."""
    value, hit = backend.get_cached_or_future_value(key, False)
    if not hit:
        value = value.result(timeout=120)
        backend.set_cache(key, value)
        value = value.copy()
    return value


def test_backend_generates_through_sglangs_batch_mask(smollm2):
    from sglang.srt.sampling.sampling_batch_info import SamplingBatchInfo

    tok, model = smollm2
    backend = backend_from_plugin(tok, model)
    cases = {
        "json": (("json", json.dumps(SCHEMA)), "The largest city of France and its population, in JSON."),
        "regex": (("regex", r"[A-Z][a-z]+ [0-9]{1,4}"), "Name a city and a year."),
        "ebnf": (("ebnf", 'root ::= "answer: " ("yes" | "no") "."'), "Is the sky green?"),
        "tag": (("structural_tag", json.dumps(TAG)), "What is the weather in Paris? Call get_weather."),
    }
    grammars = {name: request_grammar(backend, key) for name, (key, _) in cases.items()}
    assert all(isinstance(g, RuvllmGrammarObject) for g in grammars.values())
    # A second request with the same key gets a fresh copy of the cached template.
    again = request_grammar(backend, cases["json"][0])
    assert again is not grammars["json"] and again.matcher.num_tokens() == 0
    # Jump-forward: the EBNF answer's opening words are forced tokens.
    ff = grammars["ebnf"].try_jump_forward(tok)
    assert ff is not None and "answer: ".startswith(tok.decode(ff[0])), ff
    assert grammars["ebnf"].matcher.num_tokens() == 0

    prompts = {name: chat_ids(tok, p) for name, (_, p) in cases.items()}
    out = {name: [] for name in cases}
    # This small model does not call tools on its own: its answer starts with the trigger
    # (as if sampled), after which the grammar forces the only structure's begin.
    for t in tok("<function=", add_special_tokens=False)["input_ids"]:
        grammars["tag"].accept_token(t)
        out["tag"].append(t)
    ff = grammars["tag"].try_jump_forward(tok)
    assert ff is not None and tok.decode(ff[0]).startswith("get"), ff
    live = list(cases)
    for _ in range(MAX_NEW):
        if not live:
            break
        batch = SimpleNamespace(
            grammars=[grammars[n] for n in live],
            vocab_size=model.config.vocab_size,
            temperatures=torch.zeros(len(live)),
            device="cpu",
        )
        SamplingBatchInfo.update_regex_vocab_mask(batch)  # SGLang's own batch fill
        logits = next_logits(model, [prompts[n] + out[n] for n in live])
        batch.grammar_mask.apply(logits)
        for name, t in zip(list(live), logits.argmax(-1).tolist()):
            out[name].append(t)
            grammars[name].accept_token(t)
            if t == tok.eos_token_id:
                assert grammars[name].is_terminated()
                live.remove(name)
    assert not live, f"cut by the token limit: {live}: {[tok.decode(out[n]) for n in live]}"
    text = {n: tok.decode(ids[:-1]) for n, ids in out.items()}
    jsonschema.validate(json.loads(text["json"]), SCHEMA)
    assert re.fullmatch(r"[A-Z][a-z]+ [0-9]{1,4}", text["regex"]), text
    assert re.fullmatch(r"answer: (yes|no)\.", text["ebnf"]), text
    # The tagged answer: every trigger opens a complete tag whose JSON fits the schema.
    tags = list(re.finditer(r"<function=get_weather>(.*?)</function>", text["tag"], re.S))
    assert tags, text["tag"]
    for m in tags:
        jsonschema.validate(json.loads(m.group(1)), WEATHER)
    rest = re.sub(r"<function=get_weather>.*?</function>", "", text["tag"], flags=re.S)
    assert "<function=" not in rest, text["tag"]


def test_invalid_grammars_become_sglangs_invalid_object(smollm2):
    from sglang.srt.constrained.base_grammar_backend import InvalidGrammarObject

    tok, model = smollm2
    backend = RuvllmGrammarBackend(tok, model.config.vocab_size, {tok.eos_token_id})
    for key, want in [
        (("json", '{"type": "strin"}'), "type"),
        (("regex", "(a"), "regex"),
        (("ebnf", 'root ::= "a'), "1:"),
        (("structural_tag", '{"format": {}}'), "format"),
        (("json", '{"pattern": "a\\u0000"}'), "NUL"),
    ]:
        g = request_grammar(backend, key)
        assert isinstance(g, InvalidGrammarObject), key
        assert want.lower() in g.error_message.lower(), (key, g.error_message)


def test_draft_tree_through_sglangs_traverse_tree(smollm2):
    from sglang.srt.speculative.spec_utils import traverse_tree

    tok, model = smollm2
    backend = RuvllmGrammarBackend(tok, model.config.vocab_size, {tok.eos_token_id})
    g = request_grammar(backend, ("regex", r"(ab|cd)+!"))
    enc = lambda s: tok(s, add_special_tokens=False)["input_ids"]  # noqa: E731
    ab, cd, bang, x = enc("ab")[0], enc("cd")[0], enc("!")[0], enc("x")[0]
    # A tree of 5 nodes: 0 (the verified token), children 1 = ab and 2 = x (rejected);
    # 1's child 3 = cd, whose child 4 = "!".
    draft = torch.tensor([0, ab, x, cd, bang])
    next_token = torch.tensor([1, 3, -1, 4, -1])
    next_sibling = torch.tensor([-1, 2, -1, -1, -1])
    bm = g.allocate_vocab_mask(model.config.vocab_size, 5, "cpu")
    traverse_tree(next_token, next_sibling, draft, g, bm, vocab_size=model.config.vocab_size)
    assert g.matcher.num_tokens() == 0, "the walk rolls back every token it accepted"
    grammar = backend.engine.compile_regex(r"(ab|cd)+!")
    for node, path in [(0, []), (1, [ab]), (3, [ab, cd])]:
        m = ruvllm.Matcher(grammar)
        assert m.consume_tokens(path)
        row = ruvllm.allocate_token_bitmask(1, model.config.vocab_size)
        m.fill_next_token_bitmask(row, 0)
        assert (bm[node].numpy() == row[0]).all(), f"node {node}"
    # Node 2 (x) was rejected: its row stays unconstrained (-1), as SGLang expects.
    assert (bm[2] == -1).all()
