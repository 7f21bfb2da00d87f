"""Python-defined resources: :class:`CallbackMemoryResource` (``devmm.CallbackMemoryResource``,
also ``devmm.adaptors.CallbackMemoryResource``) and the signature matching its callbacks and
:class:`devmm.FailureCallbackAdaptor`'s share (ADR 46).

>>> import devmm
>>> devmm.CallbackMemoryResource is devmm.adaptors.CallbackMemoryResource
True
"""

from __future__ import annotations

import ctypes

TYPE_CHECKING = False  # typing is imported only by type checkers: it costs start-up time
if TYPE_CHECKING:
    from typing import Callable, Optional

from . import _lib
from ._shared import StreamHandle
from .errors import DevmmError, hold
from .mrs._kind import create_resource
from .resource import MemoryResource, format_device, parse_device

_C = _lib.CONSTANTS


def _new(create, *args) -> int:
    out = ctypes.c_void_p()
    _lib.check(create(*args, ctypes.byref(out)))
    return out.value


def arity(fn: object, what: str, ret: str, *shapes: str) -> int:
    """How many positional arguments to call fn with: the count of one of ``shapes`` (devmm's
    argument list first, then RMM's), chosen among those fn's signature takes by the first rule
    that picks one (test_rmm_shapes.py: test_callback_shape_by_parameter_names):

    1. a positional parameter named as devmm's shape alone names one (``alignment``,
       ``attempt``): devmm's shape;
    2. the parameter at the position of ``stream`` in one of RMM's shapes is named ``stream``
       (allocate: the 2nd, deallocate: the 3rd): that shape;
    3. the shape with as many arguments as fn requires (parameters without a default);
    4. the shape with the most arguments.

    So ``def alloc(nbytes, stream, base=base)`` is RMM's and ``def alloc(n, align, s=None)`` is
    devmm's. A callable without a signature (a builtin such as ``min``) or with ``*args`` gets
    devmm's; one that takes none is a TypeError naming each shape
    (test_from_rmm.py: test_callback_resource_takes_rmms_signatures).

    >>> arity(lambda nbytes, stream, base=None: 0, "allocate", "", "nbytes, alignment, stream",
    ...       "nbytes, stream", "nbytes")
    2
    """
    names = [[w.strip() for w in s.split(",")] for s in shapes]
    counts = [len(n) for n in names]
    got = f"{type(fn).__name__} {fn!r}"
    if callable(fn):
        import inspect  # on first use: it costs start-up time
        try:
            params = inspect.signature(fn).parameters.values()
        except (TypeError, ValueError):
            return counts[0]
        if any(p.kind == p.VAR_POSITIONAL for p in params):
            return counts[0]
        pos = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        need = sum(p.default is p.empty for p in params
                   if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD))
        fits = [n for n in counts if need <= n <= len(pos)]
        if fits:
            only = set(names[0]).difference(*names[1:])  # the names devmm's shape alone has
            if counts[0] in fits and only.intersection(pos):
                return counts[0]
            for shape, n in zip(names[1:], counts[1:]):
                k = shape.index("stream") if "stream" in shape else -1
                if n in fits and 0 <= k < len(pos) and pos[k] == "stream":
                    return n
            return need if need in fits else max(fits)
        got = f"a function of {len(pos)} argument{'' if len(pos) == 1 else 's'}"
    alts = " and ".join(f"({s})" for s in shapes[1:])
    raise TypeError(f"{what} must be callable({shapes[0]}){ret}, got {got} (RMM's {alts} "
                    f"{'is' if len(shapes) == 2 else 'are'} taken too)")


# ----------------------------------------------------------------------------- Python-defined

_ENOMEM, _ECALLBACK = _C["DEVMM_ENOMEM"], _C["DEVMM_ECALLBACK"]
_UNDO_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p)  # gives back what _lib.py_callbacks made


def _report(where: str, e: BaseException) -> int:
    code = _ENOMEM if isinstance(e, MemoryError) else _ECALLBACK
    msg = f"{where} raised {type(e).__name__}: {e}"
    # the devmm error's __cause__ (docs/from-rmm.md); an interrupt or exit is raised as it is
    # (test_from_rmm.py: test_callback_error_is_a_runtime_error_and_interrupts_propagate)
    hold(e, msg, isinstance(e, (KeyboardInterrupt, SystemExit)))
    return _lib.set_error(code, b"%s", msg.encode(errors="replace"))


