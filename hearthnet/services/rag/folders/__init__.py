"""Watched folders: a folder on this node's disk kept indexed in a corpus (scan, reconcile, live
changes, each through the one ingest flow over the bus).  See ``specs/folders.md``."""
