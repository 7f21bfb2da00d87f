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

Serialization: importing this module registers a Dask serializer for :class:`devmm.Tensor`
(in the client too: nothing to call). A ``cpu.shm`` tensor travels between processes of the
same machine as its IPC handle (:mod:`devmm.ipc`): the receiver maps the memory with a
descriptor of its own, so its copy outlives the sender's (Dask's memory manager drops replicas
of a key one worker at a time), and can be sent on. The sender holds the memory for
:data:`devmm.ipc.keep_alive` seconds, for the receiver to open it. Device memory
(``sim.device``, ``cuda.device``) and anything to another machine, or when Dask does not say
where it sends, travels by value: an importer of device memory would read freed memory once
the exporter's replica is dropped (CUDA's rule: the exporter must outlive every importer, and
nothing tells Dask so). ``devmm.dask.statistics`` counts what each worker received each way
(``ipc_received``, ``copies_received``); a mapping counts in no statistics or limit of the
receiver (the memory is the sender's allocation, counted there while the sender holds it).

This module imports ``distributed`` on first use of the plugin, never at ``import devmm``;
``import devmm.dask`` registers the serializer when ``distributed`` is importable.
"""

from __future__ import annotations

import os
import tempfile

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Optional, Sequence, Union

from . import _lib, config, ipc
from ._optional import require
from .adaptors import StatisticsAdaptor
from .resource import get_current_device_resource
from .tensor import Tensor

ROUTES = ("torch", "cupy")
_received = {"ipc_received": 0, "copies_received": 0}  # this process, as a worker


def _distributed():
    return require("distributed", "distributed", "devmm.dask")


_is_text = config.is_text  # one rule for init and the plugin


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
        self._previous: Optional[str] = None

    def setup(self, worker: object = None) -> None:
        """On the worker: devmm.init with the configuration, then the routes."""
        register_serializers()
        self._previous = _previous_config() if _lib.is_initialized() else None
        path = self.config
        if path is not None and _is_text(path):
            where = getattr(worker, "local_directory", None) or tempfile.gettempdir()
            fd, path = tempfile.mkstemp(prefix="devmm-", suffix=".ini", dir=where)
            with os.fdopen(fd, "w") as f:
                f.write(self.config)
            self._path = path
        config.init(path)
        for r in self.route:
            if r == "torch":
                from .interop import torch as routed
                routed.use_devmm()  # torch cannot swap back: it stays until the worker exits
            else:
                from .interop import cupy as routed
                self._undo.append(routed.use_devmm())

    def teardown(self, worker: object = None) -> None:
        """On the worker: undoes the routes it can, gives the worker back the configuration
        it had before setup (the devmm.ini it had loaded, else its usual lookup) and removes a
        configuration file it wrote."""
        while self._undo:
            self._undo.pop().__exit__(None, None, None)
        previous, self._previous = self._previous, None
        try:
            config.init(previous)
        except Exception:  # that file is gone or broken now: the usual lookup
            config.init(None)
        if self._path:
            try:
                os.unlink(self._path)
            except OSError:
                pass
            self._path = None


def _previous_config() -> "Optional[str]":
    """The devmm.ini this process loaded (its path, or the text init was given), or None (the
    usual lookup, the built-in default)."""
    text = config.current_text()
    if text is not None:
        return text
    src = _lib.config_source()
    path = src.decode(errors="replace") if src else None
    return path if path and os.path.isfile(path) else None


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
    rows = []
    for d in config.devices():
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
    handle = ipc._shared_handle(t) if t.device == "cpu" and _same_machine(context) else None
    if handle is not None and ipc.info(handle)["kind"] == "cpu.shm":
        ipc._hold(t)  # until the receiver opened it: then its mapping is its own
        return {"devmm": "ipc"}, [handle]
    _, (data, shape, dtype, device, readonly) = ipc._by_value(t)
    return {"devmm": "value", "shape": list(shape), "dtype": dtype, "device": device,
            "readonly": readonly}, [data]


def _deserialize(header: dict, frames: list) -> object:
    if header.get("devmm") == "ipc":
        _received["ipc_received"] += 1
        return ipc.open_ipc(bytes(frames[0]))
    _received["copies_received"] += 1
    return ipc._rebuild_value(bytes(frames[0]), tuple(header["shape"]), header["dtype"],
                          header["device"], bool(header.get("readonly")))


_registered: list = []


def register_serializers() -> None:
    """Registers the serializer of :class:`devmm.Tensor` with Dask's ``dask`` family (done by
    ``import devmm.dask`` and by :class:`DevmmPlugin` on every worker; calling it again does
    nothing)."""
    if _registered:
        return
    from distributed.protocol import dask_deserialize, dask_serialize
    dask_serialize.register(Tensor)(_serialize)
    dask_deserialize.register(Tensor)(_deserialize)
    try:  # Dask's memory accounting: a tensor's bytes, not the Python object's
        from dask.sizeof import sizeof
        sizeof.register(Tensor)(lambda t: t.nbytes)
    except ImportError:
        pass
    _registered.append(True)


# the client's side too: a gather deserializes with it
# (tests/python/test_dask.py::test_importing_devmm_dask_registers_the_serializer_for_the_client)
try:
    register_serializers()
except ImportError:  # no distributed here: the plugin says so when it is used
    pass

__all__ = ["DevmmPlugin", "statistics", "register_serializers"]
