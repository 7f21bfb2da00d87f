/* Suite sim_capture: the simulator's stream capture and per-thread default stream, with CUDA's
 * rules (ADR 37): which calls a global, thread-local or relaxed capture forbids, and to which
 * threads; what a capture records; handle 2 is each thread's own stream. Then devmm at that
 * boundary (ADR 38): cuda.device-like malloc and free refused inside a capture, the deferred
 * free waiting for the capture's end, exports under capture, per-thread default streams.
 * Environment (set by Meson): DEVMM_PLUGIN_PATH (the plugins' build directory). */
#include <check.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <devmm/ffi.h>

#include "sim_env.h"

/* The capture part of the test entry (include/devmm/sim.h), bound from the loaded plugin. */
static struct {
  __typeof__(devmm_sim_capture_begin) *begin;
  __typeof__(devmm_sim_capture_end) *end;
  __typeof__(devmm_sim_capture_status) *status;
  __typeof__(devmm_sim_capture_mode) *mode;
  __typeof__(devmm_sim_graph_launch) *launch;
  __typeof__(devmm_sim_graph_destroy) *destroy;
  __typeof__(devmm_sim_graph_nodes) *nodes;
  __typeof__(devmm_sim_event_synchronize) *event_synchronize;
  __typeof__(devmm_sim_malloc) *malloc;
  __typeof__(devmm_sim_free) *free;
} cap;

enum { GLOBAL = 0, THREAD_LOCAL = 1, RELAXED = 2 };

static void init(unsigned jitter_us, unsigned seed) {
  sim_init(jitter_us, seed);
  const char *so = NULL;
  for (size_t i = 0; i < devmm_plugin_count(); i++) {
    devmm_plugin_status st;
    ck_assert_int_eq(devmm_plugin_get(i, &st), DEVMM_OK);
    if (strcmp(st.name, "sim") == 0 && st.loaded)
      so = st.path;
  }
  void *h = dlopen(so, RTLD_NOW | RTLD_NOLOAD);
  ck_assert_ptr_nonnull(h);
#define BIND(f, name) ck_assert_ptr_nonnull(*(void **)&cap.f = dlsym(h, "devmm_sim_" name))
  BIND(begin, "capture_begin");
  BIND(end, "capture_end");
  BIND(status, "capture_status");
  BIND(mode, "capture_mode");
  BIND(launch, "graph_launch");
  BIND(destroy, "graph_destroy");
  BIND(nodes, "graph_nodes");
  BIND(event_synchronize, "event_synchronize");
  BIND(malloc, "malloc");
  BIND(free, "free");
#undef BIND
  dlclose(h);
}

/* Runs fn(arg) on a new thread and returns its result (and devmm's message there in why). */
typedef struct {
  int (*fn)(void *);
  void *arg;
  int rc;
  char why[512];
} call;

static void *run_call(void *p) {
  call *c = p;
  c->rc = c->fn(c->arg);
  if (c->rc)
    snprintf(c->why, sizeof c->why, "%s", devmm_last_error());
  return NULL;
}

static int on_thread(int (*fn)(void *), void *arg, char *why, size_t cap_) {
  call c = {fn, arg, 0, ""};
  pthread_t t;
  ck_assert_int_eq(pthread_create(&t, NULL, run_call, &c), 0);
  pthread_join(t, NULL);
  if (why)
    snprintf(why, cap_, "%s", c.why);
  return c.rc;
}

static int device_sync(void *unused) {
  (void)unused;
  return sim.device_synchronize(0);
}

static int relaxed_device_sync(void *unused) {
  (void)unused;
  int m = RELAXED;
  ck_assert_int_eq(cap.mode(&m), DEVMM_OK);
  ck_assert_int_eq(m, GLOBAL); /* every thread starts in global mode */
  return sim.device_synchronize(0);
}

static int legacy_fill(void *p) { return sim.fill(NULL, p, 0x33, 256); }

