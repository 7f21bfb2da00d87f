/* The tensor handle (ipc.h, ADR 35): a buffer's handle (buffer_handle.c) and a tensor's layout,
 * written as the little-endian bytes of version 2 under a CRC-32 of their own, and every check an
 * importer makes before anything is mapped (tests/c suite ipc_tensor, tests/python). */
#include "ipc_internal.h"

#include <stdio.h>
#include <string.h>

#define MAGIC "devmmT"
#define MAGIC_SIZE 6
#define FLAG_READONLY 1u

/* Where each field starts (the table in ipc.h). */
enum {
  OFF_VERSION = MAGIC_SIZE,
  OFF_BUFFER = 8,
  OFF_LAYOUT = OFF_BUFFER + DEVMM_IPC_HANDLE_SIZE, /* what the CRC-32 covers, to the end */
  OFF_DTYPE = OFF_LAYOUT,
  OFF_NDIM = OFF_DTYPE + DEVMM_IPC_DTYPE_MAX,
  OFF_FLAGS = OFF_NDIM + 4,
  OFF_OFFSET = OFF_FLAGS + 4,
  OFF_CRC = OFF_OFFSET + 8,
  OFF_DIMS = OFF_CRC + 4,
};
_Static_assert(OFF_DIMS == DEVMM_IPC_TENSOR_HEADER_SIZE, "ipc.h's table: the shape starts at 300");

static void put_u16(unsigned char *p, uint16_t v) {
  p[0] = (unsigned char)v;
  p[1] = (unsigned char)(v >> 8);
}
static void put_u32(unsigned char *p, uint32_t v) {
  for (int i = 0; i < 4; i++)
    p[i] = (unsigned char)(v >> (8 * i));
}
static void put_u64(unsigned char *p, uint64_t v) {
  for (int i = 0; i < 8; i++)
    p[i] = (unsigned char)(v >> (8 * i));
}
static uint16_t get_u16(const unsigned char *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t get_u32(const unsigned char *p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; i--)
    v = v << 8 | p[i];
  return v;
}
static uint64_t get_u64(const unsigned char *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--)
    v = v << 8 | p[i];
  return v;
}

/* CRC-32 as zlib computes it (reflected polynomial 0xEDB88320), four bits at a time. */
static uint32_t crc32_update(uint32_t crc, const unsigned char *p, size_t n) {
  static const uint32_t nibble[16] = {
      0x00000000u, 0x1db71064u, 0x3b6e20c8u, 0x26d930acu, 0x76dc4190u, 0x6b6b51f4u,
      0x4db26158u, 0x5005713cu, 0xedb88320u, 0xf00f9344u, 0xd6d6a3e8u, 0xcb61b38cu,
      0x9b64c2b0u, 0x86d3d2d4u, 0xa00ae278u, 0xbdbdf21cu,
  };
  for (size_t i = 0; i < n; i++) {
    crc ^= p[i];
    crc = (crc >> 4) ^ nibble[crc & 15];
    crc = (crc >> 4) ^ nibble[crc & 15];
  }
  return crc;
}

/* The checksum of a handle of len bytes: bytes OFF_LAYOUT to the end, the CRC field read as 0. */
static uint32_t layout_crc(const unsigned char *h, size_t len) {
  static const unsigned char zero[4] = {0};
  uint32_t crc = crc32_update(0xffffffffu, h + OFF_LAYOUT, OFF_CRC - OFF_LAYOUT);
  crc = crc32_update(crc, zero, sizeof zero);
  return ~crc32_update(crc, h + OFF_DIMS, len - OFF_DIMS);
}

/* "(2, 3)", "(4,)": a shape as the messages (and Python's tuples) write it. */
static const char *shape_text(int ndim, const int64_t *shape, char *buf, size_t cap) {
  size_t n = (size_t)snprintf(buf, cap, "(");
  for (int i = 0; i < ndim && n < cap; i++)
    n += (size_t)snprintf(buf + n, cap - n, "%s%lld", i ? ", " : "", (long long)shape[i]);
  if (n < cap)
    snprintf(buf + n, cap - n, "%s)", ndim == 1 ? "," : "");
  return buf;
}

