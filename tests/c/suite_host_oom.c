/* Suite: host_oom. Host memory running out in the middle of each public call that allocates: the
 * call fails with a message, and leaves nothing behind (no leak, no half-built object, its
 * inputs as they were).
 *
 * This executable (test-host-oom, apart from test-core) has a malloc family that wraps glibc's own
 * (__libc_*): it counts live blocks and, when armed, fails the Nth allocation of the calling
 * thread. glibc lets a program replace malloc, and the allocations inside libc (strdup, fopen,
 * realpath...) go through the replacement too. Under a sanitizer, which owns malloc, the wrappers
 * are not built and the suite skips. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testres.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define OOM_INJECTION 0
#else
#define OOM_INJECTION 1

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
extern void __libc_free(void *);

static _Thread_local long countdown; /* > 0: the countdown-th allocation from now fails */
static _Thread_local int injected;   /* an allocation failed since arming */
static atomic_long live;             /* blocks allocated and not freed, all threads */

static int fail_now(void) {
  if (countdown > 0 && --countdown == 0) {
    injected = 1;
    errno = ENOMEM;
    return 1;
  }
  return 0;
}

static void *counted(void *p) {
  if (p)
    atomic_fetch_add(&live, 1);
  return p;
}

void *malloc(size_t n) { return fail_now() ? NULL : counted(__libc_malloc(n)); }
void *calloc(size_t n, size_t m) { return fail_now() ? NULL : counted(__libc_calloc(n, m)); }
void free(void *p) {
  if (p)
    atomic_fetch_sub(&live, 1);
  __libc_free(p);
}
void *realloc(void *p, size_t n) {
  if (!p)
    return malloc(n);
  if (fail_now())
    return NULL;
  void *q = __libc_realloc(p, n);
  if (!q && !n) /* realloc(p, 0) freed p */
    atomic_fetch_sub(&live, 1);
  return q;
}
void *aligned_alloc(size_t a, size_t n) {
  return fail_now() ? NULL : counted(__libc_memalign(a, n));
}
void *memalign(size_t a, size_t n) { return fail_now() ? NULL : counted(__libc_memalign(a, n)); }
int posix_memalign(void **out, size_t a, size_t n) {
  if (fail_now())
    return ENOMEM;
  void *p = counted(__libc_memalign(a, n));
  if (!p)
    return ENOMEM;
  *out = p;
  return 0;
}
#endif

#if OOM_INJECTION
/* The first backtrace() loads libgcc_s, whose blocks stay: not a leak of devmm's. Likewise the
 * configuration devmm reads on first use and the thread's out-of-memory report: all are made
 * before anything is counted. */
static void warm_up_backtraces(void) {
  setenv("DEVMM_LOG_LEVEL", "error", 1);
  ck_assert_int_eq(devmm_init(NULL), DEVMM_OK);
  /* an out-of-memory report is kept per thread, in a block made by the thread's first one */
  testres *ts;
  devmm_resource *failing = testres_create(&ts);
  void *none;
  ts->fail_from = 1;
  ck_assert_int_eq(devmm_allocate(failing, 8, 0, NULL, &none), DEVMM_ENOMEM);
  devmm_resource_release(failing);
  devmm_resource *up = testres_create(NULL), *tr;
  ck_assert_int_eq(devmm_tracking_adaptor_create(up, 1, &tr), DEVMM_OK);
  devmm_resource_release(tr);
  devmm_resource_release(up);
}

static void arm(long n) { injected = 0, countdown = n; }
static int disarm(void) { /* 1 if an allocation was made to fail */
  countdown = 0;
  return injected;
}
static long live_blocks(void) { return atomic_load(&live); }
#endif

/* Runs `call` with the 1st, 2nd, 3rd... allocation failing until it runs without an injected
 * failure. Each failed run must return an error with a message and leave as many live blocks
 * as before; `undo` releases what a successful run made. */
