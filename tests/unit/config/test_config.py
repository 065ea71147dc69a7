"""Configuration: TOML, presets shipped in configs/, environment overrides, validation."""

from __future__ import annotations

import tomllib
from dataclasses import replace
from pathlib import Path

import anyio
import pytest

from hearthnet.config import apply_env, config_from_mapping, default_config_text, load_config
from hearthnet.errors import BadRequest
from hearthnet.services.embedding import EmbeddingService
from hearthnet.services.embedding.openai_backend import OpenAIEmbeddingBackend

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("name", ["local.toml", "lan.toml", "gpu-embedder.toml", "member.toml", "pi.toml"])
def test_shipped_configs_parse(name: str, tmp_path: Path) -> None:
    data = tomllib.loads((ROOT / "configs" / name).read_text())
    config = config_from_mapping(tmp_path, data)
    assert config.home == tmp_path


def test_the_small_device_profiles_say_what_they_leave_to_peers(tmp_path: Path) -> None:
    member = config_from_mapping(tmp_path, tomllib.loads((ROOT / "configs" / "member.toml").read_text()))
    assert not (member.embedding.enabled or member.rag.enabled or member.ocr.enabled)
    pi = config_from_mapping(tmp_path, tomllib.loads((ROOT / "configs" / "pi.toml").read_text()))
    assert pi.rag.enabled and pi.embedding.enabled and not pi.ocr.enabled
    assert pi.rag.ingest_max_concurrent == 1


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
            "HEARTHNET_RAG_QUERY_MAX_CONCURRENT": "8",
        },
    )
    assert config.rag.query_max_concurrent == 8
    assert config.network.listen_port == 9000 and not config.embedding.enabled
    assert config.rag.chroma_url == "http://127.0.0.1:8000"
    assert config.rag.query_timeout_seconds == 2.5
    assert config.rag.embed_timeout_seconds == 7.0 and config.embedding.timeout_seconds == 7.0


def test_the_seeds_embed_timeout_reaches_server_models_without_their_own(tmp_path: Path) -> None:
    """RAG_EMBED_TIMEOUT_SECONDS is read once, by the config: a ``[[embedding.openai]]`` table without
    ``timeout_seconds`` takes ``[embedding] timeout_seconds`` (which it sets), one with its own keeps it."""
    (tmp_path / "config.toml").write_text(
        "[[embedding.openai]]\nbase_url = 'http://127.0.0.1:1'\nmodel = 'a'\ndim = 4\n"
        "[[embedding.openai]]\nbase_url = 'http://127.0.0.1:1'\nmodel = 'b'\ndim = 4\ntimeout_seconds = 3\n"
    )
    config = load_config(tmp_path, env={"RAG_EMBED_TIMEOUT_SECONDS": "7"})
    own = {o.model: o.timeout_seconds for o in config.embedding.openai}
    assert own == {"a": None, "b": 3.0} and config.embedding.timeout_seconds == 7.0
    with pytest.raises(BadRequest, match="RAG_EMBED_TIMEOUT_SECONDS"):
        load_config(tmp_path, env={"RAG_EMBED_TIMEOUT_SECONDS": "-1"})
    service = EmbeddingService(replace(config.embedding, in_process=False))  # the servers alone
    anyio.run(service.start)
    try:
        servers = [b for b in service.backends if isinstance(b, OpenAIEmbeddingBackend)]
        assert {b.model: b.timeout_seconds for b in servers} == {"a": 7.0, "b": 3.0}
    finally:
        anyio.run(service.stop)


def test_link_liveness_settings_from_toml_and_environment(tmp_path: Path) -> None:
    base = config_from_mapping(tmp_path, {})
    assert (base.network.keepalive_seconds, base.network.dead_after_seconds) == (3.0, 10.0)
    toml = config_from_mapping(tmp_path, {"network": {"keepalive_seconds": 5, "dead_after_seconds": 12}})
    assert (toml.network.keepalive_seconds, toml.network.dead_after_seconds) == (5.0, 12.0)
    # Both together, although the keepalive alone would not fit the default dead_after (2 x 25 > 10).
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
        ({"HEARTHNET_RAG_QUERY_MAX_CONCURRENT": "0"}, "at least 1"),
        ({"HEARTHNET_RAG_QUERY_MAX_CONCURRENT": "5000"}, r"1\.\.1024"),
        ({"HEARTHNET_KEEPALIVE_SECONDS": "20"}, "at least twice"),
        ({"HEARTHNET_DEAD_AFTER_SECONDS": "abc"}, "must be a number"),
        ({"HEARTHNET_OCR": "maybe"}, "HEARTHNET_OCR must be true or false"),
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


