/* Suite sim_ipc: CUDA's rules on contexts and IPC, as the simulator follows them (ADR 37
 * §Contexts and IPC) and as devmm honours them (ADR 38 §Threads and contexts; IPC opens; ADR 40
 * §Device handles): driver-level calls need a bound context; a handle opens only in another
 * process, repeated opens share one pointer, an import maps the allocation's whole 2 MiB chunk,
 * an exporter's free under an importer is a fault, a gone exporter the generic error; devmm binds
 * the context on every thread, opens its own handles as its own memory, shares one mapping
 * between repeated opens and checks a handle's offset and size against what was opened.
 * Processes: the other process is forked before either side starts devmm (a fork after the
 * runtime started is refused, as CUDA's is) and speaks through pipes.
 * Environment (set by Meson): DEVMM_PLUGIN_PATH (the plugins' build directory). */
#include <check.h>
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sim_env.h"

#define CHUNK ((size_t)2 << 20)
enum { CTX = 201, MAPFAIL = 205, BADHANDLE = 400, ILLEGAL = 700 };

/* The runtime's raw calls (include/devmm/sim.h), from the copy devmm loaded. */
static struct {
  __typeof__(devmm_sim_address_range) *range;
  __typeof__(devmm_sim_ipc_get) *get;
  __typeof__(devmm_sim_ipc_open) *open;
  __typeof__(devmm_sim_ipc_close) *close;
  __typeof__(devmm_sim_ipc_reason) *reason;
  __typeof__(devmm_sim_get_device) *get_device;
} raw;

/* devmm over the sim plugin (sim_env.h) and the raw calls bound. */
static void start(void) {
  sim_init(0, 1);
  const char *so = NULL;
  for (size_t i = 0; i < devmm_plugin_count(); i++) {
    devmm_plugin_status st;
    ck_assert_int_eq(devmm_plugin_get(i, &st), DEVMM_OK);
    if (strcmp(st.name, "sim") == 0 && st.loaded)
      so = st.path;
  }
  ck_assert_ptr_nonnull(so);
  void *h = dlopen(so, RTLD_NOW | RTLD_NOLOAD);
  ck_assert_ptr_nonnull(h);
  ck_assert_ptr_nonnull(*(void **)&raw.range = dlsym(h, "devmm_sim_address_range"));
  ck_assert_ptr_nonnull(*(void **)&raw.get = dlsym(h, "devmm_sim_ipc_get"));
  ck_assert_ptr_nonnull(*(void **)&raw.open = dlsym(h, "devmm_sim_ipc_open"));
  ck_assert_ptr_nonnull(*(void **)&raw.close = dlsym(h, "devmm_sim_ipc_close"));
  ck_assert_ptr_nonnull(*(void **)&raw.reason = dlsym(h, "devmm_sim_ipc_reason"));
  ck_assert_ptr_nonnull(*(void **)&raw.get_device = dlsym(h, "devmm_sim_get_device"));
}

/* Device memory of n bytes holding byte, from r. */
static void *device_bytes(devmm_resource *r, size_t n, int byte) {
  void *p;
  ck_assert_int_eq(devmm_allocate(r, n, 0, NULL, &p), DEVMM_OK);
  unsigned char *host = malloc(n);
  memset(host, byte, n);
  ck_assert_int_eq(devmm_copy(r, p, host, n, NULL), DEVMM_OK);
  ck_assert_int_eq(devmm_synchronize(r, NULL), DEVMM_OK);
  free(host);
  return p;
}

static void put(int fd, const void *p, size_t n) { ck_assert_int_eq(write(fd, p, n), (ssize_t)n); }

static int get(int fd, void *p, size_t n) {
  for (size_t done = 0; done < n;) {
    ssize_t k = read(fd, (char *)p + done, n - done);
    if (k <= 0)
      return 0;
    done += (size_t)k;
  }
  return 1;
}

static int wait_child(pid_t pid) {
  int status = 0;
  ck_assert_int_eq(waitpid(pid, &status, 0), pid);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 100 + WTERMSIG(status);
}

/* A child forked before devmm starts: runs fn(from, to) with pipes from and to the parent, and
 * exits with its result. */
