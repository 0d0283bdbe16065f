"""The zoo evaluation's fast subset, as CI runs it: `nanlens eval tests/zoo --only ... --json` on four
representative programs, each of which must be located at exactly its `# ORIGIN` line.

The four cover the product's main paths: a Keras fit bug found in the forward pass of a loss in another module,
a NaN that exists only in the backward pass, a custom loop guarded with guard_step, and an unguarded eager loop
run with `nanlens run --dump`. The full run (all programs, with its misses explained) is in tests/zoo/README.md.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ZOO = Path(__file__).parent / "zoo"
REPRESENTATIVE = {
    "zoo_loss_in_other_module": ("capture", ZOO / "zoolib" / "divergences.py"),
    "zoo_sqrt_backward_only": ("capture", ZOO / "zoo_sqrt_backward_only.py"),
    "zoo_custom_training_loop": ("capture", ZOO / "zoo_custom_training_loop.py"),
    "zoo_eager_loop": ("dump", ZOO / "zoo_eager_loop.py"),
}


def origin_line(path: Path) -> int:
    """The marked line, read straight from the source (not through the evaluator)."""
    (line,) = [
        n for n, text in enumerate(path.read_text().splitlines(), 1) if re.search(r"#\s*ORIGIN\b", text)
    ]
    return line


@pytest.fixture(scope="module")
def evaluation() -> tuple[dict, str]:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pyadapter",
            "eval",
            str(ZOO),
            "--only",
            ",".join(REPRESENTATIVE),
            "--json",
            "--jobs",
            "2",
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout), result.stderr


@pytest.mark.slow
def test_representative_programs_are_located_at_their_origin_line(evaluation: tuple[dict, str]) -> None:
    document, _ = evaluation
    rows = {row["program"]: row for row in document["rows"]}
    assert set(rows) == set(REPRESENTATIVE)
    for name, (method, marked_file) in REPRESENTATIVE.items():
        row = rows[name]
        assert row["error"] is None, f"{name}: {row['error']}"
        assert row["method"] == method
        assert Path(row["expected"]["path"]) == marked_file.resolve()
        assert row["expected"]["line"] == origin_line(marked_file)
        assert Path(row["found"]["path"]) == marked_file.resolve(), f"{name}: found {row['found']}"
        assert row["found"]["line"] == row["expected"]["line"], f"{name}: found {row['found']}"
        assert row["exact_line"] is True
    assert document["programs"] == len(REPRESENTATIVE)
    assert document["exact_line"] == len(REPRESENTATIVE)


@pytest.mark.slow
def test_backward_only_nan_is_reported_as_a_backward_origin(evaluation: tuple[dict, str]) -> None:
    document, _ = evaluation
    row = next(r for r in document["rows"] if r["program"] == "zoo_sqrt_backward_only")
    assert row["role"] == "backward-origin"
    assert row["op"] == "SqrtGrad"


@pytest.mark.slow
def test_captured_steps_reproduce_in_graph_and_eager_replay(evaluation: tuple[dict, str]) -> None:
    document, _ = evaluation
    for row in document["rows"]:
        if row["method"] == "capture":
            assert row["reproduced"] == {"graph": True, "eager": True}, row["program"]
        else:
            assert row["reproduced"] == {"graph": None, "eager": None}, row["program"]  # a dump has no replay
    assert document["reproduced"] == sum(row["method"] == "capture" for row in document["rows"])


@pytest.mark.slow
def test_check_numerics_is_compared_where_it_names_an_op(evaluation: tuple[dict, str]) -> None:
    document, _ = evaluation
    for row in document["rows"]:
        check = row["check_numerics"]
        assert check["op"], f"{row['program']}: check_numerics named no op"
        assert check["agree"] == (check["op"] == row["op"])
    # The loss in another module: TensorFlow's first alarm is the same Log op we mark.
    other = next(r for r in document["rows"] if r["program"] == "zoo_loss_in_other_module")
    assert other["check_numerics"]["agree"] is True
    assert document["check_numerics_agree"] == sum(
        r["check_numerics"]["agree"] is True for r in document["rows"]
    )


@pytest.mark.slow
def test_one_progress_line_per_program_on_stderr(evaluation: tuple[dict, str]) -> None:
    _, stderr = evaluation
    progress = [line for line in stderr.splitlines() if re.match(r"\[\d+/4\] zoo_\w+: ", line)]
    assert len(progress) == 4
    assert all(": exact " in line for line in progress)
