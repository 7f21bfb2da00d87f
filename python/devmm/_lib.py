"""The binding of libdevmm, all of it: finding the library, every C signature (one table), the
C constants (:data:`CONSTANTS`) and the built-in functions libdevmm makes for the hot paths.

Nothing else in the package opens the library or binds a symbol. Every call that returns a
status goes through :func:`check`, which turns a failure into the matching exception with the C
message.

The hot paths (``empty``, ``__dlpack__``, ``buffer.free()``) call CPython built-ins that
libdevmm makes at run time through the stable ABI (``devmm_ffi_python_function``, ADR 12): a
call costs what ``len()`` costs, not a ctypes call. Their tensors, buffers and holds are
PyCapsules whose destructors release the C object, so no Python object here needs ``__del__``
to give C memory back.
"""

from __future__ import annotations

import ctypes
import os
import sys
from ctypes import (POINTER, Structure, c_char_p, c_int, c_int32, c_int64, c_size_t,
                    c_uint, c_uint8, c_uint16, c_uint32, c_uint64, c_void_p)

from . import errors

# ----------------------------------------------------------------------------- structs


class Device(Structure):
    _fields_ = [("device_type", c_int32), ("device_id", c_int32)]


class DType(Structure):
    _fields_ = [("code", c_uint8), ("bits", c_uint8), ("lanes", c_uint16)]


class Layout(Structure):
    _fields_ = [("kind", c_int), ("inner", c_int), ("ndim", c_int),
                ("strides", POINTER(c_int64)), ("unit_stride_alignment", c_size_t),
                ("base_alignment", c_size_t)]


class LayoutResult(Structure):
    _fields_ = [("span_bytes", c_size_t), ("base_alignment", c_size_t), ("nelems", c_size_t)]


class Statistics(Structure):
    _fields_ = [(n, c_int64) for n in ("current_bytes", "peak_bytes", "total_bytes",
                                       "current_count", "peak_count", "total_count")]


class AllocationInfo(Structure):
    _fields_ = [("ptr", c_void_p), ("bytes", c_size_t), ("alignment", c_size_t),
                ("stream", c_void_p), ("thread_id", c_uint64), ("nframes", c_int),
                ("frames", c_void_p * 16), ("tag", c_uint64), ("time_ns", c_uint64)]


# ----------------------------------------------------------------------------- observability

class TrackingOptions(Structure):
    _fields_ = [("struct_size", c_size_t), ("backtraces", c_int), ("history", c_size_t),
                ("context_capture", c_void_p), ("context_describe", c_void_p),
                ("context_release", c_void_p), ("context_user", c_void_p)]


class TrackingEvent(Structure):
    _fields_ = [("time_ns", c_uint64), ("ptr", c_void_p), ("bytes", c_size_t),
                ("stream", c_void_p), ("thread_id", c_uint64), ("tag", c_uint64),
                ("action", c_uint32), ("reserved_", c_uint32)]


class LogEvent(Structure):  # 48 bytes: time_ns, ptr, bytes, stream (u64), peer (i64), thread, action
    _fields_ = [("time_ns", c_uint64), ("ptr", c_uint64), ("bytes", c_uint64),
                ("stream", c_uint64), ("peer", c_int64), ("thread", c_uint32),
                ("action", c_uint32)]


class Log(Structure):
    _fields_ = [("nevents", c_size_t), ("events", POINTER(LogEvent)), ("nthreads", c_size_t),
                ("threads", POINTER(c_uint64)), ("unmatched_frees", c_size_t),
                ("never_freed", c_size_t), ("double_frees", c_size_t),
                ("resized_frees", c_size_t), ("first_double_free", c_size_t),
                ("first_resized_free", c_size_t), ("double_free_line", c_size_t),
                ("resized_free_line", c_size_t)]


class OomAllocation(Structure):
    _fields_ = [("ptr", c_void_p), ("bytes", c_size_t), ("thread_id", c_uint64),
                ("where", ctypes.c_char * 192)]