#define OOM_LOOP(what, call, on_failure, undo)                                                     \
  do {                                                                                             \
    int failures_ = 0;                                                                             \
    for (long n_ = 1;; n_++) {                                                                     \
      long before_ = live_blocks();                                                                \
      devmm_clear_error();                                                                         \
      arm(n_);                                                                                     \
      int rc_ = (call);                                                                            \
      int hit_ = disarm();                                                                         \
      if (rc_ == DEVMM_OK) {                                                                       \
        undo;                                                                                      \
        if (!hit_)                                                                                 \
          break;                                                                                   \
        continue; /* the failure was absorbed: fine too */                                         \
      }                                                                                            \
      ck_assert_msg(hit_, "%s failed without an injected failure: %s", what, devmm_last_error());  \
      ck_assert_msg(*devmm_last_error() != '\0', "%s: allocation %ld failed without a message",    \
                    what, n_);                                                                     \
      ck_assert_msg(devmm_last_status() == rc_, "%s: rc %d but status %d", what, rc_,              \
                    devmm_last_status());                                                          \
      on_failure;                                                                                  \
      ck_assert_msg(live_blocks() == before_, "%s: allocation %ld failed, %ld blocks leaked (%s)", \
                    what, n_, live_blocks() - before_, devmm_last_error());                        \
      failures_++;                                                                                 \
    }                                                                                              \
    ck_assert_msg(failures_ > 0, "%s allocated nothing: the loop tested nothing", what);           \
  } while (0)

#if OOM_INJECTION
static const devmm_device CPU = {DEVMM_DEVICE_CPU, 0};

/* An upstream that cannot align beyond 16 bytes (like cudaMalloc's fixed alignment). */
static int fixed_alloc(devmm_resource *self, size_t b, size_t a, devmm_stream s, void **o) {
  (void)self, (void)s;
  *o = NULL;
  if (a > 16)
    return devmm_set_error(DEVMM_ENOTSUP, "fixed: alignment %zu unsupported", a);
  *o = malloc(b);
  return *o ? DEVMM_OK : devmm_set_error(DEVMM_ENOMEM, "fixed: out of memory");
}
static int fixed_free(devmm_resource *self, void *p, size_t b, size_t a, devmm_stream s) {
  (void)self, (void)b, (void)a, (void)s;
  free(p);
  return DEVMM_OK;
}

static int refuse(size_t b, int a, void *u) {
  (void)b, (void)a, (void)u;
  return 0;
}

static int cb_alloc(void *user, size_t n, size_t a, devmm_stream s, void **out) {
  (void)user, (void)a, (void)s;
  *out = malloc(n);
  return *out ? DEVMM_OK : DEVMM_ENOMEM;
}
static int cb_free(void *user, void *p, size_t n, size_t a, devmm_stream s) {
  (void)user, (void)n, (void)a, (void)s;
  free(p);
  return DEVMM_OK;
}
#endif

