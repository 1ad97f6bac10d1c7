"""The ``bbb`` command line: train, evaluate, prune, demo, ood, uncertain, regression, bandit, ...

Every user mistake (bad argument, missing run directory or data, corrupt checkpoint) ends with
one line on stderr, ``bbb COMMAND: error: ...``, and exit code 2; Ctrl-C during training ends with exit
code 130 and a line saying how to resume.

* :mod:`bbb.cli.registry` - the one registry of commands (:data:`COMMANDS`): each names the
  module that holds it, imported only when the command runs.
* :mod:`bbb.cli.common` - the options every command shares, the one-line-error parser.
* :mod:`bbb.cli.parser`, :mod:`bbb.cli.commands` - the top-level parser; ``train``,
  ``evaluate``, ``prune``, ``demo``.
* :mod:`bbb.cli.entry` - :func:`main`.
"""

from __future__ import annotations

from .entry import (  # noqa: F401
    main,
)
from .parser import (  # noqa: F401
    build_parser,
)
from .registry import (  # noqa: F401
    DEMO_SETTINGS,
)

__all__ = ["main", "build_parser", "DEMO_SETTINGS"]
