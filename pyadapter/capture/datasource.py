"""At capture time: which files the failing batch's ``tf.data`` pipeline reads, and where in them its bad row is.

The training process holds the input: NanGuard sees the iterator Keras fit hands its train function (a
``tf.data`` iterator keeps its dataset), guard_step finds a dataset or iterator among the locals of the loop that
calls it. The dataset's own graph (``Dataset._as_serialized_graph``) names every reader op (``CSVDataset``,
``TextLineDataset``, ``TFRecordDataset``, also inside the functions of ``interleave``/``flat_map``, which is how
``make_csv_dataset`` and multi-file readers are built) with the constant file names feeding it, and the ops above
it (shuffle, filter, skip, batch, ...). From that:

- the files, their kind and parse options (CSV header, delimiter, NA value, compression);
- the position of the batch row in the one file when the order decides it (no shuffle, filter, repeat or
  interleave of several files: ``skip + batches_before * batch_size + row``), else why not;
- the record holding the bad row, found by its values (`pyadapter.capture.records`) while the files are certainly
  there (a program may write its data to a temporary folder that is gone when ``nanlens locate`` runs later).

All of it goes into the manifest as ``data_source`` (`pyadapter.capture.sourcerecord`). Nothing here may break a
capture: any failure leaves the field out.
"""

from __future__ import annotations

import glob
import os
import weakref
from dataclasses import dataclass
from types import FrameType
from typing import Any

import numpy as np
import tensorflow as tf

from pyadapter.capture.sourcerecord import MANIFEST_KEY, DataSource, RecordPlace, SourceFile

# The training process stops (or skips) while it searches: a short bound; `nanlens locate` searches longer.
CAPTURE_SEARCH_SECONDS = 10.0
READERS = {
    "CSVDataset": "csv",
    "CSVDatasetV2": "csv",
    "ExperimentalCSVDataset": "csv",
    "TextLineDataset": "text",
    "TFRecordDataset": "tfrecord",
    "TFRecordDatasetV2": "tfrecord",
}
# Ops between the reader and the batch that keep one element per element, in order.
IN_ORDER = frozenset(
    {
        "MapDataset",
        "ParallelMapDataset",
        "ParallelMapDatasetV2",
        "PrefetchDataset",
        "CacheDataset",
        "CacheDatasetV2",
        "ModelDataset",
        "OptionsDataset",
        "MaxIntraOpParallelismDataset",
        "PrivateThreadPoolDataset",
        "AssertCardinalityDataset",
        "AssertNextDataset",
        "TakeDataset",
        "FinalizeDataset",
        "ExperimentalMaxIntraOpParallelismDataset",
        "ExperimentalPrivateThreadPoolDataset",
    }
)
BATCHES = frozenset(
    {"BatchDataset", "BatchDatasetV2", "ParallelBatchDataset", "PaddedBatchDataset", "PaddedBatchDatasetV2"}
)
SHUFFLES = frozenset(
    {
        "ShuffleDataset",
        "ShuffleDatasetV2",
        "ShuffleDatasetV3",
        "ShuffleAndRepeatDataset",
        "ShuffleAndRepeatDatasetV2",
    }
)
FILTERS = frozenset(
    {"FilterDataset", "IgnoreErrorsDataset", "SampleFromDatasets", "DirectedInterleaveDataset"}
)
REPEATS = frozenset({"RepeatDataset", "ShuffleAndRepeatDataset", "ShuffleAndRepeatDatasetV2"})


class InputTracker:
    """The iterator NanGuard's train function is reading and how many batches it took from it before the current
    one (Keras makes a new iterator per epoch unless ``steps_per_epoch`` is set, so the count is the batch's place
    in the dataset either way). Holds the iterator weakly."""

    def __init__(self) -> None:
        self._iterator: Any = None
        self.batches_before = 0
        self._seen = 0

    def see(self, iterator: Any) -> None:
        """Called before each step read from ``iterator``."""
        current = self._iterator() if self._iterator is not None else None
        if current is not iterator:
            try:
                self._iterator = weakref.ref(iterator)
            except TypeError:
                self._iterator = None
            self._seen = 0
        self.batches_before = self._seen
        self._seen += 1

    @property
    def iterator(self) -> Any:
        return self._iterator() if self._iterator is not None else None


