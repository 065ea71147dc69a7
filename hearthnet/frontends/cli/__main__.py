"""``python -m hearthnet.frontends.cli``: the ``hearthnet`` command."""

import sys

from hearthnet.frontends.cli.main import main

sys.exit(main())
