"""Where the bad record came from, for data read from files through ``tf.data`` (issue 16): NanGuard records the
pipeline's files in the bundle (``data_source``) and ``nanlens locate`` names the file and line/record:

- the zoo's ``zoo_csv_nan_field`` (``make_csv_dataset`` of a CSV in a temporary folder, gone when locate runs):
  ``turbine.csv line 517: field 'rotor_rpm' is 'nan'``, from the record found when captured;
- tests/programs/tfrecord_shuffle.py (``TFRecordDataset`` + ``shuffle(seed)``, the file in the working folder):
  the record whose values are the captured row, searched in the file at locate time;
- tests/programs/csv_shuffled.py (``make_csv_dataset`` shuffling, ``weather.csv`` in the working folder): the
  line, and the hover and the change Warning link to it;
- a bundle naming a file outside the folder NaN Lens runs in does not make it read that file;
- a malformed ``data_source`` makes the bundle refuse to load, in one line.
"""

from __future__ import annotations

import ast
import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
from test_cause_programs import marked_line, train_and_locate

from pyadapter.capture.bundle import BundleError, CaptureBundle
from pyadapter.capture.sourcerecord import DataSource, SourceFile, check
from pyadapter.cause import attach_cause, cause_of
from pyadapter.cause.provenance import data_provenance
from pyadapter.findings import Findings

HERE = Path(__file__).parent
PROGRAMS = HERE / "programs"
ZOO = HERE / "zoo"


# ---- no TensorFlow: the search and the folder rule on real files ----


def _weather_rows(n: int = 300) -> list[list[str]]:
    rng = np.random.default_rng(3)
    table = rng.uniform(0.0, 100.0, size=(n, 5)).round(2)
    rows = [[f"{v:.2f}" for v in row] for row in table]
    rows[41][1] = "nan"  # two rows with a missing reading: the batch row's values tell them apart
    rows[207][2] = "nan"
    return rows


def _write_csv(path: Path, rows: list[list[str]]) -> None:
    path.write_text("pressure,humidity,wind,temperature,rain\n" + "\n".join(",".join(r) for r in rows) + "\n")


def _batch_holding(rows: list[list[str]], index: int, at: int = 5) -> tuple[np.ndarray, np.ndarray]:
    """A batch as make_csv_dataset + a normalizing pack would feed it: scaled features, the label as read."""
    values = np.array([[float(v) for v in r] for r in rows], dtype=np.float32)
    x = (values[:16, :4] - 50.0) / 50.0
    y = values[:16, 4:]
    x[at], y[at] = (values[index, :4] - 50.0) / 50.0, values[index, 4:]
    return x, y


def test_a_csv_row_is_found_by_its_values_among_several_bad_rows(tmp_path: Path) -> None:
    rows = _weather_rows()
    _write_csv(tmp_path / "weather.csv", rows)
    source = DataSource(
        files=[SourceFile(str(tmp_path / "weather.csv"), "csv", header=True)], order="shuffled"
    )
    where = data_provenance(
        _batch_holding(rows, 207),
        None,
        batch_index=3,
        epoch=0,
        batch_size=None,
        shuffled=None,
        cwd=None,
        data_source=source,
        folders=[str(tmp_path)],
    )
    assert where is not None
    assert where["element"] == "x[5, 2] = nan"
    assert (where["line"], where["row"], where["field"], where["field_text"]) == (209, 207, "wind", "nan")
    assert where["openable"] is True and where["found_by"] == "values in the file"
    assert where["sentence"] == "weather.csv line 209: field 'wind' is 'nan'"


