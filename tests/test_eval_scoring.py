"""`nanlens eval`'s scoring of causes, on hand-built findings (no TensorFlow): the cause marked with `# CAUSE:`
against the findings' ``cause.kind``, and the line to change (``cause.change``) taking over from the origin."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

from pyadapter.evaluate.corpus import discover
from pyadapter.evaluate.report import markdown_table, progress_line
from pyadapter.evaluate.runner import Outcome
from pyadapter.evaluate.scoring import score, summarize


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(textwrap.dedent(text))
    return path


def program(tmp_path: Path, name: str, cause: str | None, origin_line: int = 3):
    lines = ['"""Zoo: a program."""'] + ([f"# CAUSE: {cause}"] if cause else [])
    while len(lines) < origin_line - 1:
        lines.append("x = 1")
    lines.append("y = 2  # ORIGIN")
    write(tmp_path, f"{name}.py", "\n".join(lines) + "\n")
    (found,) = discover(tmp_path, [name])
    return found


def findings(path: Path, line: int, cause: dict[str, Any] | None = None) -> dict[str, Any]:
    document: dict[str, Any] = {
        "schema": "nanlens.findings/1",
        "origin": {
            "file": str(path),
            "line": line,
            "role": "origin",
            "op": {"type": "MatMul", "name": "m"},
            "message": "MatMul produced inf",
        },
    }
    if cause is not None:
        document["cause"] = cause
    return document


def test_cause_markers_are_read_from_the_program(tmp_path: Path) -> None:
    write(tmp_path, "zoo_a.py", '"""Zoo: a."""\n# CAUSE: divergence: the learning rate\nx = 1  # ORIGIN\n')
    write(tmp_path, "zoo_none.py", "x = 1  # ORIGIN\n")  # no cause: the line is still scored
    write(tmp_path, "zoo_two.py", "# CAUSE: op\n# CAUSE: data\nx = 1  # ORIGIN\n")
    write(tmp_path, "zoo_odd.py", "# CAUSE: cosmic-rays\nx = 1  # ORIGIN\n")
    write(
        tmp_path,
        "zoo_doc.py",
        '"""Mentions # CAUSE: data in a docstring, not a marker."""\nx = 1  # ORIGIN\n',
    )
    programs = {p.name: p for p in discover(tmp_path)}
    assert programs["zoo_a"].cause == "divergence" and programs["zoo_a"].problem is None
    assert programs["zoo_none"].cause is None and programs["zoo_none"].problem is None
    assert programs["zoo_doc"].cause is None and programs["zoo_doc"].problem is None
    assert programs["zoo_two"].problem and "2 # CAUSE: markers" in programs["zoo_two"].problem
    assert programs["zoo_odd"].problem and "cosmic-rays is not a cause kind" in programs["zoo_odd"].problem


def test_findings_without_a_cause_score_unknown_and_the_origin_line(tmp_path: Path) -> None:
    prog = program(tmp_path, "zoo_op", "op")
    row = score(Outcome(prog, findings=findings(prog.path, 3)))
    assert (row.cause, row.cause_hit, row.exact_line, row.line_from) == ("unknown", False, True, "origin")


def test_a_cause_kind_is_compared_with_the_marked_one(tmp_path: Path) -> None:
    prog = program(tmp_path, "zoo_op", "op")
    hit = score(
        Outcome(prog, findings=findings(prog.path, 3, {"kind": "op", "summary": "Log of 0", "change": None}))
    )
    assert (hit.cause, hit.cause_hit, hit.exact_line, hit.line_from) == ("op", True, True, "origin")
    wrong = score(
        Outcome(prog, findings=findings(prog.path, 3, {"kind": "data", "summary": "", "change": None}))
    )
    assert (wrong.cause, wrong.cause_hit, wrong.exact_line) == ("data", False, True)


