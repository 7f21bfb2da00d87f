/* Suites sim_runtime, sim_gpu, sim_core: the simulated accelerator's own rules, the GPU
 * plugin's source (gpu.c) run over it, and the core's device-generic logic (copies, stream
 * hand-over, frees, zeros) on a device whose memory the host cannot touch and whose streams
 * really run out of order.
 * Environment (set by Meson): DEVMM_PLUGIN_PATH (the plugins' build directory). */
#include <check.h>
#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sysinfo.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <devmm/devmm.h>
#include <devmm/sim.h>

#define ck_assert_error_contains(needle)                                                           \
  ck_assert_msg(strstr(devmm_last_error(), (needle)) != NULL, "error '%s' does not contain '%s'",  \
                devmm_last_error(), (needle))

/* The test entry of devmm-sim.so, found in the copy devmm loaded. */
static struct {
  __typeof__(devmm_sim_set_device) *set_device;
  __typeof__(devmm_sim_stream_create) *stream_create;
  __typeof__(devmm_sim_stream_destroy) *stream_destroy;
  __typeof__(devmm_sim_stream_synchronize) *stream_synchronize;
  __typeof__(devmm_sim_device_synchronize) *device_synchronize;
  __typeof__(devmm_sim_event_create) *event_create;
  __typeof__(devmm_sim_event_record) *event_record;
  __typeof__(devmm_sim_stream_wait_event) *stream_wait_event;
  __typeof__(devmm_sim_event_destroy) *event_destroy;
  __typeof__(devmm_sim_launch) *launch;
  __typeof__(devmm_sim_view) *view;
  __typeof__(devmm_sim_fill) *fill;
  __typeof__(devmm_sim_check) *check;
  __typeof__(devmm_sim_inject) *inject;
  __typeof__(devmm_sim_stats_get) *stats_get;
  __typeof__(devmm_sim_default_pool_threshold) *default_pool_threshold;
} sim;

static const devmm_device CPU = {DEVMM_DEVICE_CPU, 0};
static const devmm_dtype U8 = {DEVMM_DTYPE_UINT, 8, 1};

/* devmm initialised with the sim plugin (2 devices, sim.async on each) and the given jitter. */
static void sim_init(unsigned jitter_us, unsigned seed) {
  unsetenv("DEVMM_CONFIG");
  setenv("XDG_CONFIG_HOME", "/nonexistent-devmm-test", 1);
  char text[512], path[512];
  snprintf(text, sizeof text,
           "[devmm]\nplugins = cpu, sim\n[plugin sim]\ndevices = 2\nmemory = 64MiB\n"
           "jitter_us = %u\nseed = %u\n[device sim:*]\nresource = sim.async\n",
           jitter_us, seed);
  const char *tmp = getenv("TMPDIR");
  snprintf(path, sizeof path, "%s/devmm-sim-test-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  int fd = mkstemp(path);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
  close(fd);
  int rc = devmm_init(path);
  unlink(path);
  ck_assert_msg(rc == DEVMM_OK, "devmm_init: %s", devmm_last_error());
  const char *so = NULL;
  for (size_t i = 0; i < devmm_plugin_count(); i++) {
    devmm_plugin_status st;
    ck_assert_int_eq(devmm_plugin_get(i, &st), DEVMM_OK);
    if (strcmp(st.name, "sim") == 0 && st.loaded)
      so = st.path;
  }
  ck_assert_msg(so != NULL, "devmm-sim did not load");
  void *h = dlopen(so, RTLD_NOW | RTLD_NOLOAD);
  ck_assert_ptr_nonnull(h);
#define BIND(f) ck_assert_ptr_nonnull(*(void **)&sim.f = dlsym(h, "devmm_sim_" #f))
  BIND(set_device);
  BIND(stream_create);
  BIND(stream_destroy);
  BIND(stream_synchronize);
  BIND(device_synchronize);
  BIND(event_create);
  BIND(event_record);
  BIND(stream_wait_event);
  BIND(event_destroy);
  BIND(launch);
  BIND(view);
  BIND(fill);
  BIND(check);
  BIND(inject);
  BIND(stats_get);
  BIND(default_pool_threshold);
#undef BIND
  sim.inject(NULL, 0, 0);
  sim.set_device(0);
}

static devmm_resource *kind(const char *name, int device) {
  devmm_resource *r;
  ck_assert_msg(devmm_resource_create_kind(name, device, NULL, 0, &r) == DEVMM_OK, "%s: %s", name,
                devmm_last_error());
  return r;
}

static void *stream(int device) {
  void *s;
  ck_assert_int_eq(sim.stream_create(device, 0, &s), DEVMM_OK);
  return s;
}

static devmm_sim_stats stats(void) {
  devmm_sim_stats st = {.struct_size = sizeof st};
  ck_assert_int_eq(sim.stats_get(&st), DEVMM_OK);
  return st;
}

static void sleep_kernel(void *ms) {
  struct timespec ts = {0, (long)(intptr_t)ms * 1000000L};
  nanosleep(&ts, NULL);
}

/* ================================================================ sim_runtime */

START_TEST(host_touch_of_device_memory_faults) {
  sim_init(0, 1);
  devmm_resource *r = kind("sim.device", 0);
  void *p;
  ck_assert_int_eq(devmm_allocate(r, 4096, 0, NULL, &p), DEVMM_OK);
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    signal(SIGSEGV, SIG_DFL); /* a sanitizer's handler would report it instead */
    devmm_resource_retain(r); /* the child keeps nothing when it dies (valgrind) */
    devmm_deallocate(r, p, 4096, 0, NULL);
    devmm_resource_release(r);
    devmm_resource_release(r);
    devmm_shutdown();
    volatile char c = *(volatile char *)p; /* a host read of device memory: still mapped */
    (void)c;
    _exit(0);
  }
  int status;
  ck_assert_int_eq(waitpid(pid, &status, 0), pid);
  ck_assert_msg(WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV,
                "a host read of sim device memory must fault, got status %d", status);
  ck_assert_ptr_nonnull(sim.view(p, 4096)); /* the runtime's own view reaches it */
  ck_assert_int_eq(devmm_deallocate(r, p, 4096, 0, NULL), DEVMM_OK);
  devmm_resource_release(r);
}
END_TEST