def dataset_of(value: Any) -> tf.data.Dataset | None:
    """The dataset behind a dataset, a tf.data iterator or a distributed one (its first worker's)."""
    if isinstance(value, tf.data.Dataset):
        return value
    for name in ("_dataset", "_original_dataset"):
        inner = getattr(value, name, None)
        if isinstance(inner, tf.data.Dataset):
            return inner
    for name in ("_iterators", "_cloned_datasets"):
        parts = getattr(value, name, None)
        if isinstance(parts, (list, tuple)) and parts:
            return dataset_of(parts[0])
    return None


def dataset_in_frame(frame: FrameType | None) -> tf.data.Dataset | None:
    """guard_step: the dataset (or iterator) among the calling loop's locals that reads files, if any."""
    if frame is None:
        return None
    for value in list(frame.f_locals.values()):
        dataset = dataset_of(value)
        if dataset is not None and _graph(dataset) is not None:
            return dataset
    return None


# ---- the dataset's graph ----


@dataclass
class _Scope:
    """The main graph or one function of its library: nodes by name, argument names."""

    name: str
    nodes: dict[str, Any]
    args: list[str]


def _graph(dataset: tf.data.Dataset) -> Any:
    try:
        serialized = dataset._as_serialized_graph(
            external_state_policy=tf.data.experimental.ExternalStatePolicy.IGNORE
        )
        return tf.compat.v1.GraphDef.FromString(serialized.numpy())
    except Exception:  # noqa: BLE001 - a dataset TF cannot serialize (a py_function...): no source recorded
        return None


def _scopes(graph: Any) -> dict[str, _Scope]:
    scopes = {"": _Scope("", {n.name: n for n in graph.node}, [])}
    for function in graph.library.function:
        name = function.signature.name
        scopes[name] = _Scope(
            name, {n.name: n for n in function.node_def}, [a.name for a in function.signature.input_arg]
        )
    return scopes


def _node_name(text: str) -> str:
    return text.lstrip("^").split(":")[0]


def _inputs(node: Any) -> list[str]:
    return [_node_name(i) for i in node.input if not i.startswith("^")]


def _functions_of(node: Any) -> list[str]:
    return [attr.func.name for attr in node.attr.values() if attr.func.name]


def _callers(scopes: dict[str, _Scope], function: str) -> list[tuple[_Scope, Any]]:
    return [(s, n) for s in scopes.values() for n in s.nodes.values() if function in _functions_of(n)]


def _packed_strings(tensor: Any) -> list[bytes] | None:
    """A string tensor whose values are packed in ``tensor_content`` (as several file names are): n varint
    lengths, then the bytes; ``tf.make_ndarray`` does not read that form."""
    if tensor.dtype != tf.string.as_datatype_enum or not tensor.tensor_content:
        return None
    from pyadapter.dump import wire

    count = int(np.prod([d.size for d in tensor.tensor_shape.dim])) if tensor.tensor_shape.dim else 1
    data, pos, lengths = tensor.tensor_content, 0, []
    for _ in range(count):
        length, pos = wire.read_varint(data, pos)
        lengths.append(length)
    out = []
    for length in lengths:
        out.append(bytes(data[pos : pos + length]))
        pos += length
    return out


def _const(node: Any) -> Any:
    if node is None or node.op != "Const":
        return None
    try:
        packed = _packed_strings(node.attr["value"].tensor)
        if packed is not None:
            return np.array(packed, dtype=object)
        return tf.make_ndarray(node.attr["value"].tensor)
    except Exception:  # noqa: BLE001 - a resource or variant constant: not a value of ours
        return None


def _scalar(scope: _Scope, name: str) -> Any:
    value = _const(scope.nodes.get(name))
    if value is None or np.ndim(value) != 0:
        return None
    return value.item() if hasattr(value, "item") else value


def _strings(scopes: dict[str, _Scope], scope: _Scope, name: str, seen: set[tuple[str, str]]) -> list[str]:
    """The constant strings that reach input ``name`` (through datasets, function arguments, MatchingFiles)."""
    if (scope.name, name) in seen:
        return []
    seen.add((scope.name, name))
    if name in scope.args:  # a function argument: the elements of its caller's input dataset
        return [
            s
            for caller_scope, caller in _callers(scopes, scope.name)
            for s in (_strings(scopes, caller_scope, _inputs(caller)[0], seen) if _inputs(caller) else [])
        ]
    node = scope.nodes.get(name)
    if node is None:
        return []
    value = _const(node)
    if value is not None:
        flat = np.asarray(value).ravel()
        return [v.decode("utf-8", "replace") for v in flat if isinstance(v, bytes)]
    found = [s for i in _inputs(node) for s in _strings(scopes, scope, i, seen)]
    if node.op == "MatchingFiles":  # Dataset.list_files of a pattern built in the graph
        return sorted(p for pattern in found for p in glob.glob(pattern))
    return found