class OomReport(Structure):
    _fields_ = [("struct_size", c_size_t), ("device", Device), ("requested_bytes", c_size_t),
                ("alignment", c_size_t), ("stack", ctypes.c_char * 256),
                ("reason", ctypes.c_char * 512), ("current_bytes", c_int64),
                ("peak_bytes", c_int64), ("counted_by", ctypes.c_char * 256),
                ("free_bytes", c_int64), ("total_bytes", c_int64),
                ("tracking", ctypes.c_char * 256), ("live_count", c_size_t),
                ("live_bytes", c_size_t), ("nlargest", c_size_t),
                ("largest", OomAllocation * 5)]


class Option(Structure):
    _fields_ = [("key", c_char_p), ("value", c_char_p), ("line", c_int)]


# ----------------------------------------------------------------------------- loading

_HERE = os.path.dirname(os.path.abspath(__file__))


def _secure_execution() -> bool:
    """Whether this process runs set-uid, set-gid or with gained capabilities (the kernel's
    AT_SECURE, which ``secure_getenv`` reads for the C side's variables)."""
    try:
        getauxval = ctypes.CDLL(None).getauxval
    except (OSError, AttributeError):  # no getauxval: compare the real and effective ids
        return os.getuid() != os.geteuid() or os.getgid() != os.getegid()
    getauxval.restype, getauxval.argtypes = ctypes.c_ulong, [ctypes.c_ulong]
    return getauxval(23) != 0  # AT_SECURE


def _candidates() -> list[str]:
    """Where libdevmm is looked for, in order: $DEVMM_LIBRARY alone when set; the library this
    package was installed with (the wheel's own ``_native/libdevmm.so``, or the libdir that
    ``meson install`` recorded); then the dynamic loader's own search.

    $DEVMM_LIBRARY is the user's own choice, as LD_PRELOAD is: it is honoured where the
    environment is, and not otherwise: not under ``python -I`` or ``-E`` (which ignore
    PYTHONPATH and the rest), not in a set-id process. It must be an absolute path. The file
    is not checked as plugins are (docs/plugins.md, ADR 39)."""
    env = os.environ.get("DEVMM_LIBRARY")
    if env and not sys.flags.ignore_environment and not _secure_execution():
        if not os.path.isabs(env):
            raise ImportError(f"devmm: DEVMM_LIBRARY must be an absolute path, not {env!r} "
                              "(a relative one names a different file in each directory)")
        return [env]  # an explicit choice is the only one
    found = []
    try:  # written at install time next to this file
        from ._build_config import LIBDIR, LIBRARY  # type: ignore[import-not-found]
        found.append(os.path.join(_HERE, LIBDIR, LIBRARY))  # an absolute LIBDIR stays as it is
    except ImportError:
        pass
    found.append("libdevmm.so.0")  # the dynamic loader's own search (ldconfig, LD_LIBRARY_PATH)
    return found


def _load() -> ctypes.CDLL:
    tried = []
    for path in _candidates():
        try:
            found = ctypes.CDLL(path)
        except OSError as e:
            tried.append(f"{path}: {e}")
            continue
        if not hasattr(found, "devmm_version"):  # test_devmm_library_naming_another_library
            named = "DEVMM_LIBRARY=" if os.environ.get("DEVMM_LIBRARY") else ""
            raise ImportError(f"devmm: {named}{path} is not libdevmm (it has no devmm_version)")
        return found
    raise ImportError("devmm: cannot load libdevmm (set DEVMM_LIBRARY to its path, or run "
                      "under `meson devenv -C build`); tried " + "; ".join(tried))


lib = _load()
LIBRARY_PATH = getattr(lib, "_name", "")

# ----------------------------------------------------------------------------- signatures

_P = c_void_p
_ERR = {}  # status code -> (exception class, name)