START_TEST(events_order_two_streams) {
  sim_init(300, 2);
  devmm_resource *r = kind("sim.device", 0);
  void *p, *a = stream(0), *b = stream(0), *ev;
  ck_assert_int_eq(devmm_allocate(r, 1 << 16, 0, NULL, &p), DEVMM_OK);
  ck_assert_int_eq(sim.event_create(0, &ev), DEVMM_OK);
  for (int i = 0; i < 20; i++) {
    int ok;
    ck_assert_int_eq(sim.fill(a, p, i + 1, 1 << 16), DEVMM_OK);
    ck_assert_int_eq(sim.event_record(ev, a), DEVMM_OK);
    ck_assert_int_eq(sim.stream_wait_event(b, ev), DEVMM_OK);
    ck_assert_int_eq(sim.check(b, p, i + 1, 1 << 16, &ok), DEVMM_OK);
    ck_assert_int_eq(sim.stream_synchronize(b), DEVMM_OK);
    ck_assert_int_eq(ok, 1);
  }
  sim.event_destroy(ev);
  sim.stream_destroy(a);
  sim.stream_destroy(b);
  devmm_deallocate(r, p, 1 << 16, 0, NULL);
  devmm_resource_release(r);
}
END_TEST

/* The simulator's point: without the wait, the jitter makes the second stream read early. */
START_TEST(jitter_exposes_a_missing_wait) {
  sim_init(2000, 3);
  devmm_resource *r = kind("sim.device", 0);
  void *p, *a = stream(0), *b = stream(0);
  ck_assert_int_eq(devmm_allocate(r, 4096, 0, NULL, &p), DEVMM_OK);
  int stale = 0;
  for (int i = 0; i < 20; i++) {
    int ok;
    sim.fill(a, p, i + 1, 4096);
    sim.check(b, p, i + 1, 4096, &ok); /* no wait: a race */
    sim.stream_synchronize(a);
    sim.stream_synchronize(b);
    stale += ok == 0;
  }
  ck_assert_msg(stale > 0, "20 unordered reads all saw the write: the jitter does not work");
  sim.stream_destroy(a);
  sim.stream_destroy(b);
  devmm_deallocate(r, p, 4096, 0, NULL);
  devmm_resource_release(r);
}
END_TEST

START_TEST(runtime_rules_are_enforced) {
  sim_init(0, 4);
  void *ev, *s1 = stream(1), *s0 = stream(0);
  ck_assert_int_eq(sim.event_create(0, &ev), DEVMM_OK);
  /* an event records only on a stream of its own device, as in CUDA */
  ck_assert_int_eq(sim.event_record(ev, s1), DEVMM_EINVAL);
  ck_assert_error_contains("simErrorInvalidResourceHandle");
  ck_assert_int_eq(sim.event_record(ev, s0), DEVMM_OK);
  /* a destroyed stream or event is detected */
  ck_assert_int_eq(sim.stream_destroy(s1), DEVMM_OK);
  ck_assert_int_eq(sim.stream_synchronize(s1), DEVMM_EINVAL);
  ck_assert_int_eq(sim.event_destroy(ev), DEVMM_OK);
  ck_assert_int_eq(sim.event_record(ev, s0), DEVMM_EINVAL);
  /* memset from sim:0's stream on sim:1's memory: not accessible */
  devmm_resource *r0 = kind("sim.device", 0), *r1 = kind("sim.device", 1);
  void *p1;
  ck_assert_int_eq(devmm_allocate(r1, 256, 0, NULL, &p1), DEVMM_OK);
  ck_assert_int_eq(devmm_memset(r0, p1, 0, 256, NULL), DEVMM_EDEVICE);
  ck_assert_error_contains("simMemsetAsync(256) failed");
  /* the legacy default stream waits for a blocking stream's earlier work */
  int ok;
  void *blocking = stream(1);
  sim.set_device(1);
  sim.fill(blocking, p1, 0x5A, 256);
  ck_assert_int_eq(sim.check(NULL, p1, 0x5A, 256, &ok), DEVMM_OK);
  sim.device_synchronize(1);
  ck_assert_int_eq(ok, 1);
  sim.set_device(0);
  sim.stream_destroy(blocking);
  ck_assert_int_eq(devmm_deallocate(r1, p1, 256, 0, NULL), DEVMM_OK);
  /* a double free is an error, not a crash */
  ck_assert_int_eq(devmm_deallocate(r1, p1, 256, 0, NULL), DEVMM_EDEVICE);
  ck_assert_error_contains("simFree(256) failed");
  sim.stream_destroy(s0);
  devmm_resource_release(r0);
  devmm_resource_release(r1);
}
END_TEST

