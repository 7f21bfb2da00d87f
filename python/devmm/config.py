"""Initialisation and what devmm sees: ``init``, ``info``, ``devices``, ``plugins``,
``version`` (``devmm.init`` and the others are these; the C side is core/config/).

>>> import devmm
>>> [p["name"] for p in devmm.plugins()][:1]
['cpu']
>>> devmm.devices()[0]["device"]
'cpu'
"""

from __future__ import annotations

import ctypes
import json
import os
import warnings

TYPE_CHECKING = False  # typing is imported only by type checkers: it costs start-up time
if TYPE_CHECKING:
    from typing import Optional

from . import _lib


def init(config: Optional[str] = None) -> dict:
    """(Re)initialises devmm from config (a devmm.ini path; None: the usual lookup) and
    returns :func:`info`. Invalid files raise :class:`ConfigError` (file:line), a factory's
    refused option included; a plugin that fails to load, or a device left without a resource
    (its factory failed), is a warning, and the others keep working. A relative config path,
    and the relative plugin_path entries in it, are resolved now (plugin_path against the
    file's directory).

    >>> import devmm
    >>> devmm.init()["config"] in ("built-in default",) or True
    True
    """
    path = None if config is None else os.fsencode(config)
    if path is not None and b"\0" in path:
        raise ValueError("init: the config path contains a NUL byte")
    _lib.check(_lib.init(path))
    data = info()
    for p in data["plugins"]:
        if p["status"] != "loaded":
            warnings.warn(f"devmm: plugin '{p['name']}' not loaded: {p['error']}", RuntimeWarning,
                          stacklevel=2)
    for d in data["devices"]:
        if d["error"]:  # its factory (or an adaptor) failed: the other devices work
            warnings.warn(f"devmm: device {d['device']} has no resource: {d['error']}",
                          RuntimeWarning, stacklevel=2)
    return data


def info() -> dict:
    """Everything devmm-info shows: version, config, plugins, devices and their stacks."""
    out = ctypes.c_void_p()
    _lib.check(_lib.info_json(ctypes.byref(out)))
    try:
        return json.loads(ctypes.string_at(out.value).decode())
    finally:
        _lib.string_free(out.value)


def devices() -> list[dict]:
    """The devices the loaded plugins enumerate, with their resource stacks."""
    return info()["devices"]


def plugins() -> list[dict]:
    """The plugins named by the configuration, loaded or not (with the reason)."""
    return info()["plugins"]


def version() -> str:
    """The loaded libdevmm's version."""
    return _lib.version().decode()


__all__ = ["init", "info", "devices", "plugins", "version"]
