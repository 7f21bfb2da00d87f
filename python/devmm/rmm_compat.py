"""RMM's module-level conveniences over devmm's own adaptors (docs/from-rmm.md, ADR 41):
statistics (``enable_statistics``, ``get_statistics``, ``push_statistics``, ``pop_statistics``,
``with devmm.statistics():``), the allocation log (``enable_logging``, ``disable_logging``,
``get_log_filenames``, ``flush_logger``), the log levels of devmm's own diagnostics
(``set_logging_level``, ``get_logging_level``, ``set_flush_level``, ``get_flush_level``,
``should_log``), and per-device ``reset_current_device_resource``/``is_initialized``. Each is
served as ``devmm.<name>``, imported on first use.

They act on the process-wide current resource of a device (what
:func:`devmm.set_current_device_resource` sets), never on a :func:`devmm.using_memory_resource`
block's. ``device=None`` means every device for ``enable_*``/``disable_logging`` (RMM's
``enable_logging`` does every GPU) and ``"cpu"`` for the others, as
:func:`devmm.get_current_device_resource` has it.

>>> import devmm
>>> from devmm.mrs.cpu import MallocMemoryResource
>>> _ = devmm.set_current_device_resource(MallocMemoryResource())
>>> with devmm.statistics():
...     t = devmm.empty(64, "int8")
...     devmm.get_statistics().current_bytes
64
>>> devmm.get_statistics() is None     # the block put back the resource it found
True
"""

from __future__ import annotations

import contextlib
import ctypes
import enum
import os
import sys

TYPE_CHECKING = False  # typing is imported only by type checkers: it costs start-up time
if TYPE_CHECKING:
    from typing import Iterator, Optional, Union

    from ._statistics import Statistics

from . import _lib
from ._shared import is_bool, scoped
from .adaptors import LoggingAdaptor, StatisticsAdaptor
from .config import info
from .resource import (MemoryResource, get_current_device_resource, home_device,
                       reset_current, set_current_unchecked)

# ----------------------------------------------------------------------------- devices


def _devices(device: Optional[str]) -> list:
    """[device] or, for None, every device devmm knows (counting a GPU plugin's devices)."""
    if device is not None:
        return [device]
    return [d["device"] for d in info()["devices"]]


def _currents(device: Optional[str]) -> list:
    """[(device, its process-wide current resource)] for device (None: every device), all
    resolved before any is changed: an every-device call that fails on one device (a GPU
    section devmm.ini got wrong, built on first use) has changed none
    (tests/python/test_rmm_devices.py)."""
    return [(d, _current(d)) for d in _devices(device)]


def _current(device: Optional[str]) -> MemoryResource:
    """The process-wide current resource of device, whatever block is active."""
    token = scoped.set({})
    try:
        return get_current_device_resource(device)
    finally:
        scoped.reset(token)


# ----------------------------------------------------------------------------- statistics


def _stats(device: Optional[str]) -> Optional[StatisticsAdaptor]:
    try:
        return StatisticsAdaptor.find(_current(device))
    except LookupError:
        return None


def enable_statistics(device: Optional[str] = None) -> None:
    """Stacks a :class:`devmm.StatisticsAdaptor` on the current resource of device (None: of
    every device), unless its stack already has one (then that one counts)."""
    new = []
    for d, top in _currents(device):
        try:
            StatisticsAdaptor.find(top)
        except LookupError:
            new.append((d, StatisticsAdaptor(top)))
    for d, top in new:
        set_current_unchecked(top, home_device(d))  # where C has it, whatever it is (ADR 47)


def get_statistics(device: Optional[str] = None) -> Optional[Statistics]:
    """The figures of the innermost scope of the first statistics adaptor in device's current
    stack; None when it has none (RMM's)."""
    s = _stats(device)
    return None if s is None else s.statistics


def push_statistics(device: Optional[str] = None) -> Optional[Statistics]:
    """Starts a scope whose counters start at zero; returns the figures before the push, or
    None (and pushes nothing) when device's stack keeps no statistics (RMM's)."""
    s = _stats(device)
    return None if s is None else s.push()


def pop_statistics(device: Optional[str] = None) -> Optional[Statistics]:
    """Ends the innermost scope and returns its figures (None without statistics). The last
    scope raises :class:`~devmm.errors.StatisticsScopeError` (an ``IndexError``, as RMM's)."""
    s = _stats(device)
    return None if s is None else s.pop()


