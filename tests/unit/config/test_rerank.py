"""``[rerank]``, ``[[rerank.servers]]``, the ``HEARTHNET_RERANK_*`` variables and ``[answer] rerank*``."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest

from hearthnet.config import AnswerConfig, apply_env, config_from_mapping, load_config
from hearthnet.errors import BadRequest

ROOT = Path(__file__).resolve().parents[3]
ONE = {"base_url": "http://127.0.0.1:8081", "model": "bge-reranker"}


def rerank(tmp_path: Path, table: dict[str, Any]) -> Any:
    return config_from_mapping(tmp_path, {"rerank": table}).rerank


def test_the_shipped_example_parses(tmp_path: Path) -> None:
    config = config_from_mapping(tmp_path, tomllib.loads((ROOT / "configs" / "rerank.toml").read_text()))
    tei, jina = config.rerank.servers
    assert (tei.protocol, tei.endpoint, tei.max_texts) == ("tei", "http://127.0.0.1:8081/rerank", 32)
    assert (jina.protocol, jina.endpoint, jina.api_key_env) == (
        "cohere",
        "https://api.jina.ai/v1/rerank",
        "JINA_API_KEY",
    )


def test_defaults_and_every_key(tmp_path: Path) -> None:
    assert rerank(tmp_path, {}).servers == () and rerank(tmp_path, {}).enabled
    (only,) = rerank(tmp_path, {"servers": [ONE]}).servers
    assert (only.protocol, only.timeout_seconds, only.max_concurrent, only.max_texts, only.api_key_env) == (
        "tei",
        30.0,
        4,
        32,
        None,
    )
    full = {
        **ONE,
        "protocol": "cohere",
        "api_key_env": "RERANK_KEY",
        "timeout_seconds": 5,
        "max_concurrent": 2,
        "max_texts": 100,
    }
    (got,) = rerank(tmp_path, {"enabled": False, "servers": [full]}).servers
    assert (got.protocol, got.timeout_seconds, got.max_concurrent, got.max_texts, got.api_key_env) == (
        "cohere",
        5.0,
        2,
        100,
        "RERANK_KEY",
    )
    assert got.endpoint == "http://127.0.0.1:8081/v1/rerank"
    assert not rerank(tmp_path, {"enabled": False}).enabled


@pytest.mark.parametrize(
    ("table", "words"),
    [
        ({"servers": [{"model": "m"}]}, "[[rerank.servers]] #1 in config.toml needs base_url"),
        ({"servers": [{"base_url": "http://h"}]}, "needs model"),
        ({"servers": [{**ONE, "port": 1}]}, "unknown config key(s) in [[rerank.servers]] #1: port"),
        ({"server": [ONE]}, "unknown config key(s) in [rerank]: server"),
        ({"servers": [{**ONE, "protocol": "openai"}]}, "rerank.servers.protocol must be tei or cohere"),
        ({"servers": [{**ONE, "base_url": "ftp://h"}]}, "rerank.servers.base_url must be an http(s) URL"),
        ({"servers": [{**ONE, "base_url": "http://h:99999"}]}, "rerank.servers.base_url is not a valid URL"),
        ({"servers": [{**ONE, "base_url": "http://u:p@h"}]}, "must hold no credentials"),
        ({"servers": [{**ONE, "max_texts": 0}]}, "rerank.servers.max_texts must be 1..256, got 0"),
        ({"servers": [{**ONE, "max_texts": 257}]}, "rerank.servers.max_texts must be 1..256"),
        ({"servers": [{**ONE, "max_concurrent": 0}]}, "rerank.servers.max_concurrent must be 1..1024"),
        ({"servers": [{**ONE, "timeout_seconds": 0}]}, "rerank.servers.timeout_seconds must be above 0"),
        (
            {"servers": [{**ONE, "timeout_seconds": "5"}]},
            "rerank.servers.timeout_seconds in config.toml must be",
        ),
        ({"servers": [{**ONE, "max_texts": True}]}, "rerank.servers.max_texts in config.toml must be int"),
        ({"servers": [{**ONE, "api_key_env": "MY KEY"}]}, "api_key_env must be the name of an environment"),
        ({"servers": [{**ONE, "model": " "}]}, "rerank.servers.model must be 1..200 printable"),
        ({"servers": [ONE, {**ONE, "base_url": "http://other"}]}, "share the model name bge-reranker"),
        ({"servers": "http://h"}, "rerank.servers in config.toml must be list"),
        ({"servers": ["http://h"]}, "[[rerank.servers]] #1 in config.toml must be a table"),
        ({"enabled": "no"}, "rerank.enabled in config.toml must be true/false"),
    ],
)
def test_a_bad_rerank_setting_is_bad_request_naming_it(
    tmp_path: Path, table: dict[str, Any], words: str
) -> None:
    with pytest.raises(BadRequest) as exc:
        rerank(tmp_path, table)
    assert words in exc.value.message


def test_a_rerank_table_that_is_not_a_table_is_bad_request(tmp_path: Path) -> None:
    with pytest.raises(BadRequest, match=r"\[rerank\] in config.toml must be a table"):
        config_from_mapping(tmp_path, {"rerank": "http://h"})


def test_one_server_from_the_environment(tmp_path: Path) -> None:
    env = {
        "HEARTHNET_RERANK_BASE_URL": "http://10.0.0.7:8081",
        "HEARTHNET_RERANK_MODEL": "bge",
        "HEARTHNET_RERANK_PROTOCOL": "cohere",
        "HEARTHNET_RERANK_API_KEY_ENV": "BGE_KEY",
        "HEARTHNET_RERANK_TIMEOUT_SECONDS": "7.5",
        "HEARTHNET_RERANK_MAX_CONCURRENT": "3",
        "HEARTHNET_RERANK_MAX_TEXTS": "16",
    }
    (only,) = load_config(tmp_path, env=env).rerank.servers
    assert (only.base_url, only.model, only.protocol, only.api_key_env) == (
        "http://10.0.0.7:8081",
        "bge",
        "cohere",
        "BGE_KEY",
    )
    assert (only.timeout_seconds, only.max_concurrent, only.max_texts) == (7.5, 3, 16)
    # the environment replaces a configured server of the same model and keeps the others
    base = config_from_mapping(
        tmp_path, {"rerank": {"servers": [ONE, {**ONE, "model": "bge", "max_texts": 8}]}}
    )
    servers = apply_env(
        base, {"HEARTHNET_RERANK_BASE_URL": "http://10.0.0.5:80", "HEARTHNET_RERANK_MODEL": "bge"}
    )
    assert [(s.model, s.base_url, s.max_texts) for s in servers.rerank.servers] == [
        ("bge-reranker", "http://127.0.0.1:8081", 32),
        ("bge", "http://10.0.0.5:80", 8),
    ]
    assert not load_config(tmp_path, env={"HEARTHNET_RERANK": "0"}).rerank.enabled


SERVER = {"HEARTHNET_RERANK_BASE_URL": "http://h", "HEARTHNET_RERANK_MODEL": "m"}


@pytest.mark.parametrize(
    ("env", "words"),
    [
        ({"HEARTHNET_RERANK_MODEL": "m"}, "set HEARTHNET_RERANK_BASE_URL and HEARTHNET_RERANK_MODEL too"),
        ({"HEARTHNET_RERANK_MAX_TEXTS": "9"}, "HEARTHNET_RERANK_MAX_TEXTS describes a rerank server"),
        (
            {**SERVER, "HEARTHNET_RERANK_BASE_URL": "nope"},
            "HEARTHNET_RERANK_BASE_URL: rerank.servers.base_url",
        ),
        (
            {**SERVER, "HEARTHNET_RERANK_MAX_TEXTS": "32k"},
            "HEARTHNET_RERANK_MAX_TEXTS must be a whole number",
        ),
        (
            {**SERVER, "HEARTHNET_RERANK_MAX_TEXTS": "999"},
            "HEARTHNET_RERANK_MAX_TEXTS: rerank.servers.max_texts",
        ),
        (
            {**SERVER, "HEARTHNET_RERANK_PROTOCOL": "tie"},
            "HEARTHNET_RERANK_PROTOCOL: rerank.servers.protocol",
        ),
        (
            {**SERVER, "HEARTHNET_RERANK_TIMEOUT_SECONDS": "nan"},
            "HEARTHNET_RERANK_TIMEOUT_SECONDS: rerank.servers.timeout_seconds must be above 0",
        ),
        (
            {**SERVER, "HEARTHNET_RERANK_TIMEOUT_SECONDS": "x"},
            "HEARTHNET_RERANK_TIMEOUT_SECONDS must be a number",
        ),
        ({"HEARTHNET_RERANK": "maybe"}, "HEARTHNET_RERANK must be true or false"),
    ],
)
def test_bad_rerank_environment_is_bad_request_naming_the_variable(
    tmp_path: Path, env: dict[str, str], words: str
) -> None:
    with pytest.raises(BadRequest) as exc:
        load_config(tmp_path, env=env)
    assert words in exc.value.message


def test_the_composers_rerank_keys(tmp_path: Path) -> None:
    answer = config_from_mapping(tmp_path, {}).answer
    assert (answer.rerank, answer.rerank_model, answer.rerank_candidates, answer.rerank_timeout_seconds) == (
        True,
        None,
        50,
        10.0,
    )
    table = {"rerank": False, "rerank_model": "bge", "rerank_candidates": 20, "rerank_timeout_seconds": 2}
    got = config_from_mapping(tmp_path, {"answer": table}).answer
    assert (got.rerank, got.rerank_model, got.rerank_candidates, got.rerank_timeout_seconds) == (
        False,
        "bge",
        20,
        2.0,
    )
    for bad, words in [
        ({"rerank_candidates": 0}, "answer.rerank_candidates must be in 1..256"),
        ({"rerank_candidates": 257}, "answer.rerank_candidates must be in 1..256"),
        ({"rerank": "yes"}, "answer.rerank in config.toml must be true/false"),
        ({"rerank_model": 3}, "answer.rerank_model in config.toml must be str"),
    ]:
        with pytest.raises(BadRequest) as exc:
            config_from_mapping(tmp_path, {"answer": bad})
        assert words in exc.value.message
    with pytest.raises(BadRequest, match="rerank_candidates"):
        AnswerConfig(rerank_candidates=300)
