"""Which line of the user's file built the Keras layer that made an op with no frame of the user's own: by the op's
name scopes, read against the calls in the file (no TensorFlow)."""

from __future__ import annotations

from pathlib import Path

from pyadapter.dump.layer_site import layer_site

PROGRAM = """\
import keras
from keras import layers

inputs = keras.Input(shape=(4,))
x = layers.Dense(32, activation="relu")(inputs)
x = layers.Dense(32, activation="relu", name="hidden")(x)
x = layers.LayerNormalization()(x)
rate = layers.Dense(1, activation="exponential")(x)
model = keras.Model(inputs, rate, name="claims")
model.compile(optimizer="sgd", loss=keras.losses.Poisson())
model.fit(x, y)
"""


def test_a_layer_is_found_by_its_name_its_class_or_its_activation(tmp_path: Path) -> None:
    program = tmp_path / "train.py"
    program.write_text(PROGRAM)
    site = layer_site("claims/hidden/Relu", "Relu", str(program))
    assert site is not None and (site.line, site.what) == (6, "the line that builds its Dense layer")
    # Keras 3's train step scopes it with a call count: Dense(name="hidden") is "hidden_1" there. A named layer
    # matched nothing (mixed precision's Dense(10, name="dense_logits"), keras.io's guide) and the fit line was marked.
    assert getattr(layer_site("claims_1/hidden_1/Relu", "Relu", str(program)), "line", None) == 6
    # One LayerNormalization in the file, whatever its automatic name's number.
    assert getattr(layer_site("claims/layer_normalization_3/Rsqrt", "Rsqrt", str(program)), "line", None) == 7
    # Three Dense calls: the one whose activation the op computes.
    assert getattr(layer_site("claims/dense_5/Exp", "Exp", str(program)), "line", None) == 8
    # The same in the train step, where the automatic name carries a call count too ("dense_2_1" for the third
    # Dense): that matched no class ("dense2") and the fit line was marked.
    assert getattr(layer_site("claims_1/dense_2_1/Exp", "Exp", str(program)), "line", None) == 8
    # The compiled loss's op stays at the fit line, which tells a program's fits apart (a resumed run).
    assert layer_site("compile_loss/poisson/Log", "Log", str(program)) is None


def test_no_line_when_the_file_does_not_name_the_layer_once(tmp_path: Path) -> None:
    program = tmp_path / "train.py"
    program.write_text(PROGRAM)
    assert layer_site("claims/dense_2/MatMul", "MatMul", str(program)) is None  # three Dense, no activation
    assert layer_site("claims/conv2d/Conv2D", "Conv2D", str(program)) is None  # none built in this file
    assert layer_site("adam/Sqrt", "Sqrt", str(program)) is None  # the optimizer's op: no layer scope
    assert layer_site("claims/hidden/Relu", "Relu", str(tmp_path / "missing.py")) is None
    broken = tmp_path / "broken.py"
    broken.write_text("model.fit(x, y\n")
    assert layer_site("claims/hidden/Relu", "Relu", str(broken)) is None