START_TEST(stream_ordered_free_poisons) {
  sim_init(200, 5);
  devmm_resource *r = kind("sim.async", 0);
  void *p, *s = stream(0);
  int before, after;
  ck_assert_int_eq(devmm_allocate(r, 1024, 0, s, &p), DEVMM_OK);
  sim.fill(s, p, 0x11, 1024);
  sim.check(s, p, 0x11, 1024, &before);
  ck_assert_int_eq(devmm_deallocate(r, p, 1024, 0, s), DEVMM_OK);
  sim.check(s, p, 0xDD, 1024, &after); /* a kernel ordered after the free reads poison */
  sim.stream_synchronize(s);
  ck_assert_int_eq(before, 1);
  ck_assert_int_eq(after, 1);
  sim.stream_destroy(s);
  devmm_resource_release(r);
}
END_TEST

START_TEST(device_count_cannot_change_under_live_memory) {
  sim_init(0, 6);
  devmm_resource *r = kind("sim.device", 0);
  void *p;
  ck_assert_int_eq(devmm_allocate(r, 256, 0, NULL, &p), DEVMM_OK);
  char path[512];
  const char *tmp = getenv("TMPDIR");
  snprintf(path, sizeof path, "%s/devmm-sim-test-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  int fd = mkstemp(path);
  const char *text = "[devmm]\nplugins = cpu, sim\n[plugin sim]\ndevices = 3\n";
  ck_assert_int_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
  close(fd);
  int refused = devmm_init(path);
  char why[512];
  snprintf(why, sizeof why, "%s", devmm_last_error());
  int freed = devmm_deallocate(r, p, 256, 0, NULL);
  devmm_resource_release(r);
  int accepted = devmm_init(path);
  unlink(path);
  ck_assert_int_eq(refused, DEVMM_ECONFIG);
  ck_assert_msg(strstr(why, ":3: [plugin sim]: devices = 3, memory = 268435456: the device count "
                            "and memory cannot change while sim memory or streams are live"),
                "%s", why);
  ck_assert_int_eq(freed, DEVMM_OK);
  ck_assert_msg(accepted == DEVMM_OK, "%s", devmm_last_error());
  ck_assert_int_eq(devmm_device_count(), 4); /* cpu + 3 sim devices */
}
END_TEST

/* ================================================================ sim_gpu: plugins/gpu/gpu.c */

/* The event must be made on the buffer's device: recording it on that device's stream from a
 * thread whose current device is another one failed (cudaErrorInvalidResourceHandle). */
START_TEST(stream_wait_on_another_device) {
  sim_init(300, 7);
  devmm_resource *r1 = kind("sim.async", 1), *r0 = kind("sim.device", 0);
  void *s1 = stream(1), *s0 = stream(0), *p;
  sim.set_device(0); /* the calling thread works on sim:0; the buffer lives on sim:1 */
  ck_assert_int_eq(devmm_allocate(r1, 4096, 0, s1, &p), DEVMM_OK);
  for (int i = 0; i < 10; i++) {
    unsigned char host[4096];
    sim.fill(s1, p, i + 1, 4096);
    ck_assert_msg(devmm_stream_wait(r1, s0, s1) == DEVMM_OK, "%s", devmm_last_error());
    /* sim:0's stream copies the bytes out (a peer copy), after the fill */
    ck_assert_int_eq(devmm_copy(r0, host, p, 4096, s0), DEVMM_OK);
    ck_assert_int_eq(sim.stream_synchronize(s0), DEVMM_OK);
    ck_assert_int_eq(host[0], i + 1);
    ck_assert_int_eq(host[4095], i + 1);
  }
  ck_assert_int_eq(devmm_deallocate(r1, p, 4096, 0, s1), DEVMM_OK);
  sim.stream_destroy(s0);
  sim.stream_destroy(s1);
  devmm_resource_release(r0);
  devmm_resource_release(r1);
}
END_TEST

/* Copies, memsets and synchronisation on the NULL stream mean the resource's device, whatever
 * the calling thread's current device is. */
START_TEST(null_stream_ops_use_the_resources_device) {
  sim_init(500, 8);
  devmm_resource *r1 = kind("sim.device", 1);
  void *p;
  sim.set_device(0);
  ck_assert_int_eq(devmm_allocate(r1, 1 << 16, 0, NULL, &p), DEVMM_OK);
  ck_assert_msg(devmm_memset(r1, p, 0x22, 1 << 16, NULL) == DEVMM_OK, "%s", devmm_last_error());
  ck_assert_int_eq(devmm_synchronize(r1, NULL), DEVMM_OK);
  const unsigned char *v = sim.view(p, 1 << 16);
  for (int i = 0; i < 1 << 16; i++)
    ck_assert_int_eq(v[i], 0x22);
  unsigned char host[64];
  ck_assert_int_eq(devmm_copy(r1, host, p, sizeof host, NULL), DEVMM_OK);
  ck_assert_int_eq(devmm_synchronize(r1, NULL), DEVMM_OK);
  ck_assert_int_eq(host[0], 0x22);
  ck_assert_int_eq(host[63], 0x22);
  ck_assert_int_eq(devmm_deallocate(r1, p, 1 << 16, 0, NULL), DEVMM_OK);
  devmm_resource_release(r1);
}
END_TEST

START_TEST(failed_set_device_is_an_error) {
  sim_init(0, 9);
  devmm_resource *r1 = kind("sim.device", 1);
  sim.set_device(0);
  ck_assert_int_eq(sim.inject("SetDevice", 0, 101), DEVMM_OK);
  void *p = (void *)1;
  ck_assert_int_eq(devmm_allocate(r1, 256, 0, NULL, &p), DEVMM_EDEVICE);
  ck_assert_error_contains("sim.device on sim:1: simSetDevice(1) failed: invalid device ordinal");
  ck_assert_ptr_null(p);
  devmm_resource_release(r1);
}
END_TEST

START_TEST(messages_name_the_failed_call) {
  sim_init(0, 10);
  devmm_resource *r = kind("sim.async", 0), *pin = kind("sim.pinned", 0);
  void *p, *h, *s = stream(0);
  ck_assert_int_eq(devmm_allocate(r, 512, 0, NULL, &p), DEVMM_OK);
  sim.inject("FreeAsync", 0, 999);
  ck_assert_int_eq(devmm_deallocate(r, p, 512, 0, NULL), DEVMM_EDEVICE);
  ck_assert_error_contains("sim.async on sim:0: simFreeAsync(512) failed");
  ck_assert_int_eq(devmm_deallocate(r, p, 512, 0, NULL), DEVMM_OK);
  ck_assert_int_eq(devmm_allocate(pin, 512, 0, NULL, &h), DEVMM_OK);
  sim.inject("FreeHost", 0, 999);
  ck_assert_int_eq(devmm_deallocate(pin, h, 512, 0, NULL), DEVMM_EDEVICE);
  ck_assert_error_contains("simFreeHost(512) failed");
  ck_assert_int_eq(devmm_deallocate(pin, h, 512, 0, NULL), DEVMM_OK);
  sim.inject("EventRecord", 0, 999);
  ck_assert_int_eq(devmm_stream_wait(r, s, NULL), DEVMM_EDEVICE);
  ck_assert_error_contains("simEventRecord(0) failed");
  sim.stream_destroy(s);
  devmm_resource_release(r);
  devmm_resource_release(pin);
}
END_TEST

START_TEST(release_threshold_only_on_an_own_pool) {
  sim_init(0, 11);
  uint64_t before, after;
  ck_assert_int_eq(sim.default_pool_threshold(0, &before), DEVMM_OK);
  devmm_option o[] = {{"release_threshold", "1MiB", 0}, {"pool", "own", 0}};
  devmm_resource *r = NULL;
  ck_assert_int_eq(devmm_resource_create_kind("sim.async", 0, o, 1, &r), DEVMM_EINVAL);
  ck_assert_error_contains("sim.async: release_threshold needs pool = own: the device's default "
                           "pool is shared by the whole process");
  ck_assert_int_eq(sim.default_pool_threshold(0, &after), DEVMM_OK);
  ck_assert_int_eq(after, before); /* the process-wide pool is untouched */
  ck_assert_msg(devmm_resource_create_kind("sim.async", 0, o, 2, &r) == DEVMM_OK, "%s",
                devmm_last_error());
  ck_assert_str_eq(devmm_resource_name(r), "sim.async(own pool)");
  ck_assert_int_eq(sim.default_pool_threshold(0, &after), DEVMM_OK);
  ck_assert_int_eq(after, before);
  devmm_resource_release(r);
}
END_TEST

START_TEST(one_event_per_resource) {
  sim_init(0, 12);
  devmm_resource *r = kind("sim.async", 0);
  void *s = stream(0), *t = stream(0);
  uint64_t before = stats().events_created;
  for (int i = 0; i < 10; i++)
    ck_assert_int_eq(devmm_stream_wait(r, s, t), DEVMM_OK);
  ck_assert_int_eq(stats().events_created - before, 1);
  devmm_resource_release(r);
  ck_assert_int_eq(stats().events_live, 0); /* destroyed with the resource */
  sim.stream_destroy(s);
  sim.stream_destroy(t);
}
END_TEST

START_TEST(pinned_mem_info_is_host_memory) {
  sim_init(0, 13);
  devmm_resource *pin = kind("sim.pinned", 0);
  size_t f, t;
  ck_assert_int_eq(devmm_mem_info(pin, &f, &t), DEVMM_OK);
  struct sysinfo si;
  sysinfo(&si);
  ck_assert_uint_eq(t, (size_t)si.totalram * si.mem_unit);
  devmm_resource_release(pin);
}
END_TEST

START_TEST(options_are_checked_before_the_device) {
  sim_init(0, 14);
  devmm_option o[] = {{"pool", "shared", 0}};
  devmm_resource *r;
  ck_assert_int_eq(devmm_resource_create_kind("sim.async", 7, o, 1, &r), DEVMM_EINVAL);
  ck_assert_error_contains("sim.async: pool = shared: expected default or own");
}
END_TEST

/* ================================================================ sim_core */

static devmm_tensor *host_tensor(devmm_resource *cpu, int64_t n, int first) {
  devmm_tensor *t;
  devmm_layout rm = devmm_layout_row_major();
  ck_assert_int_eq(devmm_tensor_empty(cpu, CPU, &rm, 1, &n, U8, NULL, &t), DEVMM_OK);
  unsigned char *d = devmm_tensor_data(t);
  for (int64_t i = 0; i < n; i++)
    d[i] = (unsigned char)(first + i);
  return t;
}

/* A CPU tensor copied to the device went through the source (CPU) resource: a memmove into
 * device memory, a SIGSEGV. */
START_TEST(copy_host_to_device_and_back) {
  sim_init(300, 15);
  devmm_resource *cpu = kind("cpu.malloc", 0), *dev = kind("sim.async", 0);
  devmm_tensor *h = host_tensor(cpu, 1000, 3), *d = NULL, *back = NULL;
  ck_assert_msg(devmm_tensor_copy(h, dev, &d) == DEVMM_OK, "%s", devmm_last_error());
  ck_assert_int_eq(devmm_buffer_device(devmm_tensor_buffer(d)).device_type, DEVMM_DEVICE_SIM);
  ck_assert_msg(devmm_tensor_copy(d, cpu, &back) == DEVMM_OK, "%s", devmm_last_error());
  const unsigned char *b = devmm_tensor_data(back);
  for (int i = 0; i < 1000; i++)
    ck_assert_int_eq(b[i], (unsigned char)(3 + i));
  devmm_tensor_destroy(h);
  devmm_tensor_destroy(d);
  devmm_tensor_destroy(back);
  devmm_resource_release(cpu);
  devmm_resource_release(dev);
}
END_TEST

START_TEST(copy_between_devices_and_padded) {
  sim_init(300, 16);
  devmm_resource *cpu = kind("cpu.malloc", 0), *d0 = kind("sim.async", 0),
                 *d1 = kind("sim.async", 1);
  /* a padded 3 x 5 source (strides 8, 1) on sim:0 -> compact on sim:1 -> host */
  devmm_tensor *h = host_tensor(cpu, 24, 0), *pad, *x0, *x1, *back;
  int64_t shape[2] = {3, 5}, strides[2] = {8, 1};
  ck_assert_int_eq(devmm_tensor_copy(h, d0, &x0), DEVMM_OK);
  ck_assert_int_eq(devmm_tensor_create(devmm_tensor_buffer(x0), U8, 2, shape, strides, 0, 0, &pad),
                   DEVMM_OK);
  ck_assert_msg(devmm_tensor_copy(pad, d1, &x1) == DEVMM_OK, "%s", devmm_last_error());
  ck_assert_int_eq(devmm_buffer_device(devmm_tensor_buffer(x1)).device_id, 1);
  ck_assert_int_eq(devmm_tensor_strides(x1)[0], 5);
  ck_assert_msg(devmm_tensor_copy(x1, cpu, &back) == DEVMM_OK, "%s", devmm_last_error());
  const unsigned char *b = devmm_tensor_data(back);
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 5; j++)
      ck_assert_int_eq(b[i * 5 + j], i * 8 + j);
  devmm_tensor *objs[] = {h, pad, x0, x1, back};
  for (int i = 0; i < 5; i++)
    devmm_tensor_destroy(objs[i]);
  devmm_resource_release(cpu);
  devmm_resource_release(d0);
  devmm_resource_release(d1);
}
END_TEST

