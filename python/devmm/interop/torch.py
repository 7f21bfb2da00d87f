"""Route PyTorch's CUDA allocations through devmm (devmm serving torch: with the C++ shim
core/bridges/torch_alloc.cpp and ``devmm_torch_allocate`` of core/bridges/torch.c; docs/frameworks.md
gives both directions of every framework).

``use_devmm()`` installs libdevmm-torch's ``devmm_torch_alloc``/``devmm_torch_free`` as torch's
``CUDAPluggableAllocator``: every CUDA tensor torch makes then comes from the current devmm
resource of its device (say ``statistics(limiting(cuda.async))`` from devmm.ini), so devmm's
limits, statistics and logs cover torch too. A failed allocation reaches Python as a
``RuntimeError`` carrying devmm's message ("devmm: ... out of memory: ..."): torch turns the
C++ exception the allocator throws into one (it has no other way to hear of a failure). Call it
before torch's first CUDA allocation; after that torch refuses to swap allocators, and this
raises a clear error.

    import devmm.interop.torch
    devmm.interop.torch.use_devmm()
    x = torch.empty(1 << 20, device="cuda")     # allocated by devmm
"""

from __future__ import annotations

import os

from .. import _lib
from .._optional import require

torch = require("torch", "torch", "devmm.interop.torch")


def shim_path() -> str:
    """libdevmm-torch (C++: its allocator throws on failure), next to the loaded libdevmm
    (``libdevmm-torch.so.0`` in a prefix, ``libdevmm-torch.so`` in the wheel)."""
    here = os.path.dirname(_lib.LIBRARY_PATH)
    names = ("libdevmm-torch.so.0", "libdevmm-torch.so")
    for name in names:
        if here and os.path.exists(os.path.join(here, name)):
            return os.path.join(here, name)
    return names[0]  # the dynamic loader's own search


def use_devmm() -> object:
    """Makes devmm torch's CUDA allocator; returns the ``CUDAPluggableAllocator``."""
    from torch.cuda.memory import CUDAPluggableAllocator, change_current_allocator
    alloc = CUDAPluggableAllocator(shim_path(), "devmm_torch_alloc", "devmm_torch_free")
    try:
        change_current_allocator(alloc)
    except RuntimeError as e:
        raise RuntimeError("devmm.interop.torch.use_devmm() must run before torch's first CUDA "
                           f"allocation (torch says: {e})") from e
    return alloc
