"""The project's own error base: what a user can fix, as opposed to a bug.

Faces (the CLI, the dashboard) print these as one line and exit 2; any other exception is a
programming error and keeps its traceback.
"""

from __future__ import annotations


class RollscopeError(Exception):
    """Bad input or an unusable resource; the message is one line naming the problem and fix."""


class SpecError(RollscopeError, ValueError):
    """A run specification that cannot be built or read back."""
