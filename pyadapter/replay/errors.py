"""The one error type of replay and locate: something the user can fix, said in one line."""

from __future__ import annotations


class ReplayError(Exception):
    """A bundle that cannot be replayed or located; ``str(exc)`` is one line for the user."""
