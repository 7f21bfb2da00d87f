"""Memory resources, the per-device registry and scoped overrides.

>>> import devmm
>>> r = devmm.get_current_device_resource("cpu")
>>> p = r.allocate(64)
>>> r.deallocate(p, 64)
>>> r.device
'cpu'
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing is imported only by type checkers: it costs start-up time
if TYPE_CHECKING:
    from typing import Optional, Union

    DeviceLike = Union[str, tuple, None]

import os
from _thread import RLock  # built in: threading.py costs start-up time

from . import _lib
from ._lib import ctypes  # imported on first use (ADR 45)
from ._lib import format_device
from ._shared import (STREAM_HINT, SameHandle, configured, device_key, register, scoped,
                      set_objects, stream_arg, stream_hint, stream_or_alignment, typed)
from .errors import DevmmValueError

# What each C resource's allocate() gave out through Python: {resource address: {ptr: (nbytes,
# alignment)}}, so a raw deallocate of anything else is refused, not a crash
# (test_raw_deallocate_refuses_what_allocate_did_not_give).
_given: dict[int, dict[int, tuple[int, int]]] = {}
_DEVICE_CACHE: dict[object, _lib.Device] = {}  # None: the CPU
_HOME_CACHE: dict[object, _lib.Device] = {}  # home_device's, as _DEVICE_CACHE
# Held while C's current resource of a device and what Python remembers of it (set_objects,
# configured) change or are stored together: a set never lands between a get's C read and its
# store (tests/python/test_rmm_identity.py). Reentrant: a finaliser run while it is held may set.
_lock = RLock()


def _after_fork() -> None:
    """A thread that held _lock at a fork never releases the child's copy: a new one there
    (tests/python/test_fork.py)."""
    global _lock
    _lock = RLock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)


def parse_device(device: DeviceLike) -> _lib.Device:
    """A C Device from "cpu", "cuda:0", (2, 0), ... (cached).

    >>> d = parse_device("cuda:1"); (d.device_type, d.device_id)
    (2, 1)
    """
    try:
        return _DEVICE_CACHE[device]
    except (KeyError, TypeError):
        pass
    d = _lib.Device()  # ctypes, imported on the first device parsed (ADR 45)
    if device is None:
        d.device_type = _lib.CONSTANTS["DEVMM_DEVICE_CPU"]
    elif isinstance(device, tuple) and len(device) == 2:
        d.device_type = _lib.cint(device[0], ctypes.c_int32, "device type")
        d.device_id = _lib.cint(device[1], ctypes.c_int32, "device id")
    elif isinstance(device, str):
        rc = _lib.device_parse(device.encode(), ctypes.byref(d))
        if rc:
            raise ValueError(_lib.last_error().decode())
    else:
        raise TypeError(f"device must be a string like 'cpu' or 'cuda:0', or a "
                        f"(device_type, device_id) tuple, got {device!r}")
    _DEVICE_CACHE[device] = d
    return d


def home_device(device: DeviceLike) -> _lib.Device:
    """The device whose current resource serves device (cached): the GPU of managed memory
    (``sim_managed:0``: ``sim:0``, C's ``devmm_device_home``), else device itself.

    >>> format_device(home_device("cuda_managed:1")), format_device(home_device("sim_host:0"))
    ('cuda:1', 'sim_host:0')
    """
    try:
        return _HOME_CACHE[device]
    except (KeyError, TypeError):
        pass
    d = _HOME_CACHE[device] = _lib.device_home(parse_device(device))
    return d


# format_device (``"cpu"``, ``"cuda:0"``, ... as the C core writes a device) is _lib's: the
# out-of-memory error formats its device too, and errors may import nothing above _lib.


class MemoryResource(SameHandle):
    """A devmm resource (a reference to a C ``devmm_resource``).

    Every allocation through it is a raw pointer (an int); most users allocate tensors
    with :func:`devmm.empty` instead.
    """

    # _cap owns one reference (a capsule from libdevmm: no __del__), _h is its address
    __slots__ = ("_cap", "_h", "_upstream", "_keep", "_dk", "__weakref__")

    def __init__(self, handle: int, upstream: Optional["MemoryResource"] = None,
                 keep: object = None) -> None:
        self._cap = _lib.py_own_resource(handle)  # this object owns the reference
        self._h = handle
        self._upstream = upstream
        self._keep = keep
        self._dk = None

    @classmethod
    def _from_new(cls, handle: int) -> "MemoryResource":
        """Wraps a reference the caller already owns as a cls (no constructor runs)."""
        obj = cls.__new__(cls)
        obj._cap = _lib.py_own_resource(handle)
        obj._h, obj._upstream, obj._keep, obj._dk = handle, None, None, None
        return obj

    @property
    def _devkey(self) -> tuple:
        """(device_type, device_id), cached: the device of a resource never changes."""
        dk = self._dk
        if dk is None:
            d = _lib.resource_device(self._h)
            dk = self._dk = (d.device_type, d.device_id)
        return dk

    @property
    def _homekey(self) -> tuple:
        """(device_type, device_id) of the device whose current resource this one can be: the
        GPU of managed memory (sim_managed:0: sim:0), else its own (docs/api.md, the
        registry)."""
        d = _lib.device_home(_lib.resource_device(self._h))
        return (d.device_type, d.device_id)

    @property
    def handle(self) -> int:
        """The C ``devmm_resource *`` (borrowed)."""
        return self._h

    @property
    def name(self) -> str:
        """The resource's name, e.g. ``"statistics(cpu.malloc)"``."""
        return _lib.resource_name(self._h).decode()

    @property
    def device(self) -> str:
        """The device it allocates on, e.g. ``"cpu"`` or ``"cuda:0"``."""
        return format_device(_lib.resource_device(self._h))

    @property
    def upstream(self) -> Optional["MemoryResource"]:
        """The upstream of an adaptor (typed, as :func:`get_current_device_resource`), or
        None."""
        if self._upstream is not None:
            return self._upstream
        h = _lib.resource_upstream(self._h)
        return typed(_lib.resource_retain(h)) if h else None

    def allocate(self, nbytes: int, alignment: int = 0, stream: Optional[int] = None) -> int:
        """Allocates nbytes and returns the address (0 for 0 bytes). RMM's ``allocate(nbytes,
        stream)`` works as written where its stream is None or a stream object; a plain int
        there is the alignment (docs/from-rmm.md, Names)."""
        alignment, stream = stream_or_alignment(alignment, stream, "allocate")
        nbytes = _lib.cint(nbytes, ctypes.c_size_t, "nbytes")
        alignment = _lib.cint(alignment, ctypes.c_size_t, "alignment")
        out = ctypes.c_void_p()
        _lib.check(stream_hint(_lib.allocate(self._h, nbytes, alignment, stream_arg(stream),
                                             ctypes.byref(out)), alignment))
        if out.value:
            _given.setdefault(self._h, {})[out.value] = (nbytes, alignment)
        return out.value or 0

    def deallocate(self, ptr: int, nbytes: int, alignment: int = 0,
                   stream: Optional[int] = None) -> None:
        """Frees memory from :meth:`allocate` (same nbytes and alignment). A pointer this
        resource's :meth:`allocate` did not give out (a double or foreign free), or other
        nbytes or alignment than it was given for, raises :class:`DevmmValueError` instead of
        reaching the allocator, which would crash the interpreter (docs/api.md). RMM's
        ``deallocate(ptr, nbytes, stream)`` works as :meth:`allocate`'s stream does."""
        alignment, stream = stream_or_alignment(alignment, stream, "deallocate")
        ptr = _lib.cint(ptr, ctypes.c_size_t, "ptr")
        nbytes = _lib.cint(nbytes, ctypes.c_size_t, "nbytes")
        alignment = _lib.cint(alignment, ctypes.c_size_t, "alignment")
        if ptr:
            given = _given.get(self._h, {})
            was = given.get(ptr)
            if was is None:
                raise DevmmValueError(f"deallocate(0x{ptr:x}, nbytes={nbytes}) on {self.name}: "
                                      "the pointer was not given out by allocate() (or was "
                                      "freed already)")
            if was != (nbytes, alignment):
                raise DevmmValueError(f"deallocate(0x{ptr:x}) on {self.name}: nbytes={nbytes}, "
                                      f"alignment={alignment}, but allocate() gave it for "
                                      f"nbytes={was[0]}, alignment={was[1]}"
                                      + (f" ({STREAM_HINT})" if alignment != was[1] else ""))
        _lib.check(_lib.deallocate(self._h, ptr, nbytes, alignment, stream_arg(stream)))
        if ptr:
            given.pop(ptr, None)

    def mem_info(self) -> tuple[int, int]:
        """(free, total) bytes of the device as this resource sees it.

        >>> import devmm
        >>> free, total = devmm.get_current_device_resource().mem_info(); 0 <= free <= total
        True
        """
        f, t = ctypes.c_size_t(), ctypes.c_size_t()
        _lib.check(_lib.mem_info(self._h, ctypes.byref(f), ctypes.byref(t)))
        return f.value, t.value

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name} on {self.device}>"


