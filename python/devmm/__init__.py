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
                     StaleHandleError, StreamError)
from .ipc import open_ipc
from .profile import profiler as profile
from .resource import (MemoryResource, get_current_device_resource, set_current_device_resource,
                       using_memory_resource)
from .tensor import Buffer, Tensor, empty, from_buffer_view, zeros

# The package has no import cycle (tests/python/test_structure.py, ADR 36): devmm.ipc, imported
# above, plugs in the tensors' process side; devmm.profile is bound to its callable `profiler`
# here, before any other import of it could bind the plain module; devmm.adaptors registers
# the class of each adaptor kind when it loads, on first use.


def _load_adaptors() -> object:
    """devmm._shared.loader: the first adaptor C hands back loads the adaptor classes."""
    from . import adaptors  # on first use: start-up time (docs/performance.md)
    return adaptors


_shared.loader = _load_adaptors

TYPE_CHECKING = False
if TYPE_CHECKING:  # what _LAZY serves, for static checkers (tests/python/test_static_types.py)
    from .adaptors import (AlignedAdaptor, CallbackMemoryResource, FailureCallbackAdaptor,
                           LimitingAdaptor, LoggingAdaptor, StatisticsAdaptor, ThreadSafeAdaptor,
                           TrackingAdaptor)
    from .config import devices, info, init, plugins, version
    from .layout import Aligned, ColumnMajor, Layout, RowMajor, Strided
    from .statistics import Statistics
    from .timeline import snapshot

# Imported on first use: start-up time matters to short scripts (see docs/performance.md).
_LAZY = {
    "devices": "config", "info": "config", "init": "config", "plugins": "config",
    "version": "config", "Statistics": "statistics",
    "AlignedAdaptor": "adaptors", "CallbackMemoryResource": "adaptors",
    "FailureCallbackAdaptor": "adaptors", "LimitingAdaptor": "adaptors",
    "LoggingAdaptor": "adaptors", "StatisticsAdaptor": "adaptors",
    "ThreadSafeAdaptor": "adaptors", "TrackingAdaptor": "adaptors",
    "Aligned": "layout", "ColumnMajor": "layout", "Layout": "layout", "RowMajor": "layout",
    "Strided": "layout",
    "snapshot": "timeline", "dask": "dask",
    "mrs": "mrs",  # devmm.mrs.create_resource after a plain `import devmm`, as plugins.md shows
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
    return sorted(list(globals()) + list(_LAZY))


# One version, Meson's project version: the library reports it (and the wheel is stamped with it).
__version__: str = _lib.version().decode()

__all__ = [
    "Aligned", "AlignedAdaptor", "Buffer", "BufferFreedError", "CallbackError",
    "CallbackMemoryResource", "ColumnMajor", "ConfigError", "DType", "DeviceExportError",
    "DevmmError", "DevmmStateError", "DevmmValueError", "FailureCallbackAdaptor", "Layout",
    "LimitingAdaptor", "LoggingAdaptor", "MemoryResource", "OutOfMemoryError", "PluginError",
    "RowMajor", "StaleHandleError", "Statistics", "StatisticsAdaptor", "StreamError",
    "Strided", "Tensor",
    "ThreadSafeAdaptor",
    "TrackingAdaptor", "devices", "empty", "from_buffer_view", "get_current_device_resource",
    "info", "init", "open_ipc", "plugins", "profile", "set_current_device_resource",
    "snapshot",
    "using_memory_resource", "version", "zeros",
]

# Python-defined resources must never be entered once the interpreter is going away.
_atexit.register(_lib.callbacks_disable)
