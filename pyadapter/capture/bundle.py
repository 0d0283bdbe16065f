"""The capture bundle's names in one import, for code written against the single module it once was.

The bundle lives in three modules, one concern each: ``bundle_format`` (file names, `BundleError`, the atomic
`BundleWriter` and stale-partial cleanup), ``writer`` (`write_bundle`: a failing step's manifest and files, publish
to URL folders) and ``reader`` (`CaptureBundle`: open and verify, with the checks in ``integrity``). Rebuilding
Keras/TensorFlow objects from a bundle (the model, a checkpoint, the step function, RNG states) is
``pyadapter.replay.restore``. New code imports from those modules; nothing in pyadapter imports this one.
"""

from __future__ import annotations

from pyadapter.capture.bundle_format import (
    BATCH_FILE,
    CHECKPOINT_DIR,
    CHECKPOINT_PREFIX,
    FINDINGS_FILE,
    FORMAT,
    KIND_FIT,
    KIND_LOOP,
    MANIFEST,
    MAX_MANIFEST_BYTES,
    MODEL_FILE,
    PARTIAL_SUFFIX,
    WEIGHTS_FILE,
    BundleError,
    BundleWriter,
    clean_stale_partials,
    is_bundle_file,
    parse_manifest,
    read_manifest_bytes,
)
from pyadapter.capture.reader import CaptureBundle

__all__ = [
    "BATCH_FILE",
    "CHECKPOINT_DIR",
    "CHECKPOINT_PREFIX",
    "FINDINGS_FILE",
    "FORMAT",
    "KIND_FIT",
    "KIND_LOOP",
    "MANIFEST",
    "MAX_MANIFEST_BYTES",
    "MODEL_FILE",
    "PARTIAL_SUFFIX",
    "WEIGHTS_FILE",
    "BundleError",
    "BundleWriter",
    "CaptureBundle",
    "clean_stale_partials",
    "is_bundle_file",
    "parse_manifest",
    "read_manifest_bytes",
]
