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

Other streams (ADR 38): ``tensor.record_stream(s)`` reaches a pluggable allocator only through
its record_stream hook. Where torch lets Python set it (``allocator().set_record_stream_fn``),
``use_devmm()`` installs ``devmm_torch_record_stream``: the free then orders the allocation
stream after each recorded stream's work (one event each), and the memory is reused only after
it. Where it does not (torch 2.x's ``_cuda_CUDAAllocator`` has no such method), every free waits
for the whole device on devmm's deferred-free thread before the memory goes back: safe, at the
cost of memory returned later (a device-wide synchronize per batch of frees, off the caller's
thread; ``use_devmm(safe_record_stream=False)`` turns that off for programs that never use a
tensor on a second stream). ``record_stream_hooked()`` says which.

    import devmm.interop.torch
    devmm.interop.torch.use_devmm()
    x = torch.empty(1 << 20, device="cuda")     # allocated by devmm
"""

from __future__ import annotations

import ctypes
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


_HOOKED: list = []


def install_record_stream(alloc: object, device_wide: bool = True) -> bool:
    """Installs devmm's record_stream hook in a ``CUDAPluggableAllocator`` where torch lets
    Python set it (True); otherwise (False) makes every torch free wait for its whole device,
    unless ``device_wide`` is False (then a tensor used on another stream may be reused early,
    as with any pluggable allocator without the hook)."""
    native = getattr(alloc, "allocator", None)
    setter = getattr(native() if callable(native) else None, "set_record_stream_fn", None)
    hooked = callable(setter)
    if hooked:
        setter(ctypes.cast(_lib.torch_record_stream, ctypes.c_void_p).value)
    _lib.torch_free_waits_for_device(0 if hooked or not device_wide else 1)
    _HOOKED[:] = [hooked]
    return hooked


def record_stream_hooked() -> bool:
    """Whether ``use_devmm()`` installed the record_stream hook (else frees wait for the
    device)."""
    return bool(_HOOKED and _HOOKED[0])


def use_devmm(*, safe_record_stream: bool = True) -> object:
    """Makes devmm torch's CUDA allocator; returns the ``CUDAPluggableAllocator``.
    ``safe_record_stream=False``: where torch gives no record_stream hook, frees are not made to
    wait for the device (for programs that never use a tensor on a second stream)."""
    try:
        from torch.cuda.memory import CUDAPluggableAllocator, change_current_allocator
    except ImportError:  # torch 1.x (test_use_devmm_on_torch_113_says_which_torch_it_needs)
        import torch
        raise ImportError("devmm.interop.torch.use_devmm() needs torch >= 2.0 "
                          f"(CUDAPluggableAllocator); this is torch {torch.__version__}") from None
    alloc = CUDAPluggableAllocator(shim_path(), "devmm_torch_alloc", "devmm_torch_free")
    install_record_stream(alloc, device_wide=safe_record_stream)
    try:
        change_current_allocator(alloc)
    except RuntimeError as e:
        raise RuntimeError("devmm.interop.torch.use_devmm() must run before torch's first CUDA "
                           f"allocation (torch says: {e})") from e
    return alloc
