"""Shared set-up for every test module."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

if os.environ.get("PYTEST_XDIST_WORKER") and not getattr(sys.modules.get("__main__"), "__file__", None):
    # A pytest-xdist worker's __main__ is execnet's bootstrap (`python -c ...`, no file), so a NanGuard inside the
    # test process would record no entry script, where a serial `python -m pytest` run records pytest's own
    # entry point; tests of the bundle's entry script expect the latter. The same file, named the same way.
    sys.argv[0] = str(Path(pytest.__file__).with_name("__main__.py"))
