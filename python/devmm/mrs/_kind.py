"""Creating a resource of a plugin's named kind ("cpu.mmap") with options."""

from __future__ import annotations

import ctypes

from .. import _lib
from ..resource import MemoryResource


def create(kind: str, device_id: int = 0, **options: object) -> int:
    """A new C resource of kind with options (booleans as true/false); returns the handle."""
    items = [(k.encode(), (str(v).lower() if isinstance(v, bool) else str(v)).encode())
             for k, v in options.items() if v is not None]
    arr = (_lib.Option * max(len(items), 1))(*[_lib.Option(k, v, 0) for k, v in items])
    out = ctypes.c_void_p()
    _lib.check(_lib.resource_create_kind(kind.encode(), device_id, arr, len(items),
                                         ctypes.byref(out)))
    return out.value


class KindResource(MemoryResource):
    """A resource made by a plugin factory (base of the classes in devmm.mrs.*)."""

    __slots__ = ()
    KIND = ""

    def __init__(self, device_id: int = 0, **options: object) -> None:
        super().__init__(create(self.KIND, device_id, **options))


def create_resource(kind: str, device_id: int = 0, **options: object) -> MemoryResource:
    """A resource of any plugin's named kind, e.g. ``create_resource("rmm.pool", 0,
    upstream="async")`` (the plugin is loaded on demand if the configuration did not name it).

    >>> from devmm.mrs import create_resource
    >>> create_resource("cpu.mmap", huge_pages="transparent").name
    'cpu.mmap(transparent)'
    """
    return MemoryResource(create(kind, device_id, **options))
