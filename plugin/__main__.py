"""``python -m stepscope DIR ...``: the standalone server (see :mod:`stepscope.cli`)."""

import sys

from .cli import main

sys.exit(main())