static pid_t child(int (*fn)(int from, int to), int *to_child, int *from_child) {
  int a[2], b[2];
  ck_assert_int_eq(pipe(a), 0);
  ck_assert_int_eq(pipe(b), 0);
  fflush(NULL);
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    close(a[1]);
    close(b[0]);
    _exit(fn(a[0], b[1]));
  }
  close(a[0]);
  close(b[1]);
  *to_child = a[1];
  *from_child = b[0];
  return pid;
}

/* ---------------------------------------------------------------- contexts */

typedef struct {
  void *p;
  devmm_resource *r;
  int before, after_get_device, after_set_device, after_copy, get_before, devmm_get;
  size_t size;
  void *base;
} thread_probe;

static void *fresh_thread_probe(void *arg) {
  thread_probe *t = arg;
  void *base;
  size_t size;
  unsigned char h[64];
  t->before = raw.range(t->p, &base, &size);
  t->get_before = raw.get(t->p, h);
  int d;
  raw.get_device(&d); /* GetDevice binds nothing */
  t->after_get_device = raw.range(t->p, &base, &size);
  sim.set_device(0);
  t->after_set_device = raw.range(t->p, &t->base, &t->size);
  return NULL;
}

static void *copy_thread_probe(void *arg) {
  thread_probe *t = arg;
  unsigned char host[16];
  void *base;
  size_t size;
  t->before = raw.range(t->p, &base, &size);
  ck_assert_int_eq(devmm_copy(t->r, host, t->p, sizeof host, NULL), DEVMM_OK); /* a copy binds */
  devmm_synchronize(t->r, NULL);
  t->after_copy = raw.range(t->p, &base, &size);
  return NULL;
}

static void *devmm_export_probe(void *arg) {
  thread_probe *t = arg;
  devmm_ipc_handle h;
  t->devmm_get = devmm_ipc_get_handle(t->r, (char *)t->p + 100, 1000, &h);
  if (t->devmm_get)
    fprintf(stderr, "devmm_ipc_get_handle on a fresh thread: %s\n", devmm_last_error());
  return NULL;
}

START_TEST(driver_calls_need_a_bound_context) {
  start();
  devmm_resource *r = kind("sim.device", 0);
  void *p = device_bytes(r, 3000, 1);
  thread_probe t = {.p = (char *)p + 100, .r = r};
  pthread_t th;
  ck_assert_int_eq(pthread_create(&th, NULL, fresh_thread_probe, &t), 0);
  pthread_join(th, NULL);
  ck_assert_int_eq(t.before, CTX);
  ck_assert_int_eq(t.get_before, CTX);
  ck_assert_int_eq(t.after_get_device, CTX);
  ck_assert_int_eq(t.after_set_device, 0);
  ck_assert_ptr_eq(t.base, p);      /* the allocation's base and size, from an interior pointer */
  ck_assert_uint_eq(t.size, CHUNK); /* sim.device's allocations are chunks of their own */
  ck_assert_int_eq(pthread_create(&th, NULL, copy_thread_probe, &t), 0);
  pthread_join(th, NULL);
  ck_assert_int_eq(t.before, CTX);
  ck_assert_int_eq(t.after_copy, 0);
  /* devmm binds the device's context itself before its driver-level calls */
  ck_assert_int_eq(pthread_create(&th, NULL, devmm_export_probe, &t), 0);
  pthread_join(th, NULL);
  ck_assert_int_eq(t.devmm_get, DEVMM_OK);
  devmm_deallocate(r, p, 3000, 0, NULL);
  devmm_resource_release(r);
}
END_TEST

/* ---------------------------------------------------------------- the simulator's IPC */

START_TEST(a_handle_opens_only_in_another_process) {
  start();
  devmm_resource *r = kind("sim.device", 0);
  void *p = device_bytes(r, 4096, 2), *q = NULL;
  unsigned char h[64];
  ck_assert_int_eq(raw.get(p, h), 0);
  ck_assert_int_eq(raw.open(h, &q), CTX);
  ck_assert_ptr_null(q);
  ck_assert_msg(strstr(raw.reason(), "exported by this process"), "%s", raw.reason());
  devmm_deallocate(r, p, 4096, 0, NULL);
  devmm_resource_release(r);
}
END_TEST