/* Every adaptor's creation, and the resources' own. */
#if OOM_INJECTION
START_TEST(oom_creating_resources) {
  warm_up_backtraces();
  devmm_resource *up = testres_create(NULL), *r = (devmm_resource *)1;
  char log[TESTRES_PATH_MAX];
  close(testres_mkstemp(log, sizeof log, "oom-log"));
#define CREATE(what, call)                                                                         \
  do {                                                                                             \
    long start_ = live_blocks();                                                                   \
    OOM_LOOP(what, call, ck_assert_ptr_null(r);                                                    \
             ck_assert_int_eq(devmm_resource_refcount(up), 1), devmm_resource_release(r));         \
    ck_assert_msg(live_blocks() == start_, "%s: creating and releasing it leaked %ld blocks",      \
                  what, live_blocks() - start_);                                                   \
  } while (0)
  CREATE("statistics", devmm_statistics_adaptor_create(up, &r));
  CREATE("statistics sharded",
         devmm_statistics_adaptor_create_ex(up, DEVMM_STATISTICS_SHARDED, &r));
  CREATE("limiting", devmm_limiting_adaptor_create(up, 100, &r));
  CREATE("tracking", devmm_tracking_adaptor_create(up, 1, &r));
  CREATE("logging", devmm_logging_adaptor_create(up, log, 1, &r));
  CREATE("logging to stderr", devmm_logging_adaptor_create(up, NULL, 0, &r));
  ck_assert_int_ne(fcntl(2, F_GETFD), -1); /* a failed creation did not close stderr */
  CREATE("aligned", devmm_aligned_adaptor_create(up, 256, 0, &r));
  CREATE("failure_callback", devmm_failure_callback_adaptor_create(up, refuse, NULL, &r));
  CREATE("thread_safe", devmm_thread_safe_adaptor_create(up, &r));
  CREATE("callback",
         devmm_callback_resource_create(cb_alloc, cb_free, NULL, NULL, CPU, "cb", 0, &r));
  /* refused for want of somewhere to put the result: nothing allocated is kept */
  long before = live_blocks();
  ck_assert_int_lt(devmm_statistics_adaptor_create(up, NULL), 0);
  ck_assert_int_lt(devmm_limiting_adaptor_create(up, 1, NULL), 0);
  ck_assert_int_lt(devmm_tracking_adaptor_create(up, 0, NULL), 0);
  ck_assert_int_lt(devmm_aligned_adaptor_create(up, 64, 0, NULL), 0);
  ck_assert_int_lt(devmm_failure_callback_adaptor_create(up, refuse, NULL, NULL), 0);
  ck_assert_int_lt(devmm_thread_safe_adaptor_create(up, NULL), 0);
  ck_assert_int_lt(devmm_logging_adaptor_create(up, log, 0, NULL), 0);
  ck_assert_int_lt(
      devmm_callback_resource_create(cb_alloc, cb_free, NULL, NULL, CPU, "cb", 0, NULL), 0);
  ck_assert_msg(live_blocks() == before, "refused creations leaked %ld blocks",
                live_blocks() - before);
  /* and when their first allocation fails too: no crash on the missing out pointer */
#define FIRST_FAILS(call) (arm(1), rc = (call), disarm() ? rc : 0)
  int rc;
  ck_assert_int_lt(FIRST_FAILS(devmm_statistics_adaptor_create(up, NULL)), 0);
  ck_assert_int_lt(FIRST_FAILS(devmm_limiting_adaptor_create(up, 1, NULL)), 0);
  ck_assert_int_lt(FIRST_FAILS(devmm_tracking_adaptor_create(up, 0, NULL)), 0);
  ck_assert_int_lt(FIRST_FAILS(devmm_aligned_adaptor_create(up, 64, 0, NULL)), 0);
  ck_assert_int_lt(FIRST_FAILS(devmm_failure_callback_adaptor_create(up, refuse, NULL, NULL)), 0);
  ck_assert_int_lt(FIRST_FAILS(devmm_thread_safe_adaptor_create(up, NULL)), 0);
  ck_assert_int_eq(devmm_resource_refcount(up), 1);
  unlink(log);
  devmm_resource_release(up);
}
END_TEST

/* An adaptor that allocated bookkeeping (tracking's nodes and backtraces, aligned's table) gives
 * all of it back when it is released, also for allocations still live at that moment. */
START_TEST(adaptors_release_their_bookkeeping) {
  static const devmm_resource_ops fixed = {sizeof fixed, fixed_alloc, fixed_free};
  devmm_resource *up, *ad;
  warm_up_backtraces();
  ck_assert_int_eq(devmm_resource_create(&fixed, NULL, CPU, "fixed", 0, &up), DEVMM_OK);
  for (int kind = 0; kind < 3; kind++) {
    long before = live_blocks();
    if (kind == 2)
      ck_assert_int_eq(devmm_aligned_adaptor_create(up, 4096, 0, &ad), DEVMM_OK);
    else
      ck_assert_int_eq(devmm_tracking_adaptor_create(up, kind, &ad), DEVMM_OK);
    enum { N = 300, LIVE = 10 };
    void *p[N];
    for (int i = 0; i < N; i++)
      ck_assert_int_eq(devmm_allocate(ad, 32, 0, NULL, &p[i]), DEVMM_OK);
    for (int i = 0; i < N - LIVE; i++)
      ck_assert_int_eq(devmm_deallocate(ad, p[i], 32, 0, NULL), DEVMM_OK);
    devmm_resource_release(ad);
    /* what is left: the upstream's blocks of the allocations still live (the caller's) */
    ck_assert_msg(live_blocks() - before == LIVE, "adaptor %d: %ld blocks left after its release",
                  kind, live_blocks() - before);
    if (kind < 2)
      for (int i = N - LIVE; i < N; i++)
        free(p[i]); /* fixed_alloc's blocks: tracking hands them out as they are */
  }
  devmm_resource_release(up);
}
END_TEST

