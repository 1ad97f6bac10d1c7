"""The ``bbb`` command line: train, evaluate, prune, demo, ood, uncertain, regression, bandit, ...

Every user mistake (bad argument, missing run directory or data, corrupt checkpoint) ends with
one line on stderr, ``bbb: error: ...``, and exit code 2; Ctrl-C during training ends with exit
code 130 and a line saying how to resume.

* :mod:`bbb.cli.registry` - the one registry of commands (:data:`COMMANDS`): each names the
  module that holds it, imported only when the command runs.
* :mod:`bbb.cli.common` - the options every command shares, the one-line-error parser.
* :mod:`bbb.cli.parser`, :mod:`bbb.cli.commands` - the top-level parser; ``train``,
  ``evaluate``, ``prune``, ``demo``.
* :mod:`bbb.cli.entry` - :func:`main`.
"""

from __future__ import annotations

from .commands import (  # noqa: F401
    cmd_demo,
    cmd_evaluate,
    cmd_prune,
    cmd_train,
    print_eval,
    print_pruning,
    print_summary,
    weights_text,
)
from .common import (  # noqa: F401
    Parser,
    fmt_default,
    pct_text,
    text_table,
)
from .entry import (  # noqa: F401
    main,
    run_command,
    set_threads,
)
from .parser import (  # noqa: F401
    TRAIN_EXAMPLE,
    add_train_options,
    build_parser,
    suppressed_adder,
)
from .registry import (  # noqa: F401
    COMMANDS,
    DEMO_SETTINGS,
    LAZY_COMMANDS,
    PROG,
    Command,
)

__all__ = ["main", "build_parser", "DEMO_SETTINGS"]