# name: (restype, argtypes). Status-returning functions have restype c_int.
_SIGNATURES = {
    "devmm_last_error": (c_char_p, []),
    "devmm_clear_error": (None, []),
    "devmm_status_name": (c_char_p, [c_int]),
    "devmm_version": (c_char_p, []),
    "devmm_dtype_parse": (c_int, [c_char_p, POINTER(DType)]),
    "devmm_dtype_count": (c_size_t, []),
    "devmm_dtype_name_at": (c_char_p, [c_size_t]),
    "devmm_dtype_itemsize": (c_size_t, [DType]),
    "devmm_device_parse": (c_int, [c_char_p, POINTER(Device)]),
    "devmm_device_format": (c_int, [Device, c_char_p, c_size_t]),
    "devmm_device_host_accessible": (c_int, [Device]),
    "devmm_layout_row_major": (Layout, []),
    "devmm_layout_column_major": (Layout, []),
    "devmm_layout_strided": (Layout, [c_int, POINTER(c_int64)]),
    "devmm_layout_aligned": (Layout, [c_int, c_size_t, c_size_t]),
    "devmm_layout_compute": (c_int, [POINTER(Layout), c_int, POINTER(c_int64), c_size_t,
                                     POINTER(c_int64), POINTER(LayoutResult)]),
    "devmm_resource_retain": (_P, [_P]),
    "devmm_resource_name": (c_char_p, [_P]),
    "devmm_resource_device": (Device, [_P]),
    "devmm_resource_flags": (c_uint, [_P]),
    "devmm_resource_upstream": (_P, [_P]),
    "devmm_adaptor_kind": (c_char_p, [_P]),
    "devmm_allocate": (c_int, [_P, c_size_t, c_size_t, _P, POINTER(c_void_p)]),
    "devmm_deallocate": (c_int, [_P, _P, c_size_t, c_size_t, _P]),
    "devmm_mem_info": (c_int, [_P, POINTER(c_size_t), POINTER(c_size_t)]),
    "devmm_copy": (c_int, [_P, _P, _P, c_size_t, _P]),
    "devmm_memset": (c_int, [_P, _P, c_int, c_size_t, _P]),
    "devmm_synchronize": (c_int, [_P, _P]),
    "devmm_stream_wait": (c_int, [_P, _P, _P]),
    "devmm_get_current_resource": (c_int, [Device, POINTER(c_void_p)]),
    "devmm_set_current_resource": (c_int, [Device, _P, POINTER(c_void_p)]),
    "devmm_statistics_adaptor_create_ex": (c_int, [_P, c_uint, POINTER(c_void_p)]),
    "devmm_statistics_get": (c_int, [_P, POINTER(Statistics)]),
    "devmm_statistics_push": (c_int, [_P]),
    "devmm_statistics_pop": (c_int, [_P, POINTER(Statistics)]),
    "devmm_statistics_reset_peak": (c_int, [_P]),
    "devmm_limiting_adaptor_create": (c_int, [_P, c_size_t, POINTER(c_void_p)]),
    "devmm_limiting_get": (c_int, [_P, POINTER(c_size_t), POINTER(c_size_t)]),
    "devmm_tracking_adaptor_create": (c_int, [_P, c_int, POINTER(c_void_p)]),
    "devmm_tracking_lookup": (c_int, [_P, _P, POINTER(AllocationInfo)]),
    "devmm_tracking_outstanding": (c_int, [_P, POINTER(c_size_t), POINTER(c_size_t)]),
    "devmm_tracking_report": (c_int, [_P, POINTER(c_void_p)]),
    "devmm_string_free": (None, [_P]),
    "devmm_logging_adaptor_create": (c_int, [_P, c_char_p, c_int, POINTER(c_void_p)]),
    "devmm_logging_flush": (c_int, [_P]),
    "devmm_aligned_adaptor_create": (c_int, [_P, c_size_t, c_size_t, POINTER(c_void_p)]),
    "devmm_failure_callback_adaptor_create": (c_int, [_P, _P, _P, POINTER(c_void_p)]),
    "devmm_failure_callback_adaptor_create_ex": (c_int, [_P, _P, _P, c_uint,
                                                         POINTER(c_void_p)]),
    "devmm_set_log_level": (c_int, [c_char_p]),
    "devmm_log_level": (c_char_p, []),
    "devmm_thread_safe_adaptor_create": (c_int, [_P, POINTER(c_void_p)]),
    "devmm_prefetch_adaptor_create": (c_int, [_P, POINTER(c_void_p)]),
    "devmm_prefetch": (c_int, [_P, _P, c_size_t, _P]),
    "devmm_callback_resource_create": (c_int, [_P, _P, _P, _P, Device, c_char_p, c_uint,
                                               POINTER(c_void_p)]),
    "devmm_callback_resource_create_ex": (c_int, [_P, _P, _P, _P, Device, c_char_p, c_uint, _P,
                                                  POINTER(c_void_p)]),
    "devmm_callbacks_disable": (None, []),
    "devmm_torch_allocate": (c_int, [c_size_t, c_int, _P, POINTER(c_void_p)]),
    "devmm_torch_deallocate": (None, [_P, c_size_t, c_int, _P]),
    "devmm_torch_record_stream": (None, [_P, _P]),
    "devmm_torch_free_waits_for_device": (None, [c_int]),
    # variadic in C (fmt, ...): always called with the format "%s" and one string
    "devmm_set_error": (c_int, [c_int, c_char_p, c_char_p]),
    "devmm_buffer_allocate": (c_int, [_P, c_size_t, c_size_t, _P, POINTER(c_void_p)]),
    "devmm_buffer_is_freed": (c_int, [_P]),
    "devmm_buffer_ptr": (_P, [_P]),
    "devmm_buffer_nbytes": (c_size_t, [_P]),
    "devmm_buffer_resource": (_P, [_P]),
    "devmm_buffer_device": (Device, [_P]),
    "devmm_buffer_stream": (_P, [_P]),
    "devmm_buffer_stream_wait": (c_int, [_P, _P]),
    "devmm_deferred_frees_wait": (None, []),
    "devmm_tensor_create": (c_int, [_P, DType, c_int, POINTER(c_int64), POINTER(c_int64),
                                    c_size_t, c_int, POINTER(c_void_p)]),
    "devmm_last_status": (c_int, []),
    "devmm_tensor_buffer": (_P, [_P]),
    "devmm_tensor_strides": (POINTER(c_int64), [_P]),
    "devmm_tensor_data": (_P, [_P]),
    "devmm_tensor_readonly": (c_int, [_P]),
    "devmm_tensor_zero": (c_int, [_P]),
    "devmm_tensor_copy": (c_int, [_P, _P, POINTER(c_void_p)]),
    "devmm_init": (c_int, [c_char_p]),
    "devmm_ffi_init": (c_int, [c_char_p, POINTER(c_void_p)]),
    "devmm_ffi_open_page": (c_int, [c_char_p, POINTER(c_int)]),
    "devmm_shutdown": (None, []),
    "devmm_is_initialized": (c_int, []),
    "devmm_config_source": (c_char_p, []),
    "devmm_info_json": (c_int, [POINTER(c_void_p)]),
    "devmm_info_json_now": (c_int, [POINTER(c_void_p)]),
    "devmm_kind_name": (c_char_p, [c_size_t]),
    "devmm_config_warning": (c_char_p, [c_size_t]),
    "devmm_resource_create_kind": (c_int, [c_char_p, c_int32, POINTER(Option), c_size_t,
                                           POINTER(c_void_p)]),
    "devmm_parse_size": (c_int, [c_char_p, c_size_t, POINTER(c_size_t)]),
    "devmm_ffi_dtype_pack": (c_uint32, [DType]),
    # observability (#12): tracking options and history, memory logs, out-of-memory reports
    "devmm_tracking_adaptor_create_ex": (c_int, [_P, POINTER(TrackingOptions),
                                                 POINTER(c_void_p)]),
    "devmm_tracking_history": (c_int, [_P, POINTER(TrackingEvent), c_size_t, POINTER(c_size_t),
                                       POINTER(c_size_t), POINTER(c_uint64), POINTER(c_uint64)]),
    "devmm_tracking_describe": (c_int, [_P, c_uint64, _P, c_size_t]),
    "devmm_tracking_foreach": (c_int, [_P, _P, _P]),
    "devmm_frame_describe": (c_int, [_P, _P, c_size_t]),
    "devmm_log_read": (c_int, [c_char_p, POINTER(POINTER(Log))]),
    "devmm_log_free": (None, [POINTER(Log)]),
    "devmm_last_oom": (c_int, [POINTER(OomReport)]),
    # IPC (#13, ADR 30): handles are DEVMM_IPC_HANDLE_SIZE bytes, passed as char buffers
    "devmm_ipc_get_handle": (c_int, [_P, _P, c_size_t, _P]),
    "devmm_ipc_handle_info": (c_int, [_P, _P]),  # (handle, IpcInfo *)
    "devmm_ipc_open": (c_int, [_P, _P, POINTER(c_void_p)]),
    "devmm_ipc_supported": (c_int, [_P]),
    "devmm_ipc_handle_fd": (c_int, [_P, POINTER(c_int)]),
    "devmm_ipc_open_fd": (c_int, [_P, _P, c_int, POINTER(c_void_p)]),
    # tensor handles (ADR 35): (tensor, out, cap, *len); (handle, len, IpcTensorInfo *); opens
    "devmm_ipc_get_tensor_handle": (c_int, [_P, _P, c_size_t, POINTER(c_size_t)]),
    "devmm_ipc_tensor_handle_info": (c_int, [_P, c_size_t, _P]),
    "devmm_ipc_open_tensor": (c_int, [_P, _P, c_size_t, POINTER(c_void_p)]),
    "devmm_ipc_open_tensor_fd": (c_int, [_P, _P, c_size_t, c_int, POINTER(c_void_p)]),
    "devmm_tensor_ndim": (c_int, [_P]),
    "devmm_tensor_shape": (POINTER(c_int64), [_P]),
    "devmm_tensor_dtype": (DType, [_P]),
    "devmm_dtype_format": (c_int, [DType, c_char_p, c_size_t]),
}


