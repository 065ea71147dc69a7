"""Replicas: a copy of another node's corpus that follows its host's signed events (``specs/replicas.md``)."""
