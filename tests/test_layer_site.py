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


LOOPED = """\
import keras
from keras import layers

UNITS = (64, 32)
ACTIVATIONS = ["relu", "exponential"]


def block(x, units):
    return layers.Dense(units, activation="relu")(x)


inputs = keras.Input(shape=(4,))
x = layers.Dense(16)(inputs)
for units, act in zip(UNITS, ACTIVATIONS):
    x = layers.Dense(units, activation=act)(x)
x = block(x, 8)
x = block(x, 8)
heads = [layers.Dense(1, activation="softplus") for _ in range(3)]
out = layers.Dense(1)(x)
model = keras.Model(inputs, out)
model.fit(x, y)
"""


def test_a_layer_built_in_a_loop_is_found_by_counting_the_loops_turns(tmp_path: Path) -> None:
    """``for units, act in zip(UNITS, ACTIVATIONS): x = Dense(units, activation=act)(x)`` builds dense_1 and
    dense_2 on one line. The Exp of the loop's second layer was marked at the fit line (three Dense calls, none
    with activation="exponential" written in)."""
    program = tmp_path / "train.py"
    program.write_text(LOOPED)
    line = LOOPED.splitlines().index("    x = layers.Dense(units, activation=act)(x)") + 1
    assert getattr(layer_site("functional_1/dense_2_1/Exp", "Exp", str(program)), "line", None) == line
    assert getattr(layer_site("functional/dense_2/Exp", "Exp", str(program)), "line", None) == line
    # Counting the turns: the block function runs twice (dense_3, dense_4), the comprehension three times (dense_5
    # to dense_7), and the head is dense_8.
    block_line = LOOPED.splitlines().index('    return layers.Dense(units, activation="relu")(x)') + 1
    assert getattr(layer_site("functional/dense_4/Relu", "Relu", str(program)), "line", None) == block_line
    heads_line = (
        LOOPED.splitlines().index('heads = [layers.Dense(1, activation="softplus") for _ in range(3)]') + 1
    )
    assert (
        getattr(layer_site("functional/dense_7/Softplus", "Softplus", str(program)), "line", None)
        == heads_line
    )
    out_line = LOOPED.splitlines().index("out = layers.Dense(1)(x)") + 1
    assert getattr(layer_site("functional/dense_8/MatMul", "MatMul", str(program)), "line", None) == out_line
    # The first Dense has no activation: dense/Exp is not its op; the loop's is the one that may be.
    assert getattr(layer_site("functional/dense/Exp", "Exp", str(program)), "line", None) == line


def test_a_loop_of_unknown_length_leaves_the_count_to_the_activation(tmp_path: Path) -> None:
    program = tmp_path / "train.py"
    program.write_text(
        "import keras\n"
        "cfg = load_config()\n"
        "x = inputs = keras.Input(shape=(4,))\n"
        "for units in cfg.units:\n"
        "    x = keras.layers.Dense(units, activation=cfg.act)(x)\n"
        "x = keras.layers.Dense(1, activation='relu')(x)\n"
        "x = keras.layers.Dense(1)(x)\n"
        "model = keras.Model(inputs, x)\n"
        "model.fit(a, b)\n"
    )
    # How many the loop built is not written: dense_3's MatMul is not told; its Exp is the one call that may make it.
    assert layer_site("functional/dense_3/MatMul", "MatMul", str(program)) is None
    assert getattr(layer_site("functional/dense_3/Exp", "Exp", str(program)), "line", None) == 5


def test_a_keras_op_applied_between_layers_is_found_by_its_function(tmp_path: Path) -> None:
    """``h = ops.log(inputs)`` in a functional model: Keras names its Log ``functional_1/Log``, the model's scope and
    no layer's, and the fit line was marked."""
    program = tmp_path / "train.py"
    program.write_text(
        "import keras\n"
        "import numpy as np\n"
        "from keras import layers, ops\n"
        "x = np.log1p(np.ones((8, 4)))\n"
        "inputs = keras.Input(shape=(4,))\n"
        "h = ops.log(inputs)\n"
        "out = layers.Dense(1)(ops.exp(h) + ops.exp(-h))\n"
        "model = keras.Model(inputs, out)\n"
        "model.fit(x, x)\n"
    )
    site = layer_site("functional_1/Log", "Log", str(program))
    assert site is not None and (site.line, site.what) == (6, "the line that applies its ops.log"), site
    assert layer_site("functional_1/Log1p", "Log1p", str(program)) is None  # numpy's, not the model's
    assert layer_site("functional_1/Exp", "Exp", str(program)) is None  # two ops.exp: not told apart


def test_a_division_of_keras_ops_between_layers_is_found_by_its_operator(tmp_path: Path) -> None:
    """``h = (inputs - ops.mean(...)) / ops.std(...)`` in a functional model: the operator is the model's
    ``functional_1/truediv``, and the fit line was marked (s39e p7). A division of plain numbers (NumPy's) is not
    the model's."""
    program = tmp_path / "train.py"
    program.write_text(
        "import keras\n"
        "from keras import layers, ops\n"
        "x = raw / 255.0\n"
        "inputs = keras.Input(shape=(64, 1))\n"
        "h = (inputs - ops.mean(inputs, axis=1, keepdims=True)) / ops.std(inputs, axis=1, keepdims=True)\n"
        "out = layers.Dense(1)(layers.Flatten()(h))\n"
        "model = keras.Model(inputs, out)\n"
        "model.fit(x, y)\n"
    )
    site = layer_site("functional_1/truediv", "RealDiv", str(program))
    assert site is not None and (site.line, site.what) == (5, "the line that applies its division (/)"), site
    program.write_text(
        program.read_text().replace("x = raw / 255.0", "x = ops.convert_to_tensor(raw) / 255.0")
    )
    assert layer_site("functional_1/truediv", "RealDiv", str(program)) is None  # two: not told apart


