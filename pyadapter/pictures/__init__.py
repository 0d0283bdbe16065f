"""Pictures of a NaN: the op graph around the origin and the health timeline (plus a bundle's loss history).

Public API (no TensorFlow imported):

- ``build_picture_model(dump_dir, *, findings=None, source_kind=None, source_path=None, label=None,
  loss_history=None, failing_step=None, hops_back=3, hops_forward=2) -> PictureModel``
- ``bundle_loss_history(bundle_path) -> (rows | None, failing step | None)``
- ``PictureModel.to_json()``: the ``nanlens.pictures/1`` document the webviews and ``nanlens report`` draw.
"""

from __future__ import annotations

from pyadapter.pictures.build import build_picture_model, bundle_loss_history
from pyadapter.pictures.model import SCHEMA, PictureEdge, PictureModel, PictureNode, Timeline, TimelinePoint

__all__ = [
    "SCHEMA",
    "PictureEdge",
    "PictureModel",
    "PictureNode",
    "Timeline",
    "TimelinePoint",
    "build_picture_model",
    "bundle_loss_history",
]