/* The importer of the raw tests: reads a command byte and a handle, answers with bytes. */
static int raw_importer(int from, int to) {
  unsigned char h[64], h2[64];
  char cmd;
  if (!get(from, &cmd, 1) || !get(from, h, 64))
    return 10;
  start();
  sim.set_device(0);
  void *a = NULL, *b = NULL;
  int e = raw.open(h, &a);
  if (cmd == 'r') { /* repeated opens: one pointer, counted */
    if (e || raw.open(h, &b) || a != b)
      return 11;
    void *base;
    size_t size;
    if (raw.range(a, &base, &size) || base != a || size != CHUNK)
      return 12; /* the exported allocation's range, in an import too */
    if (raw.close(a) || raw.range(a, &base, &size) || raw.close(b))
      return 13; /* still mapped after the first close, unmapped after the second */
    if (raw.close(a) == 0 || sim.view(a, 1))
      return 14;
    return 0;
  }
  if (cmd == 'c') { /* a small allocation's import maps its whole chunk */
    long long delta;
    if (e || !get(from, &delta, sizeof delta))
      return 20;
    const unsigned char *v = sim.view((char *)a + delta, 1000);
    if (!v)
      return 21;
    for (int i = 0; i < 1000; i++)
      if (v[i] != 0x5A)
        return 22;
    /* an isolated allocation is a chunk of its own: nothing before or after it is mapped */
    if (!get(from, h2, 64) || raw.open(h2, &b))
      return 23;
    if (sim.view((char *)b - 256, 256) || sim.view((char *)b + CHUNK, 1) || !sim.view(b, CHUNK))
      return 24;
    raw.close(b);
    raw.close(a);
    return 0;
  }
  if (cmd == 'f') { /* the exporter frees while this process maps: a fault */
    char ok = e == 0, go;
    put(to, &ok, 1);
    if (!ok || !get(from, &go, 1))
      return 30;
    devmm_resource *r = kind("sim.device", 0);
    unsigned char host[64];
    int rc = devmm_copy(r, host, a, sizeof host, NULL);
    if (rc == DEVMM_OK || !strstr(devmm_last_error(), "illegal memory access"))
      return 31;
    if (sim.view(a, 1))
      return 32;
    if (raw.close(a) != ILLEGAL)
      return 33;
    devmm_resource_release(r);
    return 0;
  }
  if (cmd == 's') { /* the exporter freed it before the open */
    int ok = e == MAPFAIL && strstr(raw.reason(), "freed");
    if (!ok)
      fprintf(stderr, "child: open of a freed allocation: %d (%s)\n", e, raw.reason());
    return ok ? 0 : 40;
  }
  return 99;
}

static void send_handle(int to, char cmd, const unsigned char h[64]) {
  put(to, &cmd, 1);
  put(to, h, 64);
}

START_TEST(repeated_opens_return_one_counted_pointer) {
  int to, from;
  pid_t pid = child(raw_importer, &to, &from);
  start();
  devmm_resource *r = kind("sim.device", 0);
  void *p = device_bytes(r, 1000, 3);
  unsigned char h[64];
  ck_assert_int_eq(raw.get(p, h), 0);
  send_handle(to, 'r', h);
  ck_assert_int_eq(wait_child(pid), 0);
  devmm_deallocate(r, p, 1000, 0, NULL);
  devmm_resource_release(r);
}
END_TEST

/* The runtime packs small allocations into shared chunks and an import maps the whole chunk (a
 * resource made with ipc_isolate = false does as the runtime does); sim.device's default gives each
 * allocation a 2 MiB chunk of its own, so an export shows nothing else (ADR 38 §IPC opens). */