/* Allocating through the adaptors that allocate bookkeeping of their own. */
START_TEST(oom_allocating_through_adaptors) {
  warm_up_backtraces();
  testres *ts;
  devmm_resource *up = testres_create(&ts), *tr, *al;
  void *p = NULL;
  ck_assert_int_eq(devmm_tracking_adaptor_create(up, 0, &tr), DEVMM_OK);
  /* a full slab of nodes, so that the next allocation needs a new one */
  enum { N = 200 };
  void *keep[N];
  for (int i = 0; i < N; i++)
    ck_assert_int_eq(devmm_allocate(tr, 8, 0, NULL, &keep[i]), DEVMM_OK);
  OOM_LOOP("tracking allocate", devmm_allocate(tr, 64, 0, NULL, &p), ck_assert_ptr_null(p);
           ck_assert_int_eq(ts->live_bytes, 8 * N), /* the upstream's block went back */
           ck_assert_int_eq(devmm_deallocate(tr, p, 64, 0, NULL), DEVMM_OK));
  for (int i = 0; i < N; i++)
    ck_assert_int_eq(devmm_deallocate(tr, keep[i], 8, 0, NULL), DEVMM_OK);
  size_t n;
  ck_assert_int_eq(devmm_tracking_outstanding(tr, &n, NULL), DEVMM_OK);
  ck_assert_uint_eq(n, 0);
  devmm_resource_release(tr);
  /* a report with backtraces (open_memstream, backtrace_symbols) */
  ck_assert_int_eq(devmm_tracking_adaptor_create(up, 1, &tr), DEVMM_OK);
  ck_assert_int_eq(devmm_allocate(tr, 48, 0, NULL, &keep[0]), DEVMM_OK);
  ck_assert_int_eq(devmm_allocate(tr, 16, 0, NULL, &keep[1]), DEVMM_OK);
  char *report = NULL;
  OOM_LOOP("tracking report", devmm_tracking_report(tr, &report), ck_assert_ptr_null(report),
           devmm_string_free(report));
  devmm_deallocate(tr, keep[0], 48, 0, NULL);
  devmm_deallocate(tr, keep[1], 16, 0, NULL);
  devmm_resource_release(tr);
  /* aligned over an upstream that cannot align: it over-allocates and remembers the block */
  static const devmm_resource_ops fixed = {sizeof fixed, fixed_alloc, fixed_free};
  devmm_resource *fx;
  ck_assert_int_eq(devmm_resource_create(&fixed, NULL, CPU, "fixed", 0, &fx), DEVMM_OK);
  ck_assert_int_eq(devmm_aligned_adaptor_create(fx, 4096, 0, &al), DEVMM_OK);
  OOM_LOOP("aligned allocate", devmm_allocate(al, 100, 0, NULL, &p), ck_assert_ptr_null(p),
           ck_assert_int_eq(devmm_deallocate(al, p, 100, 0, NULL), DEVMM_OK));
  devmm_resource_release(al);
  devmm_resource_release(fx);
  ck_assert_int_eq(ts->live_bytes, 0);
  devmm_resource_release(up);
}
END_TEST