def _reader_file(scope: _Scope, node: Any, path: str) -> SourceFile:
    kind = READERS[node.op]
    inputs = _inputs(node)
    compression = _scalar(scope, inputs[1]) if len(inputs) > 1 else None
    source = SourceFile(
        path=os.path.abspath(path),
        kind=kind,
        compression=compression.decode() if isinstance(compression, bytes) else "",
    )
    if kind == "csv" and len(inputs) > 6:
        # CSVDataset(filenames, compression_type, buffer_size, header, field_delim, use_quote_delim, na_value, ...)
        header, delimiter, na_value = (_scalar(scope, inputs[i]) for i in (3, 4, 6))
        source.header = bool(header) if header is not None else None
        source.delimiter = (
            delimiter.decode() if isinstance(delimiter, bytes) and len(delimiter) == 1 else None
        )
        source.na_value = na_value.decode() if isinstance(na_value, bytes) else None
    return source


def _files(scopes: dict[str, _Scope]) -> tuple[list[SourceFile], set[str]]:
    """Every file a reader op reads, and the functions (by name) holding reader ops."""
    files: list[SourceFile] = []
    reading: set[str] = set()
    for scope in scopes.values():
        for node in scope.nodes.values():
            if node.op not in READERS or not _inputs(node):
                continue
            if scope.name:
                reading.add(scope.name)
            for path in _strings(scopes, scope, _inputs(node)[0], set()):
                if os.path.isfile(path) and all(f.path != os.path.abspath(path) for f in files):
                    files.append(_reader_file(scope, node, path))
    return files, reading


def _holds_reader(scopes: dict[str, _Scope], function: str, reading: set[str], depth: int = 0) -> bool:
    if function in reading:
        return True
    scope = scopes.get(function)
    if scope is None or depth > 8:
        return False
    return any(
        _holds_reader(scopes, f, reading, depth + 1) for n in scope.nodes.values() for f in _functions_of(n)
    )


@dataclass
class _Order:
    pipeline: list[str]
    order: str
    note: str | None
    batch_size: int | None
    skip: int
    seed: list[int] | None


def _order(scopes: dict[str, _Scope], reading: set[str], files: list[SourceFile]) -> _Order:
    """Walk the main graph from the dataset's output down to the reader (or the interleave whose function reads):
    what happens to the records' order on the way."""
    main = scopes[""]
    ret = next((n for n in main.nodes.values() if n.op == "_Retval"), None)
    chain: list[Any] = []
    node = main.nodes.get(_inputs(ret)[0]) if ret is not None and _inputs(ret) else None
    while node is not None and len(chain) < 200:
        chain.append(node)
        if node.op in READERS or any(_holds_reader(scopes, f, reading) for f in _functions_of(node)):
            break
        inputs = _inputs(node)
        node = main.nodes.get(inputs[0]) if inputs else None
    pipeline = [n.op for n in reversed(chain)]
    seed: list[int] | None = None
    batch_size: int | None = None
    skip_records = 0
    problems: list[tuple[str, str]] = []
    for node in reversed(
        chain[:-1] if chain else []
    ):  # from the reader up; the reader (or interleave) itself last
        inputs = _inputs(node)
        if node.op in SHUFFLES:
            seeds = [_scalar(main, i) for i in inputs[2:4]] if len(inputs) >= 4 else []
            seed = [int(s) for s in seeds if isinstance(s, (int, np.integer))] or None
            problems.append(
                ("shuffled", "the pipeline shuffles, so the position does not follow from the order")
            )
        if node.op in REPEATS:
            problems.append(
                ("repeated", "the pipeline repeats, so a batch may come from any pass over the data")
            )
        if node.op in FILTERS:
            problems.append(("filtered", f"{node.op} drops records, so positions shift"))
        if node.op in SHUFFLES or node.op in REPEATS or node.op in FILTERS:
            continue
        if node.op in BATCHES:
            size = _scalar(main, inputs[1]) if len(inputs) > 1 else None
            if batch_size is not None or not isinstance(size, (int, np.integer)):
                problems.append(("unknown", "the pipeline batches twice"))
            batch_size = int(size) if isinstance(size, (int, np.integer)) else None
        elif node.op == "SkipDataset":
            count = _scalar(main, inputs[1]) if len(inputs) > 1 else None
            if not isinstance(count, (int, np.integer)) or count < 0:
                problems.append(("unknown", "a skip of an unknown count"))
            else:
                skip_records += int(count) * (batch_size or 1)
        elif node.op == "ParallelMapDatasetV2" and node.attr["deterministic"].s == b"false":
            problems.append(("shuffled", "a map with deterministic=False may reorder records"))
        elif node.op not in IN_ORDER:
            problems.append(("unknown", f"{node.op} in the pipeline"))
    if len(files) > 1:
        problems.insert(0, ("interleaved", f"the pipeline reads {len(files)} files"))
    if batch_size is None and not problems:
        problems.append(("unknown", "no batch op found in the pipeline"))
    if not problems:
        return _Order(pipeline, "in order", None, batch_size, skip_records, seed)
    order, _ = problems[0]
    note = "; ".join(dict.fromkeys(text for _, text in problems)) + ": the row is found by its values"
    return _Order(pipeline, order, note, batch_size, skip_records, seed)