@contextlib.contextmanager
def statistics(device: Optional[str] = None) -> Iterator[StatisticsAdaptor]:
    """A block of its own statistics (RMM's ``rmm.statistics.statistics``): a pushed scope,
    popped at the end, when device's stack keeps statistics; else a statistics adaptor
    stacked for the block and taken off after it. Yields the adaptor. Changing device's
    current resource inside the block is a ``ValueError`` at its end (RMM's)."""
    prior = None
    if push_statistics(device) is None:
        prior = _current(device)
        enable_statistics(device if device is not None else "cpu")
    current = _current(device)
    try:
        yield StatisticsAdaptor.find(current)
    finally:
        if _current(device) != current:
            raise ValueError("devmm.statistics(): the current resource of "
                             f"{device or 'cpu'} was changed inside the block")
        if prior is None:
            pop_statistics(device)
        else:
            set_current_unchecked(prior, home_device(device))


# ----------------------------------------------------------------------------- allocation logs

_log_files: dict = {}  # {device: [path, ...]} of the logging adaptors enable_logging stacked


def log_file_for(name: Union[str, os.PathLike], device: str) -> str:
    """The log file of device for name: RMM's ``name.devN.ext`` for ``cuda:N``, and
    ``name.cpu.ext``, ``name.simN.ext``, ``name.rocmN.ext`` for the others.

    >>> log_file_for("rmm_log.csv", "cuda:0"), log_file_for("rmm_log.csv", "cpu")
    ('rmm_log.dev0.csv', 'rmm_log.cpu.csv')
    """
    stem, ext = os.path.splitext(os.fspath(name))
    kind, _, index = device.partition(":")
    tag = f"dev{index}" if kind == "cuda" else kind + index
    return f"{stem}.{tag}{ext}"


def _env_log_file() -> Optional[str]:
    """$DEVMM_LOG_FILE, read as $DEVMM_LIBRARY is: not under ``python -I``/``-E``, nor in a
    set-id process (the C side's secure_getenv)."""
    if sys.flags.ignore_environment or _lib._secure_execution():
        return None
    return os.environ.get("DEVMM_LOG_FILE") or None


def enable_logging(log_file_name: Union[None, str, os.PathLike, list] = None,
                   device: Optional[str] = None) -> None:
    """Stacks a :class:`devmm.LoggingAdaptor` on the current resource of device (None: every
    device) writing ``log_file_for(log_file_name, device)``; a list of names stacks one
    adaptor per name (several sinks). No name: ``$DEVMM_LOG_FILE`` (RMM's ``RMM_LOG_FILE``).
    A device whose current resource is already a logging adaptor is left as it is. Each line
    is flushed when the flush level is ``info`` or lower (:func:`set_flush_level`)."""
    if log_file_name is None:
        log_file_name = _env_log_file()
        if log_file_name is None:
            raise ValueError("enable_logging: give log_file_name= or set DEVMM_LOG_FILE")
    names = list(log_file_name) if isinstance(log_file_name, (list, tuple)) else [log_file_name]
    flush = get_flush_level() <= level_enum.info
    new = []
    for d, top in _currents(device):
        if isinstance(top, LoggingAdaptor):
            continue
        paths = [log_file_for(n, d) for n in names]
        for path in paths:
            top = LoggingAdaptor(top, path, flush=flush)
        new.append((d, top, paths))
    for d, top, paths in new:
        set_current_unchecked(top, home_device(d))
        _log_files[d] = paths


def _logging_top(device: str) -> list:
    """The logging adaptors at the top of device's current stack, outermost first."""
    return _logging_top_of(_current(device))


def _logging_top_of(r: MemoryResource) -> list:
    """The logging adaptors at the top of the stack r, outermost first."""
    out = []
    while isinstance(r, LoggingAdaptor):
        out.append(r)
        r = r.upstream
    return out


def disable_logging(device: Optional[str] = None) -> None:
    """Takes the logging adaptors off the top of device's current resource (None: every
    device's), flushed."""
    for d, top in _currents(device):
        tops = _logging_top_of(top)
        if tops:
            for t in tops:
                t.flush()
            set_current_unchecked(tops[-1].upstream, home_device(d))
        _log_files.pop(d, None)


def get_log_filenames() -> dict:
    """{device: the file enable_logging logs it to} (a list for several sinks)."""
    return {d: p[0] if len(p) == 1 else list(p) for d, p in _log_files.items()}


def _flush_stacks() -> None:
    """Flushes every logging adaptor in the current stack of each device that has one, upstream
    chains included (devmm.ini's ``adaptors = logging`` too); initialises nothing."""
    if not _lib.is_initialized():
        return
    devices = {d["device"] for d in info(now=True)["devices"] if d.get("stack")}
    for d in sorted(devices | set(_log_files)):
        h = _current(d).handle
        while h:
            if _lib.adaptor_kind(h) == b"logging":
                _lib.check(_lib.logging_flush(h))
            h = _lib.resource_upstream(h)


def flush_logger() -> None:
    """Flushes every allocation log of the devices' current resources (RMM's
    ``rmm.mr._flush_logs()``: enable_logging's and devmm.ini's), and stderr (devmm's
    diagnostics)."""
    _flush_stacks()
    sys.stderr.flush()


