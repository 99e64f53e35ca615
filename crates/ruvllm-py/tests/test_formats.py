"""Format values that the user's own validators accept (issue 66).

Random walks through the budget-aware masks of every format python-jsonschema checks, each
started with a budget from the shortest completion to 8 tokens above it, so that the
budget closes most of them mid-value; every value completed is checked with
python-jsonschema's format checker (every checker present: the test fails if one is
missing) and, where the format has a Pydantic type, with Pydantic (`EmailStr` is how
Pydantic writes `format: email`, `timedelta` is `duration`). The schemas compile with the
generation options (`generation=True`, the default), whose format values are the portable
subset (docs/JSON_SCHEMA.md, "Generation defaults").
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import random
import uuid
from pathlib import Path

import numpy as np
import pytest
from jsonschema import Draft202012Validator
from pydantic import AnyUrl, EmailStr, TypeAdapter

from ruvllm import Engine, Matcher, Vocabulary, allocate_token_bitmask

ROOT = Path(__file__).resolve().parents[3]
TOKENIZER = ROOT / "assets/tokenizers/llama3_1/tokenizer.json"

# Every format python-jsonschema's checker knows with the `format-nongpl` extras.
FORMATS = [
    "date", "date-time", "duration", "email", "hostname", "idn-email", "idn-hostname",
    "ipv4", "ipv6", "iri", "iri-reference", "json-pointer", "regex", "relative-json-pointer",
    "time", "uri", "uri-reference", "uri-template", "uuid",
]
PYDANTIC = {
    "date": datetime.date,
    "date-time": datetime.datetime,
    "time": datetime.time,
    "duration": datetime.timedelta,
    "email": EmailStr,
    "ipv4": ipaddress.IPv4Address,
    "ipv6": ipaddress.IPv6Address,
    "uuid": uuid.UUID,
    "uri": AnyUrl,
}
# Where the engine's language is not python-jsonschema's (left open in issue 66):
# `idn-hostname` is checked as the `jsonschema` crate reads IDNA 2008, and the `idna`
# package refuses more (upper-case letters in a label with other scripts, DISALLOWED code
# points); `regex` is ECMA-262's syntax, which python-jsonschema reads as Python's `re`
# (`[]` is an empty class in ECMA-262 and an unterminated one in Python).
OTHER_READING = {"idn-hostname", "regex"}
# Formats decided by a check on the whole value that a continuation can leave no way to
# pass (an IDNA rule broken, a regex that cannot close): the budget-aware mask of the
# Python API then empties (the runtime rolls such tokens back).
DEAD_ENDS = {"idn-hostname", "idn-email", "regex"}
WALKS = 16


@pytest.fixture(scope="module")
def vocab() -> Vocabulary:
    assert TOKENIZER.exists(), f"{TOKENIZER} is missing: run scripts/fetch-assets.sh"
    return Vocabulary.from_file(TOKENIZER)


def test_the_format_checkers_are_all_there():
    missing = set(FORMATS) - set(Draft202012Validator.FORMAT_CHECKER.checkers)
    assert not missing, f"python-jsonschema checks none of {missing}: install jsonschema[format-nongpl]"


def walk(m: Matcher, vocab: Vocabulary, rng: random.Random) -> tuple[bytes, bool]:
    """A random walk under the budget-aware mask: (the text, whether it completed)."""
    bm = allocate_token_bitmask(1, vocab.n_vocab)
    eos = set(vocab.eos_token_ids)
    start = m.shortest_completion()
    assert start is not None, "no completion from the start"
    budget = len(start) + rng.randint(0, 8)
    out = b""
    for step in range(budget + 1):
        m.fill_next_token_bitmask(bm, 0, tokens_left=budget - step)
        bits = np.unpackbits(bm[0].view(np.uint8), bitorder="little")[: vocab.n_vocab]
        ok = [int(t) for t in np.nonzero(bits)[0]]
        if not ok:
            return out, False
        text = [t for t in ok if t not in eos]
        if m.is_accepting() and (not text or rng.random() < 0.2):
            return out, True
        t = rng.choice(text)
        assert m.consume_token(t), m.get_error()
        out += vocab.token_bytes(t)
    return out, m.is_accepting()


@pytest.mark.parametrize("fmt", FORMATS)
def test_budget_closed_values_pass_python_validators(vocab, fmt):
    schema = {"type": "string", "format": fmt}
    g = Engine(vocab).compile_json_schema(json.dumps(schema))
    checker = Draft202012Validator(schema, format_checker=Draft202012Validator.FORMAT_CHECKER)
    rng = random.Random(f"formats {fmt}")
    refused, dead, done = [], 0, 0
    for _ in range(WALKS):
        out, complete = walk(Matcher(g), vocab, rng)
        if not complete:
            dead += 1
            continue
        done += 1
        value = json.loads(out)
        errors = [e.message for e in checker.iter_errors(value)]
        if fmt in PYDANTIC:
            try:
                TypeAdapter(PYDANTIC[fmt]).validate_python(value)
            except ValueError as e:
                errors.append(f"pydantic: {e}")
        if errors:
            refused.append((value, errors[0]))
    if fmt not in DEAD_ENDS:
        assert dead == 0, f"{dead} of {WALKS} walks found no way to complete"
    assert done >= WALKS // 2
    if fmt not in OTHER_READING:
        assert not refused, refused[:3]
