"""What a tensor's exports share: the device classes, NumPy's array-interface type strings, and
the checks of ``__dlpack__``'s arguments (the Array API's stream and device rules).

>>> check_stream(CPU, None)
>>> check_stream(CPU, 1)
Traceback (most recent call last):
...
devmm.errors.StreamError: __dlpack__: stream must be None for cpu tensors, got 1
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing is imported only by type checkers: it costs start-up time
if TYPE_CHECKING:
    from typing import Optional

    from .tensor import Tensor

from . import _lib
from ._lib import ctypes  # imported on first use (ADR 45)
from .errors import StreamError
from .resource import format_device, parse_device

C = _lib.CONSTANTS
CPU, CUDA, ROCM = C["DEVMM_DEVICE_CPU"], C["DEVMM_DEVICE_CUDA"], C["DEVMM_DEVICE_ROCM"]
CUDA_MANAGED = C["DEVMM_DEVICE_CUDA_MANAGED"]
# the simulator's pinned and managed memory: devmm's own codes, apart as CUDA's are (ADR 37)
SIM_HOST, SIM_MANAGED = C["DEVMM_DEVICE_SIM_HOST"], C["DEVMM_DEVICE_SIM_MANAGED"]
PINNED = frozenset((C["DEVMM_DEVICE_CUDA_HOST"], C["DEVMM_DEVICE_ROCM_HOST"], SIM_HOST))
HOST_DEVICES = PINNED | {CPU}
CUDA_DEVICES = frozenset((CUDA, CUDA_MANAGED))
IS_COPIED = C["DEVMM_DLPACK_FLAG_IS_COPIED"]
CPU_KEY = (CPU, 0)
I64_MAX = (1 << 63) - 1
# The simulated accelerator (kDLExtDev) follows CUDA's stream rules; memory on these devices is
# ordered by streams
SIM = C["DEVMM_DEVICE_SIM"]
CUDA_RULES = CUDA_DEVICES | {SIM, SIM_MANAGED}
STREAMED = frozenset((CUDA, CUDA_MANAGED, ROCM, SIM, SIM_MANAGED))
STREAM_ALL = C["DEVMM_STREAM_ALL"]  # (a stream handle) a consumer on streams devmm does not know
# NumPy's array-interface type strings (little-endian); dtypes without one (bfloat16, the
# float8 and float4 types) go through DLPack only
TYPESTR = {"bool": "|b1", "int8": "|i1", "uint8": "|u1", "int16": "<i2", "uint16": "<u2",
           "int32": "<i4", "uint32": "<u4", "int64": "<i8", "uint64": "<u8",
           "float16": "<f2", "float32": "<f4", "float64": "<f8", "complex64": "<c8",
           "complex128": "<c16"}


class Interface:
    """An array-interface dict as an object NumPy can read (Tensor.__array__)."""

    __slots__ = ("__array_interface__",)

    def __init__(self, iface: dict) -> None:
        self.__array_interface__ = iface


def export_error() -> BaseException:
    """The exception for a failed DLPack export: the Array API's BufferError, keeping devmm's
    own class where it is one (a freed buffer) and MemoryError for out-of-memory."""
    e = _lib.export_failed()
    if isinstance(e, (BufferError, MemoryError)):
        return e
    b = BufferError(f"__dlpack__: {e}")
    b.__cause__ = e
    return b


def check_stream(device_type: int, stream: Optional[int]) -> None:
    """Raises StreamError (a ValueError, and the RuntimeError NumPy raises for a stream on the
    CPU) unless stream is valid for the device type, TypeError unless it is an int or None."""
    if stream is None:
        return
    if not isinstance(stream, int):
        raise TypeError(f"__dlpack__: stream must be an int or None, got {type(stream).__name__}")
    if (stream < -1 or stream >= 1 << 64) and (device_type in CUDA_RULES or device_type == ROCM):
        valid = "-1, 1, 2 or a handle in 3..2**64-1" if device_type in CUDA_RULES else \
            "-1, 0 or a handle in 1..2**64-1"  # test_dlpack_refuses_a_stream_that_is_no_handle
        raise StreamError(f"__dlpack__: stream {stream} is not a stream handle: expected None, "
                          f"{valid}")
    if device_type in CUDA_RULES:
        if stream == 0:
            rt = "sim (CUDA's rules)" if device_type in (SIM, SIM_MANAGED) else "CUDA"
            raise StreamError(f"__dlpack__: stream 0 is ambiguous for {rt}; use 1 (legacy "
                              f"default), 2 (per-thread default), -1 (no sync) or a stream handle")
    elif device_type == ROCM:
        if stream in (1, 2):  # the Array API's CUDA streams: not a C constant
            raise StreamError(f"__dlpack__: stream {stream} is not valid for ROCm; use 0 "
                              f"(default), -1 or a hipStream_t")
    else:
        raise StreamError(f"__dlpack__: stream must be None for "
                          f"{format_device(parse_device((device_type, 0)))} tensors, got {stream}")


def parse_dl_device(dl_device: object) -> tuple[int, int]:
    """A __dlpack__ dl_device as (type, id): TypeError unless a pair of ints, OverflowError
    past int32 (ctypes would wrap 2**32 into device 0)."""
    try:
        t, i = dl_device  # type: ignore[misc]
    except (TypeError, ValueError):
        raise TypeError(f"__dlpack__: dl_device must be a (device_type, device_id) pair, got "
                        f"{dl_device!r}") from None
    return (_lib.cint(t, ctypes.c_int32, "dl_device type"),
            _lib.cint(i, ctypes.c_int32, "dl_device id"))


def stream_wait(t: "Tensor", stream: Optional[int]) -> None:
    """Hands t's buffer to the consumer's stream: that stream waits for the buffer's (an event
    on CUDA/ROCm/sim), and the buffer's free is ordered after the consumer. None is the default
    stream (the Array API's rule); -1: the consumer orders its work itself, nothing waits."""
    buf = _lib.tensor_buffer(t._h)
    if stream == -1:
        consumer = STREAM_ALL
    elif stream is None or (stream == 1 and t._dev[0] != ROCM):
        consumer = None  # the legacy default stream is the NULL handle; ROCm's default is 0
    else:
        consumer = stream or None  # CUDA's 2 is cudaStreamPerThread itself; ROCm's 0 is NULL
    rc = _lib.buffer_stream_wait(buf, consumer)
    if rc and stream is not None and stream > 2:  # the runtime's message names its own call
        raise StreamError(f"__dlpack__: stream {stream} ({stream:#x}): "
                          f"{_lib.last_error().decode(errors='replace')}")
    _lib.check(rc)

