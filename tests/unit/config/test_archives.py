"""Archive settings: ``[[rag.archives]]``, ``rag.archive_urls`` and the seeds' environment fallbacks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from hearthnet.config import config_from_mapping, load_config
from hearthnet.config.archives import (
    DEFAULT_CHROMADB_URL,
    DEFAULT_EMBEDDING_MODEL,
    DEFAULT_TEI_URL,
    ArchiveConfig,
    archive_defaults,
    normalize_url,
)
from hearthnet.errors import BadRequest

COLLECTION = "repo_a1b2c3d4-e5f6-7890-abcd-ef1234567890"


def archive(**extra: Any) -> dict[str, Any]:
    return {"name": "ais", "collection_name": COLLECTION, **extra}


def rag(*tables: dict[str, Any], **keys: Any) -> dict[str, Any]:
    return {"rag": {"archives": list(tables), **keys}}


def test_an_archive_table_with_only_name_and_collection_takes_the_seed_defaults(tmp_path: Path) -> None:
    (a,) = config_from_mapping(tmp_path, rag(archive())).rag.archives
    assert a == ArchiveConfig(
        name="ais",
        collection_name=COLLECTION,
        chromadb_url=DEFAULT_CHROMADB_URL,
        embedding_model=DEFAULT_EMBEDDING_MODEL,
        layer="chunk",
    )
    assert (DEFAULT_CHROMADB_URL, DEFAULT_EMBEDDING_MODEL) == (
        "http://chromadb:8000",
        "jinaai/jina-embeddings-v2-base-de",
    )
    assert a.display_name == "ais"


def test_the_environment_fills_what_a_table_leaves_out_and_never_overrides_it(tmp_path: Path) -> None:
    """The seeds' order: the archive's own value, then the environment variable, then the default."""
    env = {"DOCPROC_CHROMADB_URL": "http://chroma.lan:8001", "RAG_DEFAULT_LAYER": "page"}
    left_out, given = config_from_mapping(
        tmp_path,
        rag(
            archive(),
            archive(name="wartung", chromadb_url="http://10.0.0.5:8000", layer="section", label="Wartung"),
        ),
        env,
    ).rag.archives
    assert (left_out.chromadb_url, left_out.layer) == ("http://chroma.lan:8001", "page")
    assert (given.chromadb_url, given.layer, given.display_name) == (
        "http://10.0.0.5:8000",
        "section",
        "Wartung",
    )


def test_load_config_gives_the_environment_to_the_fallbacks(tmp_path: Path) -> None:
    (tmp_path / "config.toml").write_text(
        f'[[rag.archives]]\nname = "ais"\ncollection_name = "{COLLECTION}"\n'
        'label = "AIS Management Standard"\n'
    )
    config = load_config(
        tmp_path, env={"DOCPROC_CHROMADB_URL": "http://chroma.lan:8001", "RAG_DEFAULT_TOP_K": "7"}
    )
    (a,) = config.rag.archives
    assert a.chromadb_url == "http://chroma.lan:8001" and a.label == "AIS Management Standard"
    assert config.rag.archive_defaults.top_k == 7


def test_seed_defaults_without_environment() -> None:
    d = archive_defaults({})
    assert (d.chromadb_url, d.tei_url, d.layer, d.top_k) == (
        DEFAULT_CHROMADB_URL,
        DEFAULT_TEI_URL,
        "chunk",
        5,
    )
    assert (
        archive_defaults({"RAG_DEFAULT_TOP_K": " ", "RAG_DEFAULT_LAYER": ""}).layer == "chunk"
    )  # empty = unset


@pytest.mark.parametrize(
    ("env", "fragment"),
    [
        ({"RAG_DEFAULT_TOP_K": "0"}, "RAG_DEFAULT_TOP_K must be a whole number 1-20"),
        ({"RAG_DEFAULT_TOP_K": "21"}, "RAG_DEFAULT_TOP_K must be a whole number 1-20"),
        ({"RAG_DEFAULT_TOP_K": "five"}, "RAG_DEFAULT_TOP_K must be"),
        (
            {"RAG_DEFAULT_LAYER": "paragraph"},
            "RAG_DEFAULT_LAYER must be one of document, page, section, chunk",
        ),
        ({"DOCPROC_CHROMADB_URL": "chromadb:8000"}, "DOCPROC_CHROMADB_URL must be an http"),
        ({"DOCPROC_TEI_EMBEDDINGS_URL": "http://h:99999"}, "DOCPROC_TEI_EMBEDDINGS_URL is not a valid URL"),
    ],
)
def test_a_bad_environment_fallback_is_refused_naming_the_variable(
    tmp_path: Path, env: dict[str, str], fragment: str
) -> None:
    with pytest.raises(BadRequest, match=fragment):
        config_from_mapping(tmp_path, {}, env)


@pytest.mark.parametrize(
    ("document", "fragment"),
    [
        (rag({"collection_name": COLLECTION}), r"\[\[rag.archives\]\] #1 in config.toml needs name"),
        (rag({"name": "ais"}), "needs collection_name"),
        (rag(archive(colour="blue")), r"unknown config key\(s\) in \[rag.archives\]: colour"),
        (
            rag(archive(name="AIS Standard")),
            r"#1 in config.toml: name: corpus name 'AIS Standard' is invalid",
        ),
        (rag(archive(name="personal")), "corpus name 'personal' is reserved"),
        (
            rag(archive(collection_name="repo/../x")),
            r"\(ais\): collection_name must be a ChromaDB collection",
        ),
        (rag(archive(collection_name="ab")), "collection_name must be a ChromaDB collection name"),
        (rag(archive(chromadb_url="chromadb:8000")), r"\(ais\): chromadb_url must be an http"),
        (rag(archive(chromadb_url="http://user:pw@chromadb:8000")), "must not carry credentials"),
        (rag(archive(layer="paragraph")), r"\(ais\): layer must be one of document, page, section, chunk"),
        (rag(archive(label="two\nlines")), r"\(ais\): label must be printable"),
        (rag(archive(embedding_model="")), r"\(ais\): embedding_model must be"),
        (rag(archive(layer=3)), r"rag.archives.layer in config.toml must be str"),
        (rag(archive(), archive(label="again")), "name 'ais' is used by an earlier archive"),
        ({"rag": {"archives": {"name": "ais"}}}, "rag.archives in config.toml must be list"),
        (rag(archive_urls="http://h:8000"), "rag.archive_urls in config.toml must be list"),
        (rag(archive_urls=["http://h:8000", 5]), r"rag.archive_urls\[1\] in config.toml must be a string"),
        (rag(archive_urls=["ftp://h"]), r"rag.archive_urls\[0\] in config.toml must be an http"),
        (
            {"embedding": {"openai": [{"model": "m"}]}},
            r"\[\[embedding.openai\]\] #1 in config.toml needs dim",
        ),
        (
            {"embedding": {"openai": [{"model": "m", "dim": 8, "base_url": "tei:80"}]}},
            r"\[\[embedding.openai\]\] base_url in config.toml must be an http",
        ),
    ],
)
def test_a_wrong_archive_setting_is_one_clear_error_naming_it(
    tmp_path: Path, document: dict[str, Any], fragment: str
) -> None:
    with pytest.raises(BadRequest, match=fragment):
        config_from_mapping(tmp_path, document)


def test_the_allow_list_holds_archive_urls_the_configured_servers_and_docproc_chromadb_url(
    tmp_path: Path,
) -> None:
    config = config_from_mapping(
        tmp_path,
        rag(archive(chromadb_url="http://ChromaDB:8000/"), archive_urls=["https://archive.example.org"]),
        {"DOCPROC_CHROMADB_URL": "http://10.1.1.1:9000"},
    )
    assert config.rag.allowed_archive_urls == {
        "http://chromadb:8000",
        "https://archive.example.org:443",
        "http://10.1.1.1:9000",
    }
    # without DOCPROC_CHROMADB_URL the seed's default server is not allowed by itself
    assert config_from_mapping(tmp_path, {}).rag.allowed_archive_urls == frozenset()


def test_an_embedding_server_without_base_url_is_the_tei_fallback(tmp_path: Path) -> None:
    """``[[embedding.openai]]`` serves an archive's model: its ``base_url`` falls back to the seeds'
    ``DOCPROC_TEI_EMBEDDINGS_URL``, then ``http://tei-embeddings:8080``; a written one wins."""
    tables = {"embedding": {"openai": [{"model": DEFAULT_EMBEDDING_MODEL, "dim": 768}]}}
    assert config_from_mapping(tmp_path, tables).embedding.openai[0].base_url == "http://tei-embeddings:8080"
    env = {"DOCPROC_TEI_EMBEDDINGS_URL": "http://127.0.0.1:8081"}
    assert config_from_mapping(tmp_path, tables, env).embedding.openai[0].base_url == "http://127.0.0.1:8081"
    tables["embedding"]["openai"][0]["base_url"] = "http://gpu:8080"  # type: ignore[index]
    assert config_from_mapping(tmp_path, tables, env).embedding.openai[0].base_url == "http://gpu:8080"


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("HTTP://ChromaDB:8000/", "http://chromadb:8000"),
        ("http://chromadb", "http://chromadb:80"),
        ("https://h/base/", "https://h:443/base"),
        ("http://[::1]:8000", "http://[::1]:8000/"),
    ],
)
def test_two_spellings_of_one_server_normalise_alike(a: str, b: str) -> None:
    assert normalize_url(a) == normalize_url(b)


def test_other_servers_stay_apart() -> None:
    assert normalize_url("http://localhost:8000") != normalize_url("http://127.0.0.1:8000")
    assert normalize_url("http://h:8000") != normalize_url("https://h:8000")
    assert normalize_url("http://h:8000/a") != normalize_url("http://h:8000/b")