@pytest.mark.parametrize(
    ("document", "fragment"),
    [
        ({"rag": {"enable": False}}, r"unknown config key\(s\) in \[rag\]: enable"),
        ({"network": {"keepalive": 5}}, r"in \[network\]: keepalive"),
        ({"embedding": {"openai": [{"base_url": "http://h", "model": "m", "dim": 8, "key": 1}]}}, "openai"),
        ({"rag": {"enabled": "false"}}, r"rag\.enabled in config\.toml must be true/false"),
        ({"embedding": {"model_dir": 5}}, r"embedding\.model_dir in config\.toml must be str"),
        ({"embedding": {"threads": -2}}, "embedding.threads must be at least 1"),
        ({"blobs": {"cap_bytes": -5}}, "blobs.cap_bytes must be at least 0"),
        ({"log_level": "verbose"}, "log_level must be one of debug, info, warning, error"),
        ({"rag": {"chroma_url": "http://h:99999"}}, "rag.chroma_url is not a valid URL"),
        ({"rag": {"chroma_url": "h:8000"}}, "must be an http"),
        ({"rag": {"query_timeout_seconds": float("inf")}}, "query_timeout_seconds must be"),
        ({"rag": {"query_max_concurrent": 0}}, "rag.query_max_concurrent must be at least 1"),
        ({"ocr": {"enable": False}}, r"unknown config key\(s\) in \[ocr\]: enable"),
        ({"ocr": {"enabled": "no"}}, r"ocr\.enabled in config\.toml must be true/false"),
        ({"ocr": {"max_concurrent": 0}}, "ocr.max_concurrent must be at least 1"),
        ({"ocr": {"max_concurrent": 1.5}}, r"ocr\.max_concurrent in config\.toml must be int"),
        ({"ocr": {"dpi": 20}}, "ocr.dpi must be at least 50"),
        ({"ocr": {"dpi": 1200}}, r"ocr\.dpi must be 50\.\.600"),
        ({"ocr": True}, r"\[ocr\] in config\.toml must be a table"),
    ],
)
def test_a_setting_that_would_be_ignored_or_crash_later_is_refused_at_load(
    tmp_path: Path, document: dict[str, object], fragment: str
) -> None:
    """Typos inside a section were ignored, "false" was true, and wrong types crashed the node's
    start with a traceback instead of one line."""
    with pytest.raises(BadRequest, match=fragment):
        config_from_mapping(tmp_path, document)


@pytest.mark.parametrize(
    ("env", "fragment"),
    [
        ({"HEARTHNET_BLOB_CAP_BYTES": "abc"}, "HEARTHNET_BLOB_CAP_BYTES must be a number of bytes"),
        ({"HEARTHNET_BLOB_CAP_BYTES": "-5"}, "HEARTHNET_BLOB_CAP_BYTES must be a number of bytes"),
        ({"HEARTHNET_LOG_LEVEL": "warn"}, "HEARTHNET_LOG_LEVEL must be one of"),
        ({"HEARTHNET_NAME": " "}, "HEARTHNET_NAME must not be empty"),
        ({"HEARTHNET_CHROMA_URL": "http://h:port"}, "HEARTHNET_CHROMA_URL is not a valid URL"),
    ],
)
def test_environment_overrides_are_checked_as_strictly(
    tmp_path: Path, env: dict[str, str], fragment: str
) -> None:
    with pytest.raises(BadRequest, match=fragment):
        apply_env(config_from_mapping(tmp_path, {}), env)


def test_a_config_file_that_is_not_utf8_is_one_clear_error(tmp_path: Path) -> None:
    (tmp_path / "config.toml").write_bytes(b'name = "caf\xe9"\n')
    with pytest.raises(BadRequest, match="not UTF-8 text"):
        load_config(tmp_path, env={})