static int thread_local_mode_sync(void *unused) {
  (void)unused;
  int m = THREAD_LOCAL; /* ignores other threads' captures, even global ones */
  ck_assert_int_eq(cap.mode(&m), DEVMM_OK);
  return sim.device_synchronize(0);
}

/* Ends s's capture and says whether it was invalidated (destroying a graph it gave). */
static int invalidated(void *s) {
  void *g = (void *)1;
  int rc = cap.end(s, &g);
  if (rc == DEVMM_OK) {
    ck_assert_ptr_nonnull(g);
    cap.destroy(g);
    return 0;
  }
  ck_assert_int_eq(rc, DEVMM_EDEVICE);
  ck_assert_error_contains("simErrorStreamCaptureInvalidated");
  ck_assert_ptr_null(g);
  return 1;
}

static int end_elsewhere(void *s) {
  void *g;
  return cap.end(s, &g);
}

/* A global capture forbids a device synchronize and the legacy stream to every thread: the
 * call fails as CUDA's does and the capture's end reports it invalidated. */
START_TEST(global_capture_forbids_unsafe_calls_on_any_thread) {
  init(0, 1);
  devmm_resource *r = kind("sim.device", 0);
  void *s = stream(0), *p;
  ck_assert_int_eq(devmm_allocate(r, 4096, 0, NULL, &p), DEVMM_OK);
  char why[512];
  ck_assert_int_eq(cap.begin(s, GLOBAL), DEVMM_OK);
  ck_assert_int_eq(on_thread(device_sync, NULL, why, sizeof why), DEVMM_EDEVICE);
  ck_assert_msg(strstr(why, "simErrorStreamCaptureUnsupported"), "%s", why);
  ck_assert_int_eq(invalidated(s), 1);

  ck_assert_int_eq(cap.begin(s, GLOBAL), DEVMM_OK);
  ck_assert_int_eq(on_thread(legacy_fill, p, why, sizeof why), DEVMM_EDEVICE);
  ck_assert_msg(strstr(why, "simErrorStreamCaptureImplicit"), "%s", why);
  ck_assert_int_eq(invalidated(s), 1);

  ck_assert_int_eq(cap.begin(s, GLOBAL), DEVMM_OK); /* the capturing thread itself */
  void *q = NULL;
  ck_assert_int_eq(cap.malloc(0, 4096, &q), DEVMM_EDEVICE);
  ck_assert_error_contains("simErrorStreamCaptureUnsupported");
  ck_assert_int_eq(invalidated(s), 1);
  ck_assert_int_eq(cap.malloc(0, 4096, &q), DEVMM_OK);
  ck_assert_int_eq(cap.begin(s, GLOBAL), DEVMM_OK);
  ck_assert_int_eq(cap.free(q), DEVMM_EDEVICE);
  ck_assert_int_eq(invalidated(s), 1);
  ck_assert_int_eq(cap.free(q), DEVMM_OK);

  ck_assert_int_eq(cap.begin(s, GLOBAL), DEVMM_OK); /* a thread in relaxed mode may */
  ck_assert_int_eq(on_thread(relaxed_device_sync, NULL, why, sizeof why), DEVMM_OK);
  ck_assert_int_eq(on_thread(thread_local_mode_sync, NULL, why, sizeof why), DEVMM_OK);
  ck_assert_int_eq(invalidated(s), 0);
  ck_assert_int_eq(devmm_deallocate(r, p, 4096, 0, NULL), DEVMM_OK);
  sim.stream_destroy(s);
  devmm_resource_release(r);
}
END_TEST

