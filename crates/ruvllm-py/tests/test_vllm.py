"""The vLLM adapters driven by the real `vllm` package (0.33, installed without its CUDA
dependencies), as far as vLLM runs on a CPU: vLLM's own `StructuredOutputManager` (grammar
compilation, bitmask filling with and without speculative drafts, token acceptance), its
`apply_grammar_bitmask` (the CPU path the model runner uses), and its logits-processor
loading (`build_logitsprocs`, by entry point) with its `BatchUpdateBuilder`. The logits
come from the default model (SmolLM2-135M-Instruct, loaded from its GGUF by
transformers); vLLM's own model runner needs a GPU (scripts/gpu-check.sh runs `vllm
serve` there). Outputs must end with EOS within the token limit and pass independent
validators."""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace

import jsonschema
import pytest
import torch
from transformers import AutoConfig

import ruvllm
from conftest import CITY_SCHEMA, GGUF, MODELS, chat_ids, next_logits
from ruvllm.vllm import RuvllmGrammar, RuvllmLogitsProcessor, install_backend

MAX_NEW = 96

SCHEMA = CITY_SCHEMA


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory, smollm2):
    """A Hugging Face model folder (config and tokenizer, no weights) made from the GGUF,
    which vLLM's ModelConfig reads; and the model itself for the logits."""
    tok, model = smollm2
    d = tmp_path_factory.mktemp("smollm2")
    cfg = AutoConfig.from_pretrained(MODELS, gguf_file=GGUF)
    cfg.architectures = ["LlamaForCausalLM"]
    tok.save_pretrained(d)
    cfg.save_pretrained(d)
    return d, tok, model


def vllm_config(d: Path, spec_tokens: int = 0):
    from vllm.config import DeviceConfig, ModelConfig, SpeculativeConfig, VllmConfig

    spec = None
    if spec_tokens:
        spec = SpeculativeConfig(
            method="ngram", num_speculative_tokens=spec_tokens, prompt_lookup_max=3, prompt_lookup_min=1
        )
    return VllmConfig(
        model_config=ModelConfig(model=str(d), tokenizer=str(d)),
        device_config=DeviceConfig(device="cpu"),
        speculative_config=spec,
    )


def make_request(rid: str, ids: list[int], eos: int, **so):
    from vllm import SamplingParams
    from vllm.sampling_params import StructuredOutputsParams
    from vllm.v1.request import Request

    params = StructuredOutputsParams(**so)
    params._backend = "ruvllm"  # what vLLM's input processor sets from the server's choice
    sp = SamplingParams(max_tokens=MAX_NEW, temperature=0.0, structured_outputs=params)
    sp.update_from_generation_config({}, eos_token_id=eos)  # as vLLM's input processor does
    return Request(rid, ids, sp, None)


def wait_ready(r) -> None:
    """Waits for the manager's compile (a Future on its thread pool)."""
    g = r.structured_output_request._grammar
    if hasattr(g, "result"):
        g.result(timeout=120)
    assert r.structured_output_request.is_grammar_ready


def test_backend_through_vllms_structured_output_manager(hf_dir, monkeypatch):
    import vllm.v1.structured_output.utils as so_utils
    from vllm.v1.core.sched.output import GrammarOutput
    from vllm.v1.structured_output import StructuredOutputManager
    from vllm.v1.structured_output.utils import apply_grammar_bitmask

    # This vLLM build assumes CUDA and pins host memory; there is no driver here.
    monkeypatch.setattr(so_utils, "PIN_MEMORY", False)

    d, tok, model = hf_dir
    manager = StructuredOutputManager(vllm_config(d))
    install_backend(manager)
    reqs = {
        "json": make_request("json", chat_ids(tok, "The largest city of France and its population, in JSON."), tok.eos_token_id, json=SCHEMA),
        "regex": make_request("regex", chat_ids(tok, "Name a city and a year."), tok.eos_token_id, regex=r"[A-Z][a-z]+ [0-9]{1,4}"),
        "gbnf": make_request("gbnf", chat_ids(tok, "Is the sky green?"), tok.eos_token_id, grammar='root ::= "answer: " ("yes" | "no") "."'),
        "choice": make_request("choice", chat_ids(tok, "Pick a color."), tok.eos_token_id, choice=["red", "green", "blue"]),
    }
    for r in reqs.values():
        manager.grammar_init(r)
    for r in reqs.values():
        wait_ready(r)
        assert isinstance(r.structured_output_request.grammar, RuvllmGrammar)
    out = {rid: [] for rid in reqs}
    live = list(reqs)
    for _ in range(MAX_NEW):
        if not live:
            break
        bitmask = manager.grammar_bitmask(reqs, live, {})
        logits = next_logits(model, [reqs[r].prompt_token_ids + out[r] for r in live])
        # vLLM's model-runner step: its own function masks the logits (its CPU path).
        apply_grammar_bitmask(
            SimpleNamespace(scheduled_spec_decode_tokens={}),
            GrammarOutput(structured_output_request_ids=live, grammar_bitmask=bitmask),
            SimpleNamespace(req_ids=live),
            logits,
        )
        for rid, t in zip(list(live), logits.argmax(-1).tolist()):
            out[rid].append(t)
            assert manager.accept_tokens(reqs[rid], [t])  # the scheduler's call
            if t == tok.eos_token_id:
                assert reqs[rid].structured_output_request.grammar.is_terminated()
                live.remove(rid)
    assert not live, f"cut by the token limit: {live}"
    text = {rid: tok.decode(ids[:-1]) for rid, ids in out.items()}
    jsonschema.validate(json.loads(text["json"]), SCHEMA)
    assert re.fullmatch(r"[A-Z][a-z]+ [0-9]{1,4}", text["regex"]), text
    assert re.fullmatch(r"answer: (yes|no)\.", text["gbnf"]), text
    assert text["choice"] in ("red", "green", "blue"), text


