"""The figures of a statistics adaptor, as RMM's ``rmm.statistics.Statistics`` has them
(``devmm.Statistics``). A private module: ``devmm.statistics`` is the ``with`` block
(devmm.rmm_compat), and a submodule of that name would replace it once imported (ADR 41).

>>> import devmm
>>> from devmm.mrs.cpu import MallocMemoryResource
>>> s = devmm.StatisticsAdaptor(MallocMemoryResource())
>>> t = devmm.empty(256, "int8", resource=s)
>>> figures = s.statistics
>>> figures.current_bytes, figures.peak_count
(256, 1)
>>> figures == devmm.Statistics(256, 1, 256, 1, 256, 1)
True

It reads as the dict older RMM's ``allocation_counts`` gave, too (a read-only mapping of the six
names, equal to a dict of the same items):

>>> figures["current_bytes"], dict(figures)["total_count"], "peak_bytes" in figures
(256, 1, True)
>>> figures == {"current_bytes": 256, "current_count": 1, "peak_bytes": 256, "peak_count": 1,
...             "total_bytes": 256, "total_count": 1}
True
"""

from __future__ import annotations

import collections.abc
import dataclasses

TYPE_CHECKING = False  # typing is imported only by type checkers: it costs start-up time
if TYPE_CHECKING:
    from typing import Iterator


@dataclasses.dataclass(frozen=True, eq=False)
class Statistics(collections.abc.Mapping):
    """Bytes and allocations of one scope: live now (current), most live at once (peak) and
    ever allocated (total). Frozen: a snapshot, not a live view. Also a read-only mapping of
    the field names (RMM's dict keys) to their values; equal to another Statistics or to a
    mapping with the same items (test_from_rmm.py: test_statistics_read_as_rmms_dict)."""

    current_bytes: int
    current_count: int
    peak_bytes: int
    peak_count: int
    total_bytes: int
    total_count: int

    def __getitem__(self, key: str) -> int:
        if key not in _FIELDS:  # a str that is no field, or no str at all
            raise KeyError(key)
        return getattr(self, key)

    def __iter__(self) -> Iterator[str]:
        return iter(_FIELDS)

    def __len__(self) -> int:
        return len(_FIELDS)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Statistics):
            return dataclasses.astuple(self) == dataclasses.astuple(other)
        if isinstance(other, collections.abc.Mapping):
            return dict(self) == dict(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(dataclasses.astuple(self))


_FIELDS = tuple(f.name for f in dataclasses.fields(Statistics))  # the keys, in order