/* A thread-local capture forbids them only to the capturing thread; a relaxed one to nobody. */
START_TEST(thread_local_and_relaxed_captures) {
  init(0, 2);
  devmm_resource *r = kind("sim.device", 0);
  void *s = stream(0), *p;
  ck_assert_int_eq(devmm_allocate(r, 4096, 0, NULL, &p), DEVMM_OK);
  char why[512];
  ck_assert_int_eq(cap.begin(s, THREAD_LOCAL), DEVMM_OK);
  ck_assert_msg(on_thread(device_sync, NULL, why, sizeof why) == DEVMM_OK, "%s", why);
  ck_assert_int_eq(invalidated(s), 0);

  ck_assert_int_eq(cap.begin(s, THREAD_LOCAL), DEVMM_OK);
  ck_assert_int_eq(sim.device_synchronize(0), DEVMM_EDEVICE);
  ck_assert_int_eq(invalidated(s), 1);

  ck_assert_int_eq(cap.begin(s, RELAXED), DEVMM_OK);
  ck_assert_int_eq(sim.device_synchronize(0), DEVMM_OK);
  ck_assert_msg(on_thread(device_sync, NULL, why, sizeof why) == DEVMM_OK, "%s", why);
  void *q;
  ck_assert_int_eq(cap.malloc(0, 4096, &q), DEVMM_OK);
  ck_assert_int_eq(cap.free(q), DEVMM_OK);
  ck_assert_int_eq(invalidated(s), 0);
  ck_assert_int_eq(devmm_deallocate(r, p, 4096, 0, NULL), DEVMM_OK);
  sim.stream_destroy(s);
  devmm_resource_release(r);
}
END_TEST

/* The legacy stream is unusable while a blocking stream captures, whatever the capture's mode
 * and from any thread (cudaStreamIsCapturing's rule): its use invalidates the capture. */
START_TEST(legacy_stream_invalidates_blocking_captures_in_any_mode) {
  init(0, 2);
  devmm_resource *r = kind("sim.device", 0);
  void *s = stream(0), *p;
  ck_assert_int_eq(devmm_allocate(r, 4096, 0, NULL, &p), DEVMM_OK);
  char why[512];
  for (int mode = GLOBAL; mode <= RELAXED; mode++) {
    ck_assert_int_eq(cap.begin(s, mode), DEVMM_OK);
    ck_assert_int_eq(on_thread(legacy_fill, p, why, sizeof why), DEVMM_EDEVICE);
    ck_assert_msg(strstr(why, "simErrorStreamCaptureImplicit"), "mode %d: %s", mode, why);
    ck_assert_msg(invalidated(s) == 1, "mode %d: another thread's legacy use", mode);
    ck_assert_int_eq(cap.begin(s, mode), DEVMM_OK);
    ck_assert_int_eq(legacy_fill(p), DEVMM_EDEVICE);
    ck_assert_msg(invalidated(s) == 1, "mode %d: the capturing thread's legacy use", mode);
  }
  ck_assert_int_eq(sim.stream_synchronize(NULL), DEVMM_OK);
  ck_assert_int_eq(devmm_deallocate(r, p, 4096, 0, NULL), DEVMM_OK);
  sim.stream_destroy(s);
  devmm_resource_release(r);
}
END_TEST

/* A capture on a non-blocking stream leaves the legacy stream usable, in every mode. */
START_TEST(legacy_stream_is_usable_during_a_nonblocking_capture) {
  init(0, 2);
  devmm_resource *r = kind("sim.device", 0);
  void *ns, *p;
  ck_assert_int_eq(sim.stream_create(0, 1, &ns), DEVMM_OK);
  ck_assert_int_eq(devmm_allocate(r, 4096, 0, NULL, &p), DEVMM_OK);
  char why[512];
  for (int mode = GLOBAL; mode <= RELAXED; mode++) {
    ck_assert_int_eq(cap.begin(ns, mode), DEVMM_OK);
    ck_assert_msg(legacy_fill(p) == DEVMM_OK, "mode %d: %s", mode, devmm_last_error());
    ck_assert_msg(on_thread(legacy_fill, p, why, sizeof why) == DEVMM_OK, "mode %d: %s", mode, why);
    ck_assert_int_eq(sim.stream_synchronize(NULL), DEVMM_OK);
    ck_assert_msg(invalidated(ns) == 0, "mode %d: the legacy stream invalidated it", mode);
  }
  ck_assert_int_eq(devmm_deallocate(r, p, 4096, 0, NULL), DEVMM_OK);
  sim.stream_destroy(ns);
  devmm_resource_release(r);
}
END_TEST

