#include "testres.h"

#include <check.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <grp.h>
#include <sys/wait.h>
#include <unistd.h>

static int t_allocate(devmm_resource *self, size_t bytes, size_t align, devmm_stream stream,
                      void **out) {
  (void)stream;
  testres *s = devmm_resource_context(self);
  long n = atomic_fetch_add(&s->allocs, 1) + 1;
  long fa = atomic_load(&s->fail_at), ff = atomic_load(&s->fail_from);
  if ((fa && n == fa) || (ff && n >= ff)) {
    atomic_fetch_sub(&s->allocs, 1);
    *out = NULL;
    return devmm_set_error(DEVMM_ENOMEM, "test.malloc: injected failure of allocation %ld", n);
  }
  void *p = NULL;
  if (bytes > ((size_t)1 << 46)) { /* more than any machine has: fail as malloc would, without
                                      handing malloc a value valgrind calls fishy */
    atomic_fetch_sub(&s->allocs, 1);
    *out = NULL;
    return devmm_set_error(DEVMM_ENOMEM, "test.malloc: %zu bytes is more than any machine has",
                           bytes);
  }
  if (align > 16) {
    if (posix_memalign(&p, align, bytes))
      p = NULL;
  } else {
    p = malloc(bytes);
  }
  if (!p) {
    atomic_fetch_sub(&s->allocs, 1);
    *out = NULL;
    return devmm_set_error(DEVMM_ENOMEM, "test.malloc: malloc(%zu) failed", bytes);
  }
  atomic_fetch_add(&s->live_bytes, (long)bytes);
  *out = p;
  return DEVMM_OK;
}

static int t_deallocate(devmm_resource *self, void *ptr, size_t bytes, size_t align,
                        devmm_stream stream) {
  (void)align;
  (void)stream;
  testres *s = devmm_resource_context(self);
  atomic_fetch_add(&s->frees, 1);
  atomic_fetch_sub(&s->live_bytes, (long)bytes);
  free(ptr);
  return DEVMM_OK;
}

static int t_memset(devmm_resource *self, void *dst, int v, size_t n, devmm_stream s) {
  (void)self;
  (void)s;
  memset(dst, v, n);
  return DEVMM_OK;
}

static int t_copy(devmm_resource *self, void *d, const void *src, size_t n, devmm_stream s) {
  (void)self;
  (void)s;
  memcpy(d, src, n);
  return DEVMM_OK;
}

static void t_destroy(devmm_resource *self) {
  testres *s = devmm_resource_context(self);
  if (s->destroyed)
    *s->destroyed = 1;
  free(s);
}

static const devmm_resource_ops ops = {
    .struct_size = sizeof(devmm_resource_ops),
    .allocate = t_allocate,
    .deallocate = t_deallocate,
    .copy = t_copy,
    .memset = t_memset,
    .destroy = t_destroy,
};

devmm_resource *testres_create(testres **state) {
  testres *s = calloc(1, sizeof *s);
  devmm_resource *r = NULL;
  devmm_device cpu = {DEVMM_DEVICE_CPU, 0};
  if (devmm_resource_create(&ops, s, cpu, "test.malloc",
                            DEVMM_RESOURCE_THREAD_SAFE | DEVMM_RESOURCE_HOST_ACCESSIBLE,
                            &r) != DEVMM_OK) {
    free(s);
    return NULL;
  }
  if (state)
    *state = s;
  return r;
}

const char *testres_tmpdir(void) {
  const char *t = getenv("TMPDIR");
  return t && *t ? t : "/tmp";
}

static void temp_name(char *path, size_t n, const char *stem) {
  int len = snprintf(path, n, "%s/devmm-%s-XXXXXX", testres_tmpdir(), stem);
  ck_assert_msg(len > 0 && (size_t)len < n, "TMPDIR '%s' is too long for a %zu-byte path",
                testres_tmpdir(), n);
}

