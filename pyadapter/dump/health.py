"""Debug-tensor layouts of the tfdbg2 health modes, and reading them into TensorHealth.

Each graph trace / eager execution carries, per tensor, a float64 vector whose layout depends on the
tensor_debug_mode (tensorflow/core/kernels/debug_ops.h, DebugNumericSummaryV2):

- CURT_HEALTH:    [tensor_id, any_inf_or_nan]
- CONCISE_HEALTH: [tensor_id, size, n_neg_inf, n_pos_inf, n_nan]
- FULL_HEALTH:    [tensor_id, device_id, dtype, rank, size, n_neg_inf, n_pos_inf, n_nan, n_neg, n_zero, n_pos]
- SHAPE:          [tensor_id, dtype, rank, size, dim0 .. dim5]

The non-finite counts sit at fixed offsets, so a trace is classified finite / non-finite by comparing a
few raw bytes against zeros (0.0 is all-zero bytes in IEEE 754) without decoding anything.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pyadapter.findings import TensorHealth

# tensorflow/core/framework/types.proto: the floating dtypes a health summary can describe, plus a few.
DTYPE_NAMES = {
    1: "float32",
    2: "float64",
    3: "int32",
    4: "uint8",
    5: "int16",
    6: "int8",
    9: "int64",
    10: "bool",
    14: "bfloat16",
    17: "uint16",
    19: "float16",
    22: "uint32",
    23: "uint64",
    24: "float8_e5m2",
    25: "float8_e4m3fn",
}

_TENSOR_PROTO_DOUBLE_VECTOR = b"\x08\x02\x12\x04\x12\x02\x08"  # dtype=DT_DOUBLE, shape=[k] (k follows)


@dataclass(frozen=True)
class HealthLayout:
    """Where things are in one mode's float64 vector."""

    mode: str
    length: int
    # Byte range [lo, hi) of the tensor content that is all zeros exactly when the tensor is finite.
    nonfinite_bytes: tuple[int, int] | None

    @property
    def marker(self) -> bytes:
        """Serialized TensorProto prefix that precedes the vector's bytes (dtype, shape, content tag+len).

        TensorFlow serializes fields in number order, so a health TensorProto always starts this way when
        it uses tensor_content; the bytes cannot occur earlier in a trace record (op names and ids are
        printable text, and the marker is longer than the only binary field before it, wall_time).
        """
        return _TENSOR_PROTO_DOUBLE_VECTOR + bytes([self.length]) + b'"' + bytes([self.length * 8])

    @property
    def reports_health(self) -> bool:
        return self.nonfinite_bytes is not None

    def is_finite(self, values: Sequence[float]) -> bool:
        if self.nonfinite_bytes is None or len(values) < self.length:
            return True
        lo, hi = self.nonfinite_bytes
        return not any(values[i] for i in range(lo // 8, hi // 8))

    def health(self, values: Sequence[float]) -> TensorHealth | None:
        """TensorHealth from one vector; None if the vector is too short for the layout."""
        if len(values) < self.length:
            return None
        v = [int(x) if x == x and abs(x) < 1e18 else 0 for x in values]
        if self.mode == "FULL_HEALTH":
            return TensorHealth(
                dtype=DTYPE_NAMES.get(v[2], f"dtype{v[2]}"),
                rank=v[3],
                size=v[4],
                neg_inf=v[5],
                pos_inf=v[6],
                nan=v[7],
                neg=v[8],
                zero=v[9],
                pos=v[10],
            )
        if self.mode == "CONCISE_HEALTH":
            return TensorHealth(size=v[1], neg_inf=v[2], pos_inf=v[3], nan=v[4])
        if self.mode == "CURT_HEALTH":
            # CURT_HEALTH only says "some NaN or Inf"; it is counted as one NaN so is_finite stays right.
            return TensorHealth(nan=1 if v[1] else 0)
        if self.mode == "SHAPE":
            rank = v[2]
            dims = v[4:10]
            shape = dims[:rank] if rank <= 6 else None
            return TensorHealth(
                dtype=DTYPE_NAMES.get(v[1], f"dtype{v[1]}"), rank=rank, size=v[3], shape=shape
            )
        return None


LAYOUTS: dict[str, HealthLayout] = {
    "CURT_HEALTH": HealthLayout("CURT_HEALTH", 2, (8, 16)),
    "CONCISE_HEALTH": HealthLayout("CONCISE_HEALTH", 5, (16, 40)),
    "FULL_HEALTH": HealthLayout("FULL_HEALTH", 11, (40, 64)),
    "SHAPE": HealthLayout("SHAPE", 10, None),
}


def layout_for(mode: str) -> HealthLayout | None:
    return LAYOUTS.get(mode)


def tensor_id_of(values: Sequence[float]) -> int | None:
    """The tensor id in slot 0 (graph traces); -1 (eager) and garbage come back as None."""
    if not values:
        return None
    first = values[0]
    if first != first or first < 0 or first > 2**53:
        return None
    return int(first)