register(None, MemoryResource)  # a resource C reports as no adaptor (devmm._shared.typed)

# ----------------------------------------------------------------------------- the registry
# Scoped overrides live in devmm._shared (devmm.empty and devmm.profile read them too).


def get_current_device_resource(device: DeviceLike = None) -> MemoryResource:
    """The resource :func:`devmm.empty` uses for device (default: cpu; managed memory's device
    is its GPU's, :func:`home_device`: ``sim_managed:0`` is ``sim:0``'s): the innermost
    :func:`using_memory_resource` for it, else the process-wide one from devmm.ini, as the
    class of its top adaptor (a ``statistics`` stack is a :class:`StatisticsAdaptor`), or the
    very object :func:`set_current_device_resource` was given. Either way the same object comes
    back each time while it is the current one, as RMM's does.

    >>> import devmm
    >>> devmm.get_current_device_resource().device
    'cpu'
    >>> devmm.get_current_device_resource() is devmm.get_current_device_resource()
    True
    """
    d = home_device(device)  # sim_managed:0 is served by sim:0's (test_rmm_devices.py)
    key = device_key(d)
    over = scoped.get().get(key)
    if over is not None:
        return over
    out = ctypes.c_void_p()
    _lib.check(_lib.get_current_resource(d, ctypes.byref(out)))
    mine = set_objects.get(key)
    _lib.py_own_resource(out.value)  # the reference C gave: released as it goes
    if mine is not None and mine._h == out.value:
        return mine  # (mine holds a reference: the address is not reused while remembered)
    with _lock:
        return _remember(d, key)


