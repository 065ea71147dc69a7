"""The ``hearthnet`` command line, one module per command group (see :mod:`.main`).

Run as ``hearthnet`` (the console script) or ``python -m hearthnet.frontends.cli``.
"""

from hearthnet.frontends.cli.main import build_parser, main

__all__ = ["build_parser", "main"]
