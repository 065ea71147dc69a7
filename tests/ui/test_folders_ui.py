"""The Library's watched folders in a real headless Chromium: the owner sees each folder of the node
with its counts and each failed file's reason; a member's page has no such card and its API answer
is empty.  One node (founder: embeds, hosts) with a folder holding a note and a broken PDF."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hearthnet.testing import LocalMesh, MeshNode
from tests.shared_data import PDF_DIR
from tests.ui.harness import (
    chromium,
    css,
    fetch,
    owner_link,
    person_link,
    screenshot,
    sign_in,
    skip_without_browser,
    text_of,
    ui_url,
    wait,
)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[MeshNode, Path]]:
    skip_without_browser()
    root = tmp_path_factory.mktemp("ui-folders")
    folder = root / "family <papers>"  # a name with markup: shown as text
    folder.mkdir()
    (folder / "boiler.txt").write_text("The boiler's pressure should read 1.5 bar when cold.\n")
    shutil.copy(PDF_DIR / "corrupt_header_only.pdf", folder / "broken.pdf")
    m = LocalMesh(root / "mesh")
    try:
        a = m.add("kitchen", env={"HEARTHNET_UI_LISTEN": "127.0.0.1:0", "HEARTHNET_OCR": "0"})
        m.found(a)
        entry = a.cli_json("watch", "add", str(folder), "--corpus", "family", "--wait", "--json", timeout=600)
        assert entry["state"] == "watching" and entry["indexed"] == 1 and entry["failed_count"] == 1, entry
        yield a, folder
    finally:
        m.close()


@pytest.fixture(scope="module")
def driver(node: tuple[MeshNode, Path]) -> Iterator[Any]:
    with chromium() as d:
        d.set_page_load_timeout(30)
        d.set_script_timeout(30)
        yield d


def test_the_owner_sees_the_folder_its_counts_and_each_failure(
    node: tuple[MeshNode, Path], driver: Any
) -> None:
    a, folder = node
    sign_in(driver, owner_link(a))
    driver.get(ui_url(a) + "/library")
    wait(driver, lambda d: css(d, "#folders tbody tr"), what="the watched folders")
    row = [c.text for c in css(driver, "#folders tbody tr td")]
    assert row[:5] == [str(folder), "family", "1", "0", "1"], row
    assert row[6] == "watching"
    failures = text_of(driver, "#folder-failures")
    assert str(folder / "broken.pdf") in failures and "PDF" in failures, failures
    assert not css(driver, "#folders b, #folders script")  # the folder's '<papers>' stayed text
    screenshot(driver, "folders-01-owner-library")


def test_a_member_sees_no_folders(node: tuple[MeshNode, Path], driver: Any) -> None:
    a, _ = node
    sign_in(driver, person_link(a, "Robin", "member"))
    driver.get(ui_url(a) + "/library")
    wait(driver, lambda d: css(d, "#corpora tbody tr"), what="the corpora")
    assert not css(driver, "#folders-card")
    answer = fetch(driver, "GET", "/api/folders")
    assert answer["status"] == 200 and '"folders": []' in answer["body"].replace(
        '"folders":[]', '"folders": []'
    )
    screenshot(driver, "folders-02-member-library")