static int host_alloc(void *u, size_t n, size_t a, devmm_stream s, void **out) {
  (void)u, (void)a, (void)s;
  *out = malloc(n);
  return *out ? DEVMM_OK : DEVMM_ENOMEM;
}
static int host_free(void *u, void *p, size_t n, size_t a, devmm_stream s) {
  (void)u, (void)n, (void)a, (void)s;
  free(p);
  return DEVMM_OK;
}

START_TEST(copy_needs_a_resource_that_addresses_both_sides) {
  sim_init(0, 17);
  devmm_resource *d0 = kind("sim.async", 0), *cpu = kind("cpu.malloc", 0), *other, *bare;
  devmm_device cuda = {DEVMM_DEVICE_CUDA, 0};
  ck_assert_int_eq(devmm_callback_resource_create(host_alloc, host_free, NULL, NULL, cuda,
                                                  "other.runtime", 0, &other),
                   DEVMM_OK);
  devmm_tensor *h = host_tensor(cpu, 16, 0), *x, *y = (devmm_tensor *)1;
  ck_assert_int_eq(devmm_tensor_copy(h, d0, &x), DEVMM_OK);
  ck_assert_int_eq(devmm_tensor_copy(x, other, &y), DEVMM_ENOTSUP);
  ck_assert_error_contains("tensor copy sim:0 -> cuda:0: no resource can address both (two "
                           "runtimes): copy to cpu first");
  ck_assert_ptr_null(y);
  /* a device resource without a copy op says so */
  devmm_device s0 = {DEVMM_DEVICE_SIM, 0};
  ck_assert_int_eq(
      devmm_callback_resource_create(host_alloc, host_free, NULL, NULL, s0, "no.ops", 0, &bare),
      DEVMM_OK);
  ck_assert_int_eq(devmm_tensor_copy(h, bare, &y), DEVMM_ENOTSUP);
  ck_assert_error_contains("tensor copy cpu -> sim:0 through 'no.ops': resource 'no.ops' does not "
                           "support copy");
  devmm_tensor_destroy(h);
  devmm_tensor_destroy(x);
  devmm_resource_release(other);
  devmm_resource_release(bare);
  devmm_resource_release(cpu);
  devmm_resource_release(d0);
}
END_TEST