int devmm_ipc_get_tensor_handle(const devmm_tensor *t, void *out, size_t cap, size_t *len) {
  if (len)
    *len = 0;
  if (!t || !out || !len)
    return devmm_set_error(DEVMM_EINVAL, "devmm_ipc_get_tensor_handle: %s is NULL",
                           !t     ? "tensor"
                           : !out ? "out"
                                  : "len");
  int ndim = devmm_tensor_ndim(t);
  size_t need = DEVMM_IPC_TENSOR_HEADER_SIZE + 16 * (size_t)ndim;
  if (cap < need)
    return devmm_set_error(DEVMM_EINVAL,
                           "devmm_ipc_get_tensor_handle: out holds %zu bytes: the handle of a "
                           "%d-dimensional tensor is %zu (DEVMM_IPC_TENSOR_HANDLE_MAX, %d, hold "
                           "any)",
                           cap, ndim, need, DEVMM_IPC_TENSOR_HANDLE_MAX);
  char name[64];
  if (devmm_dtype_format(devmm_tensor_dtype(t), name, sizeof name) != DEVMM_OK)
    return devmm_set_error(DEVMM_EINVAL, "a tensor of an unnamed dtype has no handle: %.400s",
                           devmm_last_error());
  if (strlen(name) > DEVMM_IPC_DTYPE_MAX)
    return devmm_set_error(DEVMM_EINVAL,
                           "dtype name '%s' is over %d bytes: a tensor handle holds %d (send "
                           "such a tensor by value)",
                           name, DEVMM_IPC_DTYPE_MAX, DEVMM_IPC_DTYPE_MAX);
  devmm_buffer *b = devmm_tensor_buffer(t);
  if (!devmm_tensor_size(t) || !devmm_buffer_nbytes(b)) {
    char shape[256];
    return devmm_set_error(DEVMM_EINVAL,
                           "a 0-byte tensor (shape %s) has no memory to share (send it by value)",
                           shape_text(ndim, devmm_tensor_shape(t), shape, sizeof shape));
  }
  devmm_ipc_handle buffer;
  int rc = devmm_ipc_get_handle(devmm_buffer_resource(b), devmm_buffer_ptr(b),
                                devmm_buffer_nbytes(b), &buffer);
  if (rc)
    return rc;
  unsigned char *h = out;
  memset(h, 0, need);
  memcpy(h, MAGIC, MAGIC_SIZE);
  put_u16(h + OFF_VERSION, DEVMM_IPC_TENSOR_VERSION);
  memcpy(h + OFF_BUFFER, buffer.bytes, sizeof buffer.bytes);
  memcpy(h + OFF_DTYPE, name, strlen(name)); /* NUL-padded; no NUL when 16 bytes long */
  put_u32(h + OFF_NDIM, (uint32_t)ndim);
  put_u32(h + OFF_FLAGS, devmm_tensor_readonly(t) ? FLAG_READONLY : 0);
  put_u64(h + OFF_OFFSET, devmm_tensor_byte_offset(t));
  const int64_t *shape = devmm_tensor_shape(t), *strides = devmm_tensor_strides(t);
  for (int i = 0; i < ndim; i++) {
    put_u64(h + OFF_DIMS + 8 * (size_t)i, (uint64_t)shape[i]);
    put_u64(h + OFF_DIMS + 8 * (size_t)(ndim + i), (uint64_t)strides[i]);
  }
  put_u32(h + OFF_CRC, layout_crc(h, need));
  *len = need;
  return DEVMM_OK;
}

/* Checks a handle's own fields into *ti; *extent: the bytes of the buffer its layout reaches
 * (0 for a buffer's handle or an empty tensor). */