# ----------------------------------------------------------------------------- log levels


class level_enum(enum.IntEnum):
    """RMM's levels (``rmm.level_enum``). devmm's diagnostics have four: trace is debug,
    critical and off are error (devmm always says an error)."""

    trace = 0
    debug = 1
    info = 2
    warn = 3
    error = 4
    critical = 5
    off = 6


_C_NAME = {level_enum.trace: "debug", level_enum.debug: "debug", level_enum.info: "info",
           level_enum.warn: "warn", level_enum.error: "error", level_enum.critical: "error",
           level_enum.off: "error"}
_chosen: Optional[level_enum] = None
_flush_level = level_enum.warn


def _level(level: Union[level_enum, int, str]) -> level_enum:
    """What the level functions take, as RMM's ``level_enum``: a ``devmm.level_enum``, its
    number (an int 0 to 6, or any integer with ``__index__``, numpy's: not a bool, Python's or
    numpy's) or its name in any case, spaces around it ignored (``"warning"`` is ``warn``).
    Another name or number is a ValueError, another type a TypeError (test_from_rmm.py:
    test_log_levels_accept_what_the_docs_say; test_rmm_shapes.py)."""
    if isinstance(level, str):
        name = level.strip().lower()
        name = "warn" if name == "warning" else name
        if name in level_enum.__members__:
            return level_enum[name]
    elif hasattr(type(level), "__index__") and not is_bool(level):
        try:
            return level_enum(level.__index__())  # type: ignore[attr-defined]
        except ValueError:
            pass
    else:
        bool_ = " (an int, not a bool)" if is_bool(level) else ""
        raise TypeError(f"a level is a devmm.level_enum, an int or a str, got "
                        f"{type(level).__name__} {level!r}{bool_}")
    raise ValueError(f"{level!r} is not a level: expected one of "
                     f"{', '.join(level_enum.__members__)} (or devmm.level_enum)")


def set_logging_level(level: Union[level_enum, int, str]) -> None:
    """Sets the level of devmm's own diagnostics (``devmm_set_log_level``; it overrides
    DEVMM_LOG_LEVEL until a devmm.ini that sets log_level is read)."""
    global _chosen
    lv = _level(level)
    _lib.check(_lib.set_log_level(_C_NAME[lv].encode()))
    _chosen = lv


def get_logging_level() -> level_enum:
    """The level of devmm's diagnostics now (the one set, when C's still is its mapping)."""
    now = level_enum[_lib.log_level().decode()]
    if _chosen is not None and _C_NAME[_chosen] == now.name:
        return _chosen
    return now


def should_log(level: Union[level_enum, int, str]) -> bool:
    """Whether a message at level is said at the current level (RMM's ``should_log``)."""
    now = get_logging_level()
    return now != level_enum.off and _level(level) >= now


def set_flush_level(level: Union[level_enum, int, str]) -> None:
    """RMM's flush level. devmm's diagnostics go to stderr, unbuffered: each line is out at
    once whatever it is. It decides whether the adaptors of a later :func:`enable_logging`
    flush each line (at ``info`` or lower: RMM logs allocations at info)."""
    global _flush_level
    _flush_level = _level(level)


def get_flush_level() -> level_enum:
    """The flush level set (default: warn)."""
    return _flush_level


# ----------------------------------------------------------------------------- (re)initialisation


def reset_current_device_resource(device: Optional[str] = None) -> None:
    """Puts back the resource devmm.ini built for device (default cpu), the one it had before
    the first :func:`devmm.set_current_device_resource` since :func:`devmm.init` (RMM's
    ``reset_current_device_resource_ref``). Nothing set since: nothing changes."""
    reset_current(home_device(device))


def is_initialized(device: Optional[str] = None) -> bool:
    """Whether devmm has initialised (:func:`devmm.init`, or lazily at first use); with
    device, whether that device has a current resource too. Asking initialises nothing; an
    unknown device is a ValueError, as everywhere."""
    d = None if device is None else home_device(device)  # sim_managed:0: sim:0's
    if not _lib.is_initialized():
        return False
    if device is None:
        return True
    out = ctypes.c_void_p()
    if _lib.get_current_resource(d, ctypes.byref(out)):
        _lib.clear_error()
        return False
    _lib.py_own_resource(out.value)  # the reference C gave: released as it goes
    return True


__all__ = ["enable_statistics", "get_statistics", "push_statistics", "pop_statistics",
           "statistics", "enable_logging", "disable_logging", "get_log_filenames",
           "flush_logger", "log_file_for", "level_enum", "set_logging_level",
           "get_logging_level", "should_log", "set_flush_level", "get_flush_level",
           "reset_current_device_resource", "is_initialized"]
