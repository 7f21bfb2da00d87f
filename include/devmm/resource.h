/* devmm — the memory resource: a ref-counted object with a small ops table.
 *
 * A resource allocates and frees memory on one device. Plugins and users build one from an ops
 * table and a context pointer; callers use devmm_allocate / devmm_deallocate.
 *
 *   void *p;
 *   if (devmm_allocate(r, 1024, 0, NULL, &p) == DEVMM_OK) devmm_deallocate(r, p, 1024, 0, NULL);
 *   devmm_resource_release(r);
 */
#ifndef DEVMM_RESOURCE_H
#define DEVMM_RESOURCE_H

#include "error.h"
#include "export.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct devmm_resource devmm_resource;
struct devmm_resource_ipc_ops; /* ipc.h */

/* The operations of a resource. devmm_resource_create checks the table once and keeps its own
 * copy with the defaults filled in: allocate and deallocate are required; copy and memset, when
 * NULL on a resource flagged DEVMM_RESOURCE_HOST_ACCESSIBLE, become the host's memmove/memset
 * (synchronous, the stream ignored); other NULL entries answer DEVMM_ENOTSUP with a message.
 * New entries are only appended; struct_size says how many a table has. Every op that fails
 * returns a negative status and sets the message: devmm_set_error in libdevmm's own code,
 * host->set_error in a plugin (plugins link no libdevmm). Ops get the resource; a plugin's state
 * is its context (host->resource_context(self)). */
typedef struct devmm_resource_ops {
  size_t struct_size; /* sizeof(devmm_resource_ops) when the table was compiled */
  /* Required: allocate `bytes` (> 0) aligned to `alignment`, a power of two (never 0: the host
   * passes DEVMM_DEFAULT_ALIGNMENT for a request of 0), ordered on `stream`. */
  int (*allocate)(devmm_resource *self, size_t bytes, size_t alignment, devmm_stream stream,
                  void **out);
  /* Required: free a pointer this resource returned, with the same bytes and alignment. */
  int (*deallocate)(devmm_resource *self, void *ptr, size_t bytes, size_t alignment,
                    devmm_stream stream);
  /* Optional: free and total bytes of the device as this resource sees it. */
  int (*mem_info)(devmm_resource *self, size_t *free_bytes, size_t *total_bytes);
  /* Optional: copy bytes between two pointers this resource can address, ordered on stream. */
  int (*copy)(devmm_resource *self, void *dst, const void *src, size_t bytes, devmm_stream stream);
  /* Optional: fill bytes with value, ordered on stream. */
  int (*memset)(devmm_resource *self, void *dst, int value, size_t bytes, devmm_stream stream);
  /* Optional for host memory, needed by device memory with streams: make work later submitted
   * to `waiter` wait for work already on `waitee`. */
  int (*stream_wait)(devmm_resource *self, devmm_stream waiter, devmm_stream waitee);
  /* Optional for host memory, needed by device memory with streams: wait until all work on
   * `stream` is done (host synchronisation); DEVMM_STREAM_ALL: all work on the device. */
  int (*synchronize)(devmm_resource *self, devmm_stream stream);
  /* Optional: release the context; called once, when the last reference goes. */
  void (*destroy)(devmm_resource *self);
  /* Optional: sharing memory with other processes (ipc.h, ADR 30); read only when struct_size
   * covers it, and its own fields only as far as the group's struct_size. */
  const struct devmm_resource_ipc_ops *ipc;
  /* Optional (ABI 1.1, read when struct_size covers it): migrate [ptr, ptr + bytes) of memory
   * this resource returned to its device, ordered on stream (managed and system memory:
   * cudaMemPrefetchAsync). The prefetch adaptor and devmm_prefetch call it. */
  int (*prefetch)(devmm_resource *self, const void *ptr, size_t bytes, devmm_stream stream);
} devmm_resource_ops;