START_TEST(an_import_maps_the_whole_chunk) {
  int to, from;
  pid_t pid = child(raw_importer, &to, &from);
  start();
  devmm_option packed_opt[] = {{"ipc_isolate", "false", 1}};
  devmm_resource *packed = NULL, *r = kind("sim.device", 0);
  ck_assert_int_eq(devmm_resource_create_kind("sim.device", 0, packed_opt, 1, &packed), DEVMM_OK);
  void *a = device_bytes(packed, 1000, 4), *b = device_bytes(packed, 1000, 0x5A);
  void *own = device_bytes(r, 1000, 6), *base;
  size_t size;
  ck_assert_int_eq(raw.range(own, &base, &size), 0);
  ck_assert_uint_eq(size, CHUNK); /* isolated: rounded up to a chunk, which it starts */
  ck_assert_uint_eq((size_t)((char *)own - (char *)a) % CHUNK, 0);
  ck_assert_int_eq(raw.range(a, &base, &size), 0);
  ck_assert_uint_eq(size, 1024); /* packed: as asked, rounded to 256 */
  long long delta = (char *)b - (char *)a;
  ck_assert_int_lt(delta < 0 ? -delta : delta, (long long)CHUNK);
  unsigned char h[64], h2[64];
  ck_assert_int_eq(raw.get(a, h), 0);
  ck_assert_int_eq(raw.get(own, h2), 0);
  send_handle(to, 'c', h);
  put(to, &delta, sizeof delta);
  put(to, h2, 64);
  ck_assert_int_eq(wait_child(pid), 0);
  devmm_deallocate(packed, a, 1000, 0, NULL);
  devmm_deallocate(packed, b, 1000, 0, NULL);
  devmm_deallocate(r, own, 1000, 0, NULL);
  devmm_resource_release(r);
  devmm_resource_release(packed);
}
END_TEST

START_TEST(an_exporters_free_under_an_importer_is_a_fault) {
  int to, from;
  pid_t pid = child(raw_importer, &to, &from);
  start();
  devmm_resource *r = kind("sim.device", 0);
  void *p = device_bytes(r, 1000, 7);
  unsigned char h[64];
  ck_assert_int_eq(raw.get(p, h), 0);
  send_handle(to, 'f', h);
  char ok = 0;
  ck_assert(get(from, &ok, 1));
  ck_assert_int_eq(ok, 1);
  ck_assert_int_eq(devmm_deallocate(r, p, 1000, 0, NULL), DEVMM_OK);
  char go = 1;
  put(to, &go, 1);
  ck_assert_int_eq(wait_child(pid), 0);
  devmm_resource_release(r);
}
END_TEST

START_TEST(a_freed_allocations_handle_gives_the_generic_error) {
  int to, from;
  pid_t pid = child(raw_importer, &to, &from);
  start();
  devmm_resource *r = kind("sim.device", 0);
  void *p = device_bytes(r, 1000, 8);
  unsigned char h[64];
  ck_assert_int_eq(raw.get(p, h), 0);
  ck_assert_int_eq(devmm_deallocate(r, p, 1000, 0, NULL), DEVMM_OK);
  void *again = device_bytes(r, 1000, 9); /* the same bytes, handed out again */
  ck_assert_ptr_eq(again, p);
  send_handle(to, 's', h);
  ck_assert_int_eq(wait_child(pid), 0);
  devmm_deallocate(r, again, 1000, 0, NULL);
  devmm_resource_release(r);
}
END_TEST

/* An exporter that sends a handle and exits. */
static int exiting_exporter(int from, int to) {
  (void)from;
  start();
  devmm_resource *r = kind("sim.device", 0);
  void *p = device_bytes(r, 1000, 10);
  unsigned char h[64];
  if (raw.get(p, h))
    return 10;
  devmm_ipc_handle dh;
  if (devmm_ipc_get_handle(r, p, 1000, &dh))
    return 11;
  put(to, h, 64);
  put(to, dh.bytes, sizeof dh.bytes);
  return 0;
}

START_TEST(a_gone_exporter_gives_the_generic_error) {
  int to, from;
  pid_t pid = child(exiting_exporter, &to, &from);
  unsigned char h[64];
  devmm_ipc_handle dh;
  ck_assert(get(from, h, 64));
  ck_assert(get(from, dh.bytes, sizeof dh.bytes));
  ck_assert_int_eq(wait_child(pid), 0);
  start();
  sim.set_device(0);
  void *q = NULL;
  ck_assert_int_eq(raw.open(h, &q), MAPFAIL);
  ck_assert_msg(strstr(raw.reason(), "exited"), "%s", raw.reason());
  devmm_buffer *b = NULL; /* devmm: a stale handle, as on CUDA */
  ck_assert_int_eq(devmm_ipc_open(NULL, &dh, &b), DEVMM_ENOENT);
  ck_assert_error_contains("mapping of buffer object failed");
  (void)to;
}
END_TEST

