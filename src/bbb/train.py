"""Compatibility module: the names of :mod:`bbb.runs` under their old address ``bbb.train``.

New code imports from :mod:`bbb.runs` (the run directory, the epoch loop, evaluation).
"""

from __future__ import annotations

from .runs import *  # noqa: F403
from .runs import __all__ as __all__  # noqa: F401
