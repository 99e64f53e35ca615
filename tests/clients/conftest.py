"""Starts one real `ruvllm serve` on the default model for the whole session.

The binary comes from $RUVLLM_BIN (run.sh sets it); the port is chosen by the server
(--port 0) and read from its first line on stderr.
"""

import os
import re
import subprocess
import time
import urllib.request

import pytest


def start(extra):
    binary = os.environ.get("RUVLLM_BIN")
    assert binary and os.path.exists(binary), "set RUVLLM_BIN to the ruvllm binary"
    proc = subprocess.Popen(
        [binary, "serve", "--port", "0", "--max-batch", "4", *extra],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
    )
    url = None
    deadline = time.time() + 120
    while time.time() < deadline and url is None:
        line = proc.stderr.readline()
        if not line and proc.poll() is not None:
            raise RuntimeError(f"ruvllm serve exited with {proc.returncode}")
        m = re.search(r"on (http://[0-9.:]+)", line)
        if m:
            url = m.group(1)
    assert url, "ruvllm serve did not report its address"
    with urllib.request.urlopen(url + "/health", timeout=30) as r:
        assert r.status == 200
    return proc, url


@pytest.fixture(scope="session")
def server():
    proc, url = start([])
    yield url
    proc.terminate()
    proc.wait(timeout=30)


@pytest.fixture(scope="session")
def thinking_server():
    """The default model with a chat template that has a reasoning section
    (tests/templates/chatml-think.jinja, written for the tests)."""
    here = os.path.dirname(os.path.abspath(__file__))
    template = os.path.join(here, "..", "templates", "chatml-think.jinja")
    proc, url = start(["--chat-template", template, "--any-model"])
    yield url
    proc.terminate()
    proc.wait(timeout=30)


@pytest.fixture(scope="session")
def model(server):
    import json

    with urllib.request.urlopen(server + "/v1/models", timeout=30) as r:
        return json.load(r)["data"][0]["id"]