/* The copy's destination was allocated on the NULL stream and written on the source's stream
 * with no event between: its block, still owned by a free queued on the NULL stream, was
 * poisoned by that free after the copy wrote it. */
START_TEST(copy_destination_is_ordered_with_the_copy) {
  sim_init(100, 18);
  devmm_resource *cpu = kind("cpu.malloc", 0), *d0 = kind("sim.async", 0);
  void *x, *old;
  /* the source, on a stream that does not wait for the legacy stream (as torch's and CuPy's) */
  ck_assert_int_eq(sim.stream_create(0, 1, &x), DEVMM_OK);
  devmm_tensor *h = host_tensor(cpu, 4096, 9), *src, *dst, *back;
  devmm_layout rm = devmm_layout_row_major();
  int64_t n = 4096;
  ck_assert_int_eq(
      devmm_tensor_empty(d0, (devmm_device){DEVMM_DEVICE_SIM, 0}, &rm, 1, &n, U8, x, &src),
      DEVMM_OK);
  ck_assert_int_eq(devmm_copy(d0, devmm_tensor_data(src), devmm_tensor_data(h), 4096, x), DEVMM_OK);
  /* a block of the same size whose free is queued on the NULL stream, behind 50 ms of work */
  ck_assert_int_eq(devmm_allocate(d0, 4096, 0, NULL, &old), DEVMM_OK);
  sim.launch(NULL, sleep_kernel, (void *)(intptr_t)50);
  ck_assert_int_eq(devmm_deallocate(d0, old, 4096, 0, NULL), DEVMM_OK);
  ck_assert_msg(devmm_tensor_copy(src, d0, &dst) == DEVMM_OK, "%s", devmm_last_error());
  sim.device_synchronize(0);
  ck_assert_int_eq(devmm_tensor_copy(dst, cpu, &back), DEVMM_OK);
  const unsigned char *b = devmm_tensor_data(back);
  for (int i = 0; i < 4096; i++)
    ck_assert_msg(b[i] == (unsigned char)(9 + i), "byte %d is %#x, expected %#x", i, b[i],
                  (unsigned char)(9 + i));
  devmm_tensor *objs[] = {h, src, dst, back};
  for (int i = 0; i < 4; i++)
    devmm_tensor_destroy(objs[i]);
  sim.stream_destroy(x);
  devmm_resource_release(cpu);
  devmm_resource_release(d0);
}
END_TEST