/* Buffers, tensors and their DLPack exports. */
START_TEST(oom_buffers_tensors_exports) {
  warm_up_backtraces();
  testres *ts;
  devmm_resource *up = testres_create(&ts);
  devmm_buffer *b = NULL;
  OOM_LOOP("buffer allocate", devmm_buffer_allocate(up, 64, 0, NULL, &b), ck_assert_ptr_null(b);
           ck_assert_int_eq(ts->live_bytes, 0), devmm_buffer_release(b));
  devmm_tensor *t = NULL;
  int64_t shape[2] = {4, 3};
  devmm_dtype f32 = {DEVMM_DTYPE_FLOAT, 32, 1};
  OOM_LOOP("tensor empty", devmm_tensor_empty(up, CPU, NULL, 2, shape, f32, NULL, &t),
           ck_assert_ptr_null(t);
           ck_assert_int_eq(ts->live_bytes, 0), devmm_tensor_destroy(t));
  ck_assert_int_eq(devmm_tensor_empty(up, CPU, NULL, 2, shape, f32, NULL, &t), DEVMM_OK);
  devmm_buffer *tb = devmm_tensor_buffer(t);
  devmm_tensor *v = NULL;
  int64_t vs[1] = {6}, vst[1] = {2};
  OOM_LOOP("tensor create", devmm_tensor_create(tb, f32, 1, vs, vst, 4, 1, &v),
           ck_assert_ptr_null(v), devmm_tensor_destroy(v));
  devmm_dlmanaged_versioned *mv = NULL;
  OOM_LOOP("export versioned", devmm_tensor_to_dlpack_versioned(t, 0, &mv), ck_assert_ptr_null(mv),
           mv->deleter(mv));
  devmm_dlmanaged *ml = NULL;
  OOM_LOOP("export legacy", devmm_tensor_to_dlpack(t, &ml), ck_assert_ptr_null(ml),
           ml->deleter(ml));
  /* no failed export kept a hold on the buffer: freeing it gives the memory back at once */
  devmm_buffer_free(tb);
  ck_assert_int_eq(devmm_buffer_is_live(tb), 0);
  ck_assert_int_eq(ts->live_bytes, 0);
  devmm_tensor_destroy(t);
  ck_assert_int_eq(ts->live_bytes, 0);
  devmm_resource_release(up);
}
END_TEST

/* Configuration: a failed devmm_init keeps the previous state, whatever allocation failed. */
START_TEST(oom_init) {
  setenv("DEVMM_LOG_LEVEL", "error", 1);
  unsetenv("DEVMM_CONFIG");
  char path[TESTRES_PATH_MAX];
  int fd = testres_mkstemp(path, sizeof path, "oom-ini");
  const char *ini = "[devmm]\nplugins = cpu\nlog_level = error\n"
                    "plugin_path = /nonexistent-devmm-a, relative-b:/nonexistent-devmm-c\n"
                    "[device cpu]\nresource = cpu.mmap\nhuge_pages = transparent\n"
                    "adaptors = statistics, limiting, tracking\nlimit = 1GiB\n";
  ck_assert_int_eq(write(fd, ini, strlen(ini)), (ssize_t)strlen(ini));
  close(fd);
  ck_assert_msg(devmm_init(path) == DEVMM_OK, "%s",
                devmm_last_error());            /* loads the plugin once (the loader caches) */
  ck_assert_int_eq(devmm_init(NULL), DEVMM_OK); /* the built-in default */
  devmm_resource *r;
  OOM_LOOP("init", devmm_init(path), ck_assert_str_eq(devmm_config_source(), "built-in default"),
           devmm_init(NULL));
  /* and a successful re-initialisation frees everything the previous state held */
  for (int round = 0; round < 3; round++) {
    long before = live_blocks();
    ck_assert_int_eq(devmm_init(path), DEVMM_OK);
    ck_assert_int_eq(devmm_init(NULL), DEVMM_OK);
    if (round > 0) /* the first round may still fill the loader's caches */
      ck_assert_msg(live_blocks() == before, "init and re-init leaked %ld blocks",
                    live_blocks() - before);
  }
  char *json = NULL;
  OOM_LOOP("info_json", devmm_info_json(&json), ck_assert_ptr_null(json), devmm_string_free(json));
  ck_assert_msg(devmm_get_current_resource(CPU, &r) == DEVMM_OK, "%s", devmm_last_error());
  ck_assert_str_eq(devmm_resource_name(r), "cpu.malloc");
  devmm_resource_release(r);
  devmm_shutdown();
  unlink(path);
}
END_TEST

#else
START_TEST(oom_needs_its_own_malloc) {
  testres_skip("host_oom: built with a sanitizer, which owns malloc: no fault injection");
}
END_TEST
#endif

Suite *host_oom_suite(void) {
  Suite *s = suite_create("host_oom");
  TCase *tc = tcase_create("core");
#if OOM_INJECTION
  tcase_add_test(tc, oom_creating_resources);
  tcase_add_test(tc, oom_allocating_through_adaptors);
  tcase_add_test(tc, adaptors_release_their_bookkeeping);
  tcase_add_test(tc, oom_buffers_tensors_exports);
  tcase_add_test(tc, oom_init);
#else
  tcase_add_test(tc, oom_needs_its_own_malloc);
#endif
  tcase_set_timeout(tc, 60);
  suite_add_tcase(s, tc);
  return s;
}