/* Captured work runs only when its graph is launched; status and the capture's rules on
 * events: a wait across the boundary, a host wait on a captured event, the wrong thread. */
START_TEST(capture_records_instead_of_running) {
  init(300, 3);
  devmm_resource *r = kind("sim.device", 0);
  void *s = stream(0), *p, *ev, *g = NULL;
  ck_assert_int_eq(devmm_allocate(r, 4096, 0, NULL, &p), DEVMM_OK);
  ck_assert_int_eq(sim.fill(s, p, 0x11, 4096), DEVMM_OK);
  ck_assert_int_eq(sim.stream_synchronize(s), DEVMM_OK);
  int st = -1;
  uint64_t id = 0;
  ck_assert_int_eq(cap.status(s, &st, &id), DEVMM_OK);
  ck_assert_int_eq(st, 0);
  ck_assert_int_eq(cap.begin(s, GLOBAL), DEVMM_OK);
  ck_assert_int_eq(cap.begin(s, GLOBAL), DEVMM_EDEVICE); /* already capturing */
  ck_assert_int_eq(cap.status(s, &st, &id), DEVMM_OK);
  ck_assert_int_eq(st, 1);
  ck_assert_uint_gt(id, 0);
  ck_assert_int_eq(cap.status(NULL, &st, &id), DEVMM_EDEVICE); /* legacy: implicit */
  ck_assert_error_contains("simErrorStreamCaptureImplicit");
  ck_assert_int_eq(sim.fill(s, p, 0x22, 4096), DEVMM_OK);
  ck_assert_int_eq(cap.end(s, &g), DEVMM_OK);
  ck_assert_uint_eq(cap.nodes(g), 1);
  ck_assert_int_eq(sim.stream_synchronize(s), DEVMM_OK);
  ck_assert_int_eq(((unsigned char *)sim.view(p, 4096))[0], 0x11); /* not run */
  for (int i = 0; i < 2; i++) {
    ck_assert_int_eq(sim.fill(s, p, 0x11, 4096), DEVMM_OK);
    ck_assert_int_eq(cap.launch(g, s), DEVMM_OK);
    int ok;
    ck_assert_int_eq(sim.check(s, p, 0x22, 4096, &ok), DEVMM_OK);
    ck_assert_int_eq(sim.stream_synchronize(s), DEVMM_OK);
    ck_assert_int_eq(ok, 1);
  }
  ck_assert_int_eq(cap.destroy(g), DEVMM_OK);

  ck_assert_int_eq(sim.event_create(0, &ev), DEVMM_OK);
  void *other = stream(0);
  ck_assert_int_eq(sim.event_record(ev, other), DEVMM_OK);
  ck_assert_int_eq(cap.begin(s, GLOBAL), DEVMM_OK);
  ck_assert_int_eq(sim.stream_wait_event(s, ev), DEVMM_EDEVICE);
  ck_assert_error_contains("simErrorStreamCaptureIsolation");
  ck_assert_int_eq(invalidated(s), 1);
  ck_assert_int_eq(cap.begin(s, GLOBAL), DEVMM_OK);
  ck_assert_int_eq(sim.event_record(ev, s), DEVMM_OK);
  ck_assert_int_eq(sim.stream_wait_event(other, ev), DEVMM_OK); /* other joins the capture */
  ck_assert_int_eq(cap.status(other, &st, &id), DEVMM_OK);
  ck_assert_int_eq(st, 1);
  ck_assert_int_eq(cap.event_synchronize(ev), DEVMM_EDEVICE);
  ck_assert_error_contains("simErrorCapturedEvent");
  ck_assert_int_eq(invalidated(s), 1);
  ck_assert_int_eq(cap.status(other, &st, &id), DEVMM_OK);
  ck_assert_int_eq(st, 0);

  ck_assert_int_eq(cap.begin(s, GLOBAL), DEVMM_OK);
  char why[512];
  ck_assert_int_eq(on_thread(end_elsewhere, s, why, sizeof why), DEVMM_EDEVICE);
  ck_assert_msg(strstr(why, "simErrorStreamCaptureWrongThread"), "%s", why);
  ck_assert_int_eq(invalidated(s), 0); /* the wrong thread's end changed nothing */
  ck_assert_int_eq(cap.begin(NULL, GLOBAL), DEVMM_EDEVICE); /* the legacy stream cannot */
  sim.event_destroy(ev);
  sim.stream_destroy(other);
  sim.stream_destroy(s);
  ck_assert_int_eq(devmm_deallocate(r, p, 4096, 0, NULL), DEVMM_OK);
  devmm_resource_release(r);
}
END_TEST

