"""The trace scan's records and its incident window: which traces around the first NaN/Inf are kept for the origin
analysis (`pyadapter.dump.origin`), and when that window is complete (see `pyadapter.dump.traces`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from pyadapter.dump.tfrecord import ReadIssue

# After the last graph went non-finite for the first time, keep this many more traces (propagation).
TAIL_TRACES = 2000
# Hard bound on the window, whatever happens.
MAX_WINDOW_TRACES = 200_000


class TraceEntry(NamedTuple):
    """One trace kept for the origin analysis."""

    index: int  # type: ignore[assignment]  # shadows tuple.index (unused here); position in the trace file; -1 for traces before the window (known only to be finite)
    offset: int  # byte offset of the record, to re-read its health
    tensor_id: int  # key into HostDump.tensors
    graph_id: str
    round: int  # which execution of its graph (1-based, counted from the start of the file)
    nonfinite: bool
    wall_time: float


@dataclass
class TraceScan:
    """What streaming the trace file found."""

    path: str
    traces_read: int = 0
    window: list[TraceEntry] = field(default_factory=list)
    first_nonfinite_index: int | None = None
    issue: ReadIssue | None = None
    undecodable: int = 0
    ops_missing_from_graphs: int = 0
    stopped_after_window: bool = False
    bytes_total: int = 0


class Window:
    """Collects the incident window and decides when it is complete."""

    def __init__(self, graph_state: dict[str, list], entries: dict[bytes, list]) -> None:
        self.graph_state = graph_state
        self.entries = entries
        self.window: list[TraceEntry] = []
        self.pending: dict[str, int] = {}  # graph -> round it went non-finite in, until that round ends
        self.last_new_graph_index = 0
        self.seen_bad_graphs: set[str] = set()

    def open(self, current: list) -> None:
        """Keep the finite traces of every round that is still open when the first NaN/Inf shows up."""
        for entry in self.entries.values():
            if entry is current:
                continue
            state = entry[0]
            if entry[1] >= state[0] >= 0:
                self.window.append(TraceEntry(-1, entry[1], entry[2], entry[3], state[1], False, 0.0))

    def add(self, index: int, offset: int, entry: list, bad: bool, wall_time: float) -> bool:
        """Record one trace; True when the window is complete."""
        state = entry[0]
        graph_id = entry[3]
        self.window.append(TraceEntry(index, offset, entry[2], graph_id, state[1], bad, wall_time))
        if bad and graph_id not in self.seen_bad_graphs:
            self.seen_bad_graphs.add(graph_id)
            self.pending[graph_id] = state[1]
            self.last_new_graph_index = index
        if self.pending:
            for g in [g for g, r in self.pending.items() if self.graph_state[g][1] > r]:
                del self.pending[g]
        if len(self.window) >= MAX_WINDOW_TRACES:
            return True
        return not self.pending and index - self.last_new_graph_index >= TAIL_TRACES