/* ---------------------------------------------------------------- devmm's side */

START_TEST(devmm_opens_its_own_handle_as_its_own_memory) {
  start();
  devmm_resource *r = kind("sim.device", 0);
  void *p = device_bytes(r, 8192, 11);
  devmm_ipc_handle h;
  ck_assert_int_eq(devmm_ipc_get_handle(r, (char *)p + 4096, 100, &h), DEVMM_OK);
  devmm_buffer *b = NULL;
  ck_assert_msg(devmm_ipc_open(NULL, &h, &b) == DEVMM_OK, "%s", devmm_last_error());
  ck_assert_ptr_eq(devmm_buffer_ptr(b), (char *)p + 4096); /* the exporter's own bytes */
  devmm_ipc_close(b);                                      /* frees nothing */
  unsigned char back[16];
  ck_assert_int_eq(devmm_copy(r, back, p, sizeof back, NULL), DEVMM_OK);
  ck_assert_int_eq(devmm_synchronize(r, NULL), DEVMM_OK);
  ck_assert_int_eq(back[0], 11);
  ck_assert_int_eq(devmm_deallocate(r, p, 8192, 0, NULL), DEVMM_OK);
  /* freed: its own handle names nothing live now */
  ck_assert_int_eq(devmm_ipc_open(NULL, &h, &b), DEVMM_ENOENT);
  ck_assert_error_contains("names none of its live allocations");
  devmm_resource_release(r);
}
END_TEST

/* The importer of the deferred free: opens, says so, waits, reads and checks, closes, says so. */
static int deferred_importer(int from, int to) {
  devmm_ipc_handle h;
  if (!get(from, h.bytes, sizeof h.bytes))
    return 10;
  start();
  devmm_buffer *b = NULL;
  if (devmm_ipc_open(NULL, &h, &b)) {
    fprintf(stderr, "child: %s\n", devmm_last_error());
    return 11;
  }
  char c = 1;
  put(to, &c, 1);
  if (!get(from, &c, 1)) /* the exporter has freed its tensor */
    return 12;
  unsigned char host[4096];
  devmm_resource *r = devmm_buffer_resource(b);
  if (devmm_copy(r, host, devmm_buffer_ptr(b), sizeof host, NULL) || devmm_synchronize(r, NULL)) {
    fprintf(stderr, "child: %s\n", devmm_last_error());
    return 13; /* before: the simulator's fault, the exporter's free had run */
  }
  for (size_t i = 0; i < sizeof host; i++)
    if (host[i] != 14)
      return 14;
  devmm_ipc_close(b);
  put(to, &c, 1);
  return 0;
}

/* CUDA: an exporter's free of memory an importer still maps is undefined. devmm's plugin defers
 * the runtime's free until the importer's last close (the ledger, ADR 38). */
START_TEST(devmm_defers_an_exporters_free_until_the_importer_closes) {
  int to, from;
  pid_t pid = child(deferred_importer, &to, &from);
  start();
  devmm_resource *r = kind("sim.device", 0);
  void *p = device_bytes(r, 4096, 14);
  devmm_ipc_handle h;
  ck_assert_int_eq(devmm_ipc_get_handle(r, p, 4096, &h), DEVMM_OK);
  put(to, h.bytes, sizeof h.bytes);
  char c;
  ck_assert(get(from, &c, 1));
  uint64_t live = stats().allocations_live;
  ck_assert_int_eq(devmm_deallocate(r, p, 4096, 0, NULL), DEVMM_OK);
  ck_assert_uint_eq(stats().allocations_live, live); /* deferred: the importer maps it */
  devmm_buffer *own = NULL; /* but freed for this process: its own open names nothing */
  ck_assert_int_eq(devmm_ipc_open(NULL, &h, &own), DEVMM_ENOENT);
  put(to, &c, 1);
  ck_assert(get(from, &c, 1));        /* closed */
  void *q = device_bytes(r, 4096, 1); /* the next free does the deferred one */
  ck_assert_int_eq(devmm_deallocate(r, q, 4096, 0, NULL), DEVMM_OK);
  ck_assert_uint_eq(stats().allocations_live, live - 1);
  ck_assert_int_eq(wait_child(pid), 0);
  devmm_resource_release(r);
}
END_TEST

