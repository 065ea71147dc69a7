"""``llm.chat`` across two node processes: the model is configured on A, B's callers use it.

A's ``[[llm.openai]]`` points at a real HTTP/SSE server on 127.0.0.1 in this
test process; B reaches it through the mesh with the CLI and the client.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from hearthnet.client import AsyncClient
from hearthnet.errors import BadRequest
from hearthnet.testing import LocalMesh, MeshNode, wait_for
from tests.openai_chat_server import OpenAIChatServer, default_reply, words_of

MODEL = "test-chat"
MESSAGES = [
    {"role": "system", "content": "Context: [heating#c7] The boiler is serviced every October."},
    {"role": "user", "content": "When is the boiler serviced?"},
]


@pytest.fixture(scope="module")
def server() -> Iterator[OpenAIChatServer]:
    with OpenAIChatServer((MODEL,)) as s:
        yield s


@pytest.fixture(scope="module")
def mesh(tmp_path_factory: pytest.TempPathFactory, server: OpenAIChatServer) -> Iterator[LocalMesh]:
    m = LocalMesh(tmp_path_factory.mktemp("llm"))
    m.env["HEARTHNET_RAG"] = "0"
    m.env["HEARTHNET_EMBEDDING"] = "0"
    try:
        a = m.add("a")
        with (a.home / "config.toml").open("a") as f:
            f.write(
                f'\n[[llm.openai]]\nbase_url = "{server.url}"\nmodel = "{MODEL}"\n'
                "context_tokens = 2048\nmax_output_tokens = 128\nmax_concurrent = 2\n"
            )
        b = m.add("b")
        m.found(a)
        m.invite(a, b, "member")
        m.wait_full_mesh(timeout=60)
        wait_for(lambda: llm_models(b), timeout=60, what="b to see a's llm.chat")
        yield m
    finally:
        m.close()


def llm_models(node: MeshNode) -> list[dict[str, object]]:
    models: list[dict[str, object]] = node.cli_json("llm")["models"]
    return models


@pytest.fixture(autouse=True)
def fresh_server(server: OpenAIChatServer) -> None:
    server.mode, server.reply, server.hold_after = "normal", None, None
    server.release.clear()
    server.disconnected.clear()
    server.disconnects = 0


def test_hearthnet_llm_lists_the_model_with_its_window_and_node(mesh: LocalMesh) -> None:
    a, b = mesh.nodes["a"], mesh.nodes["b"]
    (model,) = llm_models(b)
    assert model["model"] == MODEL and model["context_tokens"] == 2048 and model["max_output_tokens"] == 128
    assert model["node"] == a.node_id and model["node_name"] == "a" and model["local"] is False
    text = b.cli("llm").stdout
    assert MODEL in text and "2048" in text and a.node_id in text


def test_deltas_reach_the_other_node_before_the_answer_ends(
    mesh: LocalMesh, server: OpenAIChatServer
) -> None:
    b = mesh.nodes["b"]
    server.hold_after = 4  # the server holds the rest of the answer until the test has seen 4 pieces
    expected = words_of(default_reply("[heating#c7]"))

    async def run() -> tuple[list[str], dict[str, object], dict[str, object]]:
        deltas: list[str] = []
        async with AsyncClient(b.home).stream(
            "llm.chat", {"model": MODEL}, {"messages": MESSAGES}, timeout=30
        ) as call:
            async for frame in call.frames():
                deltas.append(frame["delta"])
                if len(deltas) == 4:
                    assert not server.release.is_set()
                    server.release.set()
            result = await call.result()
        return deltas, result.output, result.meta

    deltas, output, meta = anyio.run(run)
    assert deltas == expected
    assert output["message"] == {"role": "assistant", "content": "".join(expected)}
    assert output["finish_reason"] == "stop" and output["usage"]["completion_tokens"] == len(expected)  # type: ignore[index]
    assert meta["model"] == MODEL and meta["ttft_ms"] is not None and meta["usage_estimated"] is False


def test_the_cli_chat_prints_the_answer_and_json_has_usage(mesh: LocalMesh, server: OpenAIChatServer) -> None:
    b = mesh.nodes["b"]
    server.reply = "Every October, see [heating#c7]."
    proc = b.cli("llm", "chat", "When is the boiler serviced?", "--model", MODEL)
    assert proc.stdout == "Every October, see [heating#c7].\n" and proc.stderr == ""
    doc = b.cli_json("llm", "chat", "When?", "--max-tokens", "2")
    assert doc["message"]["content"] == "Every October," and doc["finish_reason"] == "length"
    assert doc["usage"]["completion_tokens"] == 2 and doc["meta"]["model"] == MODEL
    assert doc["provider"] == mesh.nodes["a"].node_id
    assert server.requests[-1]["max_tokens"] == 2


def test_failures_are_one_line_with_their_code(mesh: LocalMesh, server: OpenAIChatServer) -> None:
    b = mesh.nodes["b"]
    server.mode = "busy"  # the client retries a refusal within the call's deadline, then reports it
    proc = b.cli("llm", "chat", "hello", "--timeout", "3", check=False)
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.startswith("hearthnet: capacity_exceeded:") and proc.stderr.count("\n") == 1
    server.mode = "normal"
    proc = b.cli("llm", "chat", "boiler " * 3000, check=False)
    assert proc.returncode == 1 and proc.stderr.startswith("hearthnet: bad_request: the prompt takes about")
    assert "context window of 2048 tokens" in proc.stderr
    proc = b.cli("llm", "chat", "hello", "--model", "no-such-model", check=False)
    assert proc.returncode == 1 and proc.stderr.startswith("hearthnet: not_found:")


def test_a_caller_that_walks_away_closes_the_http_stream_on_the_provider(
    mesh: LocalMesh, server: OpenAIChatServer
) -> None:
    b = mesh.nodes["b"]
    server.hold_after = 2

    async def walk_away() -> list[str]:
        seen: list[str] = []
        async with AsyncClient(b.home).stream(
            "llm.chat", {"model": MODEL}, {"messages": MESSAGES}, timeout=30
        ) as call:
            async for frame in call.frames():
                seen.append(frame["delta"])
                if len(seen) == 2:
                    break  # leaving the block closes B's control connection mid-answer
        return seen

    assert len(anyio.run(walk_away)) == 2
    # B's control server notices on its next write or read; the cancel then travels to A,
    # whose handler is cancelled and closes the HTTP stream.
    assert server.disconnected.wait(20)
    assert server.disconnects == 1


def test_bad_input_from_a_peer_is_refused_before_the_server_is_asked(
    mesh: LocalMesh, server: OpenAIChatServer, tmp_path: Path
) -> None:
    b = mesh.nodes["b"]
    before = len(server.requests)

    async def ask() -> None:
        async with AsyncClient(b.home) as client:
            await client.call("llm.chat", {"model": MODEL}, {"messages": [{"role": "tool", "content": "x"}]})

    with pytest.raises(BadRequest, match="role must be system, user or assistant"):
        anyio.run(ask)
    assert len(server.requests) == before


FAKE_LLAMA = Path(__file__).resolve().parents[1] / "fake_llama"


def test_a_node_runs_its_local_model_as_a_child_that_dies_with_it(tmp_path: Path) -> None:
    """``[llm.local]`` as ``make local-llm`` writes it, with ``tests/fake_llama`` as llama_cpp."""
    root = Path(__file__).resolve().parents[2]
    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF")
    with LocalMesh(tmp_path / "mesh") as m:
        m.env.update({"HEARTHNET_RAG": "0", "HEARTHNET_EMBEDDING": "0"})
        m.env["PYTHONPATH"] = os.pathsep.join([str(FAKE_LLAMA), str(root)])
        c = m.add("c")
        with (c.home / "config.toml").open("a") as f:
            f.write(f'\n[llm.local]\nmodel_path = "{model}"\nmodel = "tiny"\nmax_output_tokens = 64\n')
        m.found(c)
        (listed,) = llm_models(c)
        assert listed["model"] == "tiny" and listed["context_tokens"] == 2048 and listed["local"] is True
        proc = c.cli("llm", "chat", "What to do?", "--system", "Context: [garden#c2] Drain the tap.")
        assert proc.stdout == "According to the documents, the answer is given in [garden#c2].\n"
        local = c.cli_json("call", "node.stats")["output"]["services"]["llm"]["models"][0]["local"]
        assert local["ready"] and local["restarts"] == 0
        child = int(local["pid"])
        assert "local_child" in Path(f"/proc/{child}/cmdline").read_text()
        assert (c.home / "logs" / "llm-local.log").exists()
        c.kill()  # kill -9 of the node: its model server goes too
        wait_for(lambda: not Path(f"/proc/{child}").exists(), timeout=10, what="the child to exit")
