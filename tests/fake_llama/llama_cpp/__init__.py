"""A stand-in for llama-cpp-python in tests: only its server, ``python -m llama_cpp.server``.

The real package compiles llama.cpp for ~15 minutes and is opt-in (``make local-llm``), so
the node's supervision of its child (start, readiness, restart, dying with the node) is
tested with this server, which speaks the same HTTP/SSE protocol on 127.0.0.1.
"""
