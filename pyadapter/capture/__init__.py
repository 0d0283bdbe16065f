"""NanGuard and the capture bundle format.

- `pyadapter.capture.guard`: `NanGuard`, the Keras callback (imports TensorFlow); `train_function`: the guarded
  ``model.train_function`` it installs; `keras_state`, `cluster_bundle`: what it saves, its multi-worker bundle.
- `pyadapter.capture.loop`: `guard_step` for custom training loops (imports TensorFlow); `loop_bundle`: its bundle.
- `pyadapter.capture.options`, `policy`: the options both guards take (validated once) and what both do at a
  failing step (stop or skip, max_bundles, the bundle's extras, the failure's message).
- `pyadapter.capture.gate`: the in-graph check-and-gate both use (imports TensorFlow); `gate_checks`,
  `gate_update`, `gate_tf_keras`: its finiteness checks, the gated update, tf_keras's hooks.
- `pyadapter.capture.bundle_format`: file names, `BundleError`, the atomic `BundleWriter` and stale-partial
  cleanup; `writer`: `write_bundle` (manifest, publish); `reader`: `CaptureBundle` (open and verify); `storage`:
  URL capture folders (publish, pull). No TensorFlow at import. Rebuilding Keras/TF objects from a bundle is
  `pyadapter.replay.restore`.
- `pyadapter.capture.integrity`, `structure`, `verdict`, `rng`, `snapshot`: hashes and path checks, nested batches
  in `.npz` without pickle, the non-finite report, RNG states, run facts.

This package's ``__init__`` imports nothing heavy; import the submodule you need (or use ``pyadapter.NanGuard``).
"""