/* A handle's checksum recomputed after a forgery (FNV-1a, the checksum field read as 0). */
static void reseal(devmm_ipc_handle *h) {
  uint32_t x = 2166136261u;
  for (size_t i = 0; i < sizeof h->bytes; i++)
    x = (x ^ (i >= 8 && i < 12 ? 0 : h->bytes[i])) * 16777619u;
  memcpy(h->bytes + 8, &x, 4);
}

/* The GPU plugin's payload after the 96-byte header: tag, device (int32), offset (uint64) at 8,
 * the pool's reference (32 bytes), the runtime's handle (64), then base and size (uint64) at
 * 112 and 120. */
#define PL 96
static void forge(devmm_ipc_handle *h, uint64_t offset, uint64_t size) {
  memcpy(h->bytes + PL + 8, &offset, 8);
  if (size)
    memcpy(h->bytes + PL + 120, &size, 8);
  reseal(h);
}

/* The devmm importer: opens what the parent sends, as the parent asks. */
static int devmm_importer(int from, int to) {
  (void)to;
  char cmd;
  devmm_ipc_handle h;
  if (!get(from, &cmd, 1) || !get(from, h.bytes, sizeof h.bytes))
    return 10;
  start();
  devmm_buffer *a = NULL, *b = NULL;
  if (cmd == 'r') { /* two opens, one runtime mapping: a second runtime open would fail here */
    sim.inject("IpcOpenMemHandle", 1, 3);
    if (devmm_ipc_open(NULL, &h, &a) || devmm_ipc_open(NULL, &h, &b)) {
      fprintf(stderr, "child: %s\n", devmm_last_error());
      return 11;
    }
    sim.inject(NULL, 0, 0);
    if (devmm_buffer_ptr(a) != devmm_buffer_ptr(b))
      return 12;
    void *p = devmm_buffer_ptr(a);
    devmm_ipc_close(a);
    unsigned char host[8];
    devmm_resource *r = devmm_buffer_resource(b);
    if (devmm_copy(r, host, p, sizeof host, NULL) || devmm_synchronize(r, NULL) || host[0] != 12)
      return 13; /* still mapped for the other */
    devmm_ipc_close(b);
    return sim.view(p, 1) ? 14 : 0; /* the last close unmapped it */
  }
  /* forged offsets and sizes: refused, saying so */
  int rc = devmm_ipc_open(NULL, &h, &a);
  if (rc != DEVMM_EINVAL || !strstr(devmm_last_error(), "runs past it")) {
    fprintf(stderr, "child: forged handle %c: %d %s\n", cmd, rc, devmm_last_error());
    return 20;
  }
  return 0;
}

START_TEST(devmm_shares_one_mapping_between_repeated_opens) {
  int to, from;
  pid_t pid = child(devmm_importer, &to, &from);
  start();
  devmm_resource *r = kind("sim.device", 0);
  void *p = device_bytes(r, 4096, 12);
  devmm_ipc_handle h;
  ck_assert_int_eq(devmm_ipc_get_handle(r, p, 4096, &h), DEVMM_OK);
  send_handle(to, 'r', h.bytes);
  put(to, h.bytes + 64, sizeof h.bytes - 64);
  ck_assert_int_eq(wait_child(pid), 0);
  devmm_deallocate(r, p, 4096, 0, NULL);
  devmm_resource_release(r);
}
END_TEST

/* ADR 40: a forged sim.device handle whose offset (or offset and size) runs past its allocation
 * is refused at open, in another process and in the exporter's own. */
