"""``hearthnet logs``: the last records across rotated files, as text or JSON, and ``-f`` following
the file the node's own writer rotates, until Ctrl-C (exit 130, nothing on stderr)."""

from __future__ import annotations

import json
import logging
import os
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog

from hearthnet.frontends.cli import main
from hearthnet.runtime.observability import configure_logging, shutdown_logging


def record(i: int, **extra: object) -> str:
    return json.dumps(
        {"i": i, **extra, "event": "tick", "level": "info", "timestamp": f"2026-01-01T00:00:{i:02}Z"}
    )


def write_log(home: Path, name: str, lines: list[str]) -> None:
    (home / "logs").mkdir(parents=True, exist_ok=True)
    (home / "logs" / name).write_text("".join(line + "\n" for line in lines), encoding="utf-8")


def test_the_last_records_come_from_the_rotated_files_too_oldest_first(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home = tmp_path / "home"
    write_log(home, "node.log.2", [record(i) for i in range(0, 3)])
    write_log(home, "node.log.1", [record(i) for i in range(3, 6)])
    write_log(home, "node.log", [record(6), record(7, peer="ed25519:abc", note="two words")])
    with (home / "logs" / "node.log").open("a") as f:
        f.write('{"i": 8, "event": "half-writ')  # the writer is mid-line
    assert main(["logs", "--home", str(home), "-n", "4", "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["file"] == str(home / "logs" / "node.log")
    assert [r["i"] for r in document["records"]] == [4, 5, 6, 7]
    assert main(["logs", "--home", str(home), "-n", "7"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 7 and out[0].startswith("2026-01-01T00:00:01Z info    tick i=1")
    assert out[-1] == '2026-01-01T00:00:07Z info    tick i=7 peer=ed25519:abc note="two words"'
    assert main(["logs", "--home", str(home), "-n", "0"]) == 0
    assert capsys.readouterr().out == ""


def test_lines_that_are_not_records_and_tracebacks_are_shown_safely(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home = tmp_path / "home"
    crash = json.dumps(
        {"event": "crashed", "level": "error", "timestamp": "T", "exception": "Traceback\n  boom\x1b[2J"}
    )
    write_log(home, "node.log", ["not json \x1b[31m", crash])
    assert main(["logs", "--home", str(home)]) == 0
    assert (
        capsys.readouterr().out
        == "not json \\u001b[31m\nT error   crashed\n    Traceback\n      boom\\u001b[2J\n"
    )
    assert main(["logs", "--home", str(home), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["records"][0] == {"unparsed": "not json \x1b[31m"}


def test_no_log_file_or_a_bad_count_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    home = tmp_path / "home"
    assert main(["logs", "--home", str(home)]) == 1  # no home at all: how to make one
    err = capsys.readouterr().err
    assert (
        err
        == f"hearthnet: not_found: no node home at {home}: create one with 'hearthnet init --home {home}'\n"
    )
    home.mkdir()
    assert main(["logs", "--home", str(home)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("hearthnet: no log file at ") and "has run" in err
    (home / "config.toml").write_text("[log]\nfile = false\n")
    assert main(["logs", "--home", str(home)]) == 1
    assert "[log] file = false" in capsys.readouterr().err
    assert main(["logs", "--home", str(home), "-n", "-1"]) == 1
    assert capsys.readouterr().err == "hearthnet: bad_request: -n must be 0 or more\n"


def output_lines(proc: subprocess.Popen[str]) -> queue.Queue[str]:
    """The lines ``proc`` prints, as they come (read by a thread: ``get(timeout=...)`` is the deadline)."""
    lines: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        for line in proc.stdout or ():
            lines.put(line)

    threading.Thread(target=pump, daemon=True).start()
    return lines


def stopped(proc: subprocess.Popen[str]) -> None:
    """``proc`` ended (killed if still running) and its pipes closed once its output is read."""
    if proc.poll() is None:
        proc.kill()
    proc.communicate(timeout=30)  # reads what is left (the pump sees the end), then closes the pipes


@pytest.fixture
def node_logging(tmp_path: Path) -> Iterator[Path]:
    """This process logs like a node whose home is ``tmp_path / "home"``: the real writer, rotating
    at 1,000 bytes (about 8 records)."""
    old_config = structlog.get_config()
    root = logging.getLogger()
    old_handlers, old_level = root.handlers[:], root.level
    home = tmp_path / "home"
    configure_logging("info", log_file=home / "logs" / "node.log", max_bytes=1000, backups=2)
    try:
        yield home
    finally:
        shutdown_logging()
        structlog.configure(**old_config)
        root.handlers[:] = old_handlers
        root.setLevel(old_level)


def test_follow_survives_rotations_and_ctrl_c_ends_it_quietly(node_logging: Path) -> None:
    home = node_logging
    log = structlog.get_logger("test")
    log.info("before", i=-1)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "hearthnet.frontends.cli",
            "logs",
            "-f",
            "-n",
            "1",
            "--json",
            "--home",
            str(home),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines = output_lines(proc)
    try:
        assert json.loads(lines.get(timeout=30))["event"] == "before"  # -n 1: the last record first
        seen = []
        for batch in range(6):  # 30 records of ~120 bytes: three rotations or more
            for i in range(batch * 5, batch * 5 + 5):
                log.info("tick", i=i, peer="ed25519:" + "p" * 43)
            for _ in range(5):
                seen.append(json.loads(lines.get(timeout=30))["i"])
        assert seen == list(range(30))  # every record once, in order, across the rotations
        assert (home / "logs" / "node.log.2").exists()  # it did rotate, more than once
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 130
        assert proc.stderr is not None and proc.stderr.read() == ""
    finally:
        stopped(proc)


def test_follow_waits_for_a_missing_file_and_rereads_a_truncated_one(tmp_path: Path) -> None:
    home = tmp_path / "home"
    proc = subprocess.Popen(
        [sys.executable, "-m", "hearthnet.frontends.cli", "logs", "-f", "--home", str(home)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines = output_lines(proc)
    try:
        write_log(home, "node.log", [record(1), record(2)])
        assert lines.get(timeout=30).startswith("2026-01-01T00:00:01Z info    tick i=1")
        assert lines.get(timeout=30).startswith("2026-01-01T00:00:02Z info    tick i=2")
        with (home / "logs" / "node.log").open("w") as f:  # truncated, then written again (shorter)
            f.write(record(3) + "\n")
        assert lines.get(timeout=30).startswith("2026-01-01T00:00:03Z info    tick i=3")
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 130
    finally:
        stopped(proc)
    assert os.path.exists(home / "logs" / "node.log")