/* The free when the last consumer lets go ran on the allocation stream right away, while the
 * consumer's kernel was still queued on its own stream: the kernel read poison. */
START_TEST(free_after_last_consumer_waits_for_its_stream) {
  sim_init(100, 19);
  devmm_resource *d0 = kind("sim.async", 0);
  void *x = stream(0), *c = stream(0);
  devmm_buffer *b;
  ck_assert_int_eq(devmm_buffer_allocate(d0, 8192, 0, x, &b), DEVMM_OK);
  sim.fill(x, devmm_buffer_ptr(b), 0x3C, 8192);
  ck_assert_int_eq(devmm_buffer_acquire(b), DEVMM_OK); /* an export */
  ck_assert_int_eq(devmm_buffer_stream_wait(b, c), DEVMM_OK);
  int ok;
  sim.launch(c, sleep_kernel, (void *)(intptr_t)30); /* the consumer's work, still queued... */
  sim.check(c, devmm_buffer_ptr(b), 0x3C, 8192, &ok);
  devmm_buffer_free(b);      /* the owner lets go */
  devmm_buffer_unacquire(b); /* ...when the consumer lets go */
  devmm_buffer_release(b);
  sim.device_synchronize(0);
  ck_assert_msg(ok == 1, "the consumer's kernel read freed memory");
  sim.stream_destroy(x);
  sim.stream_destroy(c);
  devmm_resource_release(d0);
}
END_TEST