def test_a_model_built_in_a_module_beside_the_training_script_is_found_there(tmp_path: Path) -> None:
    """A research repo's layout: ``nets.py`` builds the model, ``run_clf.py`` imports it and fits. Only the fit's
    file was read, and the fit line was marked."""
    (tmp_path / "nets.py").write_text(
        "import keras\n"
        "from keras import layers\n\n\n"
        "def build(units):\n"
        "    inputs = keras.Input(shape=(4,))\n"
        "    x = inputs\n"
        "    for size in (16, 8):\n"
        "        x = layers.Dense(size, activation='relu')(x)\n"
        "    rate = layers.Dense(1, activation='exponential')(x)\n"
        "    return keras.Model(inputs, rate)\n"
    )
    program = tmp_path / "run_clf.py"
    program.write_text(
        "from nets import build\nmodel = build(16)\nmodel.compile('sgd', 'poisson')\nmodel.fit(x, y)\n"
    )
    site = layer_site("functional_1/dense_2_1/Exp", "Exp", str(program))
    assert site is not None and (site.file, site.line) == (str(tmp_path / "nets.py"), 10), site
    assert getattr(layer_site("functional_1/dense_1_1/Relu", "Relu", str(program)), "line", None) == 9


NETS = (
    "import keras\n"
    "from keras import layers\n\n\n"
    "def build():\n"
    "    inputs = keras.Input(shape=(4,))\n"
    "    rate = layers.Dense(1, activation='exponential')(inputs)\n"
    "    return keras.Model(inputs, rate)\n"
)


def test_a_model_built_in_a_module_one_folder_up_or_relative_is_found_there(tmp_path: Path) -> None:
    """``scripts/train.py`` puts the repository root on sys.path and imports ``lib.models``; a package's
    ``train.py`` (run as ``python -m pkg.train``) imports ``.model``: only the script's own folder was read, so the
    layer line (and the feature-scaling advice that needs the model's input) was not found."""
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "models.py").write_text(NETS)
    (tmp_path / "scripts").mkdir()
    script = tmp_path / "scripts" / "train.py"
    script.write_text(
        "import os, sys\nsys.path.insert(0, os.path.join(os.path.dirname(__file__), '..'))\n"
        "from lib.models import build\nmodel = build()\nmodel.fit(x, y)\n"
    )
    site = layer_site("functional_1/dense_1/Exp", "Exp", str(script))
    assert site is not None and (site.file, site.line) == (str(tmp_path / "lib" / "models.py"), 7), site
    package = tmp_path / "src" / "pkg"
    package.mkdir(parents=True)
    (package / "model.py").write_text(NETS)
    train = package / "train.py"
    train.write_text("from .model import build\nmodel = build()\nmodel.fit(x, y)\n")
    site = layer_site("functional_1/dense_1/Exp", "Exp", str(train))
    assert site is not None and (site.file, site.line) == (str(package / "model.py"), 7), site


OUT_OF_ORDER = """\
import keras
from keras import layers


class GAN(keras.Model):
    def __init__(self, latent_dim):
        super().__init__()
        self.latent_dim = latent_dim
        self.discriminator = self.build_discriminator()
        self.generator = self.build_generator()

    def build_generator(self):
        return keras.Sequential(
            [
                keras.Input((self.latent_dim,)),
                layers.Dense(64, activation="relu"),
                layers.Dense(2, activation="tanh"),
            ]
        )

    def build_discriminator(self):
        return keras.Sequential(
            [
                keras.Input((2,)),
                layers.Dense(64, activation="relu"),
                layers.Dense(1),
            ]
        )


gan = GAN(latent_dim=8)
"""


def test_layers_a_class_builds_out_of_source_order_are_numbered_in_the_order_they_run(tmp_path: Path) -> None:
    """A GAN writes ``build_generator`` first but builds the discriminator first in ``__init__``: Keras named the
    discriminator's layers ``dense`` and ``dense_1``, and the generator's ``dense_2`` and ``dense_3``. Counted in
    source order, the discriminator's ``dense_1`` was put on the generator's tanh head."""
    program = tmp_path / "gan.py"
    program.write_text(OUT_OF_ORDER)
    lines = OUT_OF_ORDER.splitlines()
    head = lines.index("                layers.Dense(1),") + 1
    hidden = lines.index('                layers.Dense(64, activation="relu"),', head - 10) + 1
    generator_hidden = lines.index('                layers.Dense(64, activation="relu"),') + 1
    assert getattr(layer_site("sequential/dense_1/MatMul", "MatMul", str(program)), "line", None) == head
    assert getattr(layer_site("sequential/dense/Relu", "Relu", str(program)), "line", None) == hidden
    assert (
        getattr(layer_site("gan/sequential_1/dense_2/Relu", "Relu", str(program)), "line", None)
        == generator_hidden
    )
