"""Random-number-generator states for a bundle: capture them at a failing step, restore them for a replay.

Keras SeedGenerator states (dropout and other random layers) are read inside the guarded step *before* the step
runs, so a replay draws the same masks. Python `random`, NumPy and the TF global generator live outside the
compiled step and are captured when the bundle is written.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

NOTE = (
    "keras_seed_generators (keras.random's global one among them when the step drew from it): before the failing "
    "step; python_random, numpy, tf_global_generator, keras_global_seed_generator: when the bundle was written"
)

# Where `keras_seed_generators` holds Keras's global SeedGenerator (the one ``keras.random.normal(shape)`` and the
# other ``keras.random.*`` functions draw from when given no seed), when the failing step drew from it.
KERAS_GLOBAL_PATH = "keras.random global SeedGenerator (seed=None)"


def seed_generator_states(model: Any, with_global: bool = False) -> list[tuple[str, Any]]:
    """(variable path, state variable) of every Keras SeedGenerator reachable from `model`'s layers; with
    `with_global`, Keras's global SeedGenerator too (`KERAS_GLOBAL_PATH`), when it exists."""
    found: list[tuple[str, Any]] = []
    seen: set[int] = set()
    layers = model._flatten_layers() if hasattr(model, "_flatten_layers") else []
    for layer in layers:
        for generator in getattr(layer, "_seed_generators", []) or []:
            state = getattr(generator, "state", None)
            if state is None or id(state) in seen:
                continue
            seen.add(id(state))
            found.append((getattr(state, "path", None) or state.name, state))
    generator = _keras_global_seed_generator() if with_global else None
    if generator is not None and id(generator.state) not in seen:
        found.append((KERAS_GLOBAL_PATH, generator.state))
    return found


def _keras_global_seed_generator() -> Any:
    try:
        from keras.src.backend.common import global_state
        from keras.src.random.seed_generator import GLOBAL_SEED_GENERATOR
    except ImportError:
        return None
    return global_state.get_global_attribute(GLOBAL_SEED_GENERATOR)


def keras_global_seed_generator_sharer() -> Callable[[], None]:
    """A call that makes this thread's Keras global SeedGenerator (Keras keeps one per thread) the one of the thread
    that runs it: a step re-run in a thread of its own then draws ``keras.random.*(seed=None)`` as training did."""
    generator = _keras_global_seed_generator()

    def share() -> None:
        if generator is None:
            return
        from keras.src.backend.common import global_state
        from keras.src.random.seed_generator import GLOBAL_SEED_GENERATOR

        global_state.set_global_attribute(GLOBAL_SEED_GENERATOR, generator)

    return share


@dataclass
class SeedsBefore:
    """What `states_before_step` found: (path, state read before the step) per seed generator, and whether the step
    made Keras's global SeedGenerator in this trace (its caller then traces the step again before the next call)."""

    states: list[tuple[str, Any]] = field(default_factory=list)
    global_made_by_step: bool = False


@contextlib.contextmanager
def states_before_step(seeds: list[tuple[str, Any]]) -> Iterator[SeedsBefore]:
    """Around a guarded step (traced, or run eagerly): the states of `seeds` ((path, state variable) of the models'
    seed generators, Keras's global one with them: `seed_generator_states(model, with_global=True)`) read before the
    step, for the bundle (a replay then draws the same dropout masks and noise).

    Keras's global SeedGenerator counts when the step draws from it (``keras.random.normal(shape)`` with no seed,
    in a layer or a train_step). Nothing is made here: the step makes it on its first unseeded draw, in its first
    trace, where its state cannot be read before the step. That trace's first call draws from its initial state
    (read while tracing, before anything ran); the caller traces the step again before the next call, which then
    reads the state in the graph."""
    import tensorflow as tf

    existed = _keras_global_seed_generator() is not None
    found = SeedsBefore([(path, tf.identity(tf.convert_to_tensor(variable))) for path, variable in seeds])
    reads = list(found.states)
    yield found
    for (path, variable), (_, read) in zip(seeds, reads, strict=True):
        if path == KERAS_GLOBAL_PATH and not _drawn_from(variable, read):
            found.states = [(p, r) for p, r in found.states if p != KERAS_GLOBAL_PATH]
    generator = None if existed or not tf.inside_function() else _keras_global_seed_generator()
    if generator is not None:
        try:
            with tf.init_scope():
                initial = np.asarray(generator.state.numpy())
        except Exception:  # noqa: BLE001 - not readable while tracing: this call's state stays unknown
            initial = None
        if initial is not None:
            found.states.append((KERAS_GLOBAL_PATH, tf.constant(initial)))
        found.global_made_by_step = True


