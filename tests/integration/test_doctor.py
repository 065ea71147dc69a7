"""``hearthnet doctor`` on one real node on 127.0.0.1, before and after it founds a community
(the LAN cases, a blocked port and peers dialling back, are in test_lan.py)."""

from __future__ import annotations

import json
from pathlib import Path

from hearthnet.testing import LocalMesh

NO_MODELS = {"HEARTHNET_EMBEDDING": "0", "HEARTHNET_RAG": "0"}


def test_doctor_names_a_missing_community_then_finds_nothing_in_the_way(tmp_path: Path) -> None:
    with LocalMesh(tmp_path) as mesh:
        a = mesh.add("attic", env=NO_MODELS)
        a.start()
        a.wait_ready()
        proc = a.cli("doctor", check=False)
        assert proc.returncode == 1, proc.stdout
        assert "PROBLEM  community  this node is in no community" in proc.stdout
        assert "fix: found one with 'hearthnet community create NAME'" in proc.stdout
        assert "only 127.0.0.1" in proc.stdout  # a loopback listen: a note, not a problem

        a.stop()
        a.cli_json("community", "create", "home")
        a.start()
        a.wait_ready()
        proc = a.cli("doctor", "--json", check=False)
        report = json.loads(proc.stdout)
        assert proc.returncode == 0 and report["ok"] is True, report["findings"]
        checks = {(f["check"], f["level"]) for f in report["findings"]}
        assert ("community", "ok") in checks and ("port", "ok") in checks
        assert ("reach", "note") in checks  # alone: no peer to dial it back
        assert report["addresses"] == a.status()["addresses"]