/* For synchronize: every stream of the resource's device (cudaDeviceSynchronize). */
#define DEVMM_STREAM_ALL ((devmm_stream)(intptr_t)-2)
/* The calling thread's per-thread default stream (cudaStreamPerThread, hipStreamPerThread, the
 * simulator's handle 2): a different stream on each thread. A buffer allocated on it is freed
 * and exported in its allocating thread's order, from any thread (ADR 38). */
#define DEVMM_STREAM_PER_THREAD ((devmm_stream)(intptr_t)2)

/* Resource flags. */
enum {
  DEVMM_RESOURCE_THREAD_SAFE = 1u << 0,     /* ops may be called from many threads at once */
  DEVMM_RESOURCE_HOST_ACCESSIBLE = 1u << 1, /* the CPU may read/write the memory directly */
};

/* Creates a resource (refcount 1) from ops and ctx; name is copied. Checks ops once (struct_size,
 * the required ops) and keeps a copy with the defaults filled in (see devmm_resource_ops). On
 * failure nothing is kept (ops->destroy is not called). */
DEVMM_API int devmm_resource_create(const devmm_resource_ops *ops, void *ctx, devmm_device device,
                                    const char *name, unsigned flags, devmm_resource **out);
/* Adds a reference; returns r. */
DEVMM_API devmm_resource *devmm_resource_retain(devmm_resource *r);
/* Drops a reference; the last one calls ops->destroy and frees the resource. NULL is ignored. */
DEVMM_API void devmm_resource_release(devmm_resource *r);
/* The context pointer given to devmm_resource_create. */
DEVMM_API void *devmm_resource_context(const devmm_resource *r);
/* The device this resource allocates on. */
DEVMM_API devmm_device devmm_resource_device(const devmm_resource *r);
/* The resource's name ("cpu.malloc", "statistics(cpu.malloc)", ...). */
DEVMM_API const char *devmm_resource_name(const devmm_resource *r);
/* The DEVMM_RESOURCE_* flags. */
DEVMM_API unsigned devmm_resource_flags(const devmm_resource *r);
/* The upstream of an adaptor (borrowed), or NULL for a leaf resource. */
DEVMM_API devmm_resource *devmm_resource_upstream(const devmm_resource *r);
/* Current reference count (for tests and diagnostics). */
DEVMM_API long devmm_resource_refcount(const devmm_resource *r);

/* The largest alignment devmm_allocate accepts (1 TiB): more can never be satisfied. */
#define DEVMM_MAX_ALIGNMENT ((size_t)1 << 40)
/* The alignment an alignment of 0 means for devmm_allocate/devmm_deallocate: malloc's
 * (alignof(max_align_t) on every supported target). Ops never see 0. Tensors use their own,
 * larger default (devmm_tensor_default_alignment). */
#define DEVMM_DEFAULT_ALIGNMENT ((size_t)16)

/* Allocates bytes (0 gives NULL and DEVMM_OK) with alignment (0: DEVMM_DEFAULT_ALIGNMENT, else a
 * power of two up to DEVMM_MAX_ALIGNMENT). */
DEVMM_API int devmm_allocate(devmm_resource *r, size_t bytes, size_t alignment, devmm_stream stream,
                             void **out);
/* Frees memory from devmm_allocate with the same bytes and alignment (0 as for devmm_allocate);
 * NULL is a no-op. */
DEVMM_API int devmm_deallocate(devmm_resource *r, void *ptr, size_t bytes, size_t alignment,
                               devmm_stream stream);
/* Free and total memory of the resource's device (DEVMM_ENOTSUP if unknown). */
DEVMM_API int devmm_mem_info(devmm_resource *r, size_t *free_bytes, size_t *total_bytes);
/* Copies bytes through the resource's copy op (memmove for a host-accessible resource without
 * one; DEVMM_ENOTSUP for others without one). */
DEVMM_API int devmm_copy(devmm_resource *r, void *dst, const void *src, size_t bytes,
                         devmm_stream stream);
/* Fills bytes with value through the resource's memset op (memset for a host-accessible
 * resource without one; DEVMM_ENOTSUP for others without one). */
