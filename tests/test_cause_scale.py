"""The scale of a captured fit batch (`pyadapter.cause.scale`): raw features and targets are told apart from
standardized ones, images in 0-255 from images in [0, 1], and a model that normalizes its inputs is not blamed."""

from __future__ import annotations

import numpy as np

from pyadapter.cause.scale import layer_classes, unscaled_inputs, usual_rate

rng = np.random.default_rng(0)


def test_standardized_features_and_small_targets_are_scaled() -> None:
    x = rng.normal(size=(32, 6)).astype("float32")
    y = rng.normal(20.0, 3.0, size=(32,)).astype("float32")  # degrees: RMS 20, under the target limit
    assert unscaled_inputs((x, y), set()) == []


def test_raw_columns_are_named_largest_first_and_the_others_are_not() -> None:
    x = np.column_stack([rng.uniform(0.5, 2, 64), rng.uniform(1e3, 9e3, 64), rng.uniform(20, 90, 64)])
    (found,) = unscaled_inputs((x.astype("float32"), rng.normal(size=64).astype("float32")), None)
    assert found.role == "features" and [c.column for c in found.columns] == [1, 2]
    assert found.describe().startswith("x[:, 1] from 1") and "x[:, 0]" not in found.describe()


def test_raw_pixels_are_one_input_and_scaled_pixels_are_fine() -> None:
    images = rng.integers(0, 256, size=(8, 28, 28, 1)).astype("float32")
    labels = rng.integers(0, 10, size=(8,))
    (found,) = unscaled_inputs((images, labels), {"Sequential", "Conv2D", "Dense"})
    assert found.columns[0].column is None and found.describe().startswith("x from 0 to 255")
    assert unscaled_inputs((images / 255.0, labels), set()) == []


def test_a_normalizing_layer_takes_the_blame_off_the_features_but_not_the_targets() -> None:
    x = rng.uniform(100, 5000, size=(16, 3)).astype("float32")
    prices = rng.uniform(1e5, 9e5, size=(16, 1)).astype("float32")
    found = unscaled_inputs((x, prices), {"Normalization", "Dense"})
    assert [f.role for f in found] == ["targets"] and found[0].describe().startswith("y from ")


def test_dict_inputs_non_finite_batches_and_one_hot_targets() -> None:
    features = {
        "area": rng.uniform(40, 250, size=(16, 1)).astype("float32"),
        "rooms": np.ones((16, 1), "float32"),
    }
    (found,) = unscaled_inputs((features, np.eye(16, 4, dtype="float32")), set())
    assert found.name == "x['area']"
    bad = rng.uniform(100, 500, size=(4, 2)).astype("float32")
    bad[1, 1] = np.nan  # a NaN record is a data cause, not a scale
    assert unscaled_inputs((bad,), set()) == []
    assert unscaled_inputs([bad], set()) == []  # not a fit batch


def test_layer_classes_reads_nested_configs() -> None:
    config = {
        "class_name": "Functional",
        "config": {
            "layers": [
                {"class_name": "InputLayer"},
                {
                    "class_name": "Sequential",
                    "config": {"layers": [{"class_name": "Rescaling"}, {"class_name": "Dense"}]},
                },
            ]
        },
    }
    assert {"Functional", "InputLayer", "Sequential", "Rescaling", "Dense"} == layer_classes(config)


def test_a_rate_above_the_optimizers_default_is_not_usual() -> None:
    assert usual_rate("SGD", 0.01) and usual_rate("Adam", 1e-3) and usual_rate("SGD", None)
    assert not usual_rate("SGD", 0.05) and not usual_rate("Adam", 0.01)


def test_features_in_the_hundreds_come_before_the_rate_and_in_the_tens_after() -> None:
    hundreds = rng.uniform(40, 250, size=(32, 2)).astype("float32")
    tens = rng.uniform(5, 40, size=(32, 2)).astype("float32")
    assert unscaled_inputs((hundreds,), set())[0].first_to_change
    assert not unscaled_inputs((tens,), set())[0].first_to_change


def test_one_huge_record_is_not_a_feature_in_raw_units() -> None:
    """One reading of 1e21 among values of about 1 gives the column an RMS of 1.8e20: a bad record (the rows'
    cause), not a feature to normalize."""
    x = np.ones((8, 2), np.float32)
    x[4, 0] = 1e21
    assert unscaled_inputs((x, np.zeros((8, 1), np.float32)), []) == []
    column = np.ones((8, 1), np.float32)
    column[2] = 1e21
    assert unscaled_inputs((column, np.zeros((8, 1), np.float32)), []) == []
