"""A full disk is said as a full disk at every door (issue 29): the CLI's ``file put``
(``file.import``), the web UI's upload, the owner's sign-in, and ``ui token create``.

One node (no models) whose whole home is a small tmpfs; once it runs and its owner link is
made, the rest of the tmpfs is filled.  Needs root to mount the tmpfs (skipped otherwise); it
is unmounted afterwards, also when the test fails.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from hearthnet.testing import LocalMesh, MeshNode
from tests.shared_data import PDF_DIR
from tests.ui.harness import Ui, owner_link, token_of, ui_url

from .conftest import NO_MODELS, report

TMPFS = "48m"


@pytest.fixture
def full_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[MeshNode, Path]]:
    mount = tmp_path_factory.mktemp(f"diskfull-{os.getpid()}")
    proc = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={TMPFS}", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
        timeout=20,
    )
    if proc.returncode != 0:
        pytest.skip(f"mounting a tmpfs was refused here (needs root): {proc.stderr.strip()[:200]}")
    mesh = LocalMesh(mount)
    try:
        node = mesh.add("a", env={**NO_MODELS, "HEARTHNET_UI_LISTEN": "127.0.0.1:0"})
        mesh.found(node)
        yield node, mount
    finally:
        mesh.close()
        subprocess.run(["umount", "-l", str(mount)], capture_output=True, timeout=20)


def _fill(mount: Path) -> int:
    """Write until the tmpfs is full; the bytes left free (none, or less than a page)."""
    with open(mount / "filler.bin", "wb") as f:
        try:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
        except OSError:
            pass
    stat = os.statvfs(mount)
    return stat.f_bavail * stat.f_frsize


def test_a_full_disk_is_said_as_disk_full_at_every_door(full_home: tuple[MeshNode, Path]) -> None:
    node, mount = full_home
    owner = Ui(owner_link(node))
    link = owner_link(node)  # made while there is room: signing in with it is what fails
    pdf = next(iter(sorted(PDF_DIR.glob("*.pdf"))))
    try:
        free = _fill(mount)
        report("disk-full", f"the node's home is a {TMPFS} tmpfs, filled: {free} bytes free")

        put = node.cli("file", "put", str(pdf), check=False)
        report("disk-full", f"file put: exit {put.returncode}: {put.stderr.strip()[:200]}")
        assert put.returncode != 0 and "disk full" in put.stderr, put.stderr
        assert "internal_error" not in put.stderr

        upload = owner.post(
            "/api/upload", params={"corpus": "docs", "name": pdf.name}, content=pdf.read_bytes()
        )
        report("disk-full", f"upload: {upload.status_code} {upload.text[:200]}")
        assert upload.headers["content-type"].startswith("application/json"), upload.text[:200]
        assert upload.json()["message"].startswith("disk full"), upload.text
        assert upload.status_code == 503 and upload.json()["error"] == "capacity_exceeded"

        with httpx.Client(base_url=ui_url(node), timeout=60) as http:
            login = http.post("/api/login", json={"token": token_of(link)})
        report("disk-full", f"owner sign-in: {login.status_code} {login.text[:200]}")
        assert login.headers["content-type"].startswith("application/json"), login.text[:200]
        assert login.json()["message"].startswith("disk full"), login.text

        created = node.cli("ui", "token", "create", "--name", "bob", "--level", "member", check=False)
        report("disk-full", f"ui token create: exit {created.returncode}: {created.stderr.strip()[:200]}")
        assert created.returncode != 0 and "disk full" in created.stderr, created.stderr
        assert "rollback" not in created.stderr

        assert node.status()["node_id"] == node.node_id  # the node still answers
        assert owner.get("/api/session").status_code == 200  # and so does its UI
    finally:
        owner.close()
        (mount / "filler.bin").unlink(missing_ok=True)
