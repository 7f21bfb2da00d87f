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
    from typing import Callable, Optional

from . import _lib
from ._shared import configured, set_objects


class InitInfo(dict):
    """What :func:`init` returns: :func:`info`'s dict, shown short (a REPL prints it whole
    otherwise: some 2 KB).

    >>> InitInfo({"config": "x.ini", "plugins": [{"status": "loaded"}], "devices": [{}]})
    <devmm config x.ini: 1 of 1 plugins loaded, 1 device>
    """

    def __repr__(self) -> str:
        plugins = self.get("plugins", [])
        loaded = sum(p.get("status") == "loaded" for p in plugins)
        n = len(self.get("devices", []))
        return (f"<devmm config {self.get('config')}: {loaded} of {len(plugins)} plugins "
                f"loaded, {n} device{'' if n == 1 else 's'}>")


def is_text(config: str) -> bool:
    """Whether config is the text of a devmm.ini (it has a newline, or starts with a section)
    rather than a path; :func:`init` and ``devmm.dask.DevmmPlugin`` take either.

    >>> is_text("[device cpu]"), is_text("/etc/devmm.ini")
    (True, False)
    """
    return "\n" in config or config.lstrip().startswith("[")


_text: Optional[str] = None  # the ini text init() was given last, while it is the configuration


def current_text() -> Optional[str]:
    """The devmm.ini text the configuration in use was read from (:func:`init` given text), or
    None when it came from a file or the built-in default (``devmm.dask`` restores it)."""
    return _text
_hooks: dict = {"before": [], "after": []}  # (func, args, kwargs), as registered


def register_reinitialize_hook(func: Callable, *args: object, after: bool = False,
                               **kwargs: object) -> Callable:
    """Has :func:`init` call ``func(*args, **kwargs)`` before it replaces the resources (RMM's
    ``rmm.register_reinitialize_hook``: the last registered runs first), or, with
    ``after=True``, once it has replaced them (in the order registered). A hook that raises
    stops init before anything changed (before), or reaches init's caller (after). Returns
    func.

    >>> import devmm
    >>> seen = []
    >>> _ = devmm.register_reinitialize_hook(seen.append, "replacing")
    >>> _ = devmm.init(); devmm.unregister_reinitialize_hook(seen.append); seen
    ['replacing']
    """
    if not callable(func):
        raise TypeError(f"register_reinitialize_hook: func must be callable, got "
                        f"{type(func).__name__} {func!r}")
    _hooks["after" if after else "before"].append((func, args, kwargs))
    return func


def unregister_reinitialize_hook(func: Callable) -> None:
    """Removes every registration of func, before and after (none: nothing happens)."""
    for when in _hooks.values():
        when[:] = [h for h in when if h[0] != func]


def _run_hooks(when: str) -> None:
    hooks = _hooks[when]
    for func, args, kwargs in (reversed(hooks) if when == "before" else list(hooks)):
        func(*args, **kwargs)


def init(config: Optional[str] = None) -> dict:
    """(Re)initialises devmm from config (a devmm.ini path, or its text; None: the usual
    lookup) and returns :func:`info` (shown short: :class:`InitInfo`). Invalid files raise
    :class:`ConfigError` (file:line; ``<ini text>:line`` for text), a factory's refused option
    included; a plugin that fails
    to load, or a device left without a resource (its factory failed), is a RuntimeWarning,
    said once (not on stderr too), and the others keep working. A GPU plugin's devices are
    counted at the first use of one (ADR 38): init initialises no GPU runtime, and such a
    device's failure is said at that use. A relative config path, and
    the relative plugin_path entries in it, are resolved now (plugin_path against the file's
    directory). Ini text is read as it is (``devmm_init_text``: no file is written); its
    relative plugin_path entries are resolved against the working directory, now.

    >>> import devmm
    >>> devmm.init("[device cpu]\\nresource = cpu.malloc\\n")
    <devmm config ini text: 1 of 1 plugins loaded, 1 device>
    >>> devmm.init()["config"] in ("built-in default",) or True
    True
    """
    global _text
    if config is not None and not isinstance(config, (str, bytes, os.PathLike)):
        raise TypeError("devmm.init: config must be a path, the text of a devmm.ini, or None; "
                        f"got {type(config).__name__}")
    _run_hooks("before")
    text = None
    if config is not None and not isinstance(config, bytes) and is_text(os.fspath(config)):
        text = os.fspath(config).encode()
    path = None if config is None or text is not None else os.fsencode(config)
    if path is not None and b"\0" in path:
        raise ValueError("init: the config path contains a NUL byte")
    said = ctypes.c_void_p()
    if text is not None:
        rc = _lib.ffi_init_text(text, len(text), b"<ini text>", ctypes.byref(said))
    else:
        rc = _lib.ffi_init(path, ctypes.byref(said))
    lines = []
    if said.value:
        lines = ctypes.string_at(said.value).decode(errors="replace").splitlines()
        _lib.string_free(said.value)
    _lib.check(rc)
    _text = text.decode() if text is not None else None
    for line in lines:  # "[who: ]warning: text": a RuntimeWarning says it is one
        warnings.warn("devmm: " + line.replace("warning: ", "", 1), RuntimeWarning, stacklevel=2)
    set_objects.clear()  # the resources set from Python are replaced
    configured.clear()
    data = InitInfo(info(now=True))  # counts no GPU's devices: that initialises its runtime
    if text is not None:
        data["config"] = "ini text"
    _run_hooks("after")
    return data


def info(now: bool = False) -> dict:
    """Everything devmm-info shows: version, config, plugins, devices and their stacks, and the
    configuration's ``warnings`` ("file:line: ..." for what has no effect). Asking
    counts every device, which initialises GPU runtimes; ``now=True`` says what devmm knows
    without that (a GPU plugin's devices are counted at the first use of one: ADR 38). A
    configuration that does not load (a broken ``$DEVMM_CONFIG`` read lazily) raises its
    :class:`ConfigError` (file:line), never an empty answer."""
    out = ctypes.c_void_p()
    _lib.check((_lib.info_json_now if now else _lib.info_json)(ctypes.byref(out)))
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
    return _lib.VERSION


__all__ = ["init", "info", "devices", "plugins", "version", "InitInfo", "is_text",
           "register_reinitialize_hook", "unregister_reinitialize_hook"]
