"""What devmm's layers share, in one small module below them all (ADR 36): C handles as Python
objects (equality by handle, stream arguments, the Python class of each resource C hands back),
the scoped overrides of the current resource, and the slots where devmm.ipc plugs in the
process side of tensors and buffers. It imports only _lib.

C says what a resource is (``devmm_adaptor_kind``: "statistics", ..., or NULL for a plain
resource); :func:`typed` wraps a handle as the class registered for that kind. The classes
register themselves where they are defined (:mod:`devmm.resource` the plain one,
:mod:`devmm.adaptors` one per adaptor), so this module imports neither: ``devmm``'s
``__init__`` imports devmm.resource, and sets :data:`loader` to import devmm.adaptors when the
first adaptor comes back from C (start-up time).

:data:`scoped` holds ``{device key: resource, None: the innermost resource}``
(:func:`devmm.using_memory_resource`), per thread and per asyncio task, as a ContextVar is; a
device key is ``(device_type, device_id)``. The registry, :func:`devmm.empty` (its hot path) and
:mod:`devmm.profile` read it.

devmm.ipc opens handles into new tensors, so it imports devmm.tensor, and a tensor's own
``ipc_handle()`` and ``__reduce__`` cannot import devmm.ipc back: devmm.ipc calls :func:`plug`
when it is imported (on first use, through :data:`ipc_loader`, which devmm's ``__init__``
sets), and they call :data:`buffer_handle`, :data:`tensor_handle` and :data:`reduce`.

>>> import devmm
>>> KINDS[None].__name__, scoped.get()
('MemoryResource', {})
>>> from devmm.mrs.cpu import SharedMemoryResource
>>> t = devmm.empty(4, resource=SharedMemoryResource())
>>> h = t.ipc_handle()
>>> devmm.open_ipc(h).shape         # devmm.ipc, loaded by that handle, plugged itself in
(4,)
>>> type(devmm.LimitingAdaptor(devmm.get_current_device_resource(), 100)).__name__
'LimitingAdaptor'
>>> KINDS["limiting"].__name__      # registered by devmm.adaptors when it loaded
'LimitingAdaptor'
"""

from __future__ import annotations

from _contextvars import ContextVar  # built in: contextvars.py is only its re-export

TYPE_CHECKING = False  # typing is imported only by type checkers: it costs start-up time
if TYPE_CHECKING:
    from typing import Any, Callable, Optional

from . import _lib
from ._lib import ctypes  # imported on first use (ADR 45)

# ----------------------------------------------------------------------------- handles

KINDS: dict = {}
"""The Python class of each kind C reports (None: a resource that is no adaptor)."""


def register(kind: Optional[str], cls: type) -> type:
    """Makes cls the class that :func:`typed` gives a resource of kind; returns cls."""
    KINDS[kind] = cls
    return cls


def _nothing_to_load() -> object:
    return None


loader: Callable[[], object] = _nothing_to_load
"""Imports the modules that register the other kinds: devmm's ``__init__`` sets it, so that
devmm.adaptors loads with the first adaptor C hands back, not at ``import devmm``."""


def typed(handle: int) -> Any:
    """Wraps a reference the caller owns as the Python class of what C says it is: an adaptor
    as its adaptor class (StatisticsAdaptor, ...), anything else as a MemoryResource."""
    kind = _lib.adaptor_kind(handle)
    key = None if kind is None else kind.decode()
    cls = KINDS.get(key)
    if cls is None:
        loader()
        cls = KINDS[key]
    return cls._from_new(handle)


stream_types: list = []
"""The classes whose ``.handle`` is a stream's (:class:`StreamHandle`; :mod:`devmm.mrs.sim`
adds its ``Stream`` when imported). Any other object's ``.handle`` is no stream: a resource's
and a buffer's are C objects (test_rmm_shapes.py: test_only_stream_objects_are_streams)."""