def test_the_line_to_change_overrides_the_origin_line(tmp_path: Path) -> None:
    prog = program(tmp_path, "zoo_lr", "divergence", origin_line=5)
    change = {"file": str(prog.path), "line": 5}
    # The origin is the overflowing op at line 2; the cause's change is the optimizer at the marked line 5.
    row = score(
        Outcome(
            prog,
            findings=findings(
                prog.path,
                2,
                {"kind": "divergence", "summary": "loss x10/step", "evidence": {}, "change": change},
            ),
        )
    )
    assert (row.found.line, row.line_from, row.exact_line, row.cause_hit) == (5, "cause.change", True, True)
    assert row.op == "MatMul"  # the op still comes from the origin
    # A change elsewhere is a line miss even though the origin sat on the marked line.
    elsewhere = score(
        Outcome(
            prog,
            findings=findings(
                prog.path,
                5,
                {"kind": "divergence", "summary": "", "change": {"file": str(prog.path), "line": 4}},
            ),
        )
    )
    assert (elsewhere.found.line, elsewhere.exact_line) == (4, False)
    # A notebook change names its cell: a different cell is a miss.
    cell = score(
        Outcome(
            prog,
            findings=findings(
                prog.path, 2, {"kind": "divergence", "summary": "", "change": {**change, "cell": 3}}
            ),
        )
    )
    assert cell.found.cell == 3 and not cell.exact_line


def test_a_malformed_change_falls_back_to_the_origin(tmp_path: Path) -> None:
    prog = program(tmp_path, "zoo_lr", "divergence")
    row = score(
        Outcome(prog, findings=findings(prog.path, 3, {"kind": "divergence", "change": {"line": "x"}}))
    )
    assert (row.found.line, row.line_from, row.exact_line) == (3, "origin", True)


def test_no_findings_is_a_cause_miss_and_no_marker_is_not_scored(tmp_path: Path) -> None:
    failed = program(tmp_path, "zoo_failed", "data")
    row = score(Outcome(failed, error="the program exited with 2"))
    assert row.cause is None and row.cause_hit is None
    unmarked = program(tmp_path, "zoo_unmarked", None)
    row2 = score(Outcome(unmarked, findings=findings(unmarked.path, 3, {"kind": "op"})))
    assert (row2.cause, row2.cause_hit, row2.exact_line) == ("op", None, True)
    summary = summarize([row, row2])
    assert (summary.cause_programs, summary.cause_hit) == (1, 0)  # the failed program counts as a cause miss


def test_summary_counts_cause_accuracy_per_class_and_prints_it(tmp_path: Path) -> None:
    rows = []
    for name, marked, kind, line in [
        ("zoo_d1", "divergence", "divergence", 3),  # both right
        ("zoo_d2", "divergence", "op", 3),  # line right, cause wrong
        ("zoo_p1", "precision", "precision", 2),  # cause right, line wrong
        ("zoo_o1", "op", None, 3),  # no cause in the findings: unknown
    ]:
        prog = program(tmp_path, name, marked)
        cause = {"kind": kind, "summary": f"{kind} summary", "change": None} if kind else None
        rows.append(score(Outcome(prog, findings=findings(prog.path, line, cause))))
    summary = summarize(rows)
    assert (summary.programs, summary.exact_line, summary.cause_programs, summary.cause_hit) == (4, 3, 4, 2)
    assert list(summary.by_cause) == ["op", "divergence", "precision"]  # in CAUSE_KINDS order
    assert summary.by_cause["divergence"] == {"programs": 2, "cause_hit": 1, "exact_line": 2, "both": 1}
    assert summary.by_cause["precision"] == {"programs": 1, "cause_hit": 1, "exact_line": 0, "both": 0}
    assert summary.by_cause["op"] == {"programs": 1, "cause_hit": 0, "exact_line": 1, "both": 0}
    document = summary.to_json()
    assert (document["cause_hit"], document["cause_programs"], document["cause_fraction"]) == (2, 4, 0.5)
    row_json = rows[1].to_json(tmp_path)
    assert row_json["cause"] == {
        "expected": "divergence",
        "found": "op",
        "hit": False,
        "summary": "op summary",
    }
    assert row_json["line_from"] == "origin"
    table = markdown_table(rows, summary, tmp_path)
    assert "| exact | cause marked | cause found | cause right |" in table.splitlines()[0]
    assert "| divergence | op | **no** |" in table.splitlines()[3]
    assert "Cause: 2/4 (50%)." in table
    assert "| divergence | 2 | 1 | 2 | 1 |" in table
    line = progress_line(2, 4, rows[1], tmp_path)
    assert "cause op (marked divergence)" in line
    assert progress_line(1, 4, rows[0], tmp_path).endswith("cause divergence (0.0 s)")