/* Handle 2 is the calling thread's own stream: another thread's per-thread stream does not
 * wait for it. */
static int per_thread_sync_ms(void *unused) {
  (void)unused;
  struct timespec a, b;
  clock_gettime(CLOCK_MONOTONIC, &a);
  ck_assert_int_eq(sim.stream_synchronize((void *)2), DEVMM_OK);
  clock_gettime(CLOCK_MONOTONIC, &b);
  return (int)((b.tv_sec - a.tv_sec) * 1000 + (b.tv_nsec - a.tv_nsec) / 1000000);
}

START_TEST(per_thread_default_stream_is_per_thread) {
  init(0, 4);
  ck_assert_int_eq(sim.launch((void *)2, sleep_kernel, (void *)(intptr_t)300), DEVMM_OK);
  int ms = on_thread(per_thread_sync_ms, NULL, NULL, 0);
  ck_assert_msg(ms < 150, "another thread's stream 2 waited %d ms for this thread's", ms);
  ck_assert_int_ge(per_thread_sync_ms(NULL), 100); /* this thread's does wait */
}
END_TEST

/* ---------------------------------------------------------------- devmm at the boundary */

static int devmm_malloc_elsewhere(void *r) {
  void *q = (void *)1;
  int rc = devmm_allocate(r, 4096, 0, NULL, &q);
  ck_assert_ptr_null(q);
  return rc;
}

/* cuda.device's malloc and free (cudaMalloc, cudaFree) would invalidate a capture: devmm refuses
 * them with a message instead, whether the capture is on the allocation's stream, on a blocking
 * stream of the device (which the legacy stream tells), or on a stream devmm saw capturing. */
START_TEST(device_malloc_and_free_refused_inside_a_capture) {
  init(0, 5);
  devmm_resource *r = kind("sim.device", 0);
  void *s = stream(0), *ns, *p, *q = (void *)1;
  ck_assert_int_eq(sim.stream_create(0, 1, &ns), DEVMM_OK); /* non-blocking, as torch's */
  ck_assert_int_eq(devmm_allocate(r, 4096, 0, NULL, &p), DEVMM_OK);
  char why[512];
  ck_assert_int_eq(cap.begin(s, GLOBAL), DEVMM_OK);
  ck_assert_int_eq(devmm_allocate(r, 4096, 0, s, &q), DEVMM_ESTATE);
  ck_assert_error_contains("sim.device on sim:0: an allocation refused inside a graph capture");
  ck_assert_error_contains("use sim.async on the capturing stream");
  ck_assert_ptr_null(q);
  ck_assert_int_eq(devmm_deallocate(r, p, 4096, 0, NULL), DEVMM_ESTATE);
  ck_assert_error_contains("a free refused while a blocking stream of the device captures");
  ck_assert_int_eq(on_thread(devmm_malloc_elsewhere, r, why, sizeof why), DEVMM_ESTATE);
  ck_assert_int_eq(invalidated(s), 0);

  ck_assert_int_eq(cap.begin(ns, GLOBAL), DEVMM_OK);
  ck_assert_int_eq(devmm_synchronize(r, ns), DEVMM_ESTATE); /* devmm sees ns capture */
  ck_assert_int_eq(on_thread(devmm_malloc_elsewhere, r, why, sizeof why), DEVMM_ESTATE);
  ck_assert_msg(strstr(why, "refused while stream"), "%s", why);
  ck_assert_int_eq(devmm_synchronize(r, DEVMM_STREAM_ALL), DEVMM_ESTATE);
  ck_assert_int_eq(invalidated(ns), 0);
  ck_assert_int_eq(devmm_synchronize(r, DEVMM_STREAM_ALL), DEVMM_OK); /* it ended */
  ck_assert_int_eq(devmm_deallocate(r, p, 4096, 0, NULL), DEVMM_OK);
  sim.stream_destroy(ns);
  sim.stream_destroy(s);
  devmm_resource_release(r);
}
END_TEST

