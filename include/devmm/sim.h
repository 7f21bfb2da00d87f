/* devmm — the test entry of the simulated accelerator, devmm-sim.so (not libdevmm).
 *
 * devmm-sim is the GPU plugin (plugins/gpu/) built against a simulated runtime (plugins/gpu/sim/):
 * kinds sim.device, sim.async, sim.managed, sim.pinned, sim.system on devices "sim:N" (DLPack
 * kDLExtDev).
 * Device memory faults on any host touch; streams are queues run by worker threads with seeded
 * random delays; a stream-ordered free poisons the bytes with 0xDD. These functions let a test
 * drive it as a real program drives a GPU: streams, events and "kernels" that read or write device
 * bytes in stream order. They are exported by the plugin: find its path with devmm_plugin_get
 * (or devmm.plugins() in Python) and dlopen it (RTLD_NOLOAD finds the copy devmm loaded).
 * Configure it in devmm.ini: [plugin sim] devices = 2, memory = 256MiB, jitter_us = 50, seed = 1,
 * pageable_access = false (true: its devices address pageable memory, as with HMM or ATS).
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
 * of another device than the kernel's, or for an address the simulator does not own (but
 * pageable memory, itself, when [plugin sim] pageable_access = true). */
void *devmm_sim_view(const void *ptr, size_t n);
/* Built-in kernels: fill n bytes at ptr with byte; check that they all equal byte (*result is
 * -1 until the kernel ran, then 1 if they did, else 0). */
int devmm_sim_fill(void *stream, void *ptr, int byte, size_t n);
int devmm_sim_check(void *stream, const void *ptr, int byte, size_t n, int *result);
/* Makes the (skip + 1)-th next call of the runtime function `call` ("SetDevice",
 * "MallocFromPoolAsync", "EventRecord", "FreeAsync", ... without the sim prefix) fail with
 * the simulated error code `error` (e.g. 2, out of memory); call "Kernel": the (skip + 1)-th
 * next kernel faults when it runs, and the next call of any function reports it (an
 * asynchronous error). A sticky code (700, illegal address, and CUDA's other sticky ones) then
 * fails every later call, as in CUDA. call NULL clears every injection and such errors. */
int devmm_sim_inject(const char *call, int skip, int error);
/* Access between devices (as cudaDeviceEnablePeerAccess from device's context, enable 0:
 * disable), and the default pool of device granting accessor access (flags: 0 none, 1 read,
 * 3 read-write, as cudaMemPoolSetAccess). */
int devmm_sim_peer_access(int device, int peer, int enable);
int devmm_sim_pool_set_access(int device, int accessor, int flags);
/* Pinned host memory allocated with device current (portable: for every device, as
 * cudaHostAllocPortable; else pinned for that device only), and its free. */
int devmm_sim_host_alloc(int device, size_t n, int portable, void **out);
int devmm_sim_free_host(void *ptr);
/* A context of device's own, not its primary one, bound to the calling thread (as cuCtxCreate),
 * and the calling thread's bound context (NULL: none; a primary context has a handle too). */
int devmm_sim_ctx_create(int device, void **ctx);
int devmm_sim_ctx_current(void **ctx);
/* Counters of live objects. */
int devmm_sim_stats_get(devmm_sim_stats *out);
/* The release threshold of device's default pool (bytes). */
int devmm_sim_default_pool_threshold(int device, uint64_t *out);
/* Whether the simulated runtime was initialised in this process (ADR 37): by its first call
 * that needs the driver, as cuInit; neither loading nor configuring the plugin does. */
enum {
  DEVMM_SIM_RUNTIME_NONE = 0,        /* not initialised in this process */
  DEVMM_SIM_RUNTIME_INITIALIZED = 1, /* initialised in this process */
  DEVMM_SIM_RUNTIME_FORKED = 2 /* a child forked after it was: every call fails (init error) */
};
int devmm_sim_runtime_state(void);
/* Stream capture, with CUDA's rules (ADR 37): mode 0 global, 1 thread-local, 2 relaxed (as
 * cudaStreamCaptureMode). Work queued on a capturing stream is recorded, not run; end gives the
 * graph (DEVMM_EDEVICE naming simErrorStreamCaptureInvalidated when an unsafe call, such as a
 * device synchronize or a use of the legacy stream, invalidated it). status: 0 none, 1 active,
 * 2 invalidated, and the capture's id; mode exchanges the calling thread's interaction mode
 * (cudaThreadExchangeStreamCaptureMode). A graph runs its nodes, in capture order, on stream. */
int devmm_sim_capture_begin(void *stream, int mode);
int devmm_sim_capture_end(void *stream, void **graph);
int devmm_sim_capture_status(void *stream, int *status, uint64_t *id);
int devmm_sim_capture_mode(int *mode);
int devmm_sim_graph_launch(void *graph, void *stream);
int devmm_sim_graph_destroy(void *graph);
size_t devmm_sim_graph_nodes(void *graph);
/* The runtime's own synchronous malloc on device and free (as cudaMalloc, cudaFree: unsafe
 * during a capture), below devmm. */
int devmm_sim_malloc(int device, size_t n, void **ptr);
int devmm_sim_free(void *ptr);

/* The preferred location that advice gave pageable memory at ptr (the plugin's sim.system with
 * a headroom advises, as RMM's sam_headroom_memory_resource): a device, -1 the host, -2 none. */
int devmm_sim_preferred_location(const void *ptr, int *location);
/* A pool of device's memory that the caller owns (as cudaMemPoolCreate: what another library
 * hands devmm's pool view, sim.async with pool = <its address>), and its destruction. */
int devmm_sim_pool_create(int device, void **pool);
int devmm_sim_pool_destroy(void *pool);

/* The simulated runtime's driver-level calls, raw (ADR 37 §Contexts and IPC): each returns the
 * runtime's own error code (0; 201 no context bound to the thread; 205 an IPC handle whose memory
 * is gone; 400 a handle the runtime did not make; 700 an import whose exporter freed it) and sets
 * no devmm message; ipc_reason says why the thread's last IPC call failed. A handle is 64 bytes. */
int devmm_sim_address_range(void *ptr, void **base, size_t *size);
int devmm_sim_ipc_get(void *ptr, unsigned char handle[64]);
int devmm_sim_ipc_open(const unsigned char handle[64], void **ptr);
int devmm_sim_ipc_close(void *ptr);
const char *devmm_sim_ipc_reason(void);

#ifdef __cplusplus
}
#endif
#endif
