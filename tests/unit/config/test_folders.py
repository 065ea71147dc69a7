"""``[[rag.folders]]`` and ``rag.folder_settle_seconds``: checked when the config is read."""

from __future__ import annotations

from pathlib import Path

import pytest

from hearthnet.config import config_from_mapping
from hearthnet.errors import BadRequest


def test_watched_folders_are_read(tmp_path: Path) -> None:
    folders = [{"path": "/srv/papers", "corpus": "family"}, {"path": "~/notes", "corpus": "notes"}]
    cfg = config_from_mapping(tmp_path, {"rag": {"folders": folders, "folder_settle_seconds": 2.5}})
    assert cfg.rag.folders == (("/srv/papers", "family"), ("~/notes", "notes"))
    assert cfg.rag.folder_settle_seconds == 2.5
    default = config_from_mapping(tmp_path, {}).rag
    assert default.folders == () and default.folder_settle_seconds == 1.0


@pytest.mark.parametrize(
    ("rag", "said"),
    [
        ({"folders": [{"path": "papers", "corpus": "family"}]}, "must be absolute"),
        ({"folders": [{"path": "/p", "corpus": "Family!"}]}, r"\[\[rag.folders\]\] #1.*invalid"),
        ({"folders": [{"path": "/p", "corpus": "system"}]}, "read-only"),
        ({"folders": [{"path": "/p"}]}, "needs corpus"),
        ({"folders": [{"path": "/p", "corpus": "a"}, {"path": "/p", "corpus": "b"}]}, "earlier table"),
        ({"folders": [{"path": "/p", "corpus": "a", "watch": True}]}, "watch"),
        ({"folder_settle_seconds": 0}, "folder_settle_seconds"),
    ],
)
def test_a_bad_folder_setting_is_refused_with_where(
    tmp_path: Path, rag: dict[str, object], said: str
) -> None:
    with pytest.raises(BadRequest, match=said):
        config_from_mapping(tmp_path, {"rag": rag})
