"""The manifest's ``data_source``: the files a ``tf.data`` input pipeline read the failing batch from, what its
order allows to say about where a batch row came from, and the record found holding the bad values when captured.

Written by `pyadapter.capture.datasource` (in the training process); read back as data (no TensorFlow, nothing
run): ``DataSource.from_json`` accepts only the shapes below and ``check`` says, in one line, what is wrong with a
tampered field (the bundle loader refuses such a bundle)::

    "data_source": {
      "files": [{"path": "/abs/turbine.csv", "kind": "csv", "compression": "", "header": true,
                 "delimiter": ",", "na_value": ""}],
      "pipeline": ["CSVDatasetV2", "LegacyParallelInterleaveDatasetV2", "BatchDatasetV2", "MapDataset", ...],
      "order": "in order" | "shuffled" | "filtered" | "interleaved" | "repeated" | "unknown",
      "note": "why the position is not decidable (or null)",
      "shuffle_seed": [87654321, 3] | null,
      "position": {"file": ..., "kind": "csv", "record": 515, "line": 517, "found_by": "pipeline position"} | null,
      "found": {"file": ..., "kind": "csv", "record": 515, "line": 517, "field": "rotor_rpm", "field_text": "nan",
                "text": "11.2,nan,...", "found_by": "values when captured"} | null
    }

``record`` counts from 0 among a file's data records (CSV rows after the header, TFRecord records); ``line`` is
the 1-based line of a text file (none for TFRecord).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

MANIFEST_KEY = "data_source"
FILE_KINDS = ("csv", "text", "tfrecord")
ORDERS = ("in order", "shuffled", "filtered", "interleaved", "repeated", "unknown")
TEXT_LIMIT = 240  # characters of a record's text kept (the line shown in a hover)


@dataclass
class SourceFile:
    """One file the pipeline reads: its absolute path, kind and how it is parsed."""

    path: str
    kind: str  # csv (CSVDataset / make_csv_dataset), text (TextLineDataset), tfrecord
    compression: str = ""
    header: bool | None = None  # CSVDataset(header=True): the first line is not a record
    delimiter: str | None = None
    na_value: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "kind": self.kind,
            "compression": self.compression,
            "header": self.header,
            "delimiter": self.delimiter,
            "na_value": self.na_value,
        }

    @classmethod
    def from_json(cls, data: Any) -> SourceFile | None:
        if (
            not isinstance(data, dict)
            or not isinstance(data.get("path"), str)
            or data.get("kind") not in FILE_KINDS
        ):
            return None
        header, delimiter, na_value = data.get("header"), data.get("delimiter"), data.get("na_value")
        return cls(
            path=data["path"],
            kind=data["kind"],
            compression=data["compression"] if isinstance(data.get("compression"), str) else "",
            header=header if isinstance(header, bool) else None,
            delimiter=delimiter if isinstance(delimiter, str) and len(delimiter) == 1 else None,
            na_value=na_value if isinstance(na_value, str) else None,
        )


@dataclass
class RecordPlace:
    """Where a batch row came from: the file, its record (0-based) and line (1-based, text files), the bad field."""

    file: str
    kind: str
    record: int
    line: int | None = None
    field: str | None = None  # the column (CSV with a header, else "column N") or feature key ("features[3]")
    field_text: str | None = None  # the field as written in the file ('nan', '' for an empty field)
    text: str | None = None  # the record's text (a CSV line), cut at TEXT_LIMIT
    found_by: str = ""  # "values in the file", "values when captured", "pipeline position"

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"file": self.file, "kind": self.kind, "record": self.record}
        for key in ("line", "field", "field_text", "text"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        out["found_by"] = self.found_by
        return out

    @classmethod
    def from_json(cls, data: Any) -> RecordPlace | None:
        if (
            not isinstance(data, dict)
            or not isinstance(data.get("file"), str)
            or data.get("kind") not in FILE_KINDS
        ):
            return None
        record, line = data.get("record"), data.get("line")
        if not isinstance(record, int) or not _count(record):
            return None
        if line is not None and not (_count(line) and line >= 1):
            return None
        texts = {key: data.get(key) for key in ("field", "field_text", "text")}
        if any(value is not None and not isinstance(value, str) for value in texts.values()):
            return None
        return cls(
            file=data["file"],
            kind=data["kind"],
            record=record,
            line=line,
            field=texts["field"],
            field_text=texts["field_text"],
            text=texts["text"][:TEXT_LIMIT] if texts["text"] is not None else None,
            found_by=str(data.get("found_by") or ""),
        )


@dataclass
class DataSource:
    """What the manifest's ``data_source`` holds (module docstring)."""

    files: list[SourceFile] = field(default_factory=list)
    pipeline: list[str] = field(default_factory=list)
    order: str = "unknown"
    note: str | None = None
    shuffle_seed: list[int] | None = None
    position: RecordPlace | None = None
    found: RecordPlace | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "files": [f.to_json() for f in self.files],
            "pipeline": list(self.pipeline),
            "order": self.order,
            "note": self.note,
            "shuffle_seed": self.shuffle_seed,
            "position": self.position.to_json() if self.position else None,
            "found": self.found.to_json() if self.found else None,
        }

    @classmethod
    def from_json(cls, data: Any) -> DataSource | None:
        """The record, or None when ``check`` finds it malformed (a bundle is data: no raise)."""
        if check(data) is not None:
            return None
        files = [f for f in (SourceFile.from_json(item) for item in data["files"]) if f is not None]
        seed = data.get("shuffle_seed")
        return cls(
            files=files,
            pipeline=[str(op) for op in data.get("pipeline") or []],
            order=data.get("order") or "unknown",
            note=data.get("note"),
            shuffle_seed=list(seed) if seed is not None else None,
            position=RecordPlace.from_json(data.get("position")),
            found=RecordPlace.from_json(data.get("found")),
        )


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def check(data: Any) -> str | None:
    """What is wrong with a manifest's ``data_source`` value (one phrase), or None when it has the shapes above."""
    if not isinstance(data, dict):
        return "is not an object"
    files = data.get("files")
    if not isinstance(files, list) or any(SourceFile.from_json(item) is None for item in files):
        return "'files' is not a list of {path, kind} objects"
    pipeline = data.get("pipeline")
    if pipeline is not None and not (
        isinstance(pipeline, list) and all(isinstance(op, str) for op in pipeline)
    ):
        return "'pipeline' is not a list of strings"
    if data.get("order") is not None and data.get("order") not in ORDERS:
        return f"'order' is not one of {', '.join(ORDERS)}"
    if data.get("note") is not None and not isinstance(data.get("note"), str):
        return "'note' is not a string"
    seed = data.get("shuffle_seed")
    if seed is not None and not (
        isinstance(seed, list) and all(isinstance(s, int) and not isinstance(s, bool) for s in seed)
    ):
        return "'shuffle_seed' is not a list of integers"
    for key in ("position", "found"):
        if data.get(key) is not None and RecordPlace.from_json(data[key]) is None:
            return f"'{key}' is not a {{file, kind, record}} object"
    return None