STREAMS = ("None, an int handle, an object with __cuda_stream__ (RMM's Stream, cuda.core's) "
           "or a devmm stream (StreamHandle, devmm.mrs.sim.Stream)")


def is_stream(obj: object) -> bool:
    """Whether obj is a stream object: it has ``__cuda_stream__`` or is of :data:`stream_types`."""
    return hasattr(obj, "__cuda_stream__") or isinstance(obj, tuple(stream_types))


def stream_arg(stream: object) -> Optional[int]:
    """A stream handle for C: None, an int address (ctypes would wrap anything else), or the
    handle of a stream object: ``__cuda_stream__()``'s (RMM's ``Stream``, cuda.core's) or the
    ``.handle`` of one of :data:`stream_types`; anything else is a TypeError.

    >>> stream_arg(StreamHandle(7)), stream_arg(None)
    (7, None)
    """
    if stream is None:
        return None
    if type(stream) is not int:
        cs = getattr(stream, "__cuda_stream__", None)
        if cs is not None:
            stream = cs()[1]
        elif isinstance(stream, tuple(stream_types)):
            stream = stream.handle  # type: ignore[attr-defined]
        elif isinstance(stream, bool) or not hasattr(type(stream), "__index__"):
            raise TypeError(f"stream must be {STREAMS}, got {type(stream).__name__} {stream!r}")
    return _lib.cint(stream, ctypes.c_size_t, "stream")


def is_bool(value: object) -> bool:
    """Whether value is a bool, Python's or NumPy's (``numpy.bool``): an int where an int id or
    level is asked for, but never meant as one."""
    return type(value).__name__ in ("bool", "bool_")


class StreamHandle(int):
    """A stream's handle as a callback resource gives it to its callbacks: an int, that devmm's
    ``allocate``/``deallocate`` also know for a stream where the alignment stands, so that RMM's
    ``base.allocate(nbytes, stream)`` passes it on (:func:`stream_or_alignment`).

    >>> s = StreamHandle(4096); (s + 0, s.handle, s.__cuda_stream__())
    (4096, 4096, (0, 4096))
    """

    __slots__ = ()

    @property
    def handle(self) -> int:
        return int(self)

    def __cuda_stream__(self) -> tuple[int, int]:
        return (0, int(self))


stream_types.append(StreamHandle)


def stream_or_alignment(alignment: object, stream: object, call: str) -> tuple:
    """(alignment, stream) of ``allocate(nbytes, alignment, stream)`` or ``deallocate(ptr,
    nbytes, alignment, stream)`` called as RMM's ``allocate(nbytes, stream)``: None or a stream
    object (:func:`is_stream`: ``__cuda_stream__``, a :class:`StreamHandle`, a
    :class:`devmm.mrs.sim.Stream`) where the alignment stands is the stream; a plain int is
    devmm's alignment (docs/from-rmm.md, Names); anything else is a TypeError.

    >>> stream_or_alignment(None, None, "allocate"), stream_or_alignment(64, 7, "allocate")
    ((0, None), (64, 7))
    """
    if type(alignment) is int:
        return alignment, stream
    if alignment is None or is_stream(alignment):
        if stream is not None:
            raise TypeError(f"{call}: the stream given twice: {alignment!r} in the alignment's "
                            f"place (RMM's positional stream) and stream={stream!r}")
        return 0, alignment
    if not hasattr(type(alignment), "__index__"):  # a bool goes on: cint says what is wrong
        raise TypeError(f"{call}: the alignment's place takes an int alignment or RMM's stream; "
                        f"a stream is {STREAMS}, got {type(alignment).__name__} {alignment!r}")
    return alignment, stream


STREAM_HINT = ("a stream handle that is a plain int goes as stream=...: allocate(nbytes, "
               "stream=s), deallocate(ptr, nbytes, stream=s); in the alignment's place only None "
               "or a stream object is taken for RMM's stream")