def test_the_written_preset_and_real_settings_still_load(tmp_path: Path) -> None:
    from hearthnet.config import default_config_text

    (tmp_path / "config.toml").write_text(default_config_text(name="n1", listen="127.0.0.1:0"))
    config = load_config(tmp_path, env={"HEARTHNET_BLOB_CAP_BYTES": "1000", "HEARTHNET_LOG_LEVEL": "WARNING"})
    assert config.name == "n1" and config.blobs.cap_bytes == 1000 and config.log_level == "warning"
    full = {
        "rag": {"enabled": False, "chroma_url": "http://127.0.0.1:8000", "query_timeout_seconds": 3},
        "embedding": {"threads": 2, "openai": [{"base_url": "http://h:1", "model": "m", "dim": 8}]},
        "network": {"max_frame": 2 << 20, "keepalive_seconds": 5, "dead_after_seconds": 10},
    }
    config = config_from_mapping(tmp_path, full)
    assert config.rag.enabled is False and config.rag.query_timeout_seconds == 3.0
    assert config.embedding.openai[0].dim == 8 and config.network.max_frame == 2 << 20


def test_the_log_file_settings_from_toml_and_environment(tmp_path: Path) -> None:
    base = config_from_mapping(tmp_path, {})
    assert (base.log.file, base.log.max_bytes, base.log.backups) == (True, 10 * 1024 * 1024, 5)
    assert base.log_path == tmp_path / "logs" / "node.log"
    toml = config_from_mapping(tmp_path, {"log": {"file": False, "max_bytes": 1 << 20, "backups": 2}})
    assert (toml.log.file, toml.log.max_bytes, toml.log.backups) == (False, 1 << 20, 2)
    assert apply_env(toml, {"HEARTHNET_LOG_FILE": "1"}).log.file is True
    assert apply_env(base, {"HEARTHNET_LOG_FILE": "off"}).log.file is False
    (tmp_path / "config.toml").write_text(default_config_text(name="n1", listen="127.0.0.1:0"))
    assert load_config(tmp_path, env={}).log == base.log  # the preset spells out the defaults


@pytest.mark.parametrize(
    ("document", "fragment"),
    [
        ({"log": {"level": "debug"}}, r"unknown config key\(s\) in \[log\]: level"),
        ({"log": {"file": "yes"}}, r"log\.file in config\.toml must be true/false"),
        ({"log": {"max_bytes": 1000}}, "log.max_bytes must be between 64 KiB and 1 GiB"),
        ({"log": {"max_bytes": 1.5e6}}, r"log\.max_bytes in config\.toml must be int"),
        ({"log": {"backups": 0}}, "log.backups must be between 1 and 100"),  # 0: the file never rotates
        ({"log": "on"}, r"\[log\] in config.toml must be a table"),
    ],
)
def test_bad_log_file_settings_are_refused(
    tmp_path: Path, document: dict[str, object], fragment: str
) -> None:
    with pytest.raises(BadRequest, match=fragment):
        config_from_mapping(tmp_path, document)
    with pytest.raises(BadRequest, match="HEARTHNET_LOG_FILE must be true or false"):
        apply_env(config_from_mapping(tmp_path, {}), {"HEARTHNET_LOG_FILE": "sometimes"})


BAD_LISTEN = [
    ("999.1.1.1:7700", "'999.1.1.1' is not a valid IPv4 address"),
    ("10.0.0:7700", "is not a valid IPv4 address"),
    ("host_x:7700", "is not a valid host name"),
    ("-lead.lan:7700", "is not a valid host name"),
    ("[::zz]:7700", "is not a valid IPv6 address"),
    (":7700", "the host is empty"),
    ("127.0.0.1:65536", "HOST:PORT"),
    ("127.0.0.1", "HOST:PORT"),
]


@pytest.mark.parametrize(("listen", "fragment"), BAD_LISTEN)
def test_a_listen_address_that_cannot_be_bound_is_refused_naming_the_setting(
    tmp_path: Path, listen: str, fragment: str
) -> None:
    """``999.1.1.1:7700`` used to pass every check and fail at ``node run`` as "Name or service
    not known"; now each place a listen address comes from refuses it and says which one."""
    with pytest.raises(BadRequest, match=r"^--listen must be HOST:PORT") as flag:
        default_config_text(name="n1", listen=listen)
    assert fragment in flag.value.message
    with pytest.raises(BadRequest, match=r"^\[network\] listen in config\.toml must be HOST:PORT") as toml:
        config_from_mapping(tmp_path, {"network": {"listen": listen}})
    assert fragment in toml.value.message
    with pytest.raises(BadRequest, match=r"^HEARTHNET_LISTEN must be HOST:PORT") as env:
        apply_env(config_from_mapping(tmp_path, {}), {"HEARTHNET_LISTEN": listen})
    assert fragment in env.value.message


