"""One failure policy for NanGuard and guard_step: the same options refused with the same words, and the same
stop/skip, max_bundles and failure record (pyadapter.capture.options, pyadapter.capture.policy). Fast: no
training."""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import pytest  # noqa: E402

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

from pyadapter import NanGuard, guard_step  # noqa: E402
from pyadapter.capture.options import GuardOptions  # noqa: E402
from pyadapter.capture.policy import Attempt, FailurePolicy  # noqa: E402
from pyadapter.capture.verdict import NonFiniteReport  # noqa: E402


def make_step_guard(**options):
    model = keras.Sequential([keras.layers.Dense(1)])
    return guard_step(lambda x: x, model=model, optimizer=keras.optimizers.SGD(0.1), **options)


@pytest.mark.parametrize(
    ("options", "words"),
    [({"on_nan": "explode"}, "on_nan must be one of"), ({"window": -1}, "window must be 0 (off)")],
)
def test_both_guards_refuse_a_bad_option_with_the_same_words(options, words):
    with pytest.raises(ValueError, match=r"^" + words.replace("(", r"\(").replace(")", r"\)")) as by_callback:
        NanGuard(**options)
    with pytest.raises(ValueError) as by_loop:
        make_step_guard(**options)
    assert str(by_callback.value) == str(by_loop.value)


def test_both_guards_resolve_the_capture_folder_alike(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert NanGuard("captures").capture_dir == make_step_guard(capture_dir="captures").capture_dir
    assert GuardOptions("captures").capture_dir == tmp_path / "captures"


def wrote(path):
    def write(attempt: Attempt) -> None:
        attempt.origin = "model.py:3: Log"
        attempt.path = path

    return write


def test_skip_mode_stops_after_max_consecutive_skips_and_a_healthy_step_resets_the_count(tmp_path):
    policy = FailurePolicy(GuardOptions(tmp_path, on_nan="skip", max_consecutive_skips=3))
    assert [policy.failed(), policy.failed()] == [False, False]
    policy.passed()
    assert [policy.failed(), policy.failed(), policy.failed()] == [False, False, True]
    assert FailurePolicy(GuardOptions(tmp_path, on_nan="stop")).failed() is True
    assert FailurePolicy(GuardOptions(tmp_path, on_nan="skip", max_consecutive_skips=None)).failed() is False


def test_max_bundles_caps_the_bundles_and_a_failed_write_is_said_not_counted(tmp_path):
    policy = FailurePolicy(GuardOptions(tmp_path, on_nan="skip", max_bundles=2))

    def crash(attempt: Attempt) -> None:
        attempt.origin = "model.py:3: Log"
        raise OSError("disk full\nmore detail")

    failed = policy.attempt(crash)
    assert (failed.path, failed.error, failed.origin) == (None, "OSError: disk full", "model.py:3: Log")
    first = policy.attempt(wrote(tmp_path / "run-step1"))
    second = policy.attempt(wrote(tmp_path / "run-step2"))
    third = policy.attempt(wrote(tmp_path / "run-step3"))
    assert (first.path, second.path, third.path) == (tmp_path / "run-step1", tmp_path / "run-step2", None)
    assert third.error is None and policy.bundles_written == 2


def test_the_failure_record_and_message(tmp_path, capsys):
    policy = FailurePolicy(GuardOptions(tmp_path, on_nan="stop"))
    report = NonFiniteReport(loss=True, checked=["loss", "gradients"])
    attempt = policy.attempt(wrote(tmp_path / "run-step7"))
    failure = policy.record(7, 0, 7, report, attempt, stop=True)
    assert policy.failures == [failure] and policy.last_bundle == tmp_path / "run-step7"
    assert (failure.action, failure.origin) == ("stopped", "model.py:3: Log")
    policy.say(failure)
    said = capsys.readouterr().err
    assert "step 7" in said and "training stopped" in said and str(tmp_path / "run-step7") in said
    quiet = FailurePolicy(GuardOptions(tmp_path, verbose=False))
    quiet.say(failure)
    assert capsys.readouterr().err == ""