def stream_hint(rc: int, alignment: int) -> int:
    """rc; an EINVAL for a non-zero alignment also says how a stream is given (RMM's
    ``allocate(nbytes, stream)`` with an int stream lands in the alignment)."""
    if rc == _lib.CONSTANTS["DEVMM_EINVAL"] and alignment:
        said = _lib.last_error().decode(errors="replace")
        return _lib.set_error(rc, b"%s", f"{said} ({STREAM_HINT})".encode(errors="replace"))
    return rc


class SameHandle:
    """Wrappers of one C object compare equal and hash alike: each call that returns a
    resource or a buffer makes a new wrapper (two live C objects never share an address)."""

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SameHandle):
            return NotImplemented
        return self._h == other._h  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash(self._h)  # type: ignore[attr-defined]


# ----------------------------------------------------------------------------- scoped overrides

scoped: ContextVar[dict] = ContextVar("devmm_scoped", default={})


set_objects: dict = {}
"""{device key: the MemoryResource last set from Python, or the wrapper get_current_device_resource
made of C's}: what it gives back (the same object, of its own class: RMM's) while C's current
resource is still it."""
configured: dict = {}
"""{device key: the resource C had before the first set from Python since devmm.init (None:
none yet)}: what reset_current_device_resource restores. devmm.init clears both."""


def device_key(d: object) -> tuple[int, int]:
    """(device_type, device_id) of a C Device (``_lib.Device``)."""
    return (d.device_type, d.device_id)  # type: ignore[attr-defined]


# ----------------------------------------------------------------------------- the process side


ipc_loader: Callable[[], Any] = _nothing_to_load
"""Imports devmm.ipc (set by ``__init__``): it is imported on first use, not with the package,
for start-up time (bench_python.py startup)."""


def _ipc() -> None:
    ipc_loader()
    if buffer_handle is _unplugged_buffer:
        raise RuntimeError("devmm.ipc is not imported: import devmm (its __init__ loads it)")


def _unplugged_buffer(obj: object) -> bytes:
    _ipc()
    return buffer_handle(obj)


def _unplugged_tensor(obj: object) -> bytes:
    _ipc()
    return tensor_handle(obj)


def _unplugged_reduce(obj: object) -> tuple:
    _ipc()
    return reduce(obj)


buffer_handle: Callable[[Any], bytes] = _unplugged_buffer
"""devmm.ipc.buffer_handle: the handle of a buffer's memory."""
tensor_handle: Callable[[Any], bytes] = _unplugged_tensor
"""devmm.ipc.tensor_handle: the handle of a tensor (its buffer's and its layout)."""
reduce: Callable[[Any], tuple] = _unplugged_reduce
"""devmm.ipc's pickling by value (plain pickle, copy.deepcopy)."""


class _ReductionHook:
    """A meta path finder that loads devmm.ipc, which registers its reducer with
    ForkingPickler, once multiprocessing.reduction is imported: ``import devmm`` imports
    neither multiprocessing nor devmm.ipc."""

    def find_spec(self, name: str, path: object = None, target: object = None) -> object:
        if name != "multiprocessing.reduction":
            return None
        import importlib.machinery
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return None
        real = spec.loader.exec_module

        def exec_module(module: object) -> None:
            real(module)
            ipc_loader().register_with(module)
        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def install_reduction_hook() -> None:
    """Called once by ``__init__``: devmm.ipc now if multiprocessing.reduction is imported
    already, else when it is."""
    import sys
    if "multiprocessing.reduction" in sys.modules:
        ipc_loader()
    elif not any(isinstance(f, _ReductionHook) for f in sys.meta_path):
        sys.meta_path.insert(0, _ReductionHook())


def plug(buffer: Callable[[Any], bytes], tensor: Callable[[Any], bytes],
         by_value: Callable[[Any], tuple]) -> None:
    """Called once by devmm.ipc at import."""
    global buffer_handle, tensor_handle, reduce
    buffer_handle, tensor_handle, reduce = buffer, tensor, by_value