/* ...and it used the allocation stream even after the user had destroyed it. */
START_TEST(free_after_allocation_stream_is_destroyed) {
  sim_init(0, 20);
  devmm_resource *d0 = kind("sim.async", 0);
  uint64_t live = stats().allocations_live;
  void *x = stream(0);
  devmm_buffer *b;
  ck_assert_int_eq(devmm_buffer_allocate(d0, 8192, 0, x, &b), DEVMM_OK);
  ck_assert_int_eq(devmm_buffer_acquire(b), DEVMM_OK);
  devmm_buffer_free(b);
  ck_assert_int_eq(sim.stream_destroy(x), DEVMM_OK); /* legal: the owner is done with it */
  devmm_buffer_unacquire(b);                         /* the consumer lets go later */
  devmm_buffer_release(b);
  devmm_deferred_frees_wait(); /* the free is queued (stream-ordered) on sim:0's default stream */
  sim.device_synchronize(0);
  ck_assert_msg(stats().allocations_live == live, "the memory was not freed (%llu live)",
                (unsigned long long)stats().allocations_live);
  devmm_resource_release(d0);
}
END_TEST

/* zeros() on pinned memory queued the memset on a stream and returned: a host read saw 0xCD. */
START_TEST(zeros_on_pinned_memory_then_a_host_read) {
  sim_init(500, 21);
  devmm_resource *pin = kind("sim.pinned", 0);
  for (int round = 0; round < 5; round++) {
    devmm_tensor *t;
    devmm_layout rm = devmm_layout_row_major();
    int64_t n = 1 << 16;
    ck_assert_int_eq(devmm_tensor_empty(pin, CPU, &rm, 1, &n, U8, NULL, &t), DEVMM_OK);
    ck_assert_int_eq(devmm_tensor_zero(t), DEVMM_OK);
    const unsigned char *d = devmm_tensor_data(t);
    for (int i = 0; i < n; i++)
      ck_assert_msg(d[i] == 0, "round %d: byte %d is %#x after zero()", round, i, d[i]);
    devmm_tensor_destroy(t);
  }
  devmm_resource_release(pin);
}
END_TEST

/* A device resource without stream ops claimed every stream order silently. */
START_TEST(device_resource_without_stream_ops_cannot_order) {
  sim_init(0, 22);
  devmm_device s0 = {DEVMM_DEVICE_SIM, 0};
  devmm_resource *bare;
  ck_assert_int_eq(devmm_callback_resource_create(host_alloc, host_free, NULL, NULL, s0,
                                                  "python.pool", 0, &bare),
                   DEVMM_OK);
  void *a = stream(0), *b = stream(0);
  ck_assert_int_eq(devmm_stream_wait(bare, a, b), DEVMM_ENOTSUP);
  ck_assert_error_contains("resource 'python.pool' on sim:0 cannot order streams (it has no "
                           "stream_wait op)");
  ck_assert_int_eq(devmm_stream_wait(bare, a, a), DEVMM_OK);
  ck_assert_int_eq(devmm_synchronize(bare, a), DEVMM_ENOTSUP);
  devmm_resource_release(bare);
  sim.stream_destroy(a);
  sim.stream_destroy(b);
}
END_TEST