/* A deferred free (the buffer went to another stream) waits for the whole device: never while a
 * capture is underway, which that wait and a free on the legacy stream would invalidate. */
START_TEST(deferred_free_waits_for_the_capture) {
  init(0, 6);
  devmm_resource *r = kind("sim.async", 0);
  void *a = stream(0), *b = stream(0), *s = stream(0);
  uint64_t before = stats().allocations_live;
  devmm_buffer *buf;
  ck_assert_int_eq(devmm_buffer_allocate(r, 4096, 0, a, &buf), DEVMM_OK);
  ck_assert_int_eq(devmm_buffer_stream_wait(buf, b), DEVMM_OK); /* its free is deferred */
  ck_assert_int_eq(cap.begin(s, GLOBAL), DEVMM_OK);
  devmm_buffer_release(buf);
  struct timespec ms100 = {0, 100000000};
  nanosleep(&ms100, NULL); /* the deferred-free thread has had its chance */
  ck_assert_uint_eq(stats().allocations_live, before + 1);
  ck_assert_int_eq(invalidated(s), 0);
  devmm_deferred_frees_wait();
  ck_assert_int_eq(sim.device_synchronize(0), DEVMM_OK); /* its stream-ordered free ran */
  ck_assert_uint_eq(stats().allocations_live, before);
  sim.stream_destroy(s);
  sim.stream_destroy(b);
  sim.stream_destroy(a);
  devmm_resource_release(r);
}
END_TEST

/* An export into a capture: the capturing stream may not wait on the legacy stream (a buffer
 * allocated on NULL) nor on an event recorded outside the capture (another stream's buffer):
 * devmm records nothing on the legacy stream and waits for the other stream on the host. */
START_TEST(export_under_capture_avoids_the_legacy_stream) {
  init(0, 7);
  devmm_resource *r = kind("sim.async", 0);
  void *a = stream(0), *s = stream(0), *g = NULL;
  devmm_buffer *on_null, *on_a;
  ck_assert_int_eq(devmm_buffer_allocate(r, 4096, 0, NULL, &on_null), DEVMM_OK);
  ck_assert_int_eq(devmm_buffer_allocate(r, 4096, 0, a, &on_a), DEVMM_OK);
  void *p = devmm_buffer_ptr(on_a);
  ck_assert_int_eq(sim.launch(a, sleep_kernel, (void *)(intptr_t)100), DEVMM_OK);
  ck_assert_int_eq(sim.fill(a, p, 0x44, 4096), DEVMM_OK);
  ck_assert_int_eq(cap.begin(s, GLOBAL), DEVMM_OK);
  ck_assert_msg(devmm_buffer_stream_wait(on_null, s) == DEVMM_OK, "%s", devmm_last_error());
  ck_assert_msg(devmm_buffer_stream_wait(on_a, s) == DEVMM_OK, "%s", devmm_last_error());
  int ok = -1;
  ck_assert_int_eq(sim.check(s, p, 0x44, 4096, &ok), DEVMM_OK);
  ck_assert_msg(cap.end(s, &g) == DEVMM_OK, "%s", devmm_last_error());
  ck_assert_int_eq(cap.launch(g, s), DEVMM_OK);
  ck_assert_int_eq(sim.stream_synchronize(s), DEVMM_OK);
  ck_assert_int_eq(ok, 1);
  cap.destroy(g);
  devmm_buffer_release(on_null);
  devmm_buffer_release(on_a);
  devmm_deferred_frees_wait();
  sim.stream_destroy(s);
  sim.stream_destroy(a);
  devmm_resource_release(r);
}
END_TEST

