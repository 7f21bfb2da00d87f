/* devmm — sharing allocations between processes (IPC) without copying (ADR 30).
 *
 * The exporter asks for a handle: DEVMM_IPC_HANDLE_SIZE plain bytes it may send any way it likes
 * (a pipe, a pickle, a Dask message). Another process on the same machine opens the handle and
 * gets a buffer mapping the same memory; closing it unmaps it there.
 *
 *   devmm_ipc_handle h;                       // exporter: r's stack ends in cpu.shm, sim.device...
 *   devmm_ipc_get_handle(r, ptr, bytes, &h);  // ... write(pipe, h.bytes, sizeof h.bytes)
 *   devmm_buffer *b;                          // importer: read(pipe, h.bytes, sizeof h.bytes)
 *   devmm_ipc_open(NULL, &h, &b);             // devmm_buffer_ptr(b): the same bytes
 *   devmm_ipc_close(b);
 *
 * A handle starts with a header devmm writes (a magic, a version, a checksum, the exporter's
 * pid and boot id, the device, the size and the kind that made it), so that a truncated,
 * corrupted or foreign handle, or one of another machine or boot, is refused with a message;
 * the rest is the leaf's payload. The checksum is no authentication: leaves check what a
 * payload names before opening it (cpu.shm and sim: a sealed devmm memfd; ADR 33).
 *
 * Lifetime: a handle can be opened only while the exporter's allocation is live (the exporter
 * keeps the memory's descriptor; once it frees the memory or exits, opening fails with
 * DEVMM_ENOENT). A mapping already open stays valid until the importer closes it: for cpu.shm the
 * exporter's free only drops its own mapping, and the importer keeps a descriptor of its own, so
 * that the mapping exports again (a handle naming the importer). For device memory the runtime's
 * rule applies (CUDA: the exporter must not free before every importer closed; the simulator makes
 * that visible: the importer then reads the 0xDD poison of a free).
 *
 * Statistics and limits: an opened mapping is not an allocation of the importer. Its adaptors
 * (statistics, limiting, tracking, logging) count nothing for it; the memory is counted once,
 * by the exporter, which allocated it. */
#ifndef DEVMM_IPC_H
#define DEVMM_IPC_H

#include "resource.h"
#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DEVMM_IPC_HANDLE_SIZE 256 /* bytes of a handle */
#define DEVMM_IPC_HEADER_SIZE 96  /* devmm's header at its start */
#define DEVMM_IPC_PAYLOAD_SIZE (DEVMM_IPC_HANDLE_SIZE - DEVMM_IPC_HEADER_SIZE) /* the leaf's */
#define DEVMM_IPC_KIND_MAX 48 /* a kind name that makes handles is shorter than this */

/* A handle: plain bytes, to be copied as they are. */
typedef struct devmm_ipc_handle {
  unsigned char bytes[DEVMM_IPC_HANDLE_SIZE];
} devmm_ipc_handle;

/* The optional IPC group of a resource's ops (devmm_resource_ops.ipc), implemented by a leaf
 * resource whose memory another process can map. Adaptors need none: the core forwards a
 * request down the stack to the first resource that has one. Fields are only appended;
 * struct_size says how many a group has. */
typedef struct devmm_resource_ipc_ops {
  size_t struct_size; /* sizeof(devmm_resource_ipc_ops) when the group was compiled */
  /* The kind written into handles and matched when opening ("cpu.shm"): a resource of that
   * kind (devmm_resource_create_kind) opens them. */
  const char *kind;
  /* Fills payload (DEVMM_IPC_PAYLOAD_SIZE bytes, zeroed) so that open, in another process, can
   * map [ptr, ptr + bytes), memory this resource allocated. */
  int (*get_handle)(devmm_resource *self, void *ptr, size_t bytes, unsigned char *payload);
  /* Maps what payload names (bytes long, made by a process with id pid) into this process:
   * *out its address, *token anything close needs. */
  int (*open)(devmm_resource *self, const unsigned char *payload, size_t bytes, int32_t pid,
              void **out, void **token);
  /* Unmaps what open mapped. */
  int (*close)(devmm_resource *self, void *ptr, size_t bytes, void *token);
  /* Optional (NULL, or past struct_size: none). The descriptor, in this process, of the memory
   * a payload made here names (it stays the resource's), so that it can travel as a descriptor
   * (SCM_RIGHTS, multiprocessing's DupFd). */
  int (*handle_fd)(devmm_resource *self, const unsigned char *payload, int *fd);
  /* Optional, with handle_fd: as open, mapping descriptor fd (received from the exporter; it
   * stays the caller's) instead of finding the exporter's. */
  int (*open_fd)(devmm_resource *self, const unsigned char *payload, size_t bytes, int fd,
                 void **out, void **token);
} devmm_resource_ipc_ops;