@pytest.mark.parametrize(
    ("listen", "host", "port"),
    [
        ("0.0.0.0:7700", "0.0.0.0", 7700),
        ("[::1]:0", "::1", 0),
        ("[::]:7700", "::", 7700),
        ("localhost:1", "localhost", 1),
        ("kitchen-pi.lan:65535", "kitchen-pi.lan", 65535),
        ("kitchen.local.:9", "kitchen.local.", 9),
    ],
)
def test_addresses_and_host_names_that_can_be_bound_are_kept(
    tmp_path: Path, listen: str, host: str, port: int
) -> None:
    config = config_from_mapping(tmp_path, {"network": {"listen": listen}})
    assert (config.network.listen_host, config.network.listen_port) == (host, port)
    assert apply_env(config, {"HEARTHNET_LISTEN": listen}).network.listen_host == host


def test_an_advertised_host_is_checked_like_a_listen_host(tmp_path: Path) -> None:
    with pytest.raises(BadRequest, match=r"^\[network\] advertise_host in config\.toml must be an IP"):
        config_from_mapping(tmp_path, {"network": {"advertise_host": "300.1.1.1"}})
    with pytest.raises(BadRequest, match=r"^HEARTHNET_ADVERTISE_HOST must be an IP"):
        apply_env(config_from_mapping(tmp_path, {}), {"HEARTHNET_ADVERTISE_HOST": "a b"})
    kept = config_from_mapping(tmp_path, {"network": {"advertise_host": "192.168.1.20"}})
    assert kept.network.advertise == (("192.168.1.20", None),)  # the older key, folded in


def test_advertised_addresses_and_discovery_from_the_file_and_the_environment(tmp_path: Path) -> None:
    entries = ["100.64.0.7", "vpn.example.net:7701", "[fd7a::1]:7702", "fd7a::2"]
    net = {"advertise": entries, "discovery": False}
    config = config_from_mapping(tmp_path, {"network": net})
    assert config.network.advertise == (
        ("100.64.0.7", None),
        ("vpn.example.net", 7701),
        ("fd7a::1", 7702),
        ("fd7a::2", None),
    )
    assert config.network.discovery is False
    assert config_from_mapping(tmp_path, {}).network.discovery is True
    env = apply_env(config, {"HEARTHNET_ADVERTISE": "10.0.0.5:7000, 10.0.0.6", "HEARTHNET_DISCOVERY": "on"})
    assert env.network.advertise == (("10.0.0.5", 7000), ("10.0.0.6", None))
    assert env.network.discovery is True
    for wildcard in ("0.0.0.0", "[::]:7700", "::"):
        with pytest.raises(BadRequest, match="wildcard"):
            config_from_mapping(tmp_path, {"network": {"advertise": [wildcard]}})
    with pytest.raises(BadRequest, match="port"):
        config_from_mapping(tmp_path, {"network": {"advertise": ["10.0.0.5:70000"]}})
    with pytest.raises(BadRequest, match="true/false"):
        config_from_mapping(tmp_path, {"network": {"discovery": "yes"}})


@pytest.mark.parametrize(
    ("name", "fragment"),
    [
        ("", "must not be empty"),
        ("   ", "must not be empty"),
        ("x" * 65, "65 characters long; the limit is 64"),
        ("x" * 10_000, "10000 characters long; the limit is 64"),
        ("kitchen\nname", "U+000A"),
        ("bell\x07", "U+0007"),
        ("rtl\u202eoverride", "U+202E"),
    ],
)
def test_a_node_name_is_1_to_64_printable_characters_wherever_it_comes_from(
    tmp_path: Path, name: str, fragment: str
) -> None:
    """Every peer's ``status`` shows each node's name: an empty one, a 10,000-character one or
    one with control characters was accepted at ``init`` and at load."""
    with pytest.raises(BadRequest, match=r"^--name ") as flag:
        default_config_text(name=name, listen="127.0.0.1:0")
    assert fragment in flag.value.message
    with pytest.raises(BadRequest, match=r"^name in config\.toml ") as toml:
        config_from_mapping(tmp_path, {"name": name})
    assert fragment in toml.value.message
    with pytest.raises(BadRequest, match=r"^HEARTHNET_NAME ") as env:
        apply_env(config_from_mapping(tmp_path, {}), {"HEARTHNET_NAME": name})
    assert fragment in env.value.message