/* A buffer allocated on handle 2 belongs to its allocating thread's stream: released or
 * exported on another thread (whose handle 2 is another stream), it is freed and waited for in
 * the allocating thread's order, never in the releasing thread's. */
typedef struct {
  devmm_resource *r;
  devmm_buffer *buf;
  void *reused;
  int ok;
} handoff;

static int release_and_reuse_elsewhere(void *arg) {
  handoff *h = arg;
  size_t n = devmm_buffer_nbytes(h->buf);
  devmm_buffer_release(h->buf); /* the owner's free, on this thread */
  ck_assert_int_eq(devmm_allocate(h->r, n, 0, (void *)2, &h->reused), DEVMM_OK);
  ck_assert_int_eq(sim.fill((void *)2, h->reused, 0x22, n), DEVMM_OK);
  return sim.stream_synchronize((void *)2);
}

static int export_elsewhere(void *arg) {
  handoff *h = arg;
  void *b = stream(0);
  int rc = devmm_buffer_stream_wait(h->buf, b);
  if (rc)
    return rc;
  ck_assert_int_eq(sim.check(b, devmm_buffer_ptr(h->buf), 0x11, 1 << 16, &h->ok), DEVMM_OK);
  ck_assert_int_eq(sim.stream_synchronize(b), DEVMM_OK);
  return sim.stream_destroy(b);
}

START_TEST(per_thread_stream_buffers_keep_their_threads_order) {
  init(0, 8);
  devmm_resource *r = kind("sim.async", 0);
  size_t n = 1 << 16;
  handoff h = {r, NULL, NULL, -1};
  ck_assert_int_eq(devmm_buffer_allocate(r, n, 0, (void *)2, &h.buf), DEVMM_OK);
  void *p = devmm_buffer_ptr(h.buf);
  ck_assert_int_eq(sim.launch((void *)2, sleep_kernel, (void *)(intptr_t)200), DEVMM_OK);
  ck_assert_int_eq(sim.fill((void *)2, p, 0x11, n), DEVMM_OK);
  char why[512];
  ck_assert_msg(on_thread(export_elsewhere, &h, why, sizeof why) == DEVMM_OK, "%s", why);
  ck_assert_msg(h.ok == 1, "another thread's export did not wait for this thread's stream 2");

  ck_assert_int_eq(sim.launch((void *)2, sleep_kernel, (void *)(intptr_t)200), DEVMM_OK);
  ck_assert_int_eq(sim.fill((void *)2, p, 0x11, n), DEVMM_OK);
  ck_assert_msg(on_thread(release_and_reuse_elsewhere, &h, why, sizeof why) == DEVMM_OK, "%s", why);
  ck_assert_int_eq(sim.stream_synchronize((void *)2), DEVMM_OK);
  const unsigned char *v = sim.view(h.reused, n);
  ck_assert_msg(v[0] == 0x22 && v[n - 1] == 0x22,
                "the new owner's bytes were overwritten by the old owner's late kernel (%#x): "
                "the free was ordered on the releasing thread's stream 2",
                v[0]);
  ck_assert_int_eq(devmm_deallocate(r, h.reused, n, 0, (void *)2), DEVMM_OK);
  devmm_deferred_frees_wait();
  devmm_resource_release(r);
}
END_TEST