/* What a handle's header says. Set struct_size to sizeof(devmm_ipc_info) before the call: fields
 * are only appended, and devmm fills the ones that struct_size covers. */
typedef struct devmm_ipc_info {
  size_t struct_size;
  char kind[DEVMM_IPC_KIND_MAX]; /* the kind that made it */
  devmm_device device;
  uint64_t bytes;   /* size of the shared range */
  int32_t pid;      /* the exporting process */
  int same_machine; /* 1 if made on this machine since its last boot (its pid namespace may
                     * still differ: opening says so, ADR 40) */
} devmm_ipc_info;

/* Writes a handle for [ptr, ptr + bytes), memory from r (or a resource of its stack that shares
 * memory; DEVMM_ENOTSUP, naming the stack, if none does). */
DEVMM_API int devmm_ipc_get_handle(devmm_resource *r, void *ptr, size_t bytes,
                                   devmm_ipc_handle *out);
/* Checks a handle's header (DEVMM_EINVAL: not a devmm handle, corrupted, another version, a kind
 * that is not a plain kind name such as "cpu.shm") and describes it. */
DEVMM_API int devmm_ipc_handle_info(const devmm_ipc_handle *h, devmm_ipc_info *out);
/* Opens a handle made by another process (or this one) as a buffer of the handle's size,
 * through r's stack, or when r is NULL the current resource of the handle's device if its stack
 * serves the handle's kind, else a new resource of that kind from a plugin already loaded (a
 * handle never loads one: DEVMM_ENOTSUP). Close it with devmm_ipc_close (or devmm_buffer_free +
 * devmm_buffer_release: the mapping goes with the memory). */
DEVMM_API int devmm_ipc_open(devmm_resource *r, const devmm_ipc_handle *h, devmm_buffer **out);
/* The descriptor (in this process) of the memory a handle made by this process names, to send
 * it as a descriptor (SCM_RIGHTS, multiprocessing's DupFd): the receiver's devmm_ipc_open_fd
 * then needs neither /proc nor the exporter's allocation. It stays devmm's: dup it, never close
 * it. DEVMM_ENOTSUP for a kind without descriptors (device memory), DEVMM_EINVAL for a handle
 * of another process or memory no longer live. */
DEVMM_API int devmm_ipc_handle_fd(const devmm_ipc_handle *h, int *fd);
/* As devmm_ipc_open, mapping fd, the handle's descriptor received from its exporter (it stays
 * the caller's: devmm keeps a duplicate), checked as a reopened one is. */
DEVMM_API int devmm_ipc_open_fd(devmm_resource *r, const devmm_ipc_handle *h, int fd,
                                devmm_buffer **out);
/* Unmaps a buffer from devmm_ipc_open (when its last export lets go) and releases it. */
DEVMM_API void devmm_ipc_close(devmm_buffer *b);
/* 1 if r's stack can make handles (some resource in it has an IPC group), else 0. */
DEVMM_API int devmm_ipc_supported(const devmm_resource *r);

