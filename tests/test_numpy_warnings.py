"""NumPy's floating-point warnings, recorded as Python shows them (``import pyadapter`` installs the recorder), and
read back from a bundle's manifest as data. No TensorFlow."""

from __future__ import annotations

import warnings

import numpy as np

import pyadapter  # noqa: F401 - installs the recorder, as a program's import does
from pyadapter import numpy_warnings


def _line_of(text: str) -> int:
    source = open(__file__, encoding="utf-8").read().splitlines()
    return next(i for i, line in enumerate(source, 1) if text in line)


def test_the_line_numpy_warned_at_is_recorded_and_still_shown() -> None:
    prices = np.array([20.0, 0.0, 21.0])
    with warnings.catch_warnings(record=True) as shown:
        # pytest records warnings the same way around each test, with Python's own showwarning: the recorder goes
        # on top of whatever shows them, as at `import pyadapter` in a program.
        numpy_warnings.install()
        warnings.simplefilter("always")
        np.log(prices[1:] / prices[:-1])  # numpy-warns-here
    found = [w for w in numpy_warnings.recorded() if w.file == __file__]
    line = _line_of("# numpy-warns-here")
    assert (line, "divide by zero encountered in divide") in [(w.line, w.message) for w in found], found
    assert all(w.makes == "inf" for w in found if w.message.startswith("divide by zero"))
    assert [str(w.message) for w in shown] == [
        "divide by zero encountered in divide",
        "divide by zero encountered in log",
    ], "shown exactly as before"


def test_a_warning_from_inside_numpy_is_put_on_the_programs_line_that_called_it() -> None:
    """``np.mean`` of an empty selection warns "Mean of empty slice" from numpy's own files; the line to change is
    the program's call."""
    with warnings.catch_warnings(record=True):
        numpy_warnings.install()
        warnings.simplefilter("always")
        np.mean(np.zeros((0, 3)), axis=0)  # empty-mean-here
    line = _line_of("# empty-mean-here")
    found = [
        (w.line, w.makes)
        for w in numpy_warnings.recorded()
        if w.file == __file__ and "empty slice" in w.message
    ]
    assert found == [(line, "nan")], numpy_warnings.recorded()


def test_a_silenced_warning_is_not_recorded() -> None:
    before = len(numpy_warnings.recorded())
    with warnings.catch_warnings(record=True):
        numpy_warnings.install()
        with np.errstate(invalid="ignore"):
            np.sqrt(np.array([-1.0]))
        warnings.simplefilter("ignore")
        np.zeros(1) / np.zeros(1)
    assert len(numpy_warnings.recorded()) == before


def test_a_manifest_entry_that_is_not_well_formed_is_dropped() -> None:
    good = {"file": "/p/train.py", "line": 20, "message": "invalid value encountered in divide"}
    read = numpy_warnings.read(
        [
            good,
            {"file": "/p/train.py", "line": True, "message": "invalid value encountered in divide"},
            {"file": 3, "line": 2, "message": "divide by zero encountered in log"},
            {"file": "/p/x.py", "line": 2, "message": "__import__('os').system('x')"},
            "not a dict",
        ]
    )
    assert [w.to_json() for w in read] == [good]
    assert read[0].makes == "nan"
    assert numpy_warnings.read({"file": "/p/train.py"}) == []