def test_shards_with_no_non_finite_record_are_named_in_one_note(tmp_path: Path) -> None:
    """A pipeline over three shards whose NaN a map made (a py_function's 0 / 0): the note said "no record of the
    file holds a non-finite value" three times, naming no file (s40d p5). One note names the three."""
    rows = [[f"{v:.2f}" for v in row] for row in np.random.default_rng(4).uniform(0, 100, (40, 5))]
    for name in ("part0.csv", "part1.csv", "part2.csv"):
        _write_csv(tmp_path / name, rows)
    source = DataSource(
        files=[
            SourceFile(str(tmp_path / n), "csv", header=True) for n in ("part0.csv", "part1.csv", "part2.csv")
        ],
        order="interleaved",
    )
    x = np.ones((16, 4), np.float32)
    x[5, 2] = np.nan
    where = data_provenance(
        (x, np.zeros((16, 1), np.float32)),
        None,
        batch_index=3,
        epoch=0,
        batch_size=None,
        shuffled=None,
        cwd=None,
        data_source=source,
        folders=[str(tmp_path)],
    )
    assert where is not None
    assert "no record of part0.csv, part1.csv or part2.csv holds a non-finite value" in where["note"], where
    assert where["note"].count("holds a non-finite value") == 1, where["note"]


def test_a_bundle_naming_a_file_outside_the_folder_does_not_make_it_read(tmp_path: Path) -> None:
    rows = _weather_rows()
    outside, inside = tmp_path / "elsewhere", tmp_path / "project"
    outside.mkdir()
    inside.mkdir()
    _write_csv(outside / "weather.csv", rows)  # holds the row: reading it would find line 209
    (inside / "weather.csv").symlink_to(outside / "weather.csv")  # a link inside does not make it inside
    batch = _batch_holding(rows, 207)
    for named in (outside / "weather.csv", inside / "weather.csv"):
        source = DataSource(files=[SourceFile(str(named), "csv", header=True)], order="shuffled")
        where = data_provenance(
            batch,
            None,
            batch_index=3,
            epoch=0,
            batch_size=None,
            shuffled=None,
            cwd=None,
            data_source=source,
            folders=[str(inside)],
        )
        assert where is not None and "file" not in where and "line" not in where, where
        assert "weather.csv is not read" in where["note"]


def test_a_malformed_data_source_is_named_in_one_line() -> None:
    assert check({"files": [{"path": "/d/a.csv", "kind": "csv"}], "order": "in order"}) is None
    assert check({"files": [{"path": "/d/a.csv", "kind": "parquet"}]}) == (
        "'files' is not a list of {path, kind} objects"
    )
    assert check({"files": [], "found": {"file": "/d/a.csv", "kind": "csv", "record": -1}}) is not None
    assert check({"files": [], "shuffle_seed": "seven"}) == "'shuffle_seed' is not a list of integers"


# ---- real training under NanGuard, then `nanlens locate` as a user runs it ----


@pytest.mark.slow
def test_zoo_csv_nan_field_names_the_file_and_line(tmp_path: Path) -> None:
    program = ZOO / "zoo_csv_nan_field.py"
    findings = train_and_locate(tmp_path, program)
    cause = findings["cause"]
    assert cause["kind"] == "data" and cause["change"]["line"] == marked_line(program, "ORIGIN")
    where = cause["provenance"]
    # np.savetxt wrote a header line, then data row 515 (table[515, 1] = nan) on line 517.
    assert Path(where["file"]).name == "turbine.csv" and where["line"] == 517 and where["row"] == 515
    assert where["field"] == "rotor_rpm" and where["field_text"] == "nan"
    assert (
        where["order"] == "in order"
    )  # make_csv_dataset(shuffle=False): the position agrees with the values
    # The program's temporary folder is gone: the record found while the process still had the file.
    assert where["found_by"] == "values when captured" and where["openable"] is False
    assert "turbine.csv is not read: it no longer exists" in where["note"]
    assert where["text"].split(",")[1] == "nan"
    assert "turbine.csv line 517: field 'rotor_rpm' is 'nan'" in cause["summary"]


