"""One node per home: a second `node run` on a running node's home is refused and changes nothing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from hearthnet.mesh import LocalMesh


def test_a_second_node_run_on_the_same_home_is_refused_and_the_first_keeps_serving(tmp_path: Path) -> None:
    with LocalMesh(tmp_path) as mesh:
        a = mesh.add("a")
        mesh.found(a)
        before = a.cli_json("status")
        second = subprocess.run(
            [sys.executable, "-m", "hearthnet.cli", "--home", str(a.home), "node", "run"],
            capture_output=True,
            text=True,
            env={**a.env, **a.extra_env},
            timeout=60,
        )
        assert second.returncode == 1
        assert second.stderr.startswith("hearthnet: a node is already running for ")
        assert second.stderr.count("\n") == 1
        assert a.cli_json("status")["node_id"] == before["node_id"]  # its control socket is intact
