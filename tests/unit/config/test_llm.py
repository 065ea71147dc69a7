"""``[llm]``, ``[[llm.openai]]``, ``[llm.local]`` and the ``HEARTHNET_LLM_*`` variables."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest

from hearthnet.config import apply_env, config_from_mapping, load_config
from hearthnet.errors import BadRequest

ROOT = Path(__file__).resolve().parents[3]
ONE = {"base_url": "http://127.0.0.1:11434", "model": "llama3"}


def llm(tmp_path: Path, table: dict[str, Any]) -> Any:
    return config_from_mapping(tmp_path, {"llm": table}).llm


def test_the_shipped_example_parses(tmp_path: Path) -> None:
    config = config_from_mapping(tmp_path, tomllib.loads((ROOT / "configs" / "llm.toml").read_text()))
    first, hosted = config.llm.openai
    assert (first.model, first.context_tokens, first.max_output_tokens, first.max_concurrent) == (
        "llama3.2:3b",
        8192,
        512,
        2,
    )
    assert hosted.api_key_env == "OPENAI_API_KEY" and config.llm.local is None


def test_defaults_and_every_key(tmp_path: Path) -> None:
    (only,) = llm(tmp_path, {"openai": [ONE]}).openai
    assert (only.context_tokens, only.max_output_tokens, only.timeout_seconds, only.max_concurrent) == (
        8192,
        1024,
        60.0,
        4,
    )
    assert only.prompt_format == "chat" and only.stream_usage and only.call_timeout_seconds == 600.0
    full = {
        **ONE,
        "api_key_env": "K",
        "context_tokens": 4096,
        "max_output_tokens": 100,
        "timeout_seconds": 5,
        "call_timeout_seconds": 50.5,
        "max_concurrent": 1,
        "prompt_format": "plain",
        "stream_usage": False,
    }
    (got,) = llm(tmp_path, {"openai": [full]}).openai
    assert (got.context_tokens, got.timeout_seconds, got.call_timeout_seconds, got.stream_usage) == (
        4096,
        5.0,
        50.5,
        False,
    )
    local = llm(tmp_path, {"local": {"model_path": "/m.gguf", "model": "gemma"}}).local
    assert (local.context_tokens, local.max_output_tokens, local.prompt_format, local.port) == (
        2048,
        256,
        "plain",
        0,
    )
    assert llm(tmp_path, {}).openai == () and llm(tmp_path, {}).enabled


@pytest.mark.parametrize(
    ("table", "words"),
    [
        ({"openai": [{**ONE, "contxt_tokens": 5}]}, "unknown config key(s) in [llm.openai]: contxt_tokens"),
        ({"openai": [{"model": "x"}]}, "needs base_url"),
        ({"openai": [{**ONE, "base_url": "localhost:11434"}]}, "llm.openai.base_url must be an http(s) URL"),
        (
            {"openai": [{**ONE, "context_tokens": "8k"}]},
            "llm.openai.context_tokens in config.toml must be int",
        ),
        ({"openai": [{**ONE, "max_output_tokens": 9000}]}, "max_output_tokens (9000) must be at least 1"),
        ({"openai": [{**ONE, "timeout_seconds": 0}]}, "llm.openai.timeout_seconds must be a positive number"),
        ({"openai": [{**ONE, "max_concurrent": 0}]}, "llm.openai.max_concurrent must be at least 1"),
        ({"openai": [{**ONE, "max_concurrent": 5000}]}, "llm.openai.max_concurrent must be 1..1024"),
        ({"openai": [{**ONE, "prompt_format": "raw"}]}, "llm.openai.prompt_format must be chat or plain"),
        (
            {"openai": [{**ONE, "stream_usage": "yes"}]},
            "llm.openai.stream_usage in config.toml must be true/false",
        ),
        ({"openai": [ONE, ONE]}, "two llm models share the model name llama3"),
        ({"openai": ONE}, "llm.openai in config.toml must be list"),
        ({"local": {"model": "x"}}, "[llm.local] in config.toml needs model_path"),
        ({"local": {"model_path": "/m", "port": 70000}}, "llm.local.port must be 0..65535"),
        ({"local": {"model_path": "/m", "threads": 0}}, "llm.local.threads must be at least 1"),
        ({"local": {"model_path": "/m", "gpu": True}}, "unknown config key(s) in [llm.local]: gpu"),
        ({"enabled": "no"}, "llm.enabled in config.toml must be true/false"),
        ({"local": {"model_path": "/m", "model": "llama3"}, "openai": [ONE]}, "share the model name llama3"),
    ],
)
def test_a_bad_llm_setting_is_bad_request_naming_it(
    tmp_path: Path, table: dict[str, Any], words: str
) -> None:
    with pytest.raises(BadRequest) as exc:
        llm(tmp_path, table)
    assert words in exc.value.message


def test_one_model_from_the_environment(tmp_path: Path) -> None:
    env = {
        "HEARTHNET_LLM_BASE_URL": "http://127.0.0.1:8080",
        "HEARTHNET_LLM_MODEL": "qwen",
        "HEARTHNET_LLM_CONTEXT_TOKENS": "16384",
        "HEARTHNET_LLM_MAX_OUTPUT_TOKENS": "700",
        "HEARTHNET_LLM_TIMEOUT_SECONDS": "30",
        "HEARTHNET_LLM_MAX_CONCURRENT": "3",
        "HEARTHNET_LLM_API_KEY_ENV": "QWEN_KEY",
        "HEARTHNET_LLM_PROMPT_FORMAT": "plain",
    }
    (only,) = load_config(tmp_path, env=env).llm.openai
    assert (only.base_url, only.model, only.context_tokens, only.max_output_tokens) == (
        "http://127.0.0.1:8080",
        "qwen",
        16384,
        700,
    )
    assert (only.timeout_seconds, only.max_concurrent, only.api_key_env, only.prompt_format) == (
        30.0,
        3,
        "QWEN_KEY",
        "plain",
    )
    # the environment replaces a configured model of the same name and keeps the others
    base = config_from_mapping(
        tmp_path, {"llm": {"openai": [ONE, {**ONE, "model": "qwen", "max_concurrent": 9}]}}
    )
    models = apply_env(base, {"HEARTHNET_LLM_BASE_URL": "http://10.0.0.5:80", "HEARTHNET_LLM_MODEL": "qwen"})
    assert [(o.model, o.base_url, o.max_concurrent) for o in models.llm.openai] == [
        ("llama3", "http://127.0.0.1:11434", 4),
        ("qwen", "http://10.0.0.5:80", 9),
    ]
    assert not load_config(tmp_path, env={"HEARTHNET_LLM": "0"}).llm.enabled


@pytest.mark.parametrize(
    ("env", "words"),
    [
        ({"HEARTHNET_LLM_MODEL": "qwen"}, "set HEARTHNET_LLM_BASE_URL and HEARTHNET_LLM_MODEL too"),
        ({"HEARTHNET_LLM_CONTEXT_TOKENS": "9"}, "HEARTHNET_LLM_CONTEXT_TOKENS describes an llm model"),
        (
            {"HEARTHNET_LLM_BASE_URL": "nope", "HEARTHNET_LLM_MODEL": "q"},
            "HEARTHNET_LLM_BASE_URL must be an http(s)",
        ),
        (
            {
                "HEARTHNET_LLM_BASE_URL": "http://h",
                "HEARTHNET_LLM_MODEL": "q",
                "HEARTHNET_LLM_CONTEXT_TOKENS": "8k",
            },
            "HEARTHNET_LLM_CONTEXT_TOKENS must be a whole number",
        ),
        (
            {
                "HEARTHNET_LLM_BASE_URL": "http://h",
                "HEARTHNET_LLM_MODEL": "q",
                "HEARTHNET_LLM_MAX_OUTPUT_TOKENS": "9000",
            },
            "max_output_tokens (9000) must be at least 1 and below llm.openai.context_tokens (8192)",
        ),
        (
            {
                "HEARTHNET_LLM_BASE_URL": "http://h",
                "HEARTHNET_LLM_MODEL": "q",
                "HEARTHNET_LLM_TIMEOUT_SECONDS": "-1",
            },
            "HEARTHNET_LLM_TIMEOUT_SECONDS must be a positive number",
        ),
        ({"HEARTHNET_LLM": "maybe"}, "HEARTHNET_LLM must be true or false"),
    ],
)
def test_bad_llm_environment_is_bad_request_naming_the_variable(
    tmp_path: Path, env: dict[str, str], words: str
) -> None:
    with pytest.raises(BadRequest) as exc:
        load_config(tmp_path, env=env)
    assert words in exc.value.message
