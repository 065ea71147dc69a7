"""Run many ``hearthnet`` command lines fast: each in a process forked from one that has the CLI
loaded, so hundreds of invocations cost milliseconds each instead of an interpreter start.

Each child is a real process with its own stdin (``/dev/null``), stdout and stderr (files), and
ends as ``python -m hearthnet.frontends.cli`` would: ``main``'s return code, or a traceback on stderr and
exit 1 if anything escapes it.  A child still running after ``timeout`` seconds is killed by its
own ``SIGALRM`` and reported as hung (exit code ``-14``).

    python -m tests.cli_fork < jobs.json > results.json
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

HUNG = -signal.SIGALRM
ROOT = Path(__file__).resolve().parents[1]


def run_many(
    argvs: Sequence[Sequence[str]],
    *,
    env: Mapping[str, str],
    cwd: Path,
    timeout: int = 60,
    parallel: int = 4,
) -> list[dict[str, Any]]:
    """``{"argv", "code", "stdout", "stderr", "seconds"}`` for each command line, in order."""
    jobs = {"argvs": [list(a) for a in argvs], "timeout": timeout, "parallel": parallel}
    path = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    proc = subprocess.run(
        [sys.executable, "-m", "tests.cli_fork"],
        input=json.dumps(jobs),  # ASCII escapes keep lone surrogates intact
        capture_output=True,
        text=True,
        env={**env, "PYTHONPATH": path},  # this checkout's code, whatever the working directory
        cwd=cwd,
        timeout=timeout * (len(argvs) // max(1, parallel) + 2),
    )
    if proc.returncode != 0:
        raise RuntimeError(f"the CLI runner failed: {proc.stderr[-2000:]}")
    results: list[dict[str, Any]] = json.loads(proc.stdout)
    return results


def _child(argv: list[str], out: str, err: str, timeout: int) -> None:
    """In the forked child: run one command line and end the process as the interpreter would."""
    code = 1
    try:
        for fd, path, flags in ((0, os.devnull, os.O_RDONLY), (1, out, os.O_WRONLY), (2, err, os.O_WRONLY)):
            opened = os.open(path, flags)
            os.dup2(opened, fd)
            os.close(opened)
        signal.alarm(timeout)
        from hearthnet.frontends.cli import main

        try:
            code = main(argv)
        except SystemExit as exc:
            if isinstance(exc.code, str):
                print(exc.code, file=sys.stderr)
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except BaseException:
            traceback.print_exc()
            code = 1
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:
        traceback.print_exc()
        code = 1
    finally:
        os._exit(code)


def _serve() -> None:
    import hearthnet.frontends.cli  # noqa: F401  (loaded once: every child starts with it)

    jobs = json.loads(sys.stdin.read())
    argvs: list[list[str]] = jobs["argvs"]
    timeout, parallel = int(jobs["timeout"]), int(jobs["parallel"])
    results: list[dict[str, Any]] = [{} for _ in argvs]
    running: dict[int, tuple[int, str, str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="cli-fork-") as tmp:
        pending = list(enumerate(argvs))
        while pending or running:
            while pending and len(running) < parallel:
                index, argv = pending.pop(0)
                out, err = f"{tmp}/{index}.out", f"{tmp}/{index}.err"
                for path in (out, err):
                    Path(path).touch()
                sys.stdout.flush()
                sys.stderr.flush()
                pid = os.fork()
                if pid == 0:
                    _child(argv, out, err, timeout)
                running[pid] = (index, out, err, time.monotonic())
            pid, status = os.wait()
            index, out, err, started = running.pop(pid)
            results[index] = {
                "argv": argvs[index],
                "code": os.waitstatus_to_exitcode(status),
                "stdout": Path(out).read_bytes().decode("utf-8", "replace"),
                "stderr": Path(err).read_bytes().decode("utf-8", "replace"),
                "seconds": time.monotonic() - started,
            }
    sys.stdout.write(json.dumps(results))


if __name__ == "__main__":
    _serve()
