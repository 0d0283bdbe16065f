"""`nanlens eval` as its users meet it: the zoo is well formed, the corpus rules hold, bad programs become rows
with an error (never a crash), and TensorFlow's check_numerics second opinion is read correctly."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pyadapter.evaluate.checknumerics import run_check_numerics
from pyadapter.evaluate.corpus import discover

ZOO = Path(__file__).parent / "zoo"
NANLENS = [sys.executable, "-m", "pyadapter"]


def nanlens(*args: str, cwd: Path | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*NANLENS, *args], capture_output=True, text=True, timeout=timeout, cwd=cwd)


def marker_lines(path: Path, cell: int | None = None) -> list[int]:
    """Lines holding a `# ORIGIN` comment, found independently of the evaluator's tokenizer (in a notebook: the
    lines within cell `cell`)."""
    return [n for n, text in enumerate(source_lines(path, cell), 1) if re.search(r"#\s*ORIGIN\b", text)]


def source_lines(path: Path, cell: int | None = None) -> list[str]:
    if cell is None:
        return path.read_text().splitlines()
    source = json.loads(path.read_text())["cells"][cell]["source"]
    return (source if isinstance(source, str) else "".join(source)).splitlines()


# ---------------------------------------------------------------------------------------------------------------
# The zoo itself


def test_zoo_has_at_least_twenty_programs_each_marking_exactly_one_line() -> None:
    programs = discover(ZOO)
    assert len(programs) >= 20
    for program in programs:
        assert program.problem is None, f"{program.name}: {program.problem}"
        assert program.origin is not None
        lines = marker_lines(program.origin.file, program.origin.cell)
        assert program.origin.line in lines, f"{program.name}: marker not on a `# ORIGIN` line"
        code = source_lines(program.origin.file, program.origin.cell)[program.origin.line - 1]
        assert code.split("#")[0].strip(), f"{program.name}: the ORIGIN comment must sit on a line of code"


def test_every_zoo_program_names_its_cause_and_every_cause_has_programs() -> None:
    from pyadapter.evaluate.corpus import CAUSE_KINDS

    programs = discover(ZOO)
    for program in programs:
        assert program.cause in CAUSE_KINDS, f"{program.name}: no valid `# CAUSE:` marker"
    counts = {kind: sum(p.cause == kind for p in programs) for kind in CAUSE_KINDS}
    assert counts["divergence"] >= 3 and counts["data"] >= 3 and counts["precision"] >= 2, counts
    for path in ZOO.rglob("*.py"):  # causes live in programs, never in helper modules
        # (.nanlens/ holds what runs write beside a notebook, e.g. its cells as files for a replay: not modules)
        if path.parent != ZOO and not any(part.startswith(".") for part in path.relative_to(ZOO).parts):
            assert "# CAUSE:" not in path.read_text(), path


def test_every_zoo_module_has_at_most_one_marker_and_helpers_are_not_programs() -> None:
    names = {p.name for p in discover(ZOO)}
    for path in ZOO.rglob("*.py"):
        assert len(marker_lines(path)) <= 1, path
        if path.parent != ZOO or not path.name.startswith("zoo_"):
            assert path.stem not in names  # helper modules (zoolib/) are never run as programs


def test_loss_in_another_module_is_marked_in_that_module() -> None:
    (program,) = discover(ZOO, ["zoo_loss_in_other_module"])
    assert program.origin is not None
    assert program.origin.file == (ZOO / "zoolib" / "divergences.py").resolve()


def test_programs_that_train_with_nanguard_are_captured_and_the_rest_dumped() -> None:
    for program in discover(ZOO):
        source = program.path.read_text()
        uses_guard = "NanGuard(" in source or "guard_step(" in source
        assert program.method == ("capture" if uses_guard else "dump"), program.name


def test_zoo_readme_lists_every_program() -> None:
    readme = (ZOO / "README.md").read_text()
    for program in discover(ZOO):
        assert program.name in readme, f"tests/zoo/README.md does not list {program.name}"


# ---------------------------------------------------------------------------------------------------------------
# Corpus rules, on a zoo of our own


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


def test_markers_are_comments_only_and_must_be_unique(tmp_path: Path) -> None:
    write(
        tmp_path,
        "zoo_docstring.py",
        '''\
        """Mentions # ORIGIN in a docstring, which is not a marker."""
        x = 1  # ORIGIN: this is the one
        ''',
    )
    write(tmp_path, "zoo_none.py", "x = 1\n")
    write(tmp_path, "zoo_two.py", "x = 1  # ORIGIN\ny = 2  # ORIGIN\n")
    write(tmp_path, "helper.py", "z = 3  # ORIGIN\n")  # not a program: no zoo_ prefix
    programs = {p.name: p for p in discover(tmp_path)}
    assert set(programs) == {"zoo_docstring", "zoo_none", "zoo_two"}
    assert programs["zoo_docstring"].origin is not None and programs["zoo_docstring"].origin.line == 2
    assert programs["zoo_none"].problem and "no # ORIGIN" in programs["zoo_none"].problem
    assert programs["zoo_two"].problem and "2 # ORIGIN markers" in programs["zoo_two"].problem


def test_only_selects_by_glob_or_substring(tmp_path: Path) -> None:
    for name in ("zoo_sqrt_a.py", "zoo_sqrt_b.py", "zoo_log.py"):
        write(tmp_path, name, "x = 1  # ORIGIN\n")
    assert [p.name for p in discover(tmp_path, ["zoo_sqrt*"])] == ["zoo_sqrt_a", "zoo_sqrt_b"]
    assert [p.name for p in discover(tmp_path, ["log,sqrt_b"])] == ["zoo_log", "zoo_sqrt_b"]
    assert [p.name for p in discover(tmp_path, ["log", "sqrt_a"])] == ["zoo_log", "zoo_sqrt_a"]


def test_user_errors_are_one_line(tmp_path: Path) -> None:
    missing = nanlens("eval", str(tmp_path / "nowhere"))
    assert missing.returncode == 2
    assert (
        missing.stderr.strip().startswith("nanlens: error:") and len(missing.stderr.strip().splitlines()) == 1
    )
    write(tmp_path, "zoo_a.py", "x = 1  # ORIGIN\n")
    unmatched = nanlens("eval", str(tmp_path), "--only", "nothing_like_it")
    assert unmatched.returncode == 2 and "matches --only" in unmatched.stderr


def test_failing_programs_are_rows_with_errors_not_a_crash(tmp_path: Path) -> None:
    # Three ways a program can fail, none of which needs TensorFlow: it hangs, it crashes, it has no marker.
    write(
        tmp_path,
        "zoo_hangs.py",
        """\
        import time
        time.sleep(120)  # ORIGIN
        NanGuard("captures")
        """,
    )
    write(
        tmp_path,
        "zoo_crashes.py",
        """\
        raise RuntimeError("boom")  # ORIGIN
        NanGuard("captures")
        """,
    )
    write(tmp_path, "zoo_unmarked.py", "x = 1\n")
    result = nanlens("eval", str(tmp_path), "--json", "--no-check-numerics", "--timeout", "5", "--jobs", "2")
    assert result.returncode == 1, result.stderr  # 1: some rows have errors
    document = json.loads(result.stdout)
    rows = {row["program"]: row for row in document["rows"]}
    assert document["programs"] == 3 and document["exact_line"] == 0
    assert "timed out after 5 s" in rows["zoo_hangs"]["error"]
    assert "RuntimeError: boom" in rows["zoo_crashes"]["error"]
    assert "no # ORIGIN" in rows["zoo_unmarked"]["error"]
    assert all(row["found"] is None for row in rows.values())
    # One progress line per program on stderr.
    assert len([line for line in result.stderr.splitlines() if re.match(r"\[\d/3\] zoo_", line)]) == 3


def test_without_json_prints_a_markdown_table(tmp_path: Path) -> None:
    write(tmp_path, "zoo_unmarked.py", "x = 1\n")  # scored without running: it has no marker
    result = nanlens("eval", str(tmp_path), "--no-check-numerics")
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    assert lines[0].startswith("| program | bug | marked (ORIGIN) | found |")
    assert lines[2].startswith("| zoo_unmarked") and "error: no # ORIGIN" in lines[2]
    assert "Exact line: 0/1" in result.stdout
    # --markdown writes the same table next to the JSON.
    table_file = tmp_path / "table.md"
    with_json = nanlens("eval", str(tmp_path), "--no-check-numerics", "--json", "--markdown", str(table_file))
    assert json.loads(with_json.stdout)["programs"] == 1
    assert table_file.read_text().strip() == result.stdout.strip()


# ---------------------------------------------------------------------------------------------------------------
# The check_numerics second opinion, with real TensorFlow


@pytest.mark.slow
def test_check_numerics_names_the_first_bad_op_and_its_line(tmp_path: Path) -> None:
    program = write(
        tmp_path,
        "zoo_graph_log.py",
        """\
        import tensorflow as tf

        @tf.function
        def f(x):
            y = tf.math.sqrt(x)
            return tf.math.log(y)  # ORIGIN

        f(tf.constant([1.0, 0.0]))
        """,
    )
    result = run_check_numerics(program, tmp_path, timeout=120)
    assert result.error is None
    assert (result.op_type, result.op_kind) == ("Log", "graph")
    assert (Path(result.file or ""), result.line) == (program.resolve(), 6)


@pytest.mark.slow
def test_check_numerics_reads_eager_ops_from_the_traceback(tmp_path: Path) -> None:
    program = write(
        tmp_path,
        "zoo_eager_div.py",
        """\
        import tensorflow as tf

        a = tf.constant([1.0, 2.0])
        b = a / tf.constant([1.0, 0.0])  # ORIGIN
        """,
    )
    result = run_check_numerics(program, tmp_path, timeout=120)
    assert (result.op_type, result.op_kind) == ("RealDiv", "eagerly-executing")
    assert (Path(result.file or ""), result.line) == (program.resolve(), 4)


@pytest.mark.slow
def test_check_numerics_line_inside_a_tf_data_map_function(tmp_path: Path) -> None:
    program = write(
        tmp_path,
        "zoo_data_log.py",
        """\
        import tensorflow as tf

        def preprocess(x):
            return tf.math.log(x)  # ORIGIN

        for value in tf.data.Dataset.from_tensor_slices([1.0, 0.0]).map(preprocess):
            pass
        """,
    )
    result = run_check_numerics(program, tmp_path, timeout=120)
    assert result.op_type == "Log"
    assert (Path(result.file or ""), result.line) == (program.resolve(), 4)


@pytest.mark.slow
def test_check_numerics_reports_nothing_for_a_finite_program(tmp_path: Path) -> None:
    program = write(
        tmp_path,
        "zoo_fine.py",
        """\
        import tensorflow as tf

        print(float(tf.reduce_sum(tf.constant([1.0, 2.0]))))  # ORIGIN
        """,
    )
    result = run_check_numerics(program, tmp_path, timeout=120)
    assert result.op_type is None and result.error is None
