"""HearthNet: a peer-to-peer capability-bus node whose heart is a RAG service."""

__version__ = "0.1.0"

__all__ = ["__version__"]
