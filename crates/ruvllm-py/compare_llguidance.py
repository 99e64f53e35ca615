r"""Token masks from ruvllm and from the llguidance wheel, compared position by position on
MaskBench schemas both compile, and every disagreement judged.

The two engines are set to the same policy: properties in the schema's order, unique keys,
numbers as encoders write them (ruvllm's `generation` mode; llguidance does the same by
default), and whitespace "any, up to 20 characters at a time" (ruvllm's `flexible`;
llguidance's `whitespace_flexible` with the pattern `[ \\n\\r\\t]{0,20}`). Along each valid
instance of a schema (its Llama 3.1 tokens), both masks are computed at every position.

A token one engine allows and the other forbids is judged by completing the document from
there with the allowing engine (a greedy walk over its own masks that prefers closing
tokens) and validating the result with `jsonschema`, an independent validator:

* `valid`: the token leads to a document both validators accept (Python's `jsonschema`
  and the Rust `jsonschema` crate, through `ruvllm validate`): the forbidding engine is
  over-strict;
* `INVALID`: both reject the completed document: the allowing engine let the output leave
  the language (a soundness bug);
* `validators disagree`: one rejects it (a format checker or a regex dialect: JSON
  Schema's patterns are ECMA-262, whose `\s` includes U+FEFF and Python's does not; RFC
  3339 allows the year 0000 and Python's `date` does not; Python's `email` only looks
  for an `@`); the message is shown;
* `open`: no completion was found within the step limit (not judged).

An EOS token is judged on the text before it.

Usage (the venv of run-tests.sh, which installs llguidance):
    .venv-py/bin/python crates/ruvllm-py/compare_llguidance.py [--every N] [--out FILE] [MASKBENCH_DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

import jsonschema
import llguidance
import llguidance.numpy as lln
import numpy as np
from tokenizers import Tokenizer

import ruvllm

ROOT = Path(__file__).resolve().parents[2]
WS = r"[\x20\x0A\x0D\x09]{0,20}"
# Tokens a greedy completion tries first: they close strings, values and containers.
PREFER = ['"', "}", "]", "0", "1", "a", ",", ":", "null", "true", "false", " ", "\n", "{", "["]
MAX_STEPS = 96


class Engines:
    def __init__(self, tokenizer: Path) -> None:
        text = tokenizer.read_text()
        self.tok = Tokenizer.from_str(text)
        self.vocab = ruvllm.Vocabulary.from_tokenizer_json(text)
        self.engine = ruvllm.Engine(self.vocab)
        self.n = self.vocab.n_vocab
        self.lltok = llguidance.LLTokenizer(text, n_vocab=self.n, eos_token=self.vocab.eos_token_ids)
        self.eos = set(self.vocab.eos_token_ids)
        self.prefer = []
        for s in PREFER:
            ids = self.tok.encode(s, add_special_tokens=False).ids
            if len(ids) == 1:
                self.prefer.append(ids[0])
        self.bytes = [self.vocab.token_bytes(i) for i in range(self.vocab.tokenizer_size)]
        self.rust = RustValidator()

    def compile(self, schema: dict):
        g = self.engine.compile_json_schema(json.dumps(schema), whitespace="flexible")
        lg = llguidance.LLMatcher.grammar_from_json_schema(
            schema, defaults={"whitespace_flexible": True, "whitespace_pattern": WS}
        )
        if llguidance.LLMatcher(self.lltok, lg, log_level=0).is_error():
            raise ValueError(llguidance.LLMatcher(self.lltok, lg, log_level=0).get_error())
        return g, lg


class Side:
    """One engine's matcher behind one interface: mask, consume, accepting."""

    def __init__(self, e: Engines, kind: str, grammar) -> None:
        self.e, self.kind = e, kind
        self.m = ruvllm.Matcher(grammar) if kind == "ruvllm" else llguidance.LLMatcher(e.lltok, grammar, log_level=0)
        self.bm = np.zeros((1, (e.n + 31) // 32), dtype=np.int32)

    def mask(self) -> np.ndarray:
        if self.kind == "ruvllm":
            self.m.fill_next_token_bitmask(self.bm, 0)
        else:
            lln.fill_next_token_bitmask(self.m, self.bm, 0)
        return self.bm[0].copy()

    def consume(self, t: int) -> bool:
        return bool(self.m.consume_token(t))

    def accepting(self) -> bool:
        return bool(self.m.is_accepting())


def allowed(row: np.ndarray, t: int) -> bool:
    return bool((int(row[t >> 5]) >> (t & 31)) & 1)


def complete(e: Engines, kind: str, grammar, prefix: list[int]) -> bytes | None:
    """A complete document from `prefix` by a greedy walk over `kind`'s own masks."""
    s = Side(e, kind, grammar)
    for t in prefix:
        if not s.consume(t):
            return None
    out = b"".join(e.bytes[t] for t in prefix)
    for _ in range(MAX_STEPS):
        if s.accepting():
            return out
        row = s.mask()
        pick = next((t for t in e.prefer if allowed(row, t)), None)
        if pick is None:
            ids = np.flatnonzero(np.unpackbits(row.view(np.uint8), bitorder="little"))
            ids = [int(i) for i in ids if i < len(e.bytes) and i not in e.eos]
            if not ids:
                return None
            pick = min(ids, key=lambda i: (len(e.bytes[i]) == 0, i))
        if not s.consume(pick):
            return None
        out += e.bytes[pick]
    return None


class RustValidator:
    """The second validator: the Rust `jsonschema` crate, through `ruvllm validate`
    (RUVLLM_BIN, or target/debug/ruvllm); answers cached per schema and document."""

    def __init__(self) -> None:
        self.binary = os.environ.get("RUVLLM_BIN") or str(ROOT / "target/debug/ruvllm")
        if not Path(self.binary).exists():
            raise FileNotFoundError(f"{self.binary}: build it (cargo build -p ruvllm-cli) or set RUVLLM_BIN")
        self.dir = tempfile.mkdtemp(prefix="cmp-llg-")
        self.files: dict[str, str] = {}
        self.memo: dict[tuple[str, bytes], tuple[bool, str]] = {}
        self.proc: tuple[str, subprocess.Popen] | None = None

    def check(self, schema: dict, doc: bytes) -> tuple[bool, str]:
        key = json.dumps(schema, sort_keys=True)
        path = self.files.get(key)
        if path is None:
            path = self.files[key] = os.path.join(self.dir, f"{len(self.files)}.json")
            Path(path).write_text(key)
        if (path, doc) not in self.memo:
            self.memo[(path, doc)] = self.ask(path, doc)
        return self.memo[(path, doc)]

    def ask(self, path: str, doc: bytes) -> tuple[bool, str]:
        """The running `ruvllm validate --lines` of this schema (started on its first
        document), asked one line at a time; a document that is not one line of UTF-8 gets a
        run of its own."""
        try:
            line = doc.decode("utf-8")
        except UnicodeDecodeError:
            line = None
        if line is None or "\n" in line or "\r" in line:
            r = subprocess.run([self.binary, "validate", "--schema", path, "-"], input=doc,
                               capture_output=True, timeout=60)
            return r.returncode == 0, r.stdout.decode("utf-8", "replace").strip()[:120]
        if not line.strip():
            return False, "empty document"
        if self.proc is None or self.proc[0] != path:
            self.close()
            self.proc = (path, subprocess.Popen(
                [self.binary, "validate", "--lines", "--schema", path, "-"],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, encoding="utf-8"))
        p = self.proc[1]
        p.stdin.write(line + "\n")
        p.stdin.flush()
        answer = p.stdout.readline()
        if not answer:
            raise RuntimeError(f"ruvllm validate --lines on {path} ended (status {p.wait()})")
        verdict = answer.split(": ", 1)[1].strip()
        return verdict == "valid", verdict.removeprefix("invalid: ")[:120]

    def close(self) -> None:
        """Ends the running `ruvllm validate --lines` (the documents of one schema are asked
        together: one process at a time)."""
        if self.proc is not None:
            self.proc[1].stdin.close()
            self.proc[1].wait(timeout=60)
            self.proc = None


def python_check(schema: dict, value) -> tuple[bool, str]:
    try:
        cls = jsonschema.validators.validator_for(schema)
        errors = list(cls(schema, format_checker=cls.FORMAT_CHECKER).iter_errors(value))
    except (jsonschema.exceptions.SchemaError, RecursionError) as err:
        return False, str(err)[:120]
    return (not errors), (errors[0].message[:120] if errors else "")


def judge(e: Engines, kind: str, grammar, schema: dict, prefix: list[int], t: int) -> tuple[str, str]:
    """`valid` (both validators accept the completed document), `INVALID` (both reject
    it), `validators disagree` (one rejects: a format checker or a regex dialect; the
    message says which), or `open` (no completion). An EOS token is judged on the text
    before it: the output would end there."""
    if t in e.eos:
        doc = b"".join(e.bytes[x] for x in prefix)
    else:
        doc = complete(e, kind, grammar, prefix + [t])
    if doc is None:
        return "open", ""
    text = doc.decode("utf-8", "replace")
    try:
        value = json.loads(doc)
    except ValueError:
        return "INVALID", text + "  [not JSON]"
    py_ok, py_why = python_check(schema, value)
    rs_ok, rs_why = e.rust.check(schema, doc)
    if py_ok and rs_ok:
        return "valid", text
    if not py_ok and not rs_ok:
        return "INVALID", f"{text}  [{py_why}]"
    return "validators disagree", f"{text}  [{'Python' if not py_ok else 'Rust'}: {py_why or rs_why}]"


def compare(e: Engines, files: list[Path], instances: int, max_judged: int = 4) -> dict:
    """Walks every file; returns the counts and the judged disagreements."""
    report: dict = {"files": 0, "compiled": 0, "positions": 0, "tokens_differ": 0,
                    "groups": [], "verdicts": Counter(), "skipped": Counter()}
    for f in files:
        d = json.loads(f.read_text())
        schema = d["schema"]
        report["files"] += 1
        try:
            g, lg = e.compile(schema)
        except (ruvllm.RuvllmError, ValueError) as err:
            report["skipped"]["ruvllm" if isinstance(err, ruvllm.RuvllmError) else "llguidance"] += 1
            continue
        report["compiled"] += 1
        seen: set = set()
        for inst in [t for t in d["tests"] if t.get("valid")][:instances]:
            ids = e.tok.encode(json.dumps(inst["data"]), add_special_tokens=False).ids
            r, l = Side(e, "ruvllm", g), Side(e, "llguidance", lg)
            for pos in range(len(ids) + 1):
                mr, ml = r.mask(), l.mask()
                report["positions"] += 1
                diff = np.flatnonzero(np.unpackbits((mr ^ ml).view(np.uint8), bitorder="little"))
                diff = [int(t) for t in diff if t < e.n]
                if diff:
                    report["tokens_differ"] += len(diff)
                    for who, grammar in (("ruvllm", g), ("llguidance", lg)):
                        mine = mr if who == "ruvllm" else ml
                        only = [t for t in diff if allowed(mine, t)]
                        if not only:
                            continue
                        key = (f.name, who, pos)
                        if key in seen:
                            continue
                        seen.add(key)
                        verdicts = Counter()
                        examples = []
                        for t in only[:max_judged]:
                            v, doc = judge(e, who, grammar, schema, ids[:pos], t)
                            verdicts[v] += 1
                            examples.append((t, e.bytes[t].decode("utf-8", "replace") if t < len(e.bytes) else "", v, doc))
                        report["verdicts"].update({f"{who} only, {k}": n for k, n in verdicts.items()})
                        report["groups"].append({
                            "file": f.name, "only": who, "position": pos,
                            "prefix": b"".join(e.bytes[t] for t in ids[:pos]).decode("utf-8", "replace"),
                            "count": len(only), "examples": examples,
                        })
                if pos < len(ids):
                    if not (r.consume(ids[pos]) and l.consume(ids[pos])):
                        break
    e.rust.close()
    return report


CLASSES = [
    ("end of output before the document is complete",
     lambda txt, who: txt.startswith("<|") and txt.endswith("|>"),
     "the engine that forbids it: an output may end only when the document is complete"),
    ("whitespace",
     lambda txt, who: txt != "" and txt.strip() == "",
     "both: JSON allows it; the two engines bound whitespace runs differently"),
    # (name, test on the token text and the allowing side, who is right and why)
    ("\\u escape of a non-control character",
     lambda txt, who: "\\u" in txt,
     "llguidance: JSON allows `\\uXXXX` for any character; ruvllm takes it in keys, constants "
     "and enum values for what encoders escape (controls, non-ASCII, HTML-sensitive punctuation), "
     "not for ASCII letters and digits, and in a `pattern` for controls only (a known gap)"),
    ("escaped slash or raw DEL",
     lambda txt, who: "\\/" in txt or "\x7f" in txt,
     "ruvllm: `\\/` is a JSON escape and U+007F needs no escape; llguidance forbids both"),
    ("a split of fixed text (key, enum or const) into smaller tokens",
     lambda txt, who: who == "ruvllm" and txt.strip() != "" and all(c.isalnum() or c in "_-.$@" for c in txt),
     "ruvllm: the text stays in the language whatever its tokenization; llguidance allows only "
     "the canonical tokens of fixed text"),
]


def classify(txt: str, who: str) -> str:
    return next((name for name, test, _ in CLASSES if test(txt, who)), "other")


def render(report: dict, cmd: str, seconds: float) -> str:
    v = report["verdicts"]
    lines = [
        "# ruvllm and llguidance: token masks compared",
        "",
        f"Generated by `{cmd}` ({seconds:.0f} s); do not edit. See the script's docstring for",
        "the method: same policies on both sides, every position of valid MaskBench instances",
        "(Llama 3.1 tokens), each disagreement judged by completing the document with the",
        "engine that allows the token and validating it with two validators (Python's",
        "`jsonschema` and the Rust `jsonschema` crate).",
        "",
        f"- Schemas sampled: {report['files']}; compiled by both: {report['compiled']} "
        f"(refused by ruvllm: {report['skipped']['ruvllm']}, by llguidance: {report['skipped']['llguidance']}).",
        f"- Positions compared: {report['positions']}; positions where the masks differ: "
        f"{len({(g['file'], g['position']) for g in report['groups']})}; token differences: {report['tokens_differ']}.",
        "- Verdicts on judged tokens (up to 4 per position and side):",
    ]
    for k in sorted(v):
        lines.append(f"  - {k}: {v[k]}")
    lines += [
        "  - `valid`: Python's `jsonschema` and the Rust `jsonschema` crate both accept the completed",
        "    document (the other engine is over-strict); `INVALID`: both reject it (the allowing engine",
        "    is unsound); `validators disagree`: one rejects it (a format checker or a regex dialect;",
        "    the message says which); `open`: no completion found within the step limit. An EOS token",
        "    is judged on the text before it.",
    ]
    invalid = sum(n for k, n in v.items() if "INVALID" in k)
    lines.append(f"- Completions both validators reject (a soundness bug in the allowing engine): {invalid}.")
    lines += ["", "## Classes of disagreement, and who is right", ""]
    rows: dict = defaultdict(lambda: [0, set(), Counter(), None])
    for g in report["groups"]:
        for _, txt, verdict, doc in g["examples"]:
            r = rows[(classify(txt, g["only"]), g["only"])]
            r[0] += 1
            r[1].add(txt)
            r[2][verdict] += 1
            if (r[3] is None or r[3][4] != "valid") and verdict != "open":
                tail = doc[max(0, len(g["prefix"]) - 20):]
                r[3] = (g["file"], g["prefix"][-40:], txt, tail[:60] + (tail[tail.rfind("  ["):] if "  [" in tail else ""), verdict)
    why = {name: text for name, _, text in CLASSES}
    lines.append("| class | allowed only by | judged tokens | verdicts | right | example |")
    lines.append("|---|---|---|---|---|---|")
    for (cls, who), (n, toks, verdicts, ex) in sorted(rows.items(), key=lambda kv: -kv[1][0]):
        vs = ", ".join(f"{k} {c}" for k, c in sorted(verdicts.items()))
        right = why.get(cls, "the allowing engine where judged `valid`; not judged where `open`; "
                        "see the schemas below")
        example = f"{ex[0]}: after `{ex[1]}`, {json.dumps(ex[2])} completes to `{ex[3]}` ({ex[4]})" if ex else ""
        example = example.replace("\r", " ").replace("\n", " ")  # one table row
        lines.append(f"| {cls} | {who} | {n} ({len(toks)} distinct) | {vs} | {right} | {example.replace('|', '/')} |")
    lines += ["", "## Every disagreement, by schema", "",
              "Per schema: the side that allows tokens the other forbids, at how many positions, and",
              "the distinct judged tokens with their verdicts.", ""]
    by_file: dict = defaultdict(lambda: defaultdict(lambda: [0, Counter()]))
    for g in report["groups"]:
        entry = by_file[g["file"]][g["only"]]
        entry[0] += 1
        for _, txt, verdict, _ in g["examples"]:
            entry[1][(txt, verdict)] += 1
    if not by_file:
        lines.append("None.")
    for fname in sorted(by_file):
        for who, (npos, toks) in sorted(by_file[fname].items()):
            shown = ", ".join(f"{json.dumps(t)} {v}" for (t, v), _ in toks.most_common())
            lines.append(f"- {fname}: only {who} allows, at {npos} positions: {shown}".replace("\n", " "))
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("data", nargs="?", default=str(ROOT.parent / "shared/data/maskbench/data"))
    ap.add_argument("--every", type=int, default=50)
    ap.add_argument("--instances", type=int, default=2)
    ap.add_argument("--tokenizer", default=str(ROOT / "assets/tokenizers/llama3_1/tokenizer.json"))
    ap.add_argument("--out", default=None, help="write the report here (e.g. docs/LLGUIDANCE_MASKS.md)")
    a = ap.parse_args()
    t0 = time.time()
    e = Engines(Path(a.tokenizer))
    files = sorted(Path(a.data).glob("*.json"))[:: a.every]
    report = compare(e, files, a.instances)
    cmd = "python crates/ruvllm-py/compare_llguidance.py --every {} --instances {}".format(a.every, a.instances)
    text = render(report, cmd, time.time() - t0)
    if a.out:
        Path(a.out).write_text(text)
    print(text if not a.out else text.split("## Every")[0])
    if report["verdicts"].get("ruvllm only, INVALID"):
        sys.exit(1)


if __name__ == "__main__":
    main()