def test_names_of_up_to_64_printable_characters_are_kept(tmp_path: Path) -> None:
    for name in ("k", "x" * 64, 'Küche 🔥 "two" words', "日本語の名前"):
        assert config_from_mapping(tmp_path, {"name": name}).name == name
        assert apply_env(config_from_mapping(tmp_path, {}), {"HEARTHNET_NAME": name}).name == name


def test_a_peer_announcing_a_name_no_config_allows_is_shown_within_the_same_bounds() -> None:
    from hearthnet.config import shown_name

    assert shown_name("kitchen 🔥") == "kitchen 🔥"
    assert shown_name("x" * 10_000) == "x" * 64
    assert shown_name("evil\nname\x1b[2J") == "evil\ufffdname\ufffd[2J"


# -- [ui] --------------------------------------------------------------------------------
def test_ui_defaults_to_loopback_7780_with_the_next_free_port(tmp_path: Path) -> None:
    cfg = config_from_mapping(tmp_path, {})
    assert (cfg.ui.enabled, cfg.ui.listen_host, cfg.ui.listen_port, cfg.ui.listen_explicit) == (
        True,
        "127.0.0.1",
        7780,
        False,
    )
    explicit = config_from_mapping(tmp_path, {"ui": {"listen": "127.0.0.1:7780"}})
    assert explicit.ui.listen_explicit  # named: a taken port is an error, not the next one
    assert (cfg.ui.api_requests_per_minute, cfg.ui.api_burst) == (600, 60)
    rated = config_from_mapping(tmp_path, {"ui": {"api_requests_per_minute": 30, "api_burst": 5}})
    assert (rated.ui.api_requests_per_minute, rated.ui.api_burst) == (30, 5)


def test_ui_table_is_strict(tmp_path: Path) -> None:
    for table, words in (
        ({"enable": True}, "unknown config key"),
        ({"enabled": "yes"}, "true/false"),
        ({"listen": "7780"}, "ui.listen"),
        ({"listen": "127.0.0.1:99999"}, "ui.listen"),
        ({"allowed_hosts": ["ok.lan", "bad host"]}, "allowed_hosts"),
        ({"allowed_hosts": "ok.lan"}, "allowed_hosts"),
        ({"max_upload_bytes": 0}, "max_upload_bytes"),
        ({"api_requests_per_minute": 0}, "api_requests_per_minute"),
        ({"api_burst": 0}, "api_burst"),
        ({"api_burst": 1.5}, "api_burst"),
    ):
        with pytest.raises(BadRequest, match=words):
            config_from_mapping(tmp_path, {"ui": table})


def test_ui_environment_overrides(tmp_path: Path) -> None:
    base = config_from_mapping(tmp_path, {})
    off = apply_env(base, {"HEARTHNET_UI": "0"})
    assert not off.ui.enabled
    moved = apply_env(base, {"HEARTHNET_UI_LISTEN": "127.0.0.1:0"})
    assert (moved.ui.listen_port, moved.ui.listen_explicit) == (0, True)
    with pytest.raises(BadRequest, match="HEARTHNET_UI"):
        apply_env(base, {"HEARTHNET_UI": "maybe"})
    with pytest.raises(BadRequest, match="HEARTHNET_UI_LISTEN"):
        apply_env(base, {"HEARTHNET_UI_LISTEN": "nowhere"})


def test_ocr_is_on_by_default_and_turned_off_by_config_or_environment(tmp_path: Path) -> None:
    base = config_from_mapping(tmp_path, {})
    assert (base.ocr.enabled, base.ocr.max_concurrent, base.ocr.dpi) == (True, 1, 200)
    small = config_from_mapping(tmp_path, {"ocr": {"enabled": False}})
    assert small.ocr.enabled is False
    assert apply_env(small, {"HEARTHNET_OCR": "1"}).ocr.enabled is True
    assert apply_env(base, {"HEARTHNET_OCR": "0"}).ocr.enabled is False
    tuned = config_from_mapping(tmp_path, {"ocr": {"max_concurrent": 2, "dpi": 300}})
    assert (tuned.ocr.max_concurrent, tuned.ocr.dpi) == (2, 300)
    lan = config_from_mapping(tmp_path, tomllib.loads((ROOT / "configs" / "lan.toml").read_text()))
    assert lan.ocr.enabled is False  # the Pi preset leaves OCR to a bigger peer
