"""Entry point of the local model's child process: ``llama_cpp.server`` that dies with its node.

On Linux the child asks the kernel for ``SIGTERM`` when its parent exits
(``PR_SET_PDEATHSIG``), so a node killed with ``kill -9`` leaves no model server
holding memory and a port.  The remaining arguments go to ``llama_cpp.server``.
"""

from __future__ import annotations

import ctypes
import os
import runpy
import signal
import sys

PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        return
    expected = os.environ.get("HEARTHNET_PARENT_PID")
    if expected is not None and str(os.getppid()) != expected:
        sys.exit(0)  # the node died before the request took effect


def main() -> None:
    _die_with_parent()
    sys.argv = ["llama_cpp.server", *sys.argv[1:]]
    runpy.run_module("llama_cpp.server", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
