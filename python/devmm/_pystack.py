"""Python call stacks for the tracking adaptor: ``TrackingAdaptor(r, python_stack=N)``.

An allocation reaches C from Python in one foreign call (``devmm_ffi_tensor_empty`` for
:func:`devmm.empty`), and frameworks allocate from C without asking Python at all. So the stack
is taken in C's hands: the tracking adaptor calls a *context hook* after each allocation it
records, on the allocating thread (``devmm_tracking_options.context_capture``). The hook is a
ctypes callback; inside it, the caller of the foreign call is the callback's own caller frame,
so ``sys._getframe(1)`` starts the walk. devmm's own frames are skipped; at most N frames are
kept (like ``tracemalloc.start(N)``), and each distinct stack is interned once: the C adaptor
stores only its number (the tag). A tracking adaptor created without ``python_stack`` has no
hook, so it costs nothing.

>>> import devmm
>>> from devmm.mrs.cpu import MallocMemoryResource
>>> tr = devmm.TrackingAdaptor(MallocMemoryResource(), python_stack=4)
>>> t = devmm.empty(16, "int8", resource=tr)
>>> tr.lookup(t.data_ptr)["python_stack"][0][2]    # (file, line, function), innermost first
'<module>'
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading

from . import _lib

_CAPTURE = ctypes.CFUNCTYPE(ctypes.c_uint64, ctypes.c_void_p, ctypes.c_size_t)
_DESCRIBE = ctypes.CFUNCTYPE(ctypes.c_size_t, ctypes.c_void_p, ctypes.c_uint64, ctypes.c_void_p,
                             ctypes.c_size_t)
_RELEASE = ctypes.CFUNCTYPE(None, ctypes.c_void_p)

_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep

# Every distinct stack once, shared by all adaptors: tag n is _STACKS[n - 1]. Stacks are kept for
# the life of the process (freed allocations' stacks stay readable in histories and snapshots);
# their number is bounded by the program's distinct allocation sites times the depth.
_STACKS: list = []
_IDS: dict = {}
_INTERN = threading.Lock()
_LIVE: dict = {}  # key -> the callbacks of one adaptor, until C releases them


def stack_of(tag: int) -> list:
    """The frames of a tag as ``(filename, lineno, function)``, innermost first ([] for 0)."""
    return list(_STACKS[tag - 1]) if 0 < tag <= len(_STACKS) else []


def format_stack(frames) -> str:
    """One line per frame, innermost first: ``file:line in function``."""
    return "\n".join(f"{f}:{n} in {name}" for f, n, name in frames)


def _capture(depth: int) -> int:
    f = sys._getframe(2)  # 0: this, 1: the ctypes callback, 2: the caller of the foreign call
    while f is not None and f.f_code.co_filename.startswith(_PACKAGE):
        f = f.f_back
    frames = []
    while f is not None and len(frames) < depth:
        code = f.f_code
        frames.append((code.co_filename, f.f_lineno, code.co_name))
        f = f.f_back
    if not frames:
        return 0  # a thread without Python frames (a framework's own thread)
    key = tuple(frames)
    tag = _IDS.get(key)
    if tag is None:
        with _INTERN:
            tag = _IDS.get(key)
            if tag is None:
                _STACKS.append(key)
                tag = _IDS[key] = len(_STACKS)
    return tag


def create(upstream_handle: int, backtraces: bool, python_stack: int, history: int) -> int:
    """A new C tracking adaptor with the options; returns its handle."""
    depth = int(python_stack)
    if depth < 0 or history < 0:
        raise ValueError(f"python_stack and history must be >= 0, got {python_stack} "
                         f"and {history}")
    opts = _lib.TrackingOptions(struct_size=ctypes.sizeof(_lib.TrackingOptions),
                                backtraces=1 if backtraces else 0, history=history)
    key = None
    if depth:
        def capture(_user: int, _nbytes: int) -> int:
            try:
                return _capture(depth)
            except BaseException:  # never let an exception cross C: no stack for this one
                return 0

        def describe(_user: int, tag: int, buf: int, cap: int) -> int:
            try:
                data = format_stack(stack_of(tag)).encode(errors="replace")[:max(cap - 1, 0)]
                ctypes.memmove(buf, data, len(data))
                return len(data)
            except BaseException:
                return 0

        fns = (_CAPTURE(capture), _DESCRIBE(describe))
        key = id(fns)
        # The callbacks live until the C adaptor is destroyed (buffers and DLPack exports can
        # keep it after this object), then its release hook drops them.
        _LIVE[key] = fns
        opts.context_capture = ctypes.cast(fns[0], ctypes.c_void_p)
        opts.context_describe = ctypes.cast(fns[1], ctypes.c_void_p)
        opts.context_release = _RELEASE_PTR
        opts.context_user = key
    out = ctypes.c_void_p()
    rc = _lib.tracking_adaptor_create_ex(upstream_handle, ctypes.byref(opts), ctypes.byref(out))
    if rc:
        _LIVE.pop(key, None)
        _lib.check(rc)
    return out.value


_RELEASE_FN = _RELEASE(lambda key: _LIVE.pop(key, None))
_RELEASE_PTR = ctypes.cast(_RELEASE_FN, ctypes.c_void_p)