def test_speculative_drafts_through_the_manager(hf_dir):
    from vllm.v1.structured_output import StructuredOutputManager

    d, tok, _ = hf_dir
    manager = StructuredOutputManager(vllm_config(d, spec_tokens=3))
    install_backend(manager)
    r = make_request("r", chat_ids(tok, "x"), tok.eos_token_id, regex=r"(ab|cd)+!")
    manager.grammar_init(r)
    wait_ready(r)
    g = r.structured_output_request.grammar
    enc = lambda s: tok(s, add_special_tokens=False)["input_ids"]  # noqa: E731
    good = enc("ab") + enc("cd")
    bad = enc("x")
    # The draft's valid prefix, without advancing.
    assert manager.validate_tokens(r, good + bad) == good
    assert manager.validate_tokens(r, good + [-1, -1]) == good
    assert g.matcher.num_tokens() == 0
    # The bitmask for a draft: one row per position plus the bonus row, each the mask
    # after the draft's prefix; the grammar is rolled back afterwards.
    draft = (good + bad)[:3]
    bm = manager.grammar_bitmask({"r": r}, ["r"], {"r": draft})
    assert g.matcher.num_tokens() == 0
    vocab = manager.backend.engine
    grammar = vocab.compile_regex(r"(ab|cd)+!")
    for i in range(len(draft) + 1):
        m = ruvllm.Matcher(grammar)
        ok = m.consume_tokens(draft[:i])
        row = ruvllm.allocate_token_bitmask(1, manager.backend.n_vocab)
        m.fill_next_token_bitmask(row, 0)
        if ok:
            assert (bm[i] == row[0]).all(), f"row {i}"
    # Accepting the draft's valid part then rolling back restores the start.
    assert g.accept_tokens("r", good)
    g.rollback(len(good))
    assert g.matcher.num_tokens() == 0
    # A refused token: not accepted, and the row then allows EOS only.
    assert not g.accept_tokens("r", bad)
    assert not g.is_terminated()
    g.reset()
    assert g.matcher.get_error() is None


def test_logits_processor_plugin_by_entry_point(hf_dir, monkeypatch):
    import vllm.utils.torch_utils as torch_utils
    from vllm import SamplingParams
    from vllm.v1.sample.logits_processor import BatchUpdateBuilder, build_logitsprocs

    d, tok, model = hf_dir
    # vLLM's built-in processors stage their tensors in pinned memory, which needs a GPU.
    monkeypatch.setattr(torch_utils, "PIN_MEMORY", False)
    procs = build_logitsprocs(vllm_config(d), torch.device("cpu"), False, False)
    mine = [p for p in procs.all if isinstance(p, RuvllmLogitsProcessor)]
    assert len(mine) == 1, "the plugin is loaded from the vllm.logits_processors entry point"
    with pytest.raises(ValueError):
        RuvllmLogitsProcessor.validate_params(SamplingParams(extra_args={"ruvllm": {"yaml": "x"}}))
    with pytest.raises(ValueError):
        RuvllmLogitsProcessor.validate_params(SamplingParams(extra_args={"ruvllm": "{not json"}))
    # The OpenAI server's vllm_xargs carry the spec as a JSON string.
    RuvllmLogitsProcessor.validate_params(SamplingParams(extra_args={"ruvllm": json.dumps({"regex": "a+"})}))

    prompts = [
        chat_ids(tok, "The largest city of France and its population, in JSON."),
        chat_ids(tok, "Say hello."),
    ]
    params = [
        SamplingParams(max_tokens=MAX_NEW, extra_args={"ruvllm": json.dumps({"json_schema": SCHEMA})}),
        SamplingParams(max_tokens=MAX_NEW),
    ]
    outs: list[list[int]] = [[], []]
    builder = BatchUpdateBuilder()
    # Added in reverse order, then swapped: the processor follows vLLM's batch moves.
    builder.added.append((0, params[1], prompts[1], outs[1]))
    builder.added.append((1, params[0], prompts[0], outs[0]))
    update = builder.get_and_reset(2)
    for p in procs.all:
        p.update_state(update)
    builder.moved.append((0, 1, __import__("vllm").v1.sample.logits_processor.MoveDirectionality.SWAP))
    rows = [0, 1]  # batch row -> request
    for step in range(MAX_NEW):
        update = builder.get_and_reset(len(rows)) if step == 0 else None
        for p in procs.all:
            p.update_state(update)
        logits = next_logits(model, [prompts[r] + outs[r] for r in rows])
        before = logits.clone()
        for p in mine:
            logits = p.apply(logits)
        # The unconstrained request's row is untouched.
        free_row = rows.index(1)
        assert torch.equal(logits[free_row], before[free_row])
        for row, t in enumerate(logits.argmax(-1).tolist()):
            outs[rows[row]].append(t)
        if tok.eos_token_id in outs[0]:
            break
    assert tok.eos_token_id in outs[0], "the constrained request was cut by the token limit"
    text = tok.decode(outs[0][: outs[0].index(tok.eos_token_id)])
    jsonschema.validate(json.loads(text), SCHEMA)
    # Removing the request drops its matcher.
    builder.removed_append(0)
    update = builder.get_and_reset(1)
    for p in mine:
        p.update_state(update)
    assert 0 not in mine[0].rows