def __getattr__(name: str):
    """Binds devmm_<name> with its signature on first use (start-up stays short)."""
    try:
        res, args = _SIGNATURES["devmm_" + name]
    except KeyError:
        raise AttributeError(f"module 'devmm._lib' has no attribute '{name}'") from None
    fn = getattr(lib, "devmm_" + name)
    fn.restype = res
    fn.argtypes = args
    globals()[name] = fn
    return fn

# ----------------------------------------------------------------------------- errors

_BY_NAME = {
    "DEVMM_ENOMEM": errors.OutOfMemoryError,
    "DEVMM_ECONFIG": errors.ConfigError,
    "DEVMM_EPLUGIN": errors.PluginError,
    "DEVMM_EINVAL": errors.DevmmValueError,
    "DEVMM_EOVERFLOW": errors.DevmmValueError,
    "DEVMM_ESTATE": errors.DevmmStateError,
    "DEVMM_ECALLBACK": errors.CallbackError,
}


def _bound(name: str):
    """A bound signature from inside this module (module __getattr__ only serves outsiders)."""
    return globals().get(name) or __getattr__(name)


def error(status: int) -> errors.DevmmError:
    """The exception for a failed call (reads this thread's C message)."""
    name = _bound("status_name")(status).decode()
    message = _bound("last_error")().decode(errors="replace")
    exc = _BY_NAME.get(name, errors.DevmmError)(message, name)
    if name == "DEVMM_ECALLBACK" or name == "DEVMM_ENOMEM":  # what a Python callback raised
        held, reraise = errors.take(message)
        if reraise:
            return held  # type: ignore[return-value]
        exc.__cause__ = held
    if name == "DEVMM_ENOMEM":  # the explanation's figures, from C (devmm_last_oom)
        rep = OomReport(struct_size=ctypes.sizeof(OomReport))
        if _bound("last_oom")(ctypes.byref(rep)) == 0:
            exc._set_figures(rep, format_device(rep.device))
    return exc