static int parse(const unsigned char *h, size_t len, devmm_ipc_tensor_info *ti, uint64_t *extent) {
  size_t struct_size = ti->struct_size;
  memset(ti, 0, sizeof *ti);
  ti->struct_size = struct_size;
  *extent = 0;
  if (len < MAGIC_SIZE || memcmp(h, MAGIC, MAGIC_SIZE) != 0) {
    if (len != DEVMM_IPC_HANDLE_SIZE)
      return devmm_set_error(DEVMM_EINVAL,
                             "a handle of %zu bytes: expected the %d bytes of a buffer's handle "
                             "or a tensor handle (\"devmmT\" and at least %d bytes; truncated?)",
                             len, DEVMM_IPC_HANDLE_SIZE, DEVMM_IPC_TENSOR_HEADER_SIZE);
    memcpy(ti->buffer.bytes, h, DEVMM_IPC_HANDLE_SIZE); /* a buffer's handle */
    return DEVMM_OK;
  }
  if (len >= OFF_BUFFER && get_u16(h + OFF_VERSION) != DEVMM_IPC_TENSOR_VERSION)
    return devmm_set_error(DEVMM_EINVAL,
                           "a tensor handle of version %u: this devmm reads version %d (was it "
                           "made by another devmm release?)",
                           get_u16(h + OFF_VERSION), DEVMM_IPC_TENSOR_VERSION);
  if (len < DEVMM_IPC_TENSOR_HEADER_SIZE)
    return devmm_set_error(DEVMM_EINVAL,
                           "a tensor handle of %zu bytes is truncated: it holds at least %d", len,
                           DEVMM_IPC_TENSOR_HEADER_SIZE);
  uint32_t ndim = get_u32(h + OFF_NDIM);
  if (ndim > DEVMM_MAX_NDIM)
    return devmm_set_error(DEVMM_EINVAL,
                           "a tensor handle of %u dimensions: a devmm tensor has at most %d "
                           "(corrupted?)",
                           ndim, DEVMM_MAX_NDIM);
  size_t want = DEVMM_IPC_TENSOR_HEADER_SIZE + 16 * (size_t)ndim;
  if (len != want)
    return devmm_set_error(DEVMM_EINVAL,
                           "a tensor handle of %zu bytes for %u dimensions: expected %zu "
                           "(truncated? or its ndim corrupted)",
                           len, ndim, want);
  uint32_t crc = get_u32(h + OFF_CRC), sum = layout_crc(h, len);
  if (crc != sum)
    return devmm_set_error(DEVMM_EINVAL,
                           "the tensor handle's layout is corrupted (its CRC-32 is 0x%08x, its "
                           "bytes sum to 0x%08x)",
                           (unsigned)crc, (unsigned)sum);
  char name[DEVMM_IPC_DTYPE_MAX + 1] = "", shown[4 * DEVMM_IPC_DTYPE_MAX + 4];
  memcpy(name, h + OFF_DTYPE, DEVMM_IPC_DTYPE_MAX);
  devmm__escape(name, sizeof name, shown, sizeof shown); /* what a handle says, escaped (ADR 40) */
  for (size_t i = strlen(name); i < DEVMM_IPC_DTYPE_MAX; i++)
    if (name[i])
      return devmm_set_error(DEVMM_EINVAL,
                             "the tensor handle's dtype name '%s' has bytes after its end "
                             "(expected NUL padding)",
                             shown);
  if (devmm_dtype_parse(name, &ti->dtype) != DEVMM_OK)
    return devmm_set_error(DEVMM_EINVAL,
                           "the tensor handle's dtype: unknown dtype '%s' (devmm_dtype_parse "
                           "lists the names)",
                           shown);
  size_t itemsize = devmm_dtype_itemsize(ti->dtype);
  if (!itemsize)
    return devmm_set_error(DEVMM_EINVAL,
                           "the tensor handle's dtype '%s' is sub-byte: a devmm tensor's "
                           "elements are whole bytes",
                           name);
  uint32_t flags = get_u32(h + OFF_FLAGS);
  if (flags & ~FLAG_READONLY)
    return devmm_set_error(DEVMM_EINVAL,
                           "the tensor handle's flags are 0x%x: this devmm knows bit 0 "
                           "(read-only) only",
                           (unsigned)flags);
  ti->is_tensor = 1;
  ti->ndim = (int)ndim;
  ti->readonly = (flags & FLAG_READONLY) != 0;
  ti->byte_offset = get_u64(h + OFF_OFFSET);
  memcpy(ti->buffer.bytes, h + OFF_BUFFER, DEVMM_IPC_HANDLE_SIZE);
  /* The last byte the view touches, as devmm_tensor_create computes it. */
  uint64_t last = 0, step, end;
  int empty = 0;
  for (uint32_t i = 0; i < ndim; i++) {
    int64_t n = (int64_t)get_u64(h + OFF_DIMS + 8 * (size_t)i);
    int64_t s = (int64_t)get_u64(h + OFF_DIMS + 8 * (size_t)(ndim + i));
    ti->shape[i] = n;
    ti->strides[i] = s;
    if (n < 0 || s < 0)
      return devmm_set_error(DEVMM_EINVAL,
                             "the tensor handle's shape[%u] = %lld and strides[%u] = %lld: "
                             "expected both >= 0",
                             i, (long long)n, i, (long long)s);
    if (n == 0)
      empty = 1;
    else if (__builtin_mul_overflow((uint64_t)(n - 1), (uint64_t)s, &step) ||
             __builtin_add_overflow(last, step, &last))
      return devmm_set_error(DEVMM_EOVERFLOW,
                             "the tensor handle's layout overflows 64 bits at dimension %u "
                             "(shape %lld, stride %lld)",
                             i, (long long)n, (long long)s);
  }
  if (!empty && (__builtin_add_overflow(last, 1, &end) ||
                 __builtin_mul_overflow(end, (uint64_t)itemsize, &end) ||
                 __builtin_add_overflow(end, ti->byte_offset, &end)))
    return devmm_set_error(DEVMM_EOVERFLOW,
                           "the tensor handle's layout overflows 64 bits (offset %llu, last "
                           "element %llu of %zu bytes)",
                           (unsigned long long)ti->byte_offset, (unsigned long long)last, itemsize);
  uint64_t count; /* a stride-0 view of 2^64 elements would count 0 (ADR 40) */
  if (devmm__count_elements("the tensor handle's layout", (int)ndim, ti->shape, itemsize, &count))
    return DEVMM_EOVERFLOW;
  *extent = empty ? 0 : end;
  return DEVMM_OK;
}