/* torch under use_devmm(): a tensor allocated on stream a, used on stream b (record_stream),
 * freed by torch with stream a, its memory reused at once by torch's next allocation on a. The
 * reuse must wait for b's work: with the record_stream hook (an event per recorded stream), or
 * with frees that wait for the device (where torch gives no hook). How: 0 the hook, 1 frees
 * that wait for the device, 2 neither (what CUDAPluggableAllocator does without a hook). */
static int torch_reuse_after_other_stream(devmm_resource *r, void *a, void *b, int how) {
  size_t n = 1 << 16;
  void *p, *q;
  int ok = -1;
  ck_assert_int_eq(devmm_torch_allocate(n, 7, a, &p), DEVMM_OK);
  ck_assert_int_eq(sim.fill(a, p, 0x11, n), DEVMM_OK);
  ck_assert_int_eq(devmm_stream_wait(r, b, a), DEVMM_OK); /* b consumes what a produced */
  ck_assert_int_eq(sim.launch(b, sleep_kernel, (void *)(intptr_t)200), DEVMM_OK);
  ck_assert_int_eq(sim.check(b, p, 0x11, n, &ok), DEVMM_OK);
  if (how == 0)
    devmm_torch_record_stream(p, b);
  devmm_torch_free_waits_for_device(how == 1);
  devmm_torch_deallocate(p, n, 7, a);
  ck_assert_int_eq(devmm_torch_allocate(n, 7, a, &q), DEVMM_OK); /* torch's next tensor */
  ck_assert_int_eq(sim.fill(a, q, 0x22, n), DEVMM_OK);
  ck_assert_int_eq(sim.stream_synchronize(b), DEVMM_OK);
  ck_assert_int_eq(sim.stream_synchronize(a), DEVMM_OK);
  devmm_deferred_frees_wait();
  devmm_torch_free_waits_for_device(0);
  devmm_torch_deallocate(q, n, 7, a);
  return ok;
}

START_TEST(torch_record_stream_delays_reuse) {
  init(0, 9);
  devmm_resource *r = kind("sim.async", 0), *prev = NULL;
  devmm_device cuda7 = {DEVMM_DEVICE_CUDA, 7}; /* torch's cuda:7, served by sim:0 here */
  ck_assert_int_eq(devmm_set_current_resource(cuda7, r, &prev), DEVMM_OK);
  void *a = stream(0), *b = stream(0);
  ck_assert_int_eq(torch_reuse_after_other_stream(r, a, b, 2), 0); /* the race is real */
  ck_assert_msg(torch_reuse_after_other_stream(r, a, b, 0) == 1,
                "record_stream: the memory was reused before the recorded stream's work");
  ck_assert_msg(torch_reuse_after_other_stream(r, a, b, 1) == 1,
                "a free that waits for the device: the memory was reused before b's work");
  devmm_deferred_frees_wait();
  sim.stream_destroy(a);
  sim.stream_destroy(b);
  devmm_resource_release(prev);
  devmm_resource_release(r);
}
END_TEST

Suite *sim_capture_suite(void) {
  const TTest *const tests[] = {
      global_capture_forbids_unsafe_calls_on_any_thread,
      thread_local_and_relaxed_captures,
      legacy_stream_invalidates_blocking_captures_in_any_mode,
      legacy_stream_is_usable_during_a_nonblocking_capture,
      capture_records_instead_of_running,
      per_thread_default_stream_is_per_thread,
      device_malloc_and_free_refused_inside_a_capture,
      deferred_free_waits_for_the_capture,
      export_under_capture_avoids_the_legacy_stream,
      per_thread_stream_buffers_keep_their_threads_order,
      torch_record_stream_delays_reuse,
      NULL,
  };
  return suite_of("sim_capture", tests);
}