/* A callback resource on a device gets its copies and stream order from the device's runtime. */
START_TEST(callback_resource_with_a_runtime) {
  sim_init(200, 23);
  devmm_resource *dev = kind("sim.device", 0), *cb;
  devmm_device s0 = {DEVMM_DEVICE_SIM, 0}, s1 = {DEVMM_DEVICE_SIM, 1};
  ck_assert_int_eq(
      devmm_callback_resource_create_ex(host_alloc, host_free, NULL, NULL, s1, "x", 0, dev, &cb),
      DEVMM_EINVAL);
  ck_assert_error_contains("callback resource 'x' on sim:1: its runtime resource 'sim.device' is "
                           "on sim:0");
  /* device memory from "elsewhere" (here: sim.device itself), filled by the runtime */
  ck_assert_int_eq(
      devmm_callback_resource_create_ex(host_alloc, host_free, NULL, NULL, s0, "pool", 0, dev, &cb),
      DEVMM_OK);
  void *s = stream(0), *p;
  ck_assert_int_eq(devmm_allocate(dev, 4096, 0, NULL, &p), DEVMM_OK);
  ck_assert_int_eq(devmm_memset(cb, p, 0x44, 4096, s), DEVMM_OK);
  ck_assert_int_eq(devmm_synchronize(cb, s), DEVMM_OK);
  ck_assert_int_eq(((unsigned char *)sim.view(p, 4096))[4095], 0x44);
  size_t f, t;
  ck_assert_int_eq(devmm_mem_info(cb, &f, &t), DEVMM_OK);
  ck_assert_uint_eq(t, (size_t)64 << 20);
  devmm_deallocate(dev, p, 4096, 0, NULL);
  devmm_resource_release(cb);
  devmm_resource_release(dev);
  sim.stream_destroy(s);
}
END_TEST

/* The C side of torch's allocator: a status and a message, never NULL with success. */
START_TEST(torch_allocate_reports_out_of_memory) {
  sim_init(0, 24);
  devmm_resource *lim, *dev = kind("sim.async", 0), *prev = NULL;
  ck_assert_int_eq(devmm_limiting_adaptor_create(dev, 1 << 20, &lim), DEVMM_OK);
  devmm_device cuda3 = {DEVMM_DEVICE_CUDA, 3};
  ck_assert_int_eq(devmm_set_current_resource(cuda3, lim, &prev), DEVMM_OK);
  void *p = (void *)1, *q;
  ck_assert_int_eq(devmm_torch_allocate(2 << 20, 3, NULL, &p), DEVMM_ENOMEM);
  ck_assert_ptr_null(p);
  ck_assert_error_contains("torch allocation of 2097152 bytes on cuda:3: out of memory");
  ck_assert_int_eq(devmm_torch_allocate(4096, 3, NULL, &q), DEVMM_OK);
  ck_assert_ptr_nonnull(q);
  ck_assert_int_eq(devmm_torch_allocate(0, 3, NULL, &p), DEVMM_OK); /* torch's empty tensors */
  ck_assert_ptr_null(p);
  devmm_torch_deallocate(q, 4096, 3, NULL);
  ck_assert_int_eq(devmm_torch_allocate(16, 99, NULL, &p), DEVMM_EINVAL);
  ck_assert_error_contains("device 99 out of range");
  devmm_resource_release(prev);
  devmm_resource_release(lim);
  devmm_resource_release(dev);
}
END_TEST

static Suite *suite_of(const char *name, const TTest *const *tests) {
  Suite *s = suite_create(name);
  TCase *tc = tcase_create(name);
  tcase_set_timeout(tc, 60);
  for (; *tests; tests++)
    tcase_add_test(tc, *tests);
  suite_add_tcase(s, tc);
  return s;
}

Suite *sim_runtime_suite(void) {
  const TTest *const tests[] = {host_touch_of_device_memory_faults,
                                events_order_two_streams,
                                jitter_exposes_a_missing_wait,
                                runtime_rules_are_enforced,
                                stream_ordered_free_poisons,
                                device_count_cannot_change_under_live_memory,
                                NULL};
  return suite_of("sim_runtime", tests);
}

Suite *sim_gpu_suite(void) {
  const TTest *const tests[] = {stream_wait_on_another_device,
                                null_stream_ops_use_the_resources_device,
                                failed_set_device_is_an_error,
                                messages_name_the_failed_call,
                                release_threshold_only_on_an_own_pool,
                                one_event_per_resource,
                                pinned_mem_info_is_host_memory,
                                options_are_checked_before_the_device,
                                NULL};
  return suite_of("sim_gpu", tests);
}

Suite *sim_core_suite(void) {
  const TTest *const tests[] = {copy_host_to_device_and_back,
                                copy_between_devices_and_padded,
                                copy_needs_a_resource_that_addresses_both_sides,
                                copy_destination_is_ordered_with_the_copy,
                                free_after_last_consumer_waits_for_its_stream,
                                free_after_allocation_stream_is_destroyed,
                                zeros_on_pinned_memory_then_a_host_read,
                                device_resource_without_stream_ops_cannot_order,
                                callback_resource_with_a_runtime,
                                torch_allocate_reports_out_of_memory,
                                NULL};
  return suite_of("sim_core", tests);
}
