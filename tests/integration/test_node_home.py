"""One node per home: a second `node run` on a running node's home is refused and changes nothing."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

from hearthnet.identity import Identity
from hearthnet.testing import LocalMesh


def test_a_second_node_run_on_the_same_home_is_refused_and_the_first_keeps_serving(tmp_path: Path) -> None:
    with LocalMesh(tmp_path) as mesh:
        a = mesh.add("a")
        mesh.found(a)
        before = a.cli_json("status")
        second = subprocess.run(
            [sys.executable, "-m", "hearthnet.frontends.cli", "--home", str(a.home), "node", "run"],
            capture_output=True,
            text=True,
            env={**a.env, **a.extra_env},
            timeout=60,
        )
        assert second.returncode == 1
        assert second.stderr.startswith("hearthnet: a node is already running for ")
        assert second.stderr.count("\n") == 1
        assert a.cli_json("status")["node_id"] == before["node_id"]  # its control socket is intact


def test_a_listen_address_in_use_is_named_with_the_settings_that_change_it(tmp_path: Path) -> None:
    """``node run`` said only "Address already in use", with no address and no way out."""
    home = tmp_path / "n1"
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        env = {**os.environ, "HEARTHNET_EMBEDDING": "0", "HEARTHNET_RAG": "0"}
        env.pop("HEARTHNET_HOME", None)
        cli = [sys.executable, "-m", "hearthnet.frontends.cli", "--home", str(home)]
        subprocess.run([*cli, "init", "--listen", f"127.0.0.1:{port}"], check=True, env=env, timeout=60)
        run = subprocess.run([*cli, "node", "run"], capture_output=True, text=True, env=env, timeout=60)
    assert run.returncode == 1
    last = run.stderr.splitlines()[-1]  # the node's JSON log lines come first
    assert last.startswith(
        f"hearthnet: bad_request: cannot listen on 127.0.0.1:{port}: address already in use"
    )
    assert f"[network] listen in {home / 'config.toml'}" in last and "HEARTHNET_LISTEN" in last
    assert not (home / "control.sock").exists()


def test_before_a_community_exists_every_command_says_what_to_do_next(tmp_path: Path) -> None:
    """``status``, ``events``, ``ingest`` and ``invite`` said "the log has no community yet"."""
    hint = "'hearthnet community create NAME'"
    with LocalMesh(tmp_path) as mesh:
        a = mesh.add("a", env={"HEARTHNET_EMBEDDING": "0"})
        a.start()
        status = a.wait_ready()
        assert status["community_id"] is None and status["level"] is None and status["revoked"] is None
        assert f"community  none: found one with {hint} or join one with 'hearthnet join TOKEN'" in (
            a.cli("status").stdout
        )
        doc = tmp_path / "note.txt"
        doc.write_text("the boiler is serviced in May")
        for args in (
            ("events",),
            ("ingest", str(doc), "--corpus", "family"),
            ("invite", Identity.generate().node_id),
        ):
            proc = a.cli(*args, check=False)
            said = proc.stdout + proc.stderr  # ingest reports each file on stdout
            assert proc.returncode == 1
            assert f"this node is in no community yet: found one with {hint}" in said, said
            assert "'hearthnet join TOKEN'" in said and "the log has no community" not in said
        # no community, no model, no embedder: no answer, said in one line (it was exit 0 with
        # "no passage matches", "not searched" and "left out" at once)
        asked = a.cli("ask", "When is the boiler serviced?", check=False)
        assert asked.returncode == 1 and asked.stdout == "" and len(asked.stderr.splitlines()) == 1
        assert asked.stderr.startswith("hearthnet: ") and "nothing to answer from: " in asked.stderr
