"""``python -m bbb``: the same as the ``bbb`` command."""

from __future__ import annotations

import sys

from bbb.cli import main

if __name__ == "__main__":
    sys.exit(main())