def check(status: int) -> None:
    """Raises the matching exception if status is not 0."""
    if status:
        raise error(status)


def format_device(d: Device) -> str:
    """"cpu", "cuda:0", ... as the C core writes a device (``devmm.resource.format_device``).

    >>> format_device(Device(2, 1))
    'cuda:1'
    """
    buf = ctypes.create_string_buffer(48)
    check(_bound("device_format")(d, buf, len(buf)))
    return buf.value.decode()


def failed() -> errors.DevmmError:
    """The exception for a built-in that answered None: this thread's last devmm error."""
    return error(_bound("last_status")())


def export_failed() -> errors.DevmmError:
    """:func:`failed` for an export (DLPack, an array interface): a freed buffer is a
    :class:`~devmm.errors.BufferFreedError` (a ``BufferError``), as the Array API asks."""
    e = failed()
    if type(e) is errors.DevmmStateError:
        return errors.BufferFreedError(str(e), e.status)
    return e


def plugin_library(path: str) -> ctypes.CDLL:
    """A loaded plugin's own shared object (the same handle devmm's loader holds), for the
    entry points a plugin exports besides its descriptor (devmm-sim's test entry)."""
    return ctypes.CDLL(path)

# ----------------------------------------------------------------------------- integers


_RANGES: dict = {}  # ctypes integer type -> (lowest, highest)


