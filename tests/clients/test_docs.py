"""Every code example of README.md, docs/SERVER.md and docs/AGENTS.md, run as written
against a real `ruvllm serve` on the default model, so that a doc example cannot rot.

How a snippet runs:
* ```python: in a fresh interpreter of this venv (the client libraries pinned by
  requirements.txt), each snippet on its own: it must define everything it uses.
  It must exit 0.
* ```sh / ```bash: with bash, from the repository root. A command that fails on purpose
  (`ruvllm validate` of an invalid document, `grammar check` of text outside the grammar)
  may exit non-zero, so the test reads the output instead: no "command not found", no
  missing file, no refused flag or argument, no "error:" from ruvllm, no `"error":` object
  from the server.

What the test changes, and only this: the address `http://127.0.0.1:8080` (or
`localhost:8080`) becomes the test server's; `./target/release/ruvllm` and `cargo run
--release -p ruvllm-cli --` become the binary under test, and `cargo run --release -p
ruvllm-engine --example NAME --` the example the test command built, and a line that
only builds (`cargo build --release`) is dropped: the test command built them already
(in its debug profile). The few snippets that cannot run inside a test are listed in
NOT_RUN with the reason; a snippet that is neither run nor listed fails the test.
"""

import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DOCS = ["README.md", "docs/SERVER.md", "docs/AGENTS.md"]

# Snippets (file, first line of the snippet's text) that are not run, and why.
NOT_RUN = {
    ("README.md", "bash scripts/run.sh"): "the setup command itself: a release build and the main job",
    ("README.md", "bash scripts/test.sh"): "the test command itself (this test is part of it)",
    ("README.md", "cargo install --locked --path crates/ruvllm-cli   # from the checkout: `ruvllm` on your PATH"):
        "a release build; tests/install/run.sh runs the same install (--debug), pull and generate",
    ("docs/SERVER.md", "bash scripts/fetch-assets.sh          # the default model, once"):
        "starts a server that runs until stopped: the test's own server is started the same way",
    ("docs/AGENTS.md", "cargo run --release -p ruvllm-cli -- serve --port 8080"):
        "starts a server that runs until stopped: the test's own server is started the same way",
}

FENCE = re.compile(r"^```([A-Za-z]*)\s*$")


def snippets():
    out = []
    for doc in DOCS:
        with open(os.path.join(ROOT, doc), encoding="utf-8") as f:
            lines = f.read().split("\n")
        i = 0
        while i < len(lines):
            m = FENCE.match(lines[i])
            if not m:
                i += 1
                continue
            lang, start = m.group(1), i + 1
            j = start
            while j < len(lines) and lines[j].strip() != "```":
                j += 1
            body = "\n".join(lines[start:j])
            if lang in ("python", "sh", "bash"):
                out.append(pytest.param(doc, lang, body, id=f"{doc}:{start}"))
            i = j + 1
    return out


def first_line(body):
    return body.strip().split("\n")[0]


def bin_path():
    b = os.environ.get("RUVLLM_BIN")
    assert b and os.path.exists(b), "set RUVLLM_BIN to the ruvllm binary"
    return b


def rewrite(body, url):
    hostport = url.split("//", 1)[1]
    body = body.replace("http://127.0.0.1:8080", url).replace("http://localhost:8080", url)
    body = body.replace("localhost:8080", hostport).replace("127.0.0.1:8080", hostport)
    return body


def rewrite_shell(body, url):
    body = rewrite(body, url)
    binary = bin_path()
    examples = os.path.join(os.path.dirname(binary), "examples")
    lines = []
    for line in body.split("\n"):
        if re.fullmatch(r"\s*cargo build --release\s*", line):
            continue
        line = line.replace("./target/release/ruvllm", binary)
        line = line.replace("cargo run --release -p ruvllm-cli --", binary)
        line = re.sub(r"cargo run --release -p ruvllm-engine --example (\w+) --",
                      lambda m: os.path.join(examples, m.group(1)), line)
        lines.append(line)
    return "\n".join(lines)


ROT = re.compile(
    r"command not found|No such file or directory|unexpected argument|unrecognized|"
    r"^error:|\berror: |Usage: ruvllm|\"error\"\s*:",
    re.M,
)


@pytest.mark.parametrize("doc,lang,body", snippets())
def test_doc_example_runs_as_written(server, doc, lang, body):
    key = (doc, first_line(body))
    if key in NOT_RUN:
        # Listed with its reason: the listing itself is checked below.
        return
    env = dict(os.environ)
    env.setdefault("CREWAI_DISABLE_TELEMETRY", "true")
    env.setdefault("OTEL_SDK_DISABLED", "true")
    if lang == "python":
        code = rewrite(body, server)
        p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env,
                           capture_output=True, text=True, timeout=600)
        assert p.returncode == 0, f"{doc} snippet failed:\n{code}\n--- stderr:\n{p.stderr[-4000:]}"
    else:
        code = rewrite_shell(body, server)
        p = subprocess.run(["bash", "-c", code], cwd=ROOT, env=env,
                           capture_output=True, text=True, timeout=600)
        out = p.stdout + p.stderr
        m = ROT.search(out)
        assert not m, f"{doc} snippet rotted ({m.group(0)!r}):\n{code}\n--- output:\n{out[-4000:]}"
        assert p.stdout.strip(), f"{doc} snippet printed nothing:\n{code}\n{p.stderr[-2000:]}"


def test_not_run_lists_only_real_snippets():
    all_snippets = snippets()
    found = {(p.values[0], first_line(p.values[2])) for p in all_snippets}
    for key in NOT_RUN:
        assert key in found, f"NOT_RUN names a snippet the docs no longer have: {key}"
    # The parametrized test runs every snippet not listed; the three documents hold at
    # least this many (a parser that found none would make that test vacuous).
    assert len(all_snippets) >= 20, len(all_snippets)
