"""model.keras in a bundle: the model's architecture and compile settings, without its values.

The values of every model and optimizer variable are in weights.npz (by variable path), which both replay routes
read: the rebuild route sets them into the model it rebuilt, the re-entry route into the objects the program built.
Keras's own archive would store them a second time (``model.weights.h5``), doubling the bundle and the write. So a
Keras 3 model is written as a ``.keras`` archive holding only ``config.json`` and ``metadata.json``, as Keras
writes them, and rebuilt from that config (`model_from_config`, safe mode) before weights.npz is set into it.

A model whose layers keep state outside variables (assets: a StringLookup's vocabulary, a TextVectorization) and a
tf_keras model are saved whole by Keras (`model.save`), as every bundle was before; their archives hold
``model.weights.h5`` and are loaded by Keras (`holds_values`). Imports Keras only when called.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import zipfile
from pathlib import Path
from typing import Any

from pyadapter import safejson
from pyadapter.capture import integrity

CONFIG_MEMBER = "config.json"
METADATA_MEMBER = "metadata.json"
VALUE_MEMBERS = frozenset({"model.weights.h5", "model.weights.npz"})


def _object_sharing() -> Any:
    """Keras's scope that keeps objects shared between layers shared through (de)serialization, as its own save
    and load use it (an internal name: without it, sharing is lost, which only matters for shared objects)."""
    try:
        from keras.src.saving.serialization_lib import ObjectSharingScope
    except ImportError:
        return contextlib.nullcontext()
    return ObjectSharingScope()


def needs_whole_save(model: Any) -> bool:
    """True for a model Keras must save whole: a layer keeps assets outside its variables (lookup vocabularies)."""
    try:
        layers = list(model._flatten_layers(include_self=False))
    except (AttributeError, TypeError):
        return True  # not a Keras 3 model we know how to walk: let Keras save it
    for layer in layers:
        save_assets = getattr(type(layer), "save_assets", None)
        if save_assets is not None:
            return True
    return False


def save(model: Any, path: Path, keras_line: str) -> None:
    """Writes model.keras: config only (Keras 3, values in weights.npz) or, for a tf_keras model or one with
    assets, Keras's whole archive. Raises what Keras raises for a model it cannot serialize."""
    if keras_line == "tf_keras" or needs_whole_save(model):
        model.save(path)
        return
    import keras

    with _object_sharing():
        config = keras.saving.serialize_keras_object(model)
    config_json = json.dumps(config)
    metadata = {
        "keras_version": keras.__version__,
        "date_saved": datetime.datetime.now().strftime("%Y-%m-%d@%H:%M:%S"),
        "values": "weights.npz",  # read by nothing in Keras; says where the values went
    }
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as archive:
        archive.writestr(METADATA_MEMBER, json.dumps(metadata))
        archive.writestr(CONFIG_MEMBER, config_json)


def holds_values(path: Path) -> bool:
    """True when the archive carries the values itself (Keras's whole save: bundles before this one, tf_keras,
    assets); False for a config-only archive, whose values are in weights.npz."""
    try:
        with zipfile.ZipFile(path) as archive:
            return any(name in VALUE_MEMBERS for name in archive.namelist())
    except integrity.ZIP_ERRORS:
        return True  # let Keras's loader say what is wrong with it


def read_config(path: Path) -> dict[str, Any]:
    """config.json of a config-only archive, bounded in size and nesting; ValueError (one line) otherwise."""
    try:
        with zipfile.ZipFile(path) as archive:
            info = archive.getinfo(CONFIG_MEMBER)
            if info.file_size > integrity.MAX_JSON_MEMBER_BYTES:
                raise ValueError("config.json is implausibly large")
            with archive.open(info) as member:
                config = safejson.loads(member.read(integrity.MAX_JSON_MEMBER_BYTES + 1))
    except (*integrity.ZIP_ERRORS, KeyError) as error:
        raise ValueError(f"config.json cannot be read ({integrity.first_line(error)})") from None
    if not isinstance(config, dict):
        raise ValueError("config.json is not a JSON object")
    return config


def model_from_config(config: dict[str, Any], custom_objects: dict[str, Any] | None, compile: bool) -> Any:
    """The model a config-only archive describes, built and (with `compile`) compiled as Keras's loader would,
    in safe mode (a Lambda's bytecode is refused); its variables hold fresh values until weights.npz is set."""
    import keras

    if not compile:
        config = dict(config, compile_config=None)
    with _object_sharing(), safe_mode():
        return keras.saving.deserialize_keras_object(config, custom_objects=custom_objects, safe_mode=True)


def safe_mode() -> Any:
    """Keras's safe mode forced for a bundle's archive: a program that calls
    ``keras.config.enable_unsafe_deserialization()`` (to load its own Lambda models) turns it off globally, and the
    global wins over ``safe_mode=True`` (a Lambda's bytecode in the bundle's config.json then ran)."""
    from keras.src.saving.serialization_lib import SafeModeScope

    return SafeModeScope(True)