def cint(value: object, ctype: type, name: str) -> int:
    """value as a Python int that the C integer type ctype can hold, or TypeError (not an
    integer; a bool is none), ValueError (negative where ctype is unsigned) or OverflowError,
    each naming `name`: ctypes itself would wrap the value silently.

    >>> cint(16, ctypes.c_size_t, "nbytes")
    16
    >>> cint(2**64 + 16, ctypes.c_size_t, "nbytes")
    Traceback (most recent call last):
    ...
    OverflowError: nbytes = 18446744073709551632 does not fit in 64 bits (at most 18446744073709551615)
    """
    if type(value) is not int:
        if isinstance(value, bool) or not hasattr(type(value), "__index__"):
            raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
        value = value.__index__()
    try:
        lo, hi = _RANGES[ctype]
    except KeyError:
        bits = ctypes.sizeof(ctype) * 8
        signed = ctype(-1).value == -1
        lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
        _RANGES[ctype] = lo, hi
    if lo <= value <= hi:
        return value
    if value < 0 and lo == 0:
        raise ValueError(f"{name} must be >= 0, got {value}")
    raise OverflowError(f"{name} = {value} does not fit in {ctypes.sizeof(ctype) * 8} bits "
                        f"(at {'most ' + str(hi) if value > hi else 'least ' + str(lo)})")

# ----------------------------------------------------------------------------- built-ins


# PyDLL: the call keeps the GIL and returns a Python object
_make = ctypes.PyDLL(LIBRARY_PATH).devmm_ffi_python_function
_make.restype, _make.argtypes = ctypes.py_object, [c_char_p]


def _builtin(name: str):
    """A CPython built-in function that libdevmm makes (see include/devmm/ffi.h)."""
    fn = _make(name.encode())
    if fn is None:
        raise ImportError(f"devmm: {_bound('last_error')().decode()}")
    return fn


py_empty = _builtin("empty")          # -> tensor capsule | None
py_own_tensor = _builtin("own_tensor")
py_own_buffer = _builtin("own_buffer")
py_own_resource = _builtin("own_resource")
py_handle = _builtin("handle")        # capsule -> address of its tensor or buffer
py_buffer_of = _builtin("buffer_of")  # tensor or buffer capsule -> address of the buffer
py_buffer_free = _builtin("buffer_free")
py_hold = _builtin("hold")            # -> (capsule holding the memory, its address) | None
py_buffer = _builtin("buffer")        # -> buffer capsule, aligned as tensors are | None
py_array_export = _builtin("array_export")  # -> ArrayExport (holds the memory) | None
py_dlpack = _builtin("dlpack")        # -> DLPack capsule | None
py_callbacks = _builtin("callbacks")  # -> C trampolines calling two Python functions

CONSTANTS: dict = _builtin("constants")()
"""The C constants by name: ``CONSTANTS["DEVMM_DEVICE_CUDA"]``, status codes, flags, limits."""


class IpcInfo(Structure):
    """devmm_ipc_info (ipc.h): what a handle's header says."""
    _fields_ = [("struct_size", c_size_t),
                ("kind", ctypes.c_char * CONSTANTS["DEVMM_IPC_KIND_MAX"]), ("device", Device),
                ("bytes", c_uint64), ("pid", c_int32), ("same_machine", c_int)]


class IpcTensorInfo(Structure):
    """devmm_ipc_tensor_info (ipc.h): what a tensor handle's own fields say."""
    _fields_ = [("struct_size", c_size_t), ("is_tensor", c_int), ("ndim", c_int),
                ("dtype", DType), ("readonly", c_int), ("byte_offset", c_uint64),
                ("shape", c_int64 * CONSTANTS["DEVMM_MAX_NDIM"]),
                ("strides", c_int64 * CONSTANTS["DEVMM_MAX_NDIM"]),
                ("buffer", c_uint8 * CONSTANTS["DEVMM_IPC_HANDLE_SIZE"])]
