"""Run by both Python suites as a script: `python read_after_free.py EXPORT` makes a 1 MiB
tensor over cpu.mmap (munmap'd memory faults on any read), exports it with EXPORT ("asarray":
__array_interface__, "dlpack": DLPack), frees the buffer and the tensor, then reads the array
and prints its sum. Before the array interface held its memory this died with SIGSEGV."""

import sys

import numpy as np

import devmm
from devmm.mrs.cpu import MmapMemoryResource

t = devmm.empty((1 << 20,), "uint8", resource=MmapMemoryResource())
a = {"asarray": np.asarray, "dlpack": np.from_dlpack}[sys.argv[1]](t)
a[...] = 7
t.buffer.free()
del t
print(int(a.sum(dtype=np.int64)))
