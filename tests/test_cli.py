"""The CLI as a user meets it: `nanlens --help`, `python -m pyadapter --help`, every verb's --help."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pyadapter.cli import VERBS

VENV_BIN = Path(sys.executable).parent


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=120)


def test_console_script_help_lists_every_verb() -> None:
    nanlens = VENV_BIN / "nanlens"
    assert nanlens.exists(), "set-up must install the console script into the venv"
    result = run(str(nanlens), "--help")
    assert result.returncode == 0, result.stderr
    for verb in VERBS:
        assert verb in result.stdout


def test_module_entry_point_help() -> None:
    result = run(sys.executable, "-m", "pyadapter", "--help")
    assert result.returncode == 0, result.stderr
    assert "usage: nanlens" in result.stdout


@pytest.mark.parametrize("verb", VERBS)
def test_every_verb_has_help_and_does_not_import_tensorflow(verb: str) -> None:
    # --help must be instant: a verb's module may not import TensorFlow, nor numpy (0.1 s), at import time.
    code = (
        "import sys\n"
        "from pyadapter.cli import main\n"
        "try:\n"
        f"    main([{verb!r}, '--help'])\n"
        "except SystemExit as e:\n"
        "    assert e.code == 0, e.code\n"
        "assert 'tensorflow' not in sys.modules, 'tensorflow imported by --help'\n"
        "assert 'numpy' not in sys.modules, 'numpy imported by --help'\n"
    )
    result = run(sys.executable, "-c", code)
    assert result.returncode == 0, result.stderr
    assert f"nanlens {verb}" in result.stdout


def test_no_verb_prints_usage_and_fails() -> None:
    result = run(sys.executable, "-m", "pyadapter")
    assert result.returncode != 0
    assert "usage: nanlens" in result.stdout


def test_unknown_verb_is_one_clear_error() -> None:
    result = run(sys.executable, "-m", "pyadapter", "frobnicate")
    assert result.returncode == 2
    assert "invalid choice" in result.stderr
    assert "Traceback" not in result.stderr
