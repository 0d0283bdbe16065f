"""Which execution produced each eager tensor: a compact map for the execution scan.

A long eager or Keras run records one execution per step or more, each with output tensor ids; a dict of
tuples costs ~190 bytes an entry (12 MB for the 5x bench dump's 62k executions). Eager tensor ids come from a
global counter, so they arrive in increasing order: they are kept in parallel ``array`` columns (8+8+8+4 bytes
an entry) searched by bisection, and the rare id that arrives out of order goes to a small dict that is looked
at first (later writes win, as in a dict).
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from collections.abc import Iterator, Mapping, Sequence


class Producers(Mapping[int, tuple[int, int, int]]):
    """eager tensor id -> (execution index, record offset, output slot)."""

    def __init__(self) -> None:
        self._ids = array("q")
        self._index = array("q")
        self._offset = array("q")
        self._slot = array("i")
        self._other: dict[int, tuple[int, int, int]] = {}
        self._count = 0

    def set(self, tensor_id: int, index: int, offset: int, slot: int) -> None:
        ids = self._ids
        if (not ids or tensor_id > ids[-1]) and tensor_id not in self._other:
            ids.append(tensor_id)
            self._index.append(index)
            self._offset.append(offset)
            self._slot.append(slot)
            self._count += 1
        else:
            if tensor_id not in self._other and not self._in_columns(tensor_id):
                self._count += 1
            self._other[tensor_id] = (index, offset, slot)

    def set_outputs(self, tensor_ids: Sequence[int], index: int, offset: int) -> None:
        """``set`` for each output of one execution (slot = position): one call per execution, and the common
        case (one output, a new largest id) without the general path's checks."""
        ids = self._ids
        if len(tensor_ids) == 1 and not self._other and (not ids or tensor_ids[0] > ids[-1]):
            ids.append(tensor_ids[0])
            self._index.append(index)
            self._offset.append(offset)
            self._slot.append(0)
            self._count += 1
            return
        for slot, tensor_id in enumerate(tensor_ids):
            self.set(tensor_id, index, offset, slot)

    def drop_older_half(self) -> None:
        """Forget the lower half of the ids (the oldest tensors), as the scan's memory bound."""
        cutoff = sorted(self)[len(self) // 2]
        keep = bisect_left(self._ids, cutoff)
        for column in (self._ids, self._index, self._offset, self._slot):
            del column[:keep]
        self._other = {k: v for k, v in self._other.items() if k >= cutoff}
        self._count = len(self._ids) + sum(1 for k in self._other if not self._in_columns(k))

    def __getitem__(self, tensor_id: int) -> tuple[int, int, int]:
        found = self._other.get(tensor_id)
        if found is not None:
            return found
        at = bisect_left(self._ids, tensor_id)
        if at < len(self._ids) and self._ids[at] == tensor_id:
            return self._index[at], self._offset[at], self._slot[at]
        raise KeyError(tensor_id)

    def __iter__(self) -> Iterator[int]:
        other = self._other
        yield from (i for i in self._ids if i not in other)
        yield from other

    def __len__(self) -> int:
        return self._count

    def _in_columns(self, tensor_id: int) -> bool:
        at = bisect_left(self._ids, tensor_id)
        return at < len(self._ids) and self._ids[at] == tensor_id
