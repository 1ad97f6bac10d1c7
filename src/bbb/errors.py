"""User-facing errors: one line that says what was wrong and what to do.

The command line turns any :class:`UserError` into that one line on stderr and exit code 2,
never a traceback.
"""

from __future__ import annotations


class UserError(ValueError):
    """A mistake in what the user asked for (bad argument, missing file, corrupt input)."""


class DataError(UserError):
    """A data file is missing, truncated, corrupt or does not match its checksum."""


class CheckpointError(UserError):
    """A run directory or checkpoint is missing or cannot be read."""