def _position(source: SourceFile, order: _Order, batches_before: int | None, row: int) -> RecordPlace | None:
    if order.order != "in order" or batches_before is None or order.batch_size is None:
        return None
    record = order.skip + batches_before * order.batch_size + row
    line = None
    if source.kind == "csv":
        line = record + 1 + (1 if source.header else 0)
    elif source.kind == "text":
        line = record + 1
    return RecordPlace(source.path, source.kind, record, line, found_by="pipeline position")


def describe(
    dataset: tf.data.Dataset | None, batch: Any, batches_before: int | None, graph: Any = None
) -> DataSource | None:
    """The ``data_source`` of a failing batch read from ``dataset`` (None when it reads no files). `graph`: the
    dataset's serialized graph, when the caller has it already."""
    if dataset is None:
        return None
    graph = graph if graph is not None else _graph(dataset)
    if graph is None:
        return None
    scopes = _scopes(graph)
    files, reading = _files(scopes)
    if not files:
        return None
    order = _order(scopes, reading, files)
    source = DataSource(
        files=files, pipeline=order.pipeline, order=order.order, note=order.note, shuffle_seed=order.seed
    )
    from pyadapter.capture import records

    element = records.first_bad_element(batch)
    if element is None:
        return source
    if len(files) == 1:
        source.position = _position(files[0], order, batches_before, element.row)
    row = records.batch_row(batch, element.row, element.rows)
    prefer = source.position.record if source.position is not None else None
    for file in files:  # the process's own input files: read them while they are certainly there
        found, _ = records.find_record(
            file,
            file.path,
            row,
            prefer=prefer,
            found_by="values when captured",
            seconds=CAPTURE_SEARCH_SECONDS,
        )
        if found is not None:
            source.found = found
            break
    return source


def _const_array(node: Any) -> np.ndarray | None:
    """A Const node's value (strings as an object array of bytes, as a tf.string batch reads); None when it cannot
    be read."""
    tensor = node.attr["value"].tensor
    if tensor.dtype == tf.string.as_datatype_enum and tensor.tensor_content:
        shape = [d.size for d in tensor.tensor_shape.dim]
        texts = _string_list(tensor.tensor_content, int(np.prod(shape, dtype=np.int64)))
        if texts is None:
            return None
        values = np.empty(len(texts), dtype=object)
        values[:] = texts
        return values.reshape(shape)
    return np.asarray(tf.make_ndarray(tensor))


def _string_list(content: bytes, count: int) -> list[bytes] | None:
    """TensorFlow's encoding of a string tensor's values (``EncodeStringList``): every length as a varint, then
    every string's bytes; None when `content` is not that."""
    lengths, offset = [], 0
    for _ in range(count):
        length, shift = 0, 0
        while True:
            if offset >= len(content) or shift > 28:
                return None
            byte = content[offset]
            offset += 1
            length |= (byte & 0x7F) << shift
            shift += 7
            if byte < 0x80:
                break
        lengths.append(length)
    if offset + sum(lengths) != len(content):
        return None
    texts = []
    for length in lengths:
        texts.append(content[offset : offset + length])
        offset += length
    return texts


