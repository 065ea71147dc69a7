"""``[[rag.replicas]]`` and ``rag.max_replicas``: checked when the config is read."""

from __future__ import annotations

from pathlib import Path

import pytest

from hearthnet.config import config_from_mapping
from hearthnet.errors import BadRequest


def test_replicated_corpora_and_the_cap_are_read(tmp_path: Path) -> None:
    cfg = config_from_mapping(
        tmp_path, {"rag": {"replicas": [{"corpus": "family"}, {"corpus": "recipes"}], "max_replicas": 2}}
    )
    assert cfg.rag.replicas == ("family", "recipes") and cfg.rag.max_replicas == 2
    assert config_from_mapping(tmp_path, {}).rag.replicas == ()


@pytest.mark.parametrize(
    ("rag", "said"),
    [
        ({"replicas": [{"corpus": "personal"}]}, "never replicates"),
        ({"replicas": [{"corpus": "Family!"}]}, "invalid"),
        ({"replicas": [{"corpus": "family"}, {"corpus": "family"}]}, "earlier table"),
        ({"replicas": [{"name": "family"}]}, "name"),
        ({"max_replicas": -1}, "at least 0"),
    ],
)
def test_a_bad_replica_setting_is_refused_with_where(
    tmp_path: Path, rag: dict[str, object], said: str
) -> None:
    with pytest.raises(BadRequest, match=said):
        config_from_mapping(tmp_path, {"rag": rag})