static void forged_open(char cmd, uint64_t offset, uint64_t size) {
  int to, from;
  pid_t pid = child(devmm_importer, &to, &from);
  start();
  devmm_resource *r = kind("sim.device", 0);
  void *p = device_bytes(r, 4096, 13);
  devmm_ipc_handle h;
  ck_assert_int_eq(devmm_ipc_get_handle(r, p, 4096, &h), DEVMM_OK);
  forge(&h, offset, size);
  send_handle(to, cmd, h.bytes);
  put(to, h.bytes + 64, sizeof h.bytes - 64);
  ck_assert_int_eq(wait_child(pid), 0);
  devmm_buffer *b = NULL; /* the exporter's own open checks its allocation */
  ck_assert_int_eq(devmm_ipc_open(NULL, &h, &b), DEVMM_EINVAL);
  ck_assert_error_contains("runs past it");
  devmm_deallocate(r, p, 4096, 0, NULL);
  devmm_resource_release(r);
}

/* one per test: a process whose runtime started cannot fork an importer (ADR 37 §fork) */
START_TEST(a_forged_offset_past_the_allocation_is_refused) { forged_open('o', CHUNK + 4096, 0); }
END_TEST

START_TEST(a_forged_large_offset_is_refused) { forged_open('l', (uint64_t)1 << 40, 0); }
END_TEST

START_TEST(a_forged_size_is_checked_against_the_mapping_opened) {
  forged_open('s', CHUNK + 8192, 4 * CHUNK);
}
END_TEST

START_TEST(a_forged_wrapping_offset_and_size_are_refused) {
  forged_open('w', UINT64_MAX - 100, UINT64_MAX);
}
END_TEST

/* ADR 40: what a raw handle says cannot widen or re-aim an import. The importer rewrites each
 * 8-byte word of a handle in turn to the rest of the device (as a sender widening the size word
 * would), or re-aims the offset at another exported allocation and guesses tags near the
 * handle's own: no open maps more than the exported allocation, none shows the never-exported
 * allocation (0x77) or the other export (0x66). */
static int forging_importer(int from, int to) {
  (void)to;
  unsigned char h[64], f[64];
  char cmd;
  long long delta;
  if (!get(from, &cmd, 1) || !get(from, h, 64) || !get(from, &delta, sizeof delta))
    return 10;
  start();
  sim.set_device(0);
  uint64_t off;
  memcpy(&off, h + 16, 8);
  if (cmd == 'w') {
    for (int w = 0; w < 8; w++)
      for (int k = 0; k < 2; k++) {
        uint64_t v = k ? ((uint64_t)64 << 20) - off : (uint64_t)64 << 20;
        memcpy(f, h, 64);
        memcpy(f + 8 * w, &v, 8);
        void *a = NULL, *base;
        size_t size = 0;
        if (raw.open(f, &a))
          continue;
        const unsigned char *v77 = sim.view((char *)a + delta, 1);
        int wide = raw.range(a, &base, &size) || size > CHUNK || (v77 && *v77 == 0x77);
        raw.close(a);
        if (wide) {
          fprintf(stderr, "child: word %d = %llu: an import of %zu bytes%s\n", w,
                  (unsigned long long)v, size, v77 ? ", the unexported allocation readable" : "");
          return 20 + w;
        }
      }
    return 0;
  }
  if (cmd == 'g') {
    uint32_t tag;
    memcpy(&tag, h + 48, 4);
    uint64_t other = off + (uint64_t)delta;
    for (uint32_t g = tag > 64 ? tag - 64 : 1; g < tag + 64; g++) {
      memcpy(f, h, 64);
      memcpy(f + 16, &other, 8);
      memcpy(f + 48, &g, 4);
      void *a = NULL;
      if (raw.open(f, &a))
        continue;
      const unsigned char *v = sim.view(a, 1);
      int hit = v && *v == 0x66;
      raw.close(a);
      if (hit) {
        fprintf(stderr, "child: tag %u opened the other exported allocation\n", g);
        return 40;
      }
    }
    return 0;
  }
  return 99;
}