int testres_mkstemp(char *path, size_t n, const char *stem) {
  temp_name(path, n, stem);
  int fd = mkstemp(path);
  ck_assert_msg(fd >= 0, "mkstemp %s failed", path);
  return fd;
}

char *testres_mkdtemp(char *path, size_t n, const char *stem) {
  temp_name(path, n, stem);
  ck_assert_msg(mkdtemp(path) != NULL, "mkdtemp %s failed", path);
  return path;
}

void testres_copy_file(const char *from, const char *to, unsigned mode) {
  FILE *a = fopen(from, "rb"), *b = fopen(to, "wb");
  ck_assert_msg(a && b, "cannot copy %s to %s", from, to);
  char buf[65536];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, a)) > 0)
    ck_assert_uint_eq(fwrite(buf, 1, n, b), n);
  fclose(a);
  ck_assert_int_eq(fclose(b), 0);
  ck_assert_int_eq(chmod(to, (mode_t)mode), 0);
}

void testres_skip(const char *fmt, ...) {
  char reason[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(reason, sizeof reason, fmt, ap);
  va_end(ap);
  printf("SKIP: %s\n", reason);
  fflush(stdout);
  const char *file = getenv("DEVMM_TEST_SKIPS");
  FILE *f = file ? fopen(file, "a") : NULL;
  if (!f) {
    ck_abort_msg("cannot record the skip (%s): run through test-core", reason);
    return;
  }
  fprintf(f, "%s\n", reason);
  fclose(f);
}

int testres_writable_as(const char *path, unsigned uid, unsigned gid) {
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    if (setgroups(0, NULL) != 0 || setgid((gid_t)gid) != 0 || setuid((uid_t)uid) != 0)
      _exit(2);
    int fd = open(path, O_WRONLY | O_APPEND);
    _exit(fd >= 0 ? 0 : 1);
  }
  int st;
  ck_assert_int_eq(waitpid(pid, &st, 0), pid);
  ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) != 2, "the child could not become %u:%u", uid,
                gid);
  return WEXITSTATUS(st) == 0;
}

char *testres_read_text(const char *path) {
  FILE *f = fopen(path, "r");
  ck_assert_msg(f != NULL, "cannot open %s", path);
  char *text = NULL;
  size_t n = 0;
  if (getdelim(&text, &n, '\0', f) < 0) {
    free(text);
    text = calloc(1, 1);
  }
  fclose(f);
  return text;
}

void testres_write_text(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  ck_assert_msg(f != NULL, "cannot write %s", path);
  fputs(text, f);
  fclose(f);
}

static int stub_alloc(devmm_resource *s, size_t n, size_t a, devmm_stream st, void **out) {
  (void)s, (void)a, (void)st;
  *out = malloc(n);
  return DEVMM_OK;
}
static int stub_free(devmm_resource *s, void *p, size_t n, size_t a, devmm_stream st) {
  (void)s, (void)n, (void)a, (void)st;
  free(p);
  return DEVMM_OK;
}
static int stub_get(devmm_resource *s, void *p, size_t n, unsigned char *pl) {
  (void)s, (void)p, (void)n, (void)pl;
  return DEVMM_OK;
}
static int stub_open(devmm_resource *s, const unsigned char *pl, size_t n, int32_t pid, void **out,
                     void **token) {
  (void)s, (void)pl, (void)n, (void)pid, (void)out, (void)token;
  return DEVMM_OK;
}
static int stub_close(devmm_resource *s, void *p, size_t n, void *token) {
  (void)s, (void)p, (void)n, (void)token;
  return DEVMM_OK;
}

void testres_ipc_stub(devmm_resource_ops *ops, devmm_resource_ipc_ops *group, const char *kind) {
  *group = (devmm_resource_ipc_ops){sizeof *group, kind, stub_get, stub_open, stub_close};
  *ops = (devmm_resource_ops){
      .struct_size = sizeof *ops, .allocate = stub_alloc, .deallocate = stub_free, .ipc = group};
}
