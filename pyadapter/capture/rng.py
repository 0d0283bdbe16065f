"""Random-number-generator states for a bundle: capture them at a failing step, restore them for a replay.

Keras SeedGenerator states (dropout and other random layers) are read inside the guarded step *before* the step
runs, so a replay draws the same masks. Python `random`, NumPy and the TF global generator live outside the
compiled step and are captured when the bundle is written.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np

NOTE = (
    "keras_seed_generators: before the failing step; python_random, numpy, tf_global_generator, "
    "keras_global_seed_generator: when the bundle was written"
)


def seed_generator_states(model: Any) -> list[tuple[str, Any]]:
    """(variable path, state variable) of every Keras SeedGenerator reachable from `model`'s layers."""
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
    return found


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
    try:
        from keras.src.backend.common import global_state
        from keras.src.random.seed_generator import GLOBAL_SEED_GENERATOR
    except ImportError:
        return None
    generator = global_state.get_global_attribute(GLOBAL_SEED_GENERATOR)
    if generator is None:
        return None
    return [int(v) for v in np.asarray(generator.state.numpy()).reshape(-1)]


def capture(seed_states_before: dict[str, np.ndarray] | None) -> dict[str, Any]:
    """The JSON-able RNG section of a manifest."""
    version, internal, gauss_next = random.getstate()
    kind, keys, pos, has_gauss, cached = np.random.get_state()
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
    keras_global = states.get("keras_global_seed_generator")
    if keras_global is not None:
        import keras

        generator = keras.random.SeedGenerator(0)
        generator.state.assign(np.array(keras_global, dtype=generator.state.dtype))
        from keras.src.backend.common import global_state
        from keras.src.random.seed_generator import GLOBAL_SEED_GENERATOR

        global_state.set_global_attribute(GLOBAL_SEED_GENERATOR, generator)
    saved = states.get("keras_seed_generators") or {}
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
