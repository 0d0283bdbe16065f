"""The one error type the dump reader raises: a one-line reason a person can act on."""

from __future__ import annotations


class ScanError(Exception):
    """A dump that cannot be scanned at all (missing, foreign, empty); the message is one line."""