@pytest.mark.slow
def test_tfrecord_with_shuffle_names_the_record(tmp_path: Path) -> None:
    program = PROGRAMS / "tfrecord_shuffle.py"
    findings = train_and_locate(tmp_path, program, "captures")
    cause = findings["cause"]
    assert cause["kind"] == "data" and cause["change"]["line"] == marked_line(program, "CHANGE")
    where = cause["provenance"]
    assert where["file"] == str(tmp_path / "sensors.tfrecord") and where["kind"] == "tfrecord"
    assert where["order"] == "shuffled" and where["found_by"] == "values in the file" and where["openable"]
    # The program wrote inf into feature 2 of record 613 and nan into feature 0 of record 880: the record named
    # must be the one whose bad feature is the captured batch element's column.
    column = int(where["element"].split(",")[1].split("]")[0])
    expected = {2: (613, "features[2]", "inf"), 0: (880, "features[0]", "nan")}[column]
    assert (where["record"], where["field"], where["field_text"]) == expected
    assert f"sensors.tfrecord record {expected[0]}" in cause["summary"]

    # The same bundle, located from another folder: the file is outside it and is not read; the answer is the
    # record found when the bundle was captured, not linked.
    bundle = next((tmp_path / "captures").iterdir())
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    again = Findings.from_json({k: v for k, v in findings.items() if k != "cause"})
    attach_cause(again, bundle, folders=[str(elsewhere)])
    moved = cause_of(again)
    assert moved is not None and moved.provenance is not None
    assert moved.provenance["found_by"] == "values when captured" and moved.provenance["openable"] is False
    assert moved.provenance["record"] == expected[0]

    # Without the capture's record, nothing names the file: it was not read.
    manifest_path = bundle / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["data_source"]["found"] = None
    manifest_path.write_text(json.dumps(manifest))
    attach_cause(again, bundle, folders=[str(elsewhere)])
    unread = cause_of(again)
    assert unread is not None and unread.provenance is not None and "record" not in unread.provenance
    assert "sensors.tfrecord is not read" in unread.provenance["note"]

    manifest["data_source"]["files"] = "sensors.tfrecord"
    manifest_path.write_text(json.dumps(manifest))
    with pytest.raises(BundleError, match="manifest field 'data_source' 'files' is not a list"):
        CaptureBundle.load(bundle)


@pytest.mark.slow
def test_shuffled_csv_in_the_folder_is_linked_from_hover_and_warning(tmp_path: Path) -> None:
    from pyadapter.server import render
    from pyadapter.server.state import SourceRecord, SourceRef

    rng = np.random.default_rng(8)
    table = np.column_stack([rng.uniform(20.0, 80.0, size=(1500, 4)), rng.gamma(1.0, 3.0, 1500)]).round(2)
    rows = [[f"{v:.2f}" for v in row] for row in table]
    rows[1042][0] = "nan"  # a pressure reading that never arrived
    (tmp_path / "weather.csv").write_text(
        "pressure,humidity,wind,temperature,rain\n" + "\n".join(",".join(r) for r in rows) + "\n"
    )
    program = PROGRAMS / "csv_shuffled.py"
    findings = train_and_locate(tmp_path, program, "captures")
    cause = findings["cause"]
    assert cause["kind"] == "data" and cause["change"]["line"] == marked_line(program, "CHANGE")
    where = cause["provenance"]
    assert where["file"] == str(tmp_path / "weather.csv") and where["order"] == "shuffled"
    assert (where["line"], where["row"], where["field"]) == (1044, 1042, "pressure")
    assert where["openable"] is True and where["found_by"] == "values in the file"
    assert math.isnan(float(where["text"].split(",")[0]))

    shutil.copy(program, tmp_path / program.name)
    record = SourceRecord(
        SourceRef("bundle", str(next((tmp_path / "captures").iterdir()))),
        status="ok",
        findings=Findings.from_json(findings),
    )
    link = f"{(tmp_path / 'weather.csv').as_uri()}#L1044"
    hover = render.cause_markdown(record, on_change_line=True)
    assert f"[weather.csv line 1044]({link}): field 'pressure' is 'nan'" in hover
    placed = render.change_diagnostic(record, render.no_line_text, lambda file, cell: Path(file).as_uri())
    assert placed is not None
    related = placed[1].related_information or []
    bad = [r for r in related if r.location.uri == (tmp_path / "weather.csv").as_uri()]
    assert len(bad) == 1 and bad[0].location.range.start.line == 1043
    assert bad[0].message == "the bad record: weather.csv line 1044: field 'pressure' is 'nan'"


# ---- the capture side on real tf.data pipelines (no training: the batch is read from the dataset itself) ----


def _first_bad_batch(dataset) -> tuple[int, tuple[np.ndarray, np.ndarray]]:
    for index, (x, y) in enumerate(dataset):
        if not np.isfinite(x.numpy()).all():
            return index, (x.numpy(), y.numpy())
    raise AssertionError("no batch holds the bad row")