def _drawn_from(variable: Any, read_before: Any) -> bool:
    """Whether the step used `variable` besides our own read of it: in a traced step, another op of the graph takes
    the variable (a read, an assign, a nested function or loop fed with it); run eagerly, its value changed."""
    import tensorflow as tf

    try:
        if not tf.executing_eagerly():
            tensor = read_before
            while tensor.op.type != "ReadVariableOp" and tensor.op.inputs:
                tensor = tensor.op.inputs[0]
            if tensor.op.type != "ReadVariableOp":
                return False
            return len(tensor.op.inputs[0].consumers()) > 1
        return not np.array_equal(np.asarray(read_before), np.asarray(variable.numpy()))
    except Exception:  # noqa: BLE001 - a variable of another kind (distributed): not kept, as before
        return False


def _tf_global_generator_state() -> dict[str, Any] | None:
    try:
        from tensorflow.python.ops import stateful_random_ops
    except ImportError:
        return None
    generator = getattr(stateful_random_ops, "global_generator", None)
    if generator is None:
        return None  # never created: reading it would create one
    return {"algorithm": int(generator.algorithm), "state": [int(v) for v in generator.state.numpy()]}


def _keras_global_seed_generator_state() -> list[int] | None:
    generator = _keras_global_seed_generator()
    if generator is None:
        return None
    return [int(v) for v in np.asarray(generator.state.numpy()).reshape(-1)]


# Python's and NumPy's global random states (`host_states`).
HostStates = tuple[Any, Any]


def host_states() -> HostStates:
    """Python's and NumPy's global random states now. A guarded step that is plain Python draws from them
    (keras.io's actor-critic: ``np.random.choice(num_actions, p=probs)`` for each action of the episode it plays):
    read before the step, they let a replay play the same episode."""
    return random.getstate(), np.random.get_state()


def set_host_states(states: HostStates) -> None:
    """Put Python's and NumPy's global random states back to `host_states`'s reading."""
    random.setstate(states[0])
    np.random.set_state(states[1])


def capture(
    seed_states_before: dict[str, np.ndarray] | None, host_before: HostStates | None = None
) -> dict[str, Any]:
    """The JSON-able RNG section of a manifest; Python's and NumPy's states from `host_before` (read before the
    failing step) when given, else as they are now."""
    (version, internal, gauss_next), (kind, keys, pos, has_gauss, cached) = host_before or host_states()
    tf_seed = None
    try:
        from tensorflow.python.eager import context

        tf_seed = context.global_seed()
    except ImportError:
        pass
    return {
        "note": NOTE,
        "python_random": {"version": version, "state": list(internal), "gauss_next": gauss_next},
        "numpy": {
            "kind": kind,
            "keys": [int(k) for k in keys],
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached),
        },
        "tf_global_seed": tf_seed,
        "tf_global_generator": _tf_global_generator_state(),
        "keras_global_seed_generator": _keras_global_seed_generator_state(),
        "keras_seed_generators": {
            path: [int(v) for v in np.asarray(state).reshape(-1)]
            for path, state in (seed_states_before or {}).items()
        },
    }


def restore(states: dict[str, Any], model: Any = None) -> None:
    """Puts the generators back in the captured states (those that exist in this process)."""
    py = states.get("python_random")
    if py:
        random.setstate((py["version"], tuple(py["state"]), py["gauss_next"]))
    npy = states.get("numpy")
    if npy:
        np.random.set_state(
            (
                npy["kind"],
                np.array(npy["keys"], dtype=np.uint32),
                npy["pos"],
                npy["has_gauss"],
                npy["cached_gaussian"],
            )
        )
    import tensorflow as tf

    if states.get("tf_global_seed") is not None:
        tf.random.set_seed(states["tf_global_seed"])
    gen = states.get("tf_global_generator")
    if gen:
        tf.random.set_global_generator(tf.random.Generator.from_state(gen["state"], gen["algorithm"]))
    saved = dict(states.get("keras_seed_generators") or {})
    # Its state from before the failing step when the step drew from it, else (older bundles) from after.
    keras_global = saved.pop(KERAS_GLOBAL_PATH, None)
    if keras_global is None:
        keras_global = states.get("keras_global_seed_generator")
    if keras_global is not None:
        import keras

        generator = keras.random.SeedGenerator(0)
        generator.state.assign(np.array(keras_global, dtype=generator.state.dtype))
        from keras.src.backend.common import global_state
        from keras.src.random.seed_generator import GLOBAL_SEED_GENERATOR

        global_state.set_global_attribute(GLOBAL_SEED_GENERATOR, generator)
    if model is not None and saved:
        live = seed_generator_states(model)
        if all(path in saved for path, _ in live):
            pairs = [(variable, saved[path]) for path, variable in live]
        elif len(live) == len(saved):
            # Layer names of subclassed models are counters that differ between processes: match by order.
            pairs = [(variable, state) for (_, variable), state in zip(live, saved.values(), strict=True)]
        else:
            pairs = [(variable, saved[path]) for path, variable in live if path in saved]
        for variable, state in pairs:
            variable.assign(np.array(state, dtype=variable.dtype))