_RUNTIME_PLUGINS = {_C["DEVMM_DEVICE_CUDA"]: "cuda", _C["DEVMM_DEVICE_ROCM"]: "rocm",
                    _C["DEVMM_DEVICE_SIM"]: "sim"}


def _device_runtime(device) -> Optional[MemoryResource]:
    """The runtime resource (``<plugin>.device``) of a device with streams, whose copy, memset
    and stream ops serve a callback resource on that device; None when no plugin serves it."""
    plugin = _RUNTIME_PLUGINS.get(device.device_type)
    if plugin is None:
        return None
    try:
        r = create_resource(f"{plugin}.device", device.device_id)
    except DevmmError:
        return None
    return r if format_device(device) == r.device else None


class CallbackMemoryResource(MemoryResource):
    """A resource written in Python: ``allocate(nbytes, alignment, stream) -> int`` and
    ``deallocate(ptr, nbytes, alignment, stream)``, or RMM's ``allocate(nbytes, stream)`` and
    ``deallocate(ptr, nbytes, stream)`` (or ``(nbytes)`` and ``(ptr, nbytes)``): each is called
    with the arguments its signature takes, by name first (a parameter ``alignment`` is devmm's,
    ``stream`` in RMM's place RMM's; then the count without defaults: :func:`arity`), devmm's
    when it has none (a builtin); ``stream``
    is None (the default stream) or the stream's handle, an int (for RMM's shapes a
    ``StreamHandle``, an int that devmm's ``allocate``/``deallocate`` take for the stream in the
    alignment's place, so RMM's ``base.allocate(nbytes, stream)`` passes it on), never an RMM
    ``Stream``. It works under every adaptor and with :func:`devmm.empty`; an exception in a
    callback becomes a :class:`CallbackError` (a ``RuntimeError``, as RMM's) carrying its
    message (``MemoryError`` becomes :class:`OutOfMemoryError`; ``KeyboardInterrupt`` and
    ``SystemExit`` are raised as they are). Free what it allocated before the interpreter
    exits: after that its frees are skipped.

    On a device with streams (``cuda:N``, ``rocm:N``, ``sim:N``), copies, memsets and stream
    ordering go through ``runtime``, a resource of the same device (default: the device's
    ``<plugin>.device``, when a plugin serves it): a Python allocator rarely brings them.
    ``host_accessible`` (default: from the device) says the CPU may touch the memory: the CPU
    then copies and fills it.

    The pointer must have the alignment asked for (a multiple of ``alignment``; tensors ask for
    64 bytes on the CPU, 256 on a GPU): one that has not is given back to ``deallocate`` and
    refused (:class:`CallbackError`). An RMM-style callback is not told the alignment, so devmm
    assumes what RMM's users' allocators give, 256 bytes on a device and 16 (``malloc``'s) on
    the CPU; for more it asks ``nbytes + alignment - 1``, aligns the pointer up, and gives
    ``deallocate`` the callback's own pointer and size back.

    >>> import ctypes
    >>> keep = {}
    >>> def alloc(n, align, stream):
    ...     buf = ctypes.create_string_buffer(n + align); base = ctypes.addressof(buf)
    ...     p = -(-base // max(align, 1)) * max(align, 1); keep[p] = buf
    ...     return p
    >>> r = CallbackMemoryResource(alloc, lambda p, n, a, s: keep.pop(p))
    >>> import devmm
    >>> t = devmm.empty((3,), "int8", resource=r); len(keep)
    1
    >>> t.buffer.free(); len(keep)
    0

    RMM's shape over a devmm resource, its stream passed on positionally as RMM's code does:

    >>> from devmm.mrs.cpu import MallocMemoryResource
    >>> base, asked = MallocMemoryResource(), []
    >>> def rmm_alloc(nbytes, stream):
    ...     asked.append(nbytes); return base.allocate(nbytes, stream)
    >>> r = CallbackMemoryResource(rmm_alloc, lambda p, n, s: base.deallocate(p, n, s))
    >>> t = devmm.empty(100, "int8", resource=r)    # the CPU asks for 64-byte alignment
    >>> t.data_ptr % 64, asked
    (0, [163])
    >>> del t
    """

    __slots__ = ()

    def __init__(self, allocate: Callable[[int, int, Optional[int]], int],
                 deallocate: Callable[[int, int, int, Optional[int]], object],
                 device: str = "cpu", name: str = "python",
                 runtime: Optional[MemoryResource] = None,
                 host_accessible: Optional[bool] = None) -> None:
        na = arity(allocate, "CallbackMemoryResource: allocate", " -> int",
                    "nbytes, alignment, stream", "nbytes, stream", "nbytes")
        nd = arity(deallocate, "CallbackMemoryResource: deallocate", "",
                    "ptr, nbytes, alignment, stream", "ptr, nbytes, stream", "ptr, nbytes")
        d = parse_device(device)
        # What an allocate callback not told the alignment is taken to give: CUDA's 256 bytes on
        # a device, malloc's 16 on the CPU; beyond it devmm over-allocates and aligns, and keeps
        # {aligned: (callback's pointer, bytes asked)} for the free (test_from_rmm.py:
        # test_rmm_shaped_callback_gets_the_alignment_it_was_not_told). Always, not after a
        # misaligned try: a callback then sees one call per allocation, with the same size.
        given = 256 if d.device_type != _C["DEVMM_DEVICE_CPU"] else 16
        over: dict = {}

        # Called by libdevmm's trampolines (_lib.py_callbacks), which take the GIL and keep any
        # exception pending on the thread out of these calls: allocate answers the address or
        # 0, free 0 or 1; on failure devmm's error says why.
        def alloc(nbytes: int, alignment: int, stream: Optional[int]) -> int:
            s = StreamHandle(stream) if stream is not None and na < 3 else stream
            extra = alignment - 1 if na < 3 and alignment > given else 0
            try:
                ptr = allocate(*((nbytes, alignment, s) if na == 3 else
                                 (nbytes + extra, s)[:na]))
                if type(ptr) is not int or ptr <= 0 or ptr >= 1 << 63:
                    _lib.set_error(_ECALLBACK, b"%s",
                                   f"the allocate callback of '{name}' returned {ptr!r}, "
                                   f"expected a positive int address".encode())
                    return 0
            except BaseException as e:
                _report(f"the allocate callback of '{name}'", e)
                return 0
            if extra:
                aligned = -(-ptr // alignment) * alignment
                over[aligned] = (ptr, nbytes + extra)
                return aligned
            return ptr

        def free(ptr: int, nbytes: int, alignment: int, stream: Optional[int]) -> int:
            s = StreamHandle(stream) if stream is not None and nd < 4 else stream
            mine = over.pop(ptr, None) if over else None
            p, n, a = (ptr, nbytes, alignment) if mine is None else (mine[0], mine[1], 0)
            try:
                deallocate(*((p, n, a, s) if nd == 4 else (p, n, s)[:nd]))
                return 0
            except BaseException as e:
                if mine is not None:
                    over[ptr] = mine  # still the callback's: a second free finds it
                _report(f"the deallocate callback of '{name}'", e)
                return 1

        flags = _C["DEVMM_RESOURCE_HOST_ACCESSIBLE"] if _lib.device_host_accessible(d) else 0
        if host_accessible is not None:
            flags = _C["DEVMM_RESOURCE_HOST_ACCESSIBLE"] if host_accessible else 0
        if runtime is None and not flags:
            runtime = _device_runtime(d)
        # C trampolines over alloc and free; `user` is a reference to them that the C resource
        # owns (it can outlive this object: buffers and DLPack exports hold it) and releases
        # when it is destroyed
        fn_alloc, fn_free, fn_destroy, user = _lib.py_callbacks(alloc, free)
        try:
            h = _new(_lib.callback_resource_create_ex, fn_alloc, fn_free, fn_destroy, user, d,
                     name.encode(), flags, runtime.handle if runtime is not None else None)
        except BaseException:
            _UNDO_FN(fn_destroy)(user)
            raise
        super().__init__(h)  # the C resource holds the runtime