def _decode(line):
    import tensorflow as tf

    fields = tf.io.decode_csv(line, [[0.0]] * 5)
    return tf.stack(fields[:4]) / 100.0, tf.stack(fields[4:])


def test_the_pipeline_order_decides_the_position_or_says_why_not(tmp_path: Path) -> None:
    import tensorflow as tf

    from pyadapter.capture import datasource

    rows = _weather_rows()
    _write_csv(tmp_path / "weather.csv", rows)
    path = str(tmp_path / "weather.csv")

    # TextLineDataset, header skipped, in order: position and values agree (row 41 is line 43 of the file).
    plain = tf.data.TextLineDataset(path).skip(1).map(_decode).batch(8)
    index, batch = _first_bad_batch(plain)
    source = datasource.describe(plain, batch, index)
    assert source is not None and source.order == "in order" and source.note is None
    assert [(f.path, f.kind) for f in source.files] == [(path, "text")]
    assert source.position is not None and source.found is not None
    assert (source.position.record, source.position.line) == (
        42,
        43,
    )  # TextLineDataset counts the header line
    assert (source.found.record, source.found.line, source.found.field) == (42, 43, "humidity")

    # make_csv_dataset shuffling with a seed: no position; the values find the line anyway.
    shuffled = tf.data.experimental.make_csv_dataset(
        path, batch_size=8, label_name="rain", num_epochs=1, shuffle_seed=4, column_defaults=[0.0] * 5
    ).map(lambda f, y: (tf.stack([f[c] for c in ("pressure", "humidity", "wind", "temperature")], -1), y))
    index, batch = _first_bad_batch(shuffled)
    source = datasource.describe(shuffled, batch, index)
    assert source is not None and source.order == "shuffled" and source.position is None
    assert source.files[0].kind == "csv" and source.files[0].header is True
    assert source.found is not None and source.found.line in (43, 209)  # whichever bad row came first
    assert source.found.field == ("humidity" if source.found.line == 43 else "wind")

    # Two files interleaved, or a filter: not decidable, said so.
    _write_csv(tmp_path / "more.csv", _weather_rows()[:50])
    both = tf.data.TextLineDataset([path, str(tmp_path / "more.csv")]).skip(1)
    both = both.filter(lambda line: tf.strings.length(line) > 0).map(_decode).batch(8)
    index, batch = _first_bad_batch(both)
    source = datasource.describe(both, batch, index)
    assert source is not None and source.order == "interleaved" and len(source.files) == 2
    assert "reads 2 files" in (source.note or "") and "drops records" in (source.note or "")


