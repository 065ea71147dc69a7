"""``rag.watch`` on an in-process bus: what it refuses, and why, before any file is read; adding,
listing and removing folders; a configured folder is removed in the config, not by the call."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from hearthnet.bus.bus import CapabilityBus
from hearthnet.community.levels import Level
from hearthnet.errors import BadRequest, NotFound, Unauthorized
from hearthnet.identity import Identity
from hearthnet.services.rag.folders.service import FolderService
from hearthnet.services.rag.folders.watcher import WatchSettings, pass_spacing

pytestmark = pytest.mark.anyio


@asynccontextmanager
async def service(
    tmp: Path,
    level: Level | None = Level.TRUSTED,
    configured: tuple[tuple[str, str], ...] = (),
    settings: WatchSettings | None = None,
) -> AsyncIterator[tuple[CapabilityBus, FolderService]]:
    identity = Identity.generate()
    bus = CapabilityBus(identity, level_of=lambda _n: level, community_id=lambda: "hc1:test", name="n")
    folders = FolderService(
        bus=bus,
        node_id=identity.node_id,
        state_path=tmp / "folders.sqlite",
        configured=configured,
        own_level=lambda: level,
        settings=settings,
    )
    await folders.start()
    for r in folders.registrations():
        bus.register(r)
    async with anyio.create_task_group() as tg:
        tg.start_soon(folders.run_background)
        try:
            yield bus, folders
        finally:
            tg.cancel_scope.cancel()
    await folders.stop()


async def watch(bus: CapabilityBus, **inp: Any) -> dict[str, Any]:
    return (await bus.call("rag.watch", input=inp, timeout=30)).output


async def test_bad_requests_are_refused_with_the_reason(tmp_path: Path) -> None:
    (tmp_path / "a-file.txt").write_text("x")
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    async with service(tmp_path) as (bus, _):
        cases = [
            ({"action": "add", "path": str(tmp_path / ("x" * 10_000)), "corpus": "c"}, "cannot be opened"),
            ({"action": "add", "path": str(tmp_path / "loop"), "corpus": "c"}, "cannot be opened"),
            ({"action": "add", "path": str(tmp_path / "nul\0byte"), "corpus": "c"}, "cannot be opened"),
            ({"action": "add", "path": "papers", "corpus": "c"}, "must be absolute"),
            ({"action": "add", "path": str(tmp_path / "none"), "corpus": "c"}, "is not a folder"),
            ({"action": "add", "path": str(tmp_path / "a-file.txt"), "corpus": "c"}, "is not a folder"),
            ({"action": "add", "path": str(tmp_path), "corpus": "system"}, "read-only"),
            ({"action": "add", "path": str(tmp_path), "corpus": "Bad!"}, "invalid"),
            ({"action": "watch", "path": str(tmp_path)}, "one of add, remove, list"),
            ({"action": "list", "recursive": True}, "recursive"),
        ]
        for inp, said in cases:
            with pytest.raises(BadRequest, match=said):
                await watch(bus, **inp)
        with pytest.raises(NotFound, match="is not watched"):
            await watch(bus, action="remove", path=str(tmp_path))
        assert await watch(bus, action="list") == {"folders": []}


async def test_a_node_that_is_not_trusted_may_not_watch(tmp_path: Path) -> None:
    async with service(tmp_path, Level.MEMBER) as (bus, _):
        with pytest.raises(Unauthorized, match=r"only a member.*not trusted.*member promote"):
            await watch(bus, action="add", path=str(tmp_path), corpus="c")
    async with service(tmp_path / "x", None) as (bus, _):
        with pytest.raises(Unauthorized, match="not a member"):
            await watch(bus, action="add", path=str(tmp_path), corpus="c")


async def test_add_list_overlap_and_remove(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    (docs / "sub").mkdir(parents=True)
    async with service(tmp_path) as (bus, folders):
        assert await watch(bus, action="add", path=str(docs), corpus="c") == {
            "path": str(docs),
            "corpus": "c",
            "added": True,
        }
        assert (await watch(bus, action="add", path=str(docs) + "/", corpus="c"))["added"] is False
        with pytest.raises(BadRequest, match="watched into corpus c already"):
            await watch(bus, action="add", path=str(docs), corpus="d")
        for overlapping in (docs / "sub", tmp_path):
            with pytest.raises(BadRequest, match="overlaps"):
                await watch(bus, action="add", path=str(overlapping), corpus="c")
        (listed,) = (await watch(bus, action="list"))["folders"]
        assert listed["path"] == str(docs) and listed["corpus"] == "c" and listed["from_config"] is False
        assert set(listed) >= {
            "state",
            "files",
            "indexed",
            "pending",
            "failed",
            "failed_count",
            "last_change",
        }
        assert await watch(bus, action="remove", path=str(docs)) == {
            "path": str(docs),
            "corpus": "c",
            "removed": True,
        }
        assert folders.watches == {}


async def test_a_configured_folder_is_removed_in_the_config(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    async with service(tmp_path, configured=((str(docs), "c"),)) as (bus, _):
        (listed,) = (await watch(bus, action="list"))["folders"]
        assert listed["from_config"] is True
        with pytest.raises(BadRequest, match=r"config.toml \(\[\[rag.folders\]\]\)"):
            await watch(bus, action="remove", path=str(docs))
    async with service(tmp_path) as (bus, _):  # taken out of the config: no longer watched
        assert await watch(bus, action="list") == {"folders": []}


async def test_a_file_written_for_long_does_not_have_the_folder_walked_back_to_back(tmp_path: Path) -> None:
    """Every pass walks the whole folder: while a file is written (here: written to as each pass
    ends, so an event is always waiting), the next pass starts no sooner than the last walk's time
    over ``walk_share``."""
    docs = tmp_path / "docs"
    docs.mkdir()
    for i in range(1000):  # a folder with many files: walking it takes measurable time
        (docs / f"f{i:04d}.bin").write_bytes(b"x")
    settings = WatchSettings(walk_share=0.02)
    async with service(tmp_path, settings=settings) as (bus, folders):
        await watch(bus, action="add", path=str(docs), corpus="c")
        (w,) = folders.watches.values()
        passes: list[tuple[float, float]] = []
        with (docs / "download.bin").open("ab") as download, anyio.fail_after(600):
            while len(passes) < 4:
                await w.passed.wait()
                passes.append((w.pass_started, w.walk_seconds))
                download.write(b"y" * 1024)  # the download goes on: its event wakes the watcher
                download.flush()
    assert all(walk > 0 for _, walk in passes)
    for (start, walk), (next_start, _) in itertools.pairwise(passes):
        assert next_start - start >= pass_spacing(walk, settings) - 1e-3, passes
