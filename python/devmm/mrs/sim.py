"""The simulated accelerator, devmm-sim: the GPU plugin's own source (plugins/gpu/) built
over a runtime that runs on the CPU, so that device-memory and stream logic can be tested on a
machine without a GPU. Never CUDA: its devices are ``sim:N`` (DLPack ``kDLExtDev``).

- Device memory faults on any host access (the address is a ``PROT_NONE`` view; the runtime
  reaches the bytes through a private mapping), exactly like an illegal address on a GPU.
- Every stream is a queue run by its own thread, with a seeded random delay before each
  operation; handle 1 (or None/0 at the C level) is the legacy default stream of the current
  device, 2 the calling thread's per-thread default stream.
- A stream-ordered free poisons the bytes (0xDD) when it runs; fresh memory holds 0xCD.

Resources: :class:`SimMemoryResource`, :class:`SimAsyncMemoryResource`,
:class:`ManagedMemoryResource`, :class:`PinnedMemoryResource` (host memory: DLPack CPU).
:func:`runtime` drives the simulator as a program drives a GPU (streams, events, kernels).
Its settings live in devmm.ini: ``[plugin sim]`` ``devices = 2``, ``memory = 256MiB``,
``jitter_us = 50``, ``seed = 1``, ``pageable_access = false`` (true: its devices address pageable
host memory, as HMM or ATS let a GPU, and :class:`SystemMemoryResource` is offered).

>>> import devmm
>>> from devmm.mrs.sim import SimAsyncMemoryResource, runtime
>>> t = devmm.zeros(8, "uint8", resource=SimAsyncMemoryResource(0))
>>> t.device, t.__dlpack_device__()
('sim:0', (12, 0))
>>> sim = runtime()
>>> s = sim.stream(0)                       # a stream of sim:0
>>> cap = t.__dlpack__(stream=s.handle)     # s now waits for t's stream
>>> ok = sim.check(s, t.data_ptr, 0, 8)     # a kernel on s reading the 8 bytes
>>> s.synchronize(); ok.value
1
>>> s.destroy()

Stream capture follows CUDA's rules (ADR 37): work queued on a capturing stream is recorded into
a graph; an unsafe call (a device synchronize, the legacy stream, a synchronous malloc) from a
thread the capture's mode covers invalidates it.

>>> c = sim.stream(0)
>>> sim.begin_capture(c, "global")
>>> sim.fill(c, t.data_ptr, 7, 8)           # recorded, not run
>>> g = sim.end_capture(c); g.nodes
1
>>> g.launch(c); ok = sim.check(c, t.data_ptr, 7, 8); c.synchronize(); ok.value
1
>>> g.destroy(); c.destroy()
"""

from __future__ import annotations

import ctypes

from .. import _lib, _shared
from ..config import plugins
from ._gpu import (AsyncManagedResource, AsyncResource, AsyncViewResource, DeviceResource,
                   ManagedResource, PinnedResource, SamHeadroomResource, SystemResource)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Callable, Optional


class SimMemoryResource(DeviceResource):
    """``simMalloc`` / ``simFree`` on one device (synchronous)."""

    __slots__ = ()
    KIND = "sim.device"


class SimAsyncMemoryResource(AsyncResource):
    """Stream-ordered ``simMallocFromPoolAsync`` / ``simFreeAsync`` on the device's default pool
    (``pool="default"``) or a pool of its own (``pool="own"``, with ``max_pool_size`` and
    ``release_threshold`` (bytes, "4GiB" or "50%"): freed memory the pool keeps; the default
    pool is the whole process's, devmm leaves its settings alone); ``ipc=True`` with an own
    pool: other processes can open its allocations (devmm.open_ipc; CUDA only)."""

    __slots__ = ()
    KIND = "sim.async"


class ManagedMemoryResource(ManagedResource):
    """``simMallocManaged``; ``advise`` = None | "read_mostly" | "preferred_location" |
    "accessed_by" (for this device), ``prefetch=True`` moves new memory to the device."""

    __slots__ = ()
    KIND = "sim.managed"


class PinnedMemoryResource(PinnedResource):
    """Page-locked host memory, ``simHostAlloc`` (portable), on device ``sim_host:0``: devmm's
    own device type, apart as ``cuda_host`` is; a consumer asks for it as ``(kDLCPU, 0)``."""

    __slots__ = ()
    KIND = "sim.pinned"