static void forged_raw(char cmd) {
  int to, from;
  pid_t pid = child(forging_importer, &to, &from);
  start();
  devmm_resource *r = kind("sim.device", 0);
  void *a = device_bytes(r, 4096, 0x11), *never = device_bytes(r, 4096, 0x77);
  void *other = device_bytes(r, 4096, 0x66);
  unsigned char h[64], ho[64];
  ck_assert_int_eq(raw.get(a, h), 0);
  ck_assert_int_eq(raw.get(other, ho), 0);
  long long delta = (char *)(cmd == 'w' ? never : other) - (char *)a;
  send_handle(to, cmd, h);
  put(to, &delta, sizeof delta);
  ck_assert_int_eq(wait_child(pid), 0);
  devmm_deallocate(r, a, 4096, 0, NULL);
  devmm_deallocate(r, never, 4096, 0, NULL);
  devmm_deallocate(r, other, 4096, 0, NULL);
  devmm_resource_release(r);
}

START_TEST(a_raw_handle_cannot_widen_its_import) { forged_raw('w'); }
END_TEST

START_TEST(a_raw_handle_cannot_be_re_aimed_by_guessing_a_tag) { forged_raw('g'); }
END_TEST

/* ADR 40: the same through devmm: each word of the runtime's handle inside devmm's payload, and
 * devmm's own size and bytes words, widened to 64 MiB with the checksum fixed: no open gives a
 * buffer past the exported allocation's chunk. */
static int devmm_widening_importer(int from, int to) {
  (void)to;
  char cmd;
  devmm_ipc_handle h = {0}, f;
  if (!get(from, &cmd, 1) || !get(from, h.bytes, sizeof h.bytes))
    return 10;
  start();
  uint64_t wide = (uint64_t)64 << 20;
  for (int w = 0; w < 8; w++) {
    f = h;
    memcpy(f.bytes + PL + 48 + 8 * w, &wide, 8);
    memcpy(f.bytes + PL + 120, &wide, 8);
    memcpy(f.bytes + 24, &wide, 8);
    reseal(&f);
    devmm_buffer *b = NULL;
    if (devmm_ipc_open(NULL, &f, &b) != DEVMM_OK)
      continue;
    size_t n = devmm_buffer_nbytes(b);
    devmm_ipc_close(b);
    if (n > CHUNK) {
      fprintf(stderr, "child: word %d widened: a buffer of %zu bytes\n", w, n);
      return 20 + w;
    }
  }
  return 0;
}

START_TEST(a_devmm_handle_cannot_widen_its_import) {
  int to, from;
  pid_t pid = child(devmm_widening_importer, &to, &from);
  start();
  devmm_resource *r = kind("sim.device", 0);
  void *p = device_bytes(r, 4096, 0x11), *never = device_bytes(r, 4096, 0x77);
  devmm_ipc_handle h;
  ck_assert_int_eq(devmm_ipc_get_handle(r, p, 4096, &h), DEVMM_OK);
  send_handle(to, 'w', h.bytes);
  put(to, h.bytes + 64, sizeof h.bytes - 64);
  ck_assert_int_eq(wait_child(pid), 0);
  devmm_deallocate(r, p, 4096, 0, NULL);
  devmm_deallocate(r, never, 4096, 0, NULL);
  devmm_resource_release(r);
}
END_TEST

Suite *sim_ipc_suite(void) {
  const TTest *const tests[] = {driver_calls_need_a_bound_context,
                                a_handle_opens_only_in_another_process,
                                repeated_opens_return_one_counted_pointer,
                                an_import_maps_the_whole_chunk,
                                an_exporters_free_under_an_importer_is_a_fault,
                                a_freed_allocations_handle_gives_the_generic_error,
                                a_gone_exporter_gives_the_generic_error,
                                devmm_opens_its_own_handle_as_its_own_memory,
                                devmm_shares_one_mapping_between_repeated_opens,
                                devmm_defers_an_exporters_free_until_the_importer_closes,
                                a_forged_offset_past_the_allocation_is_refused,
                                a_forged_large_offset_is_refused,
                                a_forged_size_is_checked_against_the_mapping_opened,
                                a_forged_wrapping_offset_and_size_are_refused,
                                a_raw_handle_cannot_widen_its_import,
                                a_raw_handle_cannot_be_re_aimed_by_guessing_a_tag,
                                a_devmm_handle_cannot_widen_its_import,
                                NULL};
  return suite_of("sim_ipc", tests);
}
