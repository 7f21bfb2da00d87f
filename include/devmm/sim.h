/* devmm — the test entry of the simulated accelerator, devmm-sim.so (not libdevmm).
 *
 * devmm-sim is the GPU plugin (plugins/gpu/) built against a simulated runtime (plugins/gpu/sim/):
 * kinds sim.device, sim.async, sim.managed, sim.pinned on devices "sim:N" (DLPack kDLExtDev).
 * Device memory faults on any host touch; streams are queues run by worker threads with seeded
 * random delays; a stream-ordered free poisons the bytes with 0xDD. These functions let a test
 * drive it as a real program drives a GPU: streams, events and "kernels" that read or write device
 * bytes in stream order. They are exported by the plugin: find its path with devmm_plugin_get
 * (or devmm.plugins() in Python) and dlopen it (RTLD_NOLOAD finds the copy devmm loaded).
 * Configure it in devmm.ini: [plugin sim] devices = 2, memory = 256MiB, jitter_us = 50, seed = 1.
 *
 *   void *s; int ok;
 *   devmm_sim_stream_create(0, 0, &s);                  // a blocking stream on sim:0
 *   devmm_sim_fill(s, p, 0x11, n);                      // a kernel writing device bytes
 *   devmm_sim_check(s, p, 0x11, n, &ok);                // a kernel reading them, in order
 *   devmm_sim_stream_synchronize(s);                    // ok == 1
 *   devmm_sim_stream_destroy(s);
 *
 * Streams are void * handles: NULL or (void *)1 is the legacy default stream of the calling
 * thread's current sim device, (void *)2 its per-thread default stream. Every function returns
 * a devmm status and sets devmm's thread-local message, naming the simulated runtime's error. */
#ifndef DEVMM_SIM_H
#define DEVMM_SIM_H

#include "error.h"
#include "export.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What the simulated runtime has live (for leak and reuse checks). Fields are only appended. */
typedef struct devmm_sim_stats {
  size_t struct_size;
  uint64_t streams_created, streams_live; /* user streams (not the default streams) */
  uint64_t events_created, events_live;
  uint64_t allocations_live, bytes_live; /* device, managed and pinned memory */
  uint64_t frees_pending;                /* stream-ordered frees enqueued, not yet executed */
} devmm_sim_stats;

/* A kernel: runs on the stream's worker thread, in stream order. */
typedef void (*devmm_sim_kernel)(void *user);

/* The calling thread's current sim device (as cudaSetDevice / cudaGetDevice). */
int devmm_sim_set_device(int device);
int devmm_sim_get_device(int *device);
/* Creates a stream on device (nonblocking: it does not synchronise with the legacy stream). */
int devmm_sim_stream_create(int device, int nonblocking, void **stream);
/* Destroys a user stream: work already queued still runs; any later use is an error. */
int devmm_sim_stream_destroy(void *stream);
/* Waits on the host for all work queued on stream so far. */
int devmm_sim_stream_synchronize(void *stream);
/* Waits on the host for all work queued on every stream of device so far. */
int devmm_sim_device_synchronize(int device);
/* Creates an event on device; records it on a stream of the same device; makes a stream wait
 * for its last record; waits for it on the host; destroys it. */
int devmm_sim_event_create(int device, void **event);
int devmm_sim_event_record(void *event, void *stream);
int devmm_sim_stream_wait_event(void *stream, void *event);
int devmm_sim_event_synchronize(void *event);
int devmm_sim_event_destroy(void *event);
/* Queues kernel(user) on stream. */
int devmm_sim_launch(void *stream, devmm_sim_kernel kernel, void *user);
/* Inside a kernel (or on the host, for checks after a synchronize): the address through which
 * [ptr, ptr + n) of device, managed or pinned memory may be read and written; NULL for memory
 * of another device than the kernel's, or for an address the simulator does not own. */
void *devmm_sim_view(const void *ptr, size_t n);
/* Built-in kernels: fill n bytes at ptr with byte; check that they all equal byte (*result is
 * -1 until the kernel ran, then 1 if they did, else 0). */
int devmm_sim_fill(void *stream, void *ptr, int byte, size_t n);
int devmm_sim_check(void *stream, const void *ptr, int byte, size_t n, int *result);
/* Makes the (skip + 1)-th next call of the runtime function `call` ("SetDevice",
 * "MallocFromPoolAsync", "EventRecord", "FreeAsync", ... without the sim prefix) fail with
 * the simulated error code `error` (e.g. 2, out of memory). call NULL clears every injection. */
int devmm_sim_inject(const char *call, int skip, int error);
/* Counters of live objects. */
int devmm_sim_stats_get(devmm_sim_stats *out);
/* The release threshold of device's default pool (bytes). */
int devmm_sim_default_pool_threshold(int device, uint64_t *out);

#ifdef __cplusplus
}
#endif
#endif
