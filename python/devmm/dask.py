"""One devmm.ini for a whole Dask cluster: a worker plugin, per-worker statistics, and a
serializer that passes devmm tensors between workers on one machine without copying.

``DevmmPlugin`` is a ``distributed.WorkerPlugin``: on every worker (present and future) it runs
:func:`devmm.init` with one configuration (a path, or the text of a devmm.ini), optionally routes
frameworks' allocators through devmm (``route=("torch", "cupy")``: :mod:`devmm.interop`, which
needs the framework and a GPU), and on teardown undoes it. Limits in the configuration hold on
every worker: a task that allocates past one fails with :class:`devmm.OutOfMemoryError`, which
Dask re-raises in the client.

::

    from distributed import Client, LocalCluster
    import devmm.dask

    ini = "[device cpu]\\nresource = cpu.shm\\nadaptors = statistics, limiting\\nlimit = 1GiB\\n"
    with LocalCluster(n_workers=2, processes=True) as cluster, Client(cluster) as client:
        client.register_plugin(devmm.dask.DevmmPlugin(config=ini))
        x = client.submit(devmm.zeros, (1 << 20,), "float32")    # allocated by devmm
        print(devmm.dask.statistics(client))                     # one row per worker and device

Serialization: a :class:`devmm.Tensor` whose resource shares memory (``cpu.shm``,
``sim.device``, ``cuda.device``, ...) travels between processes of the same machine as its IPC
handle (:mod:`devmm.ipc`; the sender's copy stays in the sender's memory, Dask keeps it as long
as the key lives); to another machine, or when Dask does not say where it sends, by value.
``devmm.dask.statistics`` counts what each worker received each way (``ipc_received``,
``copies_received``).

This module imports ``distributed`` on first use of the plugin or the serializer, never at
``import devmm``.
"""

from __future__ import annotations

import os
import tempfile

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Optional, Sequence, Union

ROUTES = ("torch", "cupy")
_received = {"ipc_received": 0, "copies_received": 0}  # this process, as a worker


def _distributed():
    from .interop import _require
    return _require("distributed", "distributed", "devmm.dask")


def _is_text(config: str) -> bool:
    """Whether config is the text of a devmm.ini (a section or a newline) rather than a path."""
    return "\n" in config or config.lstrip().startswith("[")


def _plugin_base():
    return _distributed().WorkerPlugin


class DevmmPlugin:
    """A ``distributed.WorkerPlugin`` running ``devmm.init(config)`` on every worker.

    config: a devmm.ini path (it must exist on every worker) or its text; None: each worker's
    usual lookup. route: frameworks whose allocators to route through devmm (``"torch"``,
    ``"cupy"``); a framework that a worker cannot import fails the plugin's setup there with
    an ``ImportError`` saying which. The instance is a real WorkerPlugin (its class derives
    from distributed's when distributed is importable).

    >>> DevmmPlugin(route=("tensorflow",))
    Traceback (most recent call last):
    ...
    ValueError: DevmmPlugin: route = 'tensorflow': expected any of torch, cupy
    """

    name = "devmm"

    def __new__(cls, *args: object, **kwargs: object) -> "DevmmPlugin":
        if cls is DevmmPlugin:  # the WorkerPlugin subclass, made once distributed is needed
            cls = _plugin_class()
        return object.__new__(cls)

    def __init__(self, config: "Optional[Union[str, os.PathLike]]" = None,
                 route: "Sequence[str]" = ()) -> None:
        if isinstance(route, str):
            route = (route,)
        for r in route:
            if r not in ROUTES:
                raise ValueError(f"DevmmPlugin: route = {r!r}: expected any of "
                                 f"{', '.join(ROUTES)}")
        self.config = None if config is None else os.fspath(config)
        self.route = tuple(route)
        self._path: Optional[str] = None
        self._undo: list = []

    def setup(self, worker: object = None) -> None:
        """On the worker: devmm.init with the configuration, then the routes."""
        from ._info import init
        register_serializers()
        path = self.config
        if path is not None and _is_text(path):
            where = getattr(worker, "local_directory", None) or tempfile.gettempdir()
            fd, path = tempfile.mkstemp(prefix="devmm-", suffix=".ini", dir=where)
            with os.fdopen(fd, "w") as f:
                f.write(self.config)
            self._path = path
        init(path)
        for r in self.route:
            if r == "torch":
                from .interop import torch as routed
                routed.use_devmm()  # torch cannot swap back: it stays until the worker exits
            else:
                from .interop import cupy as routed
                self._undo.append(routed.use_devmm())

    def teardown(self, worker: object = None) -> None:
        """On the worker: undoes the routes it can, forgets the configuration (devmm.shutdown
        clears the current resources init set) and removes a configuration file it wrote."""
        from . import _lib
        while self._undo:
            self._undo.pop().__exit__(None, None, None)
        _lib.shutdown()
        if self._path:
            try:
                os.unlink(self._path)
            except OSError:
                pass
            self._path = None


