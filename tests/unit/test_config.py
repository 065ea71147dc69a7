"""Configuration: TOML, presets shipped in configs/, environment overrides, validation."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from hearthnet.config import apply_env, config_from_mapping, default_config_text, load_config
from hearthnet.errors import BadRequest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", ["local.toml", "lan.toml", "gpu-embedder.toml"])
def test_shipped_configs_parse(name: str, tmp_path: Path) -> None:
    data = tomllib.loads((ROOT / "configs" / name).read_text())
    config = config_from_mapping(tmp_path, data)
    assert config.home == tmp_path


def test_init_preset_round_trips(tmp_path: Path) -> None:
    (tmp_path / "config.toml").write_text(default_config_text(name="kitchen", listen="127.0.0.1:7700"))
    config = load_config(tmp_path, env={})
    assert (config.name, config.network.listen_host, config.network.listen_port) == (
        "kitchen",
        "127.0.0.1",
        7700,
    )
    assert config.rag.query_timeout_seconds == 5.0 and config.rag.embed_timeout_seconds == 10.0


def test_environment_overrides(tmp_path: Path) -> None:
    config = load_config(
        tmp_path,
        env={
            "HEARTHNET_LISTEN": "0.0.0.0:9000",
            "HEARTHNET_EMBEDDING": "0",
            "HEARTHNET_CHROMA_URL": "http://127.0.0.1:8000",
            "RAG_QUERY_TIMEOUT_SECONDS": "2.5",
            "RAG_EMBED_TIMEOUT_SECONDS": "7",
        },
    )
    assert config.network.listen_port == 9000 and not config.embedding.enabled
    assert config.rag.chroma_url == "http://127.0.0.1:8000"
    assert config.rag.query_timeout_seconds == 2.5
    assert config.rag.embed_timeout_seconds == 7.0 and config.embedding.timeout_seconds == 7.0


def test_link_liveness_settings_from_toml_and_environment(tmp_path: Path) -> None:
    base = config_from_mapping(tmp_path, {})
    assert (base.network.keepalive_seconds, base.network.dead_after_seconds) == (10.0, 30.0)
    toml = config_from_mapping(tmp_path, {"network": {"keepalive_seconds": 5, "dead_after_seconds": 12}})
    assert (toml.network.keepalive_seconds, toml.network.dead_after_seconds) == (5.0, 12.0)
    # Both together, although the keepalive alone would not fit the default dead_after (2 x 25 > 30).
    env = apply_env(base, {"HEARTHNET_KEEPALIVE_SECONDS": "25", "HEARTHNET_DEAD_AFTER_SECONDS": "60"})
    assert (env.network.keepalive_seconds, env.network.dead_after_seconds) == (25.0, 60.0)
    with pytest.raises(BadRequest, match="at least twice"):
        config_from_mapping(tmp_path, {"network": {"keepalive_seconds": 5, "dead_after_seconds": 9}})


@pytest.mark.parametrize(
    ("env", "fragment"),
    [
        ({"HEARTHNET_LISTEN": "nonsense"}, "HOST:PORT"),
        ({"HEARTHNET_EMBEDDING": "maybe"}, "true or false"),
        ({"RAG_QUERY_TIMEOUT_SECONDS": "-1"}, "positive"),
        ({"HEARTHNET_KEEPALIVE_SECONDS": "20"}, "at least twice"),
        ({"HEARTHNET_DEAD_AFTER_SECONDS": "abc"}, "must be a number"),
    ],
)
def test_bad_environment_values_are_rejected_with_a_reason(
    tmp_path: Path, env: dict[str, str], fragment: str
) -> None:
    base = config_from_mapping(tmp_path, {})
    with pytest.raises(BadRequest, match=fragment):
        apply_env(base, env)


def test_unknown_keys_and_bad_toml_are_rejected(tmp_path: Path) -> None:
    with pytest.raises(BadRequest, match="unknown config key"):
        config_from_mapping(tmp_path, {"colour": "blue"})
    (tmp_path / "config.toml").write_text("name = ")
    with pytest.raises(BadRequest, match="not valid TOML"):
        load_config(tmp_path, env={})