class SimAsyncViewMemoryResource(AsyncViewResource):
    """A view of a pool another library owns: ``simMallocFromPoolAsync`` on it, never
    ``simMemPoolDestroy`` (``sim.async`` with ``pool = 0x<address>``)."""

    __slots__ = ()
    KIND = "sim.async"


class SimAsyncManagedMemoryResource(AsyncManagedResource):
    """``simMallocFromPoolAsync`` on the device's default pool of managed memory (``sim.async``
    with ``pool = managed``): the simulator models it (managed regions, freed in stream order)."""

    __slots__ = ()
    KIND = "sim.async"


class SystemMemoryResource(SystemResource):
    """``malloc``'ed memory that sim's device addresses, where
    ``simDevAttrPageableMemoryAccess`` is 1 (``[plugin sim] pageable_access = true`` models it;
    the default is false, as on most machines); ``headroom``, ``prefetch``: see
    :class:`devmm.mrs._gpu.SystemResource`."""

    __slots__ = ()
    KIND = "sim.system"


class SamHeadroomMemoryResource(SamHeadroomResource):
    """``sim.system`` with a ``headroom`` (RMM's ``SamHeadroomMemoryResource``)."""

    __slots__ = ()
    KIND = "sim.system"


_P = ctypes.c_void_p
_KERNEL = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class Stats(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t)] + [
        (n, ctypes.c_uint64) for n in ("streams_created", "streams_live", "events_created",
                                       "events_live", "allocations_live", "bytes_live",
                                       "frees_pending")]


_SIGNATURES = {
    "set_device": [ctypes.c_int],
    "get_device": [ctypes.POINTER(ctypes.c_int)],
    "stream_create": [ctypes.c_int, ctypes.c_int, ctypes.POINTER(_P)],
    "stream_destroy": [_P],
    "stream_synchronize": [_P],
    "device_synchronize": [ctypes.c_int],
    "event_create": [ctypes.c_int, ctypes.POINTER(_P)],
    "event_record": [_P, _P],
    "stream_wait_event": [_P, _P],
    "event_synchronize": [_P],
    "event_destroy": [_P],
    "launch": [_P, _KERNEL, _P],
    "fill": [_P, _P, ctypes.c_int, ctypes.c_size_t],
    "check": [_P, _P, ctypes.c_int, ctypes.c_size_t, ctypes.POINTER(ctypes.c_int)],
    "inject": [ctypes.c_char_p, ctypes.c_int, ctypes.c_int],
    "stats_get": [ctypes.POINTER(Stats)],
    "default_pool_threshold": [ctypes.c_int, ctypes.POINTER(ctypes.c_uint64)],
    "capture_begin": [_P, ctypes.c_int],
    "capture_end": [_P, ctypes.POINTER(_P)],
    "capture_status": [_P, ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_uint64)],
    "capture_mode": [ctypes.POINTER(ctypes.c_int)],
    "graph_launch": [_P, _P],
    "graph_destroy": [_P],
    "preferred_location": [_P, ctypes.POINTER(ctypes.c_int)],
    "pool_create": [ctypes.c_int, ctypes.POINTER(_P)],
    "pool_destroy": [_P],
}

#: Stream capture modes, as cudaStreamCaptureMode (include/devmm/sim.h).
CAPTURE_MODES = {"global": 0, "thread_local": 1, "relaxed": 2}


def _handle(stream: object) -> Optional[int]:
    """A stream argument as a handle: a Stream, an int (1 legacy, 2 per-thread) or None."""
    return stream.handle if isinstance(stream, Stream) else stream


class Stream:
    """A stream of the simulator (``handle`` is what ``__dlpack__(stream=...)`` takes)."""

    def __init__(self, rt: "Runtime", handle: int) -> None:
        self._rt, self.handle = rt, handle

    def synchronize(self) -> None:
        """Waits on the host for all work queued on it so far."""
        self._rt._call("stream_synchronize", self.handle)

    def destroy(self) -> None:
        """Destroys it: queued work still runs; a later use is an error."""
        self._rt._call("stream_destroy", self.handle)

    def __enter__(self) -> "Stream":
        return self

    def __exit__(self, *exc: object) -> None:
        self.destroy()


_shared.stream_types.append(Stream)  # its .handle is a stream's (_shared.stream_arg)


class Event:
    """An event of one sim device."""

    def __init__(self, rt: "Runtime", handle: int) -> None:
        self._rt, self.handle = rt, handle

    def record(self, stream: object) -> None:
        self._rt._call("event_record", self.handle, _handle(stream))

    def wait(self, stream: object) -> None:
        """Makes stream wait for the last record."""
        self._rt._call("stream_wait_event", _handle(stream), self.handle)

    def synchronize(self) -> None:
        self._rt._call("event_synchronize", self.handle)

    def destroy(self) -> None:
        self._rt._call("event_destroy", self.handle)


