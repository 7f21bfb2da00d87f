"""The binding of libdevmm, all of it: finding the library, every C signature (one table, in
:mod:`devmm._cdecl` with the structs), the C constants (:data:`CONSTANTS`) and the built-in
functions libdevmm makes for the hot paths.

libdevmm is loaded as the extension module ``devmm._libdevmm`` (its ``PyInit__libdevmm``), which
makes the built-ins without ctypes: ``import devmm`` and :func:`devmm.empty` never import it
(start-up time, ADR 45). ctypes, the structs and the bound functions come with the first read of
one (this module's ``__getattr__``).

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

import os
import sys

from . import errors

TYPE_CHECKING = False  # True for a type checker only: it reads ctypes and the structs

# ----------------------------------------------------------------------------- ctypes, later


class _Later:
    """A module imported on the first read of one of its attributes, then read as its own
    (its names copied into this object): ``import devmm`` and :func:`devmm.empty` never import
    ctypes, which costs start-up time (ADR 45, bench_python.py startup). devmm's modules that
    load with the package take ctypes from here (``from ._lib import ctypes``)."""

    def __init__(self, name: str) -> None:
        self.__dict__["_later"] = name

    def __getattr__(self, name: str):
        module = __import__(self.__dict__["_later"])
        self.__dict__.update(module.__dict__)
        return getattr(module, name)


if TYPE_CHECKING:
    import ctypes

    from ._cdecl import Device
else:
    ctypes = _Later("ctypes")

# ----------------------------------------------------------------------------- loading

_HERE = os.path.dirname(os.path.abspath(__file__))
_AT_SECURE = 23  # <elf.h>'s auxiliary vector type: not a C constant of devmm's


def _secure_execution() -> bool:
    """Whether this process runs set-uid, set-gid or with gained capabilities (the kernel's
    AT_SECURE, which ``secure_getenv`` reads for the C side's variables), read from
    /proc/self/auxv (pairs of unsigned longs), else asked of getauxval."""
    try:
        with open("/proc/self/auxv", "rb") as f:
            words = memoryview(f.read()).cast("L")
        for i in range(0, len(words) - 1, 2):
            if words[i] == _AT_SECURE:
                return words[i + 1] != 0
    except (OSError, TypeError, ValueError):  # no /proc, or not readable (a set-id process)
        pass
    try:
        getauxval = ctypes.CDLL(None).getauxval
    except (OSError, AttributeError):  # no getauxval: compare the real and effective ids
        return os.getuid() != os.geteuid() or os.getgid() != os.getegid()
    getauxval.restype, getauxval.argtypes = ctypes.c_ulong, [ctypes.c_ulong]
    return getauxval(_AT_SECURE) != 0


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


def _native(path: str) -> object:
    """libdevmm at path loaded as CPython's extension module devmm._libdevmm (its
    PyInit__libdevmm, ADR 45) by the interpreter's own extension loader, which
    ``importlib.machinery.ExtensionFileLoader`` calls (importing importlib costs start-up time);
    None where that fails (the file is no libdevmm, or an older one; a bare name, which that
    loader would look for in the current directory): ctypes loads it then, and says why."""
    if os.sep not in path:
        return None
    try:
        import _imp
        return _imp.create_dynamic(type(__spec__)("devmm._libdevmm", None, origin=path))
    except (ImportError, SystemError, AttributeError, TypeError):
        return None


def _load() -> tuple:
    """(path, the extension module or None, the ctypes handle or None) of the first candidate
    that loads: the extension module when it can, else ctypes."""
    tried = []
    for path in _candidates():
        native = _native(path)
        if native is not None:
            return path, native, None
        try:
            found = ctypes.CDLL(path)
        except OSError as e:
            tried.append(f"{path}: {e}")
            continue
        if not hasattr(found, "devmm_version"):  # test_devmm_library_naming_another_library
            named = "DEVMM_LIBRARY=" if os.environ.get("DEVMM_LIBRARY") else ""
            raise ImportError(f"devmm: {named}{path} is not libdevmm (it has no devmm_version)")
        return path, None, found
    raise ImportError("devmm: cannot load libdevmm (set DEVMM_LIBRARY to its path, or run "
                      "under `meson devenv -C build`); tried " + "; ".join(tried))


LIBRARY_PATH, _module, _handle = _load()
if _handle is not None:  # else loaded on first use of ``lib`` (__getattr__)
    lib = _handle


def __getattr__(name: str):
    """On first use: ``lib`` (the ctypes handle), the structs (``_lib.Device``, ...) and
    devmm_<name> bound with its signature (devmm._cdecl's table): start-up stays short."""
    if name.startswith("__"):  # what the import system asks of a module (__path__, ...)
        raise AttributeError(f"module 'devmm._lib' has no attribute '{name}'")
    from . import _cdecl  # on first use: it imports ctypes (start-up time, ADR 45)
    if name == "lib":
        value = ctypes.CDLL(LIBRARY_PATH)
    elif name in _cdecl.STRUCTS:
        value = getattr(_cdecl, name)
    else:
        try:
            res, args = _cdecl.SIGNATURES["devmm_" + name]
        except KeyError:
            raise AttributeError(f"module 'devmm._lib' has no attribute '{name}'") from None
        value = getattr(_bound("lib"), "devmm_" + name)
        value.restype = res
        value.argtypes = args
    globals()[name] = value
    return value

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
        report = _bound("OomReport")
        rep = report(struct_size=ctypes.sizeof(report))
        if _bound("last_oom")(ctypes.byref(rep)) == 0:
            exc._set_figures(rep, format_device(rep.device))
    return exc


def check(status: int) -> None:
    """Raises the matching exception if status is not 0."""
    if status:
        raise error(status)


def format_device(d: Device) -> str:
    """"cpu", "cuda:0", ... as the C core writes a device (``devmm.resource.format_device``).

    >>> from devmm._lib import Device
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


if _module is not None:  # devmm._libdevmm's function(name) is devmm_ffi_python_function
    _make = _module.function  # type: ignore[attr-defined]
else:  # PyDLL: the call keeps the GIL and returns a Python object
    _make = ctypes.PyDLL(LIBRARY_PATH).devmm_ffi_python_function
    _make.restype, _make.argtypes = ctypes.py_object, [ctypes.c_char_p]


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
py_dtype = _builtin("dtype")          # name bytes -> (code, bits, lanes, itemsize, packed) | None
py_callbacks_disable = _builtin("callbacks_disable")  # devmm_callbacks_disable (at exit)

CONSTANTS: dict = _builtin("constants")()
"""The C constants by name: ``CONSTANTS["DEVMM_DEVICE_CUDA"]``, status codes, flags, limits."""
VERSION: str = _builtin("version")()
"""devmm_version(): Meson's project version (``devmm.__version__``)."""

