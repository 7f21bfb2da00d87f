"""The C side as ctypes declares it: libdevmm's structs and the signature of every C function
that :mod:`devmm._lib` binds (one table). Only ``_lib`` imports it, on the first use of a
struct or a bound function: ``import devmm`` and :func:`devmm.empty` need neither, and
importing ctypes costs start-up time (ADR 45). It imports nothing of devmm's.
"""

from __future__ import annotations

import ctypes
from ctypes import (POINTER, Structure, c_char_p, c_int, c_int32, c_int64, c_size_t,
                    c_uint, c_uint8, c_uint16, c_uint32, c_uint64, c_void_p)

STRUCTS = ("Device", "DType", "Layout", "LayoutResult", "Statistics", "AllocationInfo",
           "TrackingOptions", "TrackingEvent", "LogEvent", "Log", "OomAllocation", "OomReport",
           "Option")
"""The structs ``_lib`` serves by name (``_lib.Device``, ...)."""

# ----------------------------------------------------------------------------- structs


class Device(Structure):
    _fields_ = [("device_type", c_int32), ("device_id", c_int32)]


class DType(Structure):
    _fields_ = [("code", c_uint8), ("bits", c_uint8), ("lanes", c_uint16)]


class Layout(Structure):
    _fields_ = [("kind", c_int), ("inner", c_int), ("ndim", c_int),
                ("strides", POINTER(c_int64)), ("unit_stride_alignment", c_size_t),
                ("base_alignment", c_size_t)]


class LayoutResult(Structure):
    _fields_ = [("span_bytes", c_size_t), ("base_alignment", c_size_t), ("nelems", c_size_t)]


class Statistics(Structure):
    _fields_ = [(n, c_int64) for n in ("current_bytes", "peak_bytes", "total_bytes",
                                       "current_count", "peak_count", "total_count")]


class AllocationInfo(Structure):
    _fields_ = [("ptr", c_void_p), ("bytes", c_size_t), ("alignment", c_size_t),
                ("stream", c_void_p), ("thread_id", c_uint64), ("nframes", c_int),
                ("frames", c_void_p * 16), ("tag", c_uint64), ("time_ns", c_uint64)]


# ----------------------------------------------------------------------------- observability

class TrackingOptions(Structure):
    _fields_ = [("struct_size", c_size_t), ("backtraces", c_int), ("history", c_size_t),
                ("context_capture", c_void_p), ("context_describe", c_void_p),
                ("context_release", c_void_p), ("context_user", c_void_p)]


class TrackingEvent(Structure):
    _fields_ = [("time_ns", c_uint64), ("ptr", c_void_p), ("bytes", c_size_t),
                ("stream", c_void_p), ("thread_id", c_uint64), ("tag", c_uint64),
                ("action", c_uint32), ("reserved_", c_uint32)]


class LogEvent(Structure):  # 48 bytes: time_ns, ptr, bytes, stream (u64), peer (i64), thread, action
    _fields_ = [("time_ns", c_uint64), ("ptr", c_uint64), ("bytes", c_uint64),
                ("stream", c_uint64), ("peer", c_int64), ("thread", c_uint32),
                ("action", c_uint32)]


class Log(Structure):
    _fields_ = [("nevents", c_size_t), ("events", POINTER(LogEvent)), ("nthreads", c_size_t),
                ("threads", POINTER(c_uint64)), ("unmatched_frees", c_size_t),
                ("never_freed", c_size_t), ("double_frees", c_size_t),
                ("resized_frees", c_size_t), ("first_double_free", c_size_t),
                ("first_resized_free", c_size_t), ("double_free_line", c_size_t),
                ("resized_free_line", c_size_t)]


class OomAllocation(Structure):
    _fields_ = [("ptr", c_void_p), ("bytes", c_size_t), ("thread_id", c_uint64),
                ("where", ctypes.c_char * 192)]


class OomReport(Structure):
    _fields_ = [("struct_size", c_size_t), ("device", Device), ("requested_bytes", c_size_t),
                ("alignment", c_size_t), ("stack", ctypes.c_char * 256),
                ("reason", ctypes.c_char * 512), ("current_bytes", c_int64),
                ("peak_bytes", c_int64), ("counted_by", ctypes.c_char * 256),
                ("free_bytes", c_int64), ("total_bytes", c_int64),
                ("tracking", ctypes.c_char * 256), ("live_count", c_size_t),
                ("live_bytes", c_size_t), ("nlargest", c_size_t),
                ("largest", OomAllocation * 5)]


class Option(Structure):
    _fields_ = [("key", c_char_p), ("value", c_char_p), ("line", c_int)]


# ----------------------------------------------------------------------------- signatures

_P = c_void_p

