"""devmm — a device memory manager: one interface to allocate, free and manage memory on
CPU, CUDA and ROCm, handed out zero-copy through DLPack. Pure Python over ctypes; no
dependencies.

>>> import devmm
>>> t = devmm.empty((2, 3), "float32", layout=devmm.RowMajor())
>>> t.shape, t.strides
((2, 3), (3, 1))
"""

from __future__ import annotations

import atexit as _atexit

from . import _lib, _shared
from .dtype import DType
from .errors import (BufferFreedError, CallbackError, ConfigError, DeviceExportError, DevmmError,
                     DevmmStateError, DevmmValueError, OutOfMemoryError, PluginError,
                     StaleHandleError, StatisticsScopeError, StreamError)
from .profile import profiler as profile
from .resource import (MemoryResource, get_current_device_resource, set_current_device_resource,
                       using_memory_resource)
from .tensor import Buffer, Tensor, empty, from_buffer_view, prefetch, zeros

# The package has no import cycle (tests/python/test_structure.py, ADR 36): devmm.ipc, loaded
# on first use below, plugs in the tensors' process side; devmm.profile is bound to its callable `profiler`
# here, before any other import of it could bind the plain module; devmm.adaptors registers
# the class of each adaptor kind when it loads, on first use.


def _load_adaptors() -> object:
    """devmm._shared.loader: the first adaptor C hands back loads the adaptor classes."""
    from . import adaptors  # on first use: start-up time (docs/performance.md)
    return adaptors


_shared.loader = _load_adaptors


def _load_ipc() -> object:
    """devmm._shared.ipc_loader: devmm.ipc on first use (a handle, a pickle by value,
    multiprocessing): importing it with the package cost start-up time (threading, ...)."""
    from . import ipc as loaded  # on first use: start-up time (bench_python.py startup)
    return loaded


_shared.ipc_loader = _load_ipc
_shared.install_reduction_hook()  # multiprocessing sends shared tensors by handle

TYPE_CHECKING = False
if TYPE_CHECKING:  # what _LAZY serves, for static checkers (tests/python/test_static_types.py)
    from .adaptors import (AlignedAdaptor, CallbackMemoryResource, FailureCallbackAdaptor,
                           LimitingAdaptor, LoggingAdaptor, PrefetchAdaptor, StatisticsAdaptor,
                           ThreadSafeAdaptor, TrackingAdaptor)
    from ._statistics import Statistics
    from .config import (devices, info, init, plugins, register_reinitialize_hook,
                         unregister_reinitialize_hook, version)
    from .ipc import open_ipc
    from .layout import Aligned, ColumnMajor, Layout, RowMajor, Strided
    from .rmm_compat import (disable_logging, enable_logging, enable_statistics, flush_logger,
                             get_flush_level, get_log_filenames, get_logging_level,
                             get_statistics, is_initialized, level_enum, pop_statistics,
                             push_statistics, reset_current_device_resource, set_flush_level,
                             set_logging_level, should_log, statistics)
    from .timeline import snapshot

# Imported on first use: start-up time matters to short scripts (see docs/performance.md).
_LAZY = {
    "devices": "config", "info": "config", "init": "config", "plugins": "config",
    "version": "config", "Statistics": "_statistics",
    "register_reinitialize_hook": "config", "unregister_reinitialize_hook": "config",
    "__git_commit__": "_commit",
    "AlignedAdaptor": "adaptors", "CallbackMemoryResource": "adaptors",
    "FailureCallbackAdaptor": "adaptors", "LimitingAdaptor": "adaptors",
    "LoggingAdaptor": "adaptors", "StatisticsAdaptor": "adaptors",
    "ThreadSafeAdaptor": "adaptors", "TrackingAdaptor": "adaptors",
    "PrefetchAdaptor": "adaptors",
    "Aligned": "layout", "ColumnMajor": "layout", "Layout": "layout", "RowMajor": "layout",
    "Strided": "layout",
    "snapshot": "timeline", "dask": "dask", "ipc": "ipc", "open_ipc": "ipc",
    "mrs": "mrs",  # devmm.mrs.create_resource after a plain `import devmm`, as plugins.md shows
    # RMM's conveniences (docs/from-rmm.md). `statistics` is the `with` block, a function: no
    # submodule has its name (the Statistics dataclass is in devmm._statistics), so no import
    # can put a module in its place (ADR 41).
    "enable_statistics": "rmm_compat", "get_statistics": "rmm_compat",
    "push_statistics": "rmm_compat", "pop_statistics": "rmm_compat", "statistics": "rmm_compat",
    "enable_logging": "rmm_compat", "disable_logging": "rmm_compat",
    "get_log_filenames": "rmm_compat", "flush_logger": "rmm_compat", "level_enum": "rmm_compat",
    "set_logging_level": "rmm_compat", "get_logging_level": "rmm_compat",
    "should_log": "rmm_compat", "set_flush_level": "rmm_compat", "get_flush_level": "rmm_compat",
    "reset_current_device_resource": "rmm_compat", "is_initialized": "rmm_compat",
}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'devmm' has no attribute '{name}'")
    import importlib  # on first use: importing it costs start-up time
    mod = importlib.import_module(f".{module}", __name__)
    value = mod if name == module else getattr(mod, name)
    globals()[name] = value
    return value


def __dir__() -> list:
    """Each public name once: the lazy ones too, never `annotations` or `TYPE_CHECKING`."""
    names = {n for n in globals() if not n.startswith("_") or n.startswith("__")}
    return sorted((names | set(_LAZY)) - {"annotations", "TYPE_CHECKING"})


__git_commit__: str  # the commit it was built from, on first use (devmm._commit; RMM's)

# One version, Meson's project version: the library reports it (and the wheel is stamped with it).
__version__: str = _lib.VERSION

__all__ = [
    "Aligned", "AlignedAdaptor", "Buffer", "BufferFreedError", "CallbackError",
    "CallbackMemoryResource", "ColumnMajor", "ConfigError", "DType", "DeviceExportError",
    "DevmmError", "DevmmStateError", "DevmmValueError", "FailureCallbackAdaptor", "Layout",
    "LimitingAdaptor", "LoggingAdaptor", "MemoryResource", "OutOfMemoryError", "PluginError",
    "PrefetchAdaptor",
    "RowMajor", "StaleHandleError", "Statistics", "StatisticsAdaptor", "StreamError",
    "Strided", "Tensor",
    "ThreadSafeAdaptor",
    "TrackingAdaptor", "devices", "empty", "from_buffer_view", "get_current_device_resource",
    "info", "init", "open_ipc", "plugins", "prefetch", "profile", "set_current_device_resource",
    "snapshot",
    "using_memory_resource", "version", "zeros",
    # coming from RMM (docs/from-rmm.md)
    "StatisticsScopeError", "disable_logging", "enable_logging", "enable_statistics",
    "flush_logger", "get_flush_level", "get_log_filenames", "get_logging_level",
    "get_statistics", "is_initialized", "level_enum", "pop_statistics", "push_statistics",
    "register_reinitialize_hook", "reset_current_device_resource", "set_flush_level",
    "set_logging_level", "should_log", "statistics", "unregister_reinitialize_hook",
]

# Python-defined resources must never be entered once the interpreter is going away.
_atexit.register(_lib.py_callbacks_disable)