_CLASS: list = []


def _plugin_class() -> type:
    """DevmmPlugin as a subclass of distributed.WorkerPlugin (made once)."""
    if not _CLASS:
        base = _plugin_base()
        _CLASS.append(type("DevmmPlugin", (DevmmPlugin, base),
                           {"__module__": __name__, "__qualname__": "DevmmPlugin",
                            "__reduce__": _reduce_plugin}))
    return _CLASS[0]


def _reduce_plugin(self: DevmmPlugin) -> tuple:
    return (_make_plugin, (self.config, self.route))


def _make_plugin(config: "Optional[str]", route: tuple) -> DevmmPlugin:
    return DevmmPlugin(config=config, route=route)


# ----------------------------------------------------------------------------- statistics

def _worker_statistics() -> list:
    """This process's devmm figures: one dict per device whose stack has a statistics adaptor
    (or none: the stack alone), with what it received through Dask."""
    from . import _info
    from .adaptors import StatisticsAdaptor
    from .resource import get_current_device_resource
    rows = []
    for d in _info.devices():
        row = {"device": d["device"], "stack": d["stack"], **_received}
        try:
            r = get_current_device_resource(d["device"])
        except Exception:  # a device without a resource: its stack says why
            r = None
        while r is not None and not isinstance(r, StatisticsAdaptor):
            r = r.upstream
        if r is not None:
            s = r.statistics
            row.update(current_bytes=s.current_bytes, peak_bytes=s.peak_bytes,
                       total_bytes=s.total_bytes, current_count=s.current_count,
                       peak_count=s.peak_count, total_count=s.total_count)
        rows.append(row)
    return rows


def statistics(client: object) -> list:
    """One row per worker and device: ``worker`` (its address), ``device``, ``stack``, the
    statistics adaptor's ``current_bytes``, ``peak_bytes``, ``total_bytes``, ``current_count``,
    ``peak_count``, ``total_count`` (absent when the stack counts nothing), and the tensors the
    worker received by IPC handle or by value. ``pandas.DataFrame(rows)`` makes it a table."""
    per_worker = client.run(_worker_statistics)
    return [{"worker": w, **row} for w, rows in sorted(per_worker.items()) for row in rows]


# ----------------------------------------------------------------------------- serialization

def _host(address: object) -> "Optional[str]":
    """The host part of a Dask address ("tcp://127.0.0.1:4242" -> "127.0.0.1")."""
    if not isinstance(address, str):
        return None
    try:
        from distributed.comm import get_address_host
        return get_address_host(address)
    except Exception:
        return None


def _same_machine(context: "Optional[dict]") -> bool:
    """Whether Dask says it sends to a process on this machine."""
    if not context:
        return False
    sender = _host((context.get("sender") or {}).get("address"))
    recipient = _host((context.get("recipient") or {}).get("address"))
    return sender is not None and sender == recipient


def _serialize(t: object, context: "Optional[dict]" = None) -> tuple:
    from . import _lib
    from .ipc import tensor_handle
    b = t.buffer
    if t.size and _same_machine(context) and _lib.ipc_supported(_lib.buffer_resource(b._h)):
        return {"devmm": "ipc"}, [tensor_handle(t)]
    import ctypes
    host = t.copy("cpu") if t.device != "cpu" else t.copy()
    data = ctypes.string_at(host.data_ptr, host.nbytes) if host.size else b""
    return {"devmm": "value", "shape": list(t.shape), "dtype": t.dtype, "device": t.device}, [data]


def _deserialize(header: dict, frames: list) -> object:
    from .ipc import _rebuild_value, open_ipc
    if header.get("devmm") == "ipc":
        _received["ipc_received"] += 1
        return open_ipc(bytes(frames[0]))
    _received["copies_received"] += 1
    return _rebuild_value(bytes(frames[0]), tuple(header["shape"]), header["dtype"],
                          header["device"])


_registered: list = []


def register_serializers() -> None:
    """Registers the serializer of :class:`devmm.Tensor` with Dask's ``dask`` family (done by
    :class:`DevmmPlugin` on every worker; call it in the client too, before sending tensors)."""
    if _registered:
        return
    from distributed.protocol import dask_deserialize, dask_serialize
    from .tensor import Tensor
    dask_serialize.register(Tensor)(_serialize)
    dask_deserialize.register(Tensor)(_deserialize)
    try:  # Dask's memory accounting: a tensor's bytes, not the Python object's
        from dask.sizeof import sizeof
        sizeof.register(Tensor)(lambda t: t.nbytes)
    except ImportError:
        pass
    _registered.append(True)


__all__ = ["DevmmPlugin", "statistics", "register_serializers"]