int devmm_ipc_tensor_handle_info(const void *handle, size_t len, devmm_ipc_tensor_info *out) {
  if (!handle || !out)
    return devmm_set_error(DEVMM_EINVAL, "devmm_ipc_tensor_handle_info: %s is NULL",
                           !handle ? "handle" : "out");
  if (out->struct_size < sizeof(devmm_ipc_tensor_info))
    return devmm_set_error(DEVMM_EINVAL,
                           "devmm_ipc_tensor_handle_info: out->struct_size is %zu: set it to "
                           "sizeof(devmm_ipc_tensor_info) (%zu bytes in this devmm)",
                           out->struct_size, sizeof(devmm_ipc_tensor_info));
  devmm_ipc_tensor_info ti = {.struct_size = out->struct_size};
  uint64_t extent;
  int rc = parse(handle, len, &ti, &extent);
  if (rc)
    return rc;
  memcpy(out, &ti, sizeof ti); /* a later caller's bigger struct: fill what this devmm has */
  return DEVMM_OK;
}

static int open_tensor(devmm_resource *r, const void *handle, size_t len, int use_fd, int fd,
                       devmm_tensor **out) {
  const char *fn = use_fd ? "devmm_ipc_open_tensor_fd" : "devmm_ipc_open_tensor";
  if (!out)
    return devmm_set_error(DEVMM_EINVAL, "%s: out is NULL", fn);
  *out = NULL;
  if (!handle)
    return devmm_set_error(DEVMM_EINVAL, "%s: handle is NULL", fn);
  devmm_ipc_tensor_info ti = {.struct_size = sizeof ti};
  uint64_t extent;
  int rc = parse(handle, len, &ti, &extent);
  if (rc)
    return rc;
  devmm_ipc_info bi = {.struct_size = sizeof bi};
  if ((rc = devmm_ipc_handle_info(&ti.buffer, &bi)) != DEVMM_OK)
    return rc;         /* the buffer's header: magic, version, checksum */
  if (!ti.is_tensor) { /* a buffer's handle: all of its bytes */
    ti.ndim = 1;
    ti.shape[0] = (int64_t)bi.bytes;
    ti.strides[0] = 1;
    devmm_dtype_parse("uint8", &ti.dtype);
  } else if (extent > bi.bytes) {
    char shape[256];
    return devmm_set_error(DEVMM_EINVAL,
                           "the tensor handle's layout (shape %s, offset %llu: %llu bytes) does "
                           "not fit the %llu bytes of its buffer",
                           shape_text(ti.ndim, ti.shape, shape, sizeof shape),
                           (unsigned long long)ti.byte_offset, (unsigned long long)extent,
                           (unsigned long long)bi.bytes);
  }
  devmm_buffer *b = NULL;
  rc = use_fd ? devmm_ipc_open_fd(r, &ti.buffer, fd, &b) : devmm_ipc_open(r, &ti.buffer, &b);
  if (rc)
    return rc;
  rc = devmm_tensor_create(b, ti.dtype, ti.ndim, ti.shape, ti.strides, (size_t)ti.byte_offset,
                           ti.readonly, out);
  if (rc) { /* not reached: the layout was checked against the same size */
    char why[DEVMM__MSG_MAX];
    snprintf(why, sizeof why, "%s", devmm_last_error());
    devmm_buffer_release(b); /* unmaps it */
    return devmm_set_error(rc, "the tensor handle's layout does not fit its buffer: %s", why);
  }
  devmm_buffer_release(b); /* the tensor holds the only reference now */
  return DEVMM_OK;
}

int devmm_ipc_open_tensor(devmm_resource *r, const void *handle, size_t len, devmm_tensor **out) {
  return open_tensor(r, handle, len, 0, -1, out);
}

int devmm_ipc_open_tensor_fd(devmm_resource *r, const void *handle, size_t len, int fd,
                             devmm_tensor **out) {
  return open_tensor(r, handle, len, 1, fd, out);
}