def _remember(d: _lib.Device, key: tuple) -> MemoryResource:
    """C's current resource of d, wrapped once and remembered (under _lock): one devmm.ini
    built (or C set) is then given back itself, as RMM's is (tests/python/test_rmm_identity.py).
    The wrapper's reference keeps the address from being reused while it is remembered;
    devmm.init forgets it, a set or reset replaces it."""
    while True:
        out = ctypes.c_void_p()
        _lib.check(_lib.get_current_resource(d, ctypes.byref(out)))
        mine = set_objects.get(key)
        if mine is not None and mine._h == out.value:
            _lib.py_own_resource(out.value)  # the reference C gave: released as it goes
            return mine  # another thread wrapped it first
        obj = typed(out.value)
        if set_objects.get(key) is mine:  # else this thread set one meanwhile: look again
            set_objects[key] = obj
            return obj


def set_current_device_resource(resource: MemoryResource,
                                device: DeviceLike = None) -> Optional[MemoryResource]:
    """Makes resource the process-wide current resource of its home device, the one device
    (None) and :func:`devmm.empty` of that device allocate from: the GPU of managed memory
    (``sim_managed:0``: ``sim:0``), else its own device; returns the previous one. A device
    that is not resource's home device raises :class:`DevmmValueError`, and nothing changes.

    >>> import devmm
    >>> from devmm.mrs.cpu import MallocMemoryResource
    >>> prev = devmm.set_current_device_resource(MallocMemoryResource())
    >>> _ = devmm.set_current_device_resource(prev)
    >>> devmm.set_current_device_resource(MallocMemoryResource(), "sim:0")
    Traceback (most recent call last):
    ...
    devmm.errors.DevmmValueError: set_current_device_resource: cpu.malloc (memory on cpu) is \
a resource of cpu, not of sim:0: call set_current_device_resource(mr) or \
set_current_device_resource(mr, "cpu")
    """
    if not isinstance(resource, MemoryResource):
        raise TypeError(f"expected a MemoryResource, got {type(resource).__name__}")
    home = resource._homekey
    d = parse_device(home if device is None else device)
    if device is not None and (d.device_type, d.device_id) != home:
        h = format_device(parse_device(home))
        raise DevmmValueError(f"set_current_device_resource: {resource.name} (memory on "
                              f"{resource.device}) is a resource of {h}, not of "
                              f"{format_device(d)}: call set_current_device_resource(mr) or "
                              f"set_current_device_resource(mr, \"{h}\")")
    return set_current_unchecked(resource, d)


