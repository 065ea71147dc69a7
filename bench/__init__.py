"""Benchmarks and measurement scripts (not part of the installed package).

Floors run in the benchmark's own process, which each benchmark tunes like a
node's allocator (:func:`bench.common.node_like_process`).  OpenBLAS keeps its
default here, unlike in a node (``OPENBLAS_THREAD_TIMEOUT=4``): its threads
spin ~0.1 s after a product, which makes the floor's exact search its fastest
(0.65 ms at 10k against ~1 ms with sleeping threads), and ``bench.rag`` lets
that spin end before it times ours, so the spinning never takes a core from
the node being measured.
"""