# name: (restype, argtypes). Status-returning functions have restype c_int.
SIGNATURES = {
    "devmm_last_error": (c_char_p, []),
    "devmm_clear_error": (None, []),
    "devmm_status_name": (c_char_p, [c_int]),
    "devmm_version": (c_char_p, []),
    "devmm_dtype_parse": (c_int, [c_char_p, POINTER(DType)]),
    "devmm_dtype_count": (c_size_t, []),
    "devmm_dtype_name_at": (c_char_p, [c_size_t]),
    "devmm_dtype_itemsize": (c_size_t, [DType]),
    "devmm_device_parse": (c_int, [c_char_p, POINTER(Device)]),
    "devmm_device_format": (c_int, [Device, c_char_p, c_size_t]),
    "devmm_device_host_accessible": (c_int, [Device]),
    "devmm_device_home": (Device, [Device]),
    "devmm_layout_row_major": (Layout, []),
    "devmm_layout_column_major": (Layout, []),
    "devmm_layout_strided": (Layout, [c_int, POINTER(c_int64)]),
    "devmm_layout_aligned": (Layout, [c_int, c_size_t, c_size_t]),
    "devmm_layout_compute": (c_int, [POINTER(Layout), c_int, POINTER(c_int64), c_size_t,
                                     POINTER(c_int64), POINTER(LayoutResult)]),
    "devmm_resource_retain": (_P, [_P]),
    "devmm_resource_name": (c_char_p, [_P]),
    "devmm_resource_device": (Device, [_P]),
    "devmm_resource_flags": (c_uint, [_P]),
    "devmm_resource_upstream": (_P, [_P]),
    "devmm_adaptor_kind": (c_char_p, [_P]),
    "devmm_allocate": (c_int, [_P, c_size_t, c_size_t, _P, POINTER(c_void_p)]),
    "devmm_deallocate": (c_int, [_P, _P, c_size_t, c_size_t, _P]),
    "devmm_mem_info": (c_int, [_P, POINTER(c_size_t), POINTER(c_size_t)]),
    "devmm_copy": (c_int, [_P, _P, _P, c_size_t, _P]),
    "devmm_memset": (c_int, [_P, _P, c_int, c_size_t, _P]),
    "devmm_synchronize": (c_int, [_P, _P]),
    "devmm_stream_wait": (c_int, [_P, _P, _P]),
    "devmm_get_current_resource": (c_int, [Device, POINTER(c_void_p)]),
    "devmm_set_current_resource": (c_int, [Device, _P, POINTER(c_void_p)]),
    "devmm_statistics_adaptor_create_ex": (c_int, [_P, c_uint, POINTER(c_void_p)]),
    "devmm_statistics_get": (c_int, [_P, POINTER(Statistics)]),
    "devmm_statistics_push": (c_int, [_P]),
    "devmm_statistics_pop": (c_int, [_P, POINTER(Statistics)]),
    "devmm_statistics_reset_peak": (c_int, [_P]),
    "devmm_limiting_adaptor_create": (c_int, [_P, c_size_t, POINTER(c_void_p)]),
    "devmm_limiting_get": (c_int, [_P, POINTER(c_size_t), POINTER(c_size_t)]),
    "devmm_tracking_adaptor_create": (c_int, [_P, c_int, POINTER(c_void_p)]),
    "devmm_tracking_lookup": (c_int, [_P, _P, POINTER(AllocationInfo)]),
    "devmm_tracking_outstanding": (c_int, [_P, POINTER(c_size_t), POINTER(c_size_t)]),
    "devmm_tracking_report": (c_int, [_P, POINTER(c_void_p)]),
    "devmm_string_free": (None, [_P]),
    "devmm_logging_adaptor_create": (c_int, [_P, c_char_p, c_int, POINTER(c_void_p)]),
    "devmm_logging_flush": (c_int, [_P]),
    "devmm_aligned_adaptor_create": (c_int, [_P, c_size_t, c_size_t, POINTER(c_void_p)]),
    "devmm_failure_callback_adaptor_create": (c_int, [_P, _P, _P, POINTER(c_void_p)]),
    "devmm_failure_callback_adaptor_create_ex": (c_int, [_P, _P, _P, c_uint,
                                                         POINTER(c_void_p)]),
    "devmm_set_log_level": (c_int, [c_char_p]),
    "devmm_log_level": (c_char_p, []),
    "devmm_thread_safe_adaptor_create": (c_int, [_P, POINTER(c_void_p)]),
    "devmm_prefetch_adaptor_create": (c_int, [_P, POINTER(c_void_p)]),
    "devmm_prefetch": (c_int, [_P, _P, c_size_t, _P]),
    "devmm_callback_resource_create": (c_int, [_P, _P, _P, _P, Device, c_char_p, c_uint,
                                               POINTER(c_void_p)]),
    "devmm_callback_resource_create_ex": (c_int, [_P, _P, _P, _P, Device, c_char_p, c_uint, _P,
                                                  POINTER(c_void_p)]),
    "devmm_callbacks_disable": (None, []),
    "devmm_torch_allocate": (c_int, [c_size_t, c_int, _P, POINTER(c_void_p)]),
    "devmm_torch_deallocate": (None, [_P, c_size_t, c_int, _P]),
    "devmm_torch_record_stream": (None, [_P, _P]),
    "devmm_torch_free_waits_for_device": (None, [c_int]),
    # variadic in C (fmt, ...): always called with the format "%s" and one string
    "devmm_set_error": (c_int, [c_int, c_char_p, c_char_p]),
    "devmm_buffer_allocate": (c_int, [_P, c_size_t, c_size_t, _P, POINTER(c_void_p)]),
    "devmm_buffer_is_freed": (c_int, [_P]),
    "devmm_buffer_ptr": (_P, [_P]),
    "devmm_buffer_nbytes": (c_size_t, [_P]),
    "devmm_buffer_resource": (_P, [_P]),
    "devmm_buffer_device": (Device, [_P]),
    "devmm_buffer_stream": (_P, [_P]),
    "devmm_buffer_stream_wait": (c_int, [_P, _P]),
    "devmm_buffer_prefetch": (c_int, [_P, Device, _P]),
    "devmm_deferred_frees_wait": (None, []),
    "devmm_tensor_create": (c_int, [_P, DType, c_int, POINTER(c_int64), POINTER(c_int64),
                                    c_size_t, c_int, POINTER(c_void_p)]),
    "devmm_last_status": (c_int, []),
    "devmm_tensor_buffer": (_P, [_P]),
    "devmm_tensor_strides": (POINTER(c_int64), [_P]),
    "devmm_tensor_data": (_P, [_P]),
    "devmm_tensor_readonly": (c_int, [_P]),
    "devmm_tensor_zero": (c_int, [_P]),
    "devmm_tensor_copy": (c_int, [_P, _P, POINTER(c_void_p)]),
    "devmm_init": (c_int, [c_char_p]),
    "devmm_ffi_init": (c_int, [c_char_p, POINTER(c_void_p)]),
    "devmm_ffi_init_text": (c_int, [c_char_p, c_size_t, c_char_p, POINTER(c_void_p)]),
    "devmm_ffi_open_page": (c_int, [c_char_p, POINTER(c_int)]),
    "devmm_shutdown": (None, []),
    "devmm_is_initialized": (c_int, []),
    "devmm_config_source": (c_char_p, []),
    "devmm_info_json": (c_int, [POINTER(c_void_p)]),
    "devmm_info_json_now": (c_int, [POINTER(c_void_p)]),
    "devmm_kind_name": (c_char_p, [c_size_t]),
    "devmm_config_warning": (c_char_p, [c_size_t]),
    "devmm_resource_create_kind": (c_int, [c_char_p, c_int32, POINTER(Option), c_size_t,
                                           POINTER(c_void_p)]),
    "devmm_parse_size": (c_int, [c_char_p, c_size_t, POINTER(c_size_t)]),
    "devmm_ffi_dtype_pack": (c_uint32, [DType]),
    # observability (#12): tracking options and history, memory logs, out-of-memory reports
    "devmm_tracking_adaptor_create_ex": (c_int, [_P, POINTER(TrackingOptions),
                                                 POINTER(c_void_p)]),
    "devmm_tracking_history": (c_int, [_P, POINTER(TrackingEvent), c_size_t, POINTER(c_size_t),
                                       POINTER(c_size_t), POINTER(c_uint64), POINTER(c_uint64)]),
    "devmm_tracking_describe": (c_int, [_P, c_uint64, _P, c_size_t]),
    "devmm_tracking_foreach": (c_int, [_P, _P, _P]),
    "devmm_frame_describe": (c_int, [_P, _P, c_size_t]),
    "devmm_log_read": (c_int, [c_char_p, POINTER(POINTER(Log))]),
    "devmm_log_free": (None, [POINTER(Log)]),
    "devmm_last_oom": (c_int, [POINTER(OomReport)]),
    # IPC (#13, ADR 30): handles are DEVMM_IPC_HANDLE_SIZE bytes, passed as char buffers
    "devmm_ipc_get_handle": (c_int, [_P, _P, c_size_t, _P]),
    "devmm_ipc_handle_info": (c_int, [_P, _P]),  # (handle, IpcInfo *)
    "devmm_ipc_open": (c_int, [_P, _P, POINTER(c_void_p)]),
    "devmm_ipc_supported": (c_int, [_P]),
    "devmm_ipc_handle_fd": (c_int, [_P, POINTER(c_int)]),
    "devmm_ipc_open_fd": (c_int, [_P, _P, c_int, POINTER(c_void_p)]),
    # tensor handles (ADR 35): (tensor, out, cap, *len); (handle, len, IpcTensorInfo *); opens
    "devmm_ipc_get_tensor_handle": (c_int, [_P, _P, c_size_t, POINTER(c_size_t)]),
    "devmm_ipc_tensor_handle_info": (c_int, [_P, c_size_t, _P]),
    "devmm_ipc_open_tensor": (c_int, [_P, _P, c_size_t, POINTER(c_void_p)]),
    "devmm_ipc_open_tensor_fd": (c_int, [_P, _P, c_size_t, c_int, POINTER(c_void_p)]),
    "devmm_tensor_ndim": (c_int, [_P]),
    "devmm_tensor_shape": (POINTER(c_int64), [_P]),
    "devmm_tensor_dtype": (DType, [_P]),
    "devmm_dtype_format": (c_int, [DType, c_char_p, c_size_t]),
}
