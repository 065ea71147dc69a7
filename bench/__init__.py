"""Benchmarks and measurement scripts (not part of the installed package).

Floors run in the benchmark's own process, so it is set up as ``hearthnet node
run`` sets up a node: the OpenBLAS thread timeout here, before numpy loads
(whichever entry point runs, ``python -m bench.run`` or one benchmark alone),
and the malloc tuning by :func:`bench.common.node_like_process` when a
benchmark starts.
"""

import os

os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")