def set_current_unchecked(resource: MemoryResource,
                          d: _lib.Device) -> Optional[MemoryResource]:
    """set_current_device_resource's set, with no check of the device: devmm.rmm_compat re-sets
    what C's registry holds for d there, whatever device its memory is on (a C caller may stand
    another device's resource in, ADR 47; tests/python/test_rmm_devices.py).

    >>> import devmm
    >>> from devmm.mrs.cpu import MallocMemoryResource
    >>> prev = set_current_unchecked(MallocMemoryResource(), parse_device("cpu"))
    >>> set_current_unchecked(prev, parse_device("cpu")).name
    'cpu.malloc'
    """
    prev = ctypes.c_void_p()
    key = device_key(d)
    with _lock:
        _lib.check(_lib.set_current_resource(d, resource._h, ctypes.byref(prev)))
        was = set_objects.get(key)
        set_objects[key] = resource
        if was is not None and was._h == prev.value:
            _lib.py_own_resource(prev.value)  # the reference C gave: released as it goes
            out = was
        else:
            out = typed(prev.value) if prev.value else None
        configured.setdefault(key, out)
    return out


def reset_current(d: _lib.Device) -> None:
    """reset_current_device_resource's: puts back the resource C had for d before the first set
    from Python since devmm.init (nothing set since: nothing changes).

    >>> import devmm
    >>> from devmm.mrs.cpu import MallocMemoryResource
    >>> _ = devmm.set_current_device_resource(MallocMemoryResource())
    >>> reset_current(parse_device("cpu")); reset_current(parse_device("cpu"))  # once is enough
    """
    key = device_key(d)
    with _lock:
        if key not in configured:
            return
        was = configured[key]
        _lib.check(_lib.set_current_resource(d, was.handle if was is not None else None, None))
        del configured[key]
        set_objects.pop(key, None)
        if was is not None:
            set_objects[key] = was


class using_memory_resource:
    """Within the block, allocations for resource's home device (as
    :func:`set_current_device_resource`'s: managed memory's GPU, and so its managed device too)
    and those naming no device go to resource. Per thread and per asyncio task.

    >>> import devmm
    >>> stats = devmm.StatisticsAdaptor(devmm.get_current_device_resource())
    >>> with devmm.using_memory_resource(stats):
    ...     t = devmm.empty((4,), "int32")
    >>> stats.current_bytes
    16
    """

    __slots__ = ("_resource", "_tokens")

    def __init__(self, resource: MemoryResource) -> None:
        if not isinstance(resource, MemoryResource):
            raise TypeError(f"expected a MemoryResource, got {type(resource).__name__}")
        self._resource = resource
        self._tokens: list = []

    def __enter__(self) -> MemoryResource:
        new = dict(scoped.get())
        new[self._resource._homekey] = self._resource  # managed memory: its GPU's
        new[None] = self._resource
        self._tokens.append(scoped.set(new))
        return self._resource

    def __exit__(self, *exc: object) -> None:
        scoped.reset(self._tokens.pop())