def sliced_rows_entry(dataset: tf.data.Dataset | None, batch: Any, graph: Any = None) -> dict[str, Any]:
    """``{"fit_rows": {...}}`` with ``"of": "from_tensor_slices"`` for a pipeline made from arrays in memory
    (``Dataset.from_tensor_slices((dict(df), labels))``, keras.io's structured-data shape): each batch row's index
    in the arrays it was sliced from, found by its values (`fit_arrays.rows_in`), so a shuffled pipeline's bad
    record is named at the user's own row. ``{}`` for anything else; never raises."""
    from pyadapter.capture import fit_arrays

    try:
        graph = graph if graph is not None else _graph(dataset) if dataset is not None else None
        if graph is None:
            return {}
        nodes = {n.name: n for n in graph.node}
        slices = [n for n in graph.node if n.op in ("TensorSliceDataset", "TensorDataset")]
        if len(slices) != 1 or not isinstance(batch, (list, tuple)) or not batch:
            return {}
        components = [nodes.get(_node_name(i)) for i in _inputs(slices[0])]
        consts = [c for c in components if c is not None and c.op == "Const"]
        if not consts or len(consts) != len(components):
            return {}
        arrays = [_const_array(c) for c in consts]
        first = fit_arrays.first_array(batch[0])
        if first is None:
            return {}
        # The components in tf.nest order (dict keys sorted), as the batch's leaves: the first that fits x's first.
        source = next(
            (
                a
                for a in arrays
                if a is not None and a.ndim > 0 and a.dtype == first.dtype and a.shape[1:] == first.shape[1:]
            ),
            None,
        )
        if source is None or len(first) > fit_arrays.MAX_ROWS:
            return {}
        # The labels tell copies of one feature row apart: the last other component shaped as y.
        labels = fit_arrays.first_array(batch[1]) if len(batch) > 1 else None
        label_source = next(
            (
                a
                for a in reversed(arrays)
                if a is not None
                and a is not source
                and labels is not None
                and a.ndim > 0
                and len(a) == len(source)
                and a.dtype == labels.dtype
                and a.shape[1:] == labels.shape[1:]
            ),
            None,
        )
        indices = fit_arrays.rows_in(first, source, labels, label_source)
        held = _slices_hold_the_bad_value(arrays, len(source), batch, indices)
    except Exception:  # noqa: BLE001 - provenance is an addition; never lose a capture for it
        return {}
    if not any(i is not None for i in indices):
        return {}
    entry: dict[str, Any] = {"indices": indices, "array_rows": len(source), "of": fit_arrays.SLICES}
    if held:
        entry["held"] = True
    return {fit_arrays.MANIFEST_KEY: entry}


def _slices_hold_the_bad_value(
    arrays: list[np.ndarray | None], rows: int, batch: Any, indices: list[int | None]
) -> bool:
    """Whether an array the pipeline was sliced from holds the batch's first NaN/Inf row as the batch has it, at
    that row's index: the value was there before any op of the pipeline (a sample_weight column a pandas left merge
    made NaN, s42f p3), so `nanlens locate` need not re-run the pipeline to find an op that made it."""
    from pyadapter.capture import records

    element = records.first_bad_element(batch)
    if element is None or not 0 <= element.row < len(indices) or indices[element.row] is None:
        return False
    value = next((v for label, v, _ in records.leaves(batch) if label == element.leaf), None)
    if not isinstance(value, np.ndarray):
        return False
    row, index = np.asarray(value[element.row]), indices[element.row]
    return any(
        a is not None
        and a.ndim > 0
        and len(a) == rows
        and a.dtype == value.dtype
        and a.shape[1:] == value.shape[1:]
        and not np.isfinite(a[index]).all()
        and np.asarray(a[index]).tobytes() == row.tobytes()
        for a in arrays
    )


def manifest_entry(dataset: tf.data.Dataset | None, batch: Any, batches_before: int | None) -> dict[str, Any]:
    """``{"data_source": {...}}`` for the bundle's manifest, with `sliced_rows_entry`'s rows for a pipeline made
    from arrays in memory, or ``{}``; never raises. The dataset's graph is serialized once for both."""
    try:
        graph = _graph(dataset) if dataset is not None else None
        source = describe(dataset, batch, batches_before, graph)
    except Exception:  # noqa: BLE001 - provenance is an addition; never lose a capture for it
        return {}
    entry = {MANIFEST_KEY: source.to_json()} if source is not None else {}
    return {**entry, **sliced_rows_entry(dataset, batch, graph)}