class Graph:
    """What a capture recorded (:meth:`Runtime.end_capture`): launch it on a stream to run its
    nodes, in capture order."""

    def __init__(self, rt: "Runtime", handle: int) -> None:
        self._rt, self.handle = rt, handle

    @property
    def nodes(self) -> int:
        return self._rt._nodes(self.handle)

    def launch(self, stream: object) -> None:
        self._rt._call("graph_launch", self.handle, _handle(stream))

    def destroy(self) -> None:
        """Destroys it (after the work its launches queued has run)."""
        self._rt._call("graph_destroy", self.handle)


class Check:
    """The result of a :meth:`Runtime.check` kernel: -1 until it ran, then 1 or 0."""

    def __init__(self) -> None:
        self._v = ctypes.c_int(-1)

    @property
    def value(self) -> int:
        return self._v.value


class Runtime:
    """The test entry of devmm-sim.so (include/devmm/sim.h) through ctypes."""

    def __init__(self, path: str) -> None:
        self._lib = _lib.plugin_library(path)  # the copy devmm loaded: same file, same handle
        self._kernels: dict = {}
        self._next = 0

        def trampoline(key: int) -> None:
            self._kernels.pop(key)()

        self._trampoline = _KERNEL(trampoline)
        for name, args in _SIGNATURES.items():
            fn = getattr(self._lib, "devmm_sim_" + name)
            fn.restype, fn.argtypes = ctypes.c_int, args
        self._view = self._lib.devmm_sim_view
        self._view.restype, self._view.argtypes = _P, [_P, ctypes.c_size_t]
        self._nodes = self._lib.devmm_sim_graph_nodes
        self._nodes.restype, self._nodes.argtypes = ctypes.c_size_t, [_P]

    def _call(self, name: str, *args: object) -> None:
        _lib.check(getattr(self._lib, "devmm_sim_" + name)(*args))

    def set_device(self, device: int) -> None:
        """The calling thread's current sim device."""
        self._call("set_device", device)

    def get_device(self) -> int:
        d = ctypes.c_int()
        self._call("get_device", ctypes.byref(d))
        return d.value

    def stream(self, device: int = 0, nonblocking: bool = False) -> Stream:
        """A new stream on device (nonblocking: it does not wait for the legacy stream)."""
        out = _P()
        self._call("stream_create", device, 1 if nonblocking else 0, ctypes.byref(out))
        return Stream(self, out.value)

    def event(self, device: int = 0) -> Event:
        out = _P()
        self._call("event_create", device, ctypes.byref(out))
        return Event(self, out.value)

    def launch(self, stream: object, kernel: Callable[[], None]) -> None:
        """Queues kernel() on stream; it runs on the stream's thread, reaching device bytes
        with :meth:`read` and :meth:`write`."""
        self._next += 1
        key = self._next
        self._kernels[key] = kernel
        try:
            self._call("launch", _handle(stream), self._trampoline, key)
        except BaseException:
            self._kernels.pop(key, None)
            raise

    def fill(self, stream: object, ptr: int, byte: int, n: int) -> None:
        """A kernel writing byte over n bytes at ptr."""
        self._call("fill", _handle(stream), ptr, byte, n)

    def check(self, stream: object, ptr: int, byte: int, n: int) -> Check:
        """A kernel reading n bytes at ptr: its result is 1 when they all equal byte."""
        c = Check()
        self._call("check", _handle(stream), ptr, byte, n, ctypes.byref(c._v))
        return c

    def view(self, ptr: int, n: int) -> int:
        """The runtime's address for [ptr, ptr + n), or 0 (another device's memory inside a
        kernel, or memory the simulator does not own)."""
        return self._view(ptr, n) or 0

    def read(self, ptr: int, n: int) -> bytes:
        """n bytes of sim memory, read now (inside a kernel, or on the host after a
        synchronize: the host itself faults on device memory)."""
        v = self.view(ptr, n)
        if not v:
            raise ValueError(f"sim: {ptr:#x} (+{n}) is not memory this kernel may read")
        return ctypes.string_at(v, n)

    def write(self, ptr: int, data: bytes) -> None:
        v = self.view(ptr, len(data))
        if not v:
            raise ValueError(f"sim: {ptr:#x} (+{len(data)}) is not memory this kernel may write")
        ctypes.memmove(v, data, len(data))

    def synchronize(self, device: Optional[int] = None) -> None:
        """Waits for every stream of device (None: of every configured device)."""
        if device is not None:
            self._call("device_synchronize", device)
            return
        d = 0
        while self._lib.devmm_sim_device_synchronize(d) == 0:
            d += 1

    def inject(self, call: Optional[str], skip: int = 0, error: int = 999) -> None:
        """Makes the (skip + 1)-th next call of the runtime function `call` ("SetDevice",
        "EventRecord", "FreeAsync", ...) fail with the simulated error `error` (2: out of
        memory, 101: invalid device, 999: unknown); None clears every injection."""
        self._call("inject", None if call is None else call.encode(), skip, error)

    def stats(self) -> dict:
        """Live streams, events, allocations and pending stream-ordered frees."""
        s = Stats(struct_size=ctypes.sizeof(Stats))
        self._call("stats_get", ctypes.byref(s))
        return {n: getattr(s, n) for n, _ in Stats._fields_[1:]}

    def begin_capture(self, stream: object, mode: str = "global") -> None:
        """Starts capturing stream's work into a graph, with CUDA's rules for ``mode``
        ("global": an unsafe call from any thread in global mode invalidates it;
        "thread_local": only from this thread; "relaxed": never)."""
        self._call("capture_begin", _handle(stream), CAPTURE_MODES[mode])

    def end_capture(self, stream: object) -> Graph:
        """Ends stream's capture: its graph, or a DeviceError naming
        simErrorStreamCaptureInvalidated when an unsafe call invalidated it."""
        g = _P()
        self._call("capture_end", _handle(stream), ctypes.byref(g))
        return Graph(self, g.value)

    def capture_status(self, stream: object) -> tuple:
        """("none" | "active" | "invalidated", the capture's id)."""
        st, cid = ctypes.c_int(), ctypes.c_uint64()
        self._call("capture_status", _handle(stream), ctypes.byref(st), ctypes.byref(cid))
        return ("none", "active", "invalidated")[st.value], cid.value

    def exchange_capture_mode(self, mode: str) -> str:
        """Sets the calling thread's capture interaction mode (as
        cudaThreadExchangeStreamCaptureMode); returns the previous one."""
        m = ctypes.c_int(CAPTURE_MODES[mode])
        self._call("capture_mode", ctypes.byref(m))
        return {v: k for k, v in CAPTURE_MODES.items()}[m.value]

    def default_pool_threshold(self, device: int = 0) -> int:
        """The release threshold of device's default pool (process-wide state)."""
        v = ctypes.c_uint64()
        self._call("default_pool_threshold", device, ctypes.byref(v))
        return v.value

    def preferred_location(self, ptr: int) -> Optional[int]:
        """The preferred location advice gave pageable memory at ptr (a ``sim.system`` with a
        headroom advises): a device, -1 for the host, None when none did."""
        v = ctypes.c_int()
        self._call("preferred_location", ptr, ctypes.byref(v))
        return None if v.value == -2 else v.value

    def pool_create(self, device: int = 0) -> int:
        """A pool of device's memory that the caller owns (as ``cudaMemPoolCreate``), for a
        :class:`SimAsyncViewMemoryResource`; destroy it with :meth:`pool_destroy`."""
        out = _P()
        self._call("pool_create", device, ctypes.byref(out))
        return out.value

    def pool_destroy(self, pool: int) -> None:
        self._call("pool_destroy", pool)


_RUNTIME: list = []


def runtime() -> Runtime:
    """The simulator's test entry, loading devmm-sim on demand (the configuration's copy when
    it names the plugin)."""
    if _RUNTIME:
        return _RUNTIME[0]
    path = {p["name"]: p["path"] for p in plugins() if p["status"] == "loaded"}.get("sim")
    if path is None:
        SimMemoryResource(0)  # loads the plugin for this configuration
        path = {p["name"]: p["path"] for p in plugins() if p["status"] == "loaded"}["sim"]
    _RUNTIME.append(Runtime(path))
    return _RUNTIME[0]


__all__ = ["SimMemoryResource", "SimAsyncMemoryResource", "ManagedMemoryResource",
           "PinnedMemoryResource", "runtime", "Runtime", "Stream", "Event", "Graph",
           "CAPTURE_MODES",
           "SimAsyncViewMemoryResource", "SystemMemoryResource", "SamHeadroomMemoryResource",
           "SimAsyncManagedMemoryResource"]
