"""The four GPU resource classes, made once for each GPU plugin (cuda, rocm)."""

from __future__ import annotations

from ._kind import KindResource

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Optional, Union


def classes(plugin: str, prefix: str, runtime: dict) -> dict:
    """``{name: class}`` for plugin; runtime names its calls for the docstrings."""

    class Device(KindResource):
        __slots__ = ()
        KIND = f"{plugin}.device"

        def __init__(self, device: int = 0) -> None:
            super().__init__(device)

    class Async(KindResource):
        __slots__ = ()
        KIND = f"{plugin}.async"

        def __init__(self, device: int = 0, pool: str = "default",
                     release_threshold: Optional[Union[int, str]] = None,
                     max_pool_size: Optional[Union[int, str]] = None,
                     ipc: bool = False) -> None:
            super().__init__(device, pool=pool, release_threshold=release_threshold,
                             max_pool_size=max_pool_size, ipc=True if ipc else None)

    class Managed(KindResource):
        __slots__ = ()
        KIND = f"{plugin}.managed"

        def __init__(self, device: int = 0, advise: Optional[str] = None,
                     prefetch: bool = False) -> None:
            super().__init__(device, advise=advise, prefetch=prefetch)

    class Pinned(KindResource):
        __slots__ = ()
        KIND = f"{plugin}.pinned"

        def __init__(self) -> None:
            super().__init__(0)

    Device.__doc__ = f"``{runtime['malloc']}`` / ``{runtime['free']}`` on one device (synchronous)."
    Async.__doc__ = (f"Stream-ordered ``{runtime['pool_malloc']}`` / ``{runtime['free_async']}`` "
                     f"on the device's default pool (``pool=\"default\"``) or a pool of its own "
                     f"(``pool=\"own\"``, with ``max_pool_size`` and ``release_threshold`` (bytes, "
                     f"\"4GiB\" or \"50%\"): freed memory the pool keeps; the default pool is "
                     f"the whole process's, devmm leaves its settings alone); ``ipc=True`` "
                     f"with an own pool: other processes can open its allocations "
                     f"(devmm.open_ipc; CUDA only).")
    Managed.__doc__ = (f"``{runtime['managed']}``; ``advise`` = None | \"read_mostly\" | "
                       f"\"preferred_location\" | \"accessed_by\" (for this device), "
                       f"``prefetch=True`` moves new memory to the device.")
    Pinned.__doc__ = (f"Page-locked host memory, ``{runtime['host']}`` (DLPack device "
                      f"{runtime['host_device']}).")
    named = {f"{prefix}MemoryResource": Device, f"{prefix}AsyncMemoryResource": Async,
             "ManagedMemoryResource": Managed, "PinnedMemoryResource": Pinned}
    for name, cls in named.items():
        cls.__name__ = cls.__qualname__ = name
        cls.__module__ = f"devmm.mrs.{plugin}"
    return named
