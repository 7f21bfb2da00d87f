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
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Statistics:
    """Bytes and allocations of one scope: live now (current), most live at once (peak) and
    ever allocated (total). Frozen: a snapshot, not a live view."""

    current_bytes: int
    current_count: int
    peak_bytes: int
    peak_count: int
    total_bytes: int
    total_count: int