@pytest.mark.slow
def test_guard_step_records_the_loops_text_file(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    rng = np.random.default_rng(2)
    table = rng.normal(size=(300, 4)).round(3)
    lines = ["a,b,c,target", *(",".join(f"{v:.3f}" for v in row) for row in table)]
    fields = lines[151].split(",")
    fields[1] = "inf"  # data row 150, line 152 of the file
    lines[151] = ",".join(fields)
    (tmp_path / "readings.txt").write_text("\n".join(lines) + "\n")
    program = tmp_path / "loop_textline.py"
    shutil.copy(PROGRAMS / program.name, program)
    done = subprocess.run(
        [sys.executable, str(program), "captures"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"),
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    bundle = next((tmp_path / "captures").iterdir())
    source = DataSource.from_json(CaptureBundle.load(bundle).manifest["data_source"])
    assert source is not None and [f.kind for f in source.files] == ["text"]
    assert source.files[0].path == str(tmp_path / "readings.txt")
    assert source.order == "shuffled" and source.position is None
    assert source.found is not None and (source.found.line, source.found.field_text) == (152, "inf")
    assert source.found.field == "b"  # the header line names the column


def test_tfrecords_with_the_same_label_are_told_apart_by_where_their_nan_sits(tmp_path: Path) -> None:
    """An ETL wrote two records with a NaN feature, both labelled 2; the pipeline normalises the features, so no
    finite value of the batch row is in the file. The note said "2 records hold non-finite values and the batch
    row's values do not tell them apart", though the row is NaN at feature 0 and only one record is."""
    tf = pytest.importorskip("tensorflow")
    path = tmp_path / "sensors.tfrecord"
    rng = np.random.default_rng(0)
    table = rng.uniform(5.0, 15.0, size=(40, 4)).astype(np.float32)
    labels = rng.integers(0, 4, size=40)
    table[11, 2], labels[11] = np.nan, 2
    table[29, 0], labels[29] = np.nan, 2
    with tf.io.TFRecordWriter(str(path)) as writer:
        for features, label in zip(table, labels, strict=True):
            example = tf.train.Example(
                features=tf.train.Features(
                    feature={
                        "features": tf.train.Feature(float_list=tf.train.FloatList(value=features)),
                        "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(label)])),
                    }
                )
            )
            writer.write(example.SerializeToString())
    x = (table[:8] - 10.0) / 3.0
    x[3] = (table[29] - 10.0) / 3.0
    y = labels[:8].copy()
    y[3] = 2
    where = data_provenance(
        (x, y),
        None,
        batch_index=5,
        epoch=0,
        batch_size=None,
        shuffled=None,
        cwd=None,
        data_source=DataSource(files=[SourceFile(str(path), "tfrecord")], order="shuffled"),
        folders=[str(tmp_path)],
    )
    assert where is not None and where.get("record") == 29, where
    assert where["sentence"].startswith("sensors.tfrecord record 29: feature 'features[0]' is nan"), where


def test_a_csv_named_by_a_variable_is_read_for_the_bad_row(tmp_path: Path) -> None:
    """``path = "weather.csv"`` then ``np.genfromtxt(path, ...)``: only a file name written on the reading line was
    read, so the bad row's file and line were not named."""
    from pyadapter.cause.change_line import reading_site
    from pyadapter.cause.sources import user_sources

    rows = _weather_rows()
    _write_csv(tmp_path / "weather.csv", rows)
    program = tmp_path / "train.py"
    program.write_text(
        'import numpy as np\npath = "weather.csv"\ntable = np.genfromtxt(path, delimiter=",", skip_header=1)\n'
    )
    units = user_sources(Findings("bundle", "b", None), str(program))
    site = reading_site(units, None, None, None)
    assert site is not None and site.name == "genfromtxt"
    values = np.array([[float(v) for v in r] for r in rows], dtype=np.float32)
    x, y = values[:16, :4].copy(), values[:16, 4:].copy()
    x[5], y[5] = values[207, :4], values[207, 4:]
    where = data_provenance(
        (x, y),
        site,
        batch_index=0,
        epoch=0,
        batch_size=None,
        shuffled=None,
        cwd=str(tmp_path),
        folders=[str(tmp_path)],
    )
    assert where is not None and Path(where["file"]).name == "weather.csv" and where["line"] == 209, where


def test_a_read_file_holds_missing_fields_or_none(tmp_path):
    """A CSV read to its end with no empty or NA field is clean (False); one empty field, or a "NaN" text, is
    missing (True); a header's empty index name is not a field; a file not found is unknown (None)."""
    from pyadapter.cause import change_line, provenance
    from pyadapter.cause.sources import SourceUnit

    code = 'import pandas as pd\ndata = pd.read_csv("table.csv")\n'
    script = tmp_path / "train.py"
    script.write_text(code)
    unit = SourceUnit(file=str(script), cell=None, text=code, tree=ast.parse(code))
    site = change_line.reading_site([unit], None, None, None)
    assert site is not None
    folders = [str(tmp_path)]
    assert provenance.read_file_holds_missing(site, str(tmp_path), folders) is None
    (tmp_path / "table.csv").write_text(",a,b\n0,1.5,2\n1,3,4\n")
    assert provenance.read_file_holds_missing(site, str(tmp_path), folders) is False
    (tmp_path / "table.csv").write_text(",a,b\n0,1.5,2\n1,,4\n")
    assert provenance.read_file_holds_missing(site, str(tmp_path), folders) is True
    (tmp_path / "table.csv").write_text("a,b\n1.5,NaN\n")
    assert provenance.read_file_holds_missing(site, str(tmp_path), folders) is True
