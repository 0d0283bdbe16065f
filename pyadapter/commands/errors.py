"""The one error a CLI verb raises for what the user can fix (the verbs import it from here, not from the CLI)."""

from __future__ import annotations


class CliError(Exception):
    """An error the user can fix; printed as one line `nanlens: error: ...`, exit code 2."""