/* ---------------------------------------------------------------- tensor handles (ADR 35)
 * A tensor's handle is its buffer's handle and its layout, so that the importer needs no shape
 * or dtype from the sender: little-endian bytes, 300 + 16 * ndim of them (version 2, the format
 * devmm's Python side wrote before it moved here: handles of either open in the other):
 *
 *   0 "devmmT"  6 u16 version (2)  8 the buffer's handle (DEVMM_IPC_HANDLE_SIZE bytes)
 *   264 the dtype's name (16 bytes, NUL-padded)  280 u32 ndim  284 u32 flags (bit 0: read-only)
 *   288 u64 byte offset of element 0  296 u32 CRC-32 (zlib's) of bytes 264 to the end, this
 *   field read as 0  300 i64 shape[ndim], then i64 strides[ndim] (in elements)
 *
 *   unsigned char h[DEVMM_IPC_TENSOR_HANDLE_MAX]; size_t n;   // exporter
 *   devmm_ipc_get_tensor_handle(t, h, sizeof h, &n);          // ... send the n bytes
 *   devmm_tensor *u;                                          // importer
 *   devmm_ipc_open_tensor(NULL, h, n, &u);                    // the same memory, t's layout
 *   devmm_tensor_destroy(u);                                  // unmaps it */

#define DEVMM_IPC_TENSOR_VERSION 2
#define DEVMM_IPC_TENSOR_HEADER_SIZE 300 /* bytes before the shape */
#define DEVMM_IPC_TENSOR_HANDLE_MAX (DEVMM_IPC_TENSOR_HEADER_SIZE + 16 * DEVMM_MAX_NDIM) /* 812 */
#define DEVMM_IPC_DTYPE_MAX 16 /* a dtype name a tensor handle holds is at most this long */

/* What a tensor handle's own fields say. Set struct_size to sizeof(devmm_ipc_tensor_info) before
 * the call: fields are only appended, and devmm fills the ones that struct_size covers. */
typedef struct devmm_ipc_tensor_info {
  size_t struct_size;
  int is_tensor; /* 0: a buffer's handle (only `buffer` is set; it opens as 1-D uint8 bytes) */
  int ndim;
  devmm_dtype dtype;
  int readonly;
  uint64_t byte_offset;
  int64_t shape[DEVMM_MAX_NDIM];
  int64_t strides[DEVMM_MAX_NDIM]; /* in elements */
  devmm_ipc_handle buffer;         /* the buffer's handle inside (devmm_ipc_handle_info reads it) */
} devmm_ipc_tensor_info;

/* Writes t's handle into out (cap bytes; DEVMM_IPC_TENSOR_HANDLE_MAX always suffice) and its
 * length into *len: the handle of t's buffer (devmm_ipc_get_handle) and t's layout. */
DEVMM_API int devmm_ipc_get_tensor_handle(const devmm_tensor *t, void *out, size_t cap,
                                          size_t *len);
/* Checks a tensor handle's own fields (magic, version, length, ndim, checksum, dtype, flags,
 * shape and strides; DEVMM_EINVAL or DEVMM_EOVERFLOW saying which) and describes them. The
 * buffer's handle inside is checked by devmm_ipc_handle_info, everything by the open. */
DEVMM_API int devmm_ipc_tensor_handle_info(const void *handle, size_t len,
                                           devmm_ipc_tensor_info *out);
/* Opens a tensor handle (len bytes; or a buffer's handle: a 1-D uint8 tensor of all its bytes)
 * as devmm_ipc_open opens its buffer, once every field is checked and the layout found to fit
 * the buffer. devmm_tensor_destroy unmaps it (the tensor holds the buffer's only reference). */
DEVMM_API int devmm_ipc_open_tensor(devmm_resource *r, const void *handle, size_t len,
                                    devmm_tensor **out);
/* As devmm_ipc_open_tensor, mapping fd, the buffer's descriptor received from its exporter
 * (devmm_ipc_handle_fd of info.buffer there), as devmm_ipc_open_fd does. */
DEVMM_API int devmm_ipc_open_tensor_fd(devmm_resource *r, const void *handle, size_t len, int fd,
                                       devmm_tensor **out);

#ifdef __cplusplus
}
#endif
#endif