DEVMM_API int devmm_memset(devmm_resource *r, void *dst, int value, size_t bytes,
                           devmm_stream stream);
/* Makes `waiter` wait for `waitee`. Without the op: OK for host memory (cpu, cuda_host,
 * rocm_host) and host-accessible resources (the CPU does their work: nothing is pending);
 * DEVMM_ENOTSUP for other device memory, which cannot order streams. */
DEVMM_API int devmm_stream_wait(devmm_resource *r, devmm_stream waiter, devmm_stream waitee);
/* Waits on the host for work on stream (DEVMM_STREAM_ALL: the whole device); without the op,
 * the same answers as devmm_stream_wait. */
DEVMM_API int devmm_synchronize(devmm_resource *r, devmm_stream stream);
/* Prefetches [ptr, ptr + bytes) to r's device, ordered on stream, through the prefetch op of r
 * or of the nearest layer below it that has one (adaptors keep their upstream's addresses);
 * DEVMM_ENOTSUP, saying so, where no layer has one (memory that does not move). */
DEVMM_API int devmm_prefetch(devmm_resource *r, const void *ptr, size_t bytes, devmm_stream stream);

/* A resource whose allocate/free are plain function pointers with a user pointer: how a
 * front end (Python's CallbackMemoryResource) defines a resource in its own language. alloc
 * returns a devmm status and sets an error message on failure. */
typedef int (*devmm_callback_alloc_fn)(void *user, size_t bytes, size_t alignment,
                                       devmm_stream stream, void **out);
typedef int (*devmm_callback_free_fn)(void *user, void *ptr, size_t bytes, size_t alignment,
                                      devmm_stream stream);
/* Creates a callback resource (thread-safe if the callbacks are); destroy(user) runs when the
 * last reference goes (may be NULL). */
DEVMM_API int devmm_callback_resource_create(devmm_callback_alloc_fn alloc,
                                             devmm_callback_free_fn free_fn,
                                             void (*destroy)(void *), void *user,
                                             devmm_device device, const char *name, unsigned flags,
                                             devmm_resource **out);
/* Like devmm_callback_resource_create, with `runtime` (retained; NULL: none): a resource on the
 * same device whose copy, memset, stream_wait, synchronize and mem_info serve this one (the
 * device's runtime, e.g. cuda.device, copies and fills any memory of its device). */
DEVMM_API int devmm_callback_resource_create_ex(devmm_callback_alloc_fn alloc,
                                                devmm_callback_free_fn free_fn,
                                                void (*destroy)(void *), void *user,
                                                devmm_device device, const char *name,
                                                unsigned flags, devmm_resource *runtime,
                                                devmm_resource **out);
/* After this call no callback resource calls its callbacks again: allocations fail and frees
 * are skipped (leaked). A front end calls it when its runtime shuts down (Python's atexit), so
 * a late free from another thread never enters a finalised interpreter. */
DEVMM_API void devmm_callbacks_disable(void);

/* Formats a device as "cpu", "cuda:0", "rocm:1", "sim:0", ... into buf; a type without a name
 * (a plugin's own DLPack code) as "deviceT:N" ("device14:0"). */
DEVMM_API int devmm_device_format(devmm_device d, char *buf, size_t cap);
/* Parses "cpu", "cuda", "cuda:0", "rocm:1", "cuda_host", "cuda_managed:0", "sim:1",
 * "device14:0" ...: whatever devmm_device_format writes for a type > 0. */
DEVMM_API int devmm_device_parse(const char *text, devmm_device *d);
/* 1 if the CPU can read and write the device's memory directly (cpu, cuda_host, rocm_host,
 * cuda_managed), else 0. */
DEVMM_API int devmm_device_host_accessible(devmm_device d);
/* The device whose current resource memory of d is: the GPU managed memory belongs to
 * (cuda_managed:N and sim_managed:N: cuda:N and sim:N), else d itself (pinned host memory is its
 * own device, as devmm.ini's sections are). */
DEVMM_API devmm_device devmm_device_home(devmm_device d);

#ifdef __cplusplus
}
#endif
#endif
