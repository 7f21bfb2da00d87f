/* Suite ipc_tensor: the tensor handle (include/devmm/ipc.h, ADR 35) over cpu.shm: round trips
 * of every kind of layout, the bytes of version 2 as ipc.h's table writes them, a Python process
 * writing the same bytes with struct and zlib alone (and devmm's Python package handing C a
 * tensor), and each refusal with its message, leaving nothing mapped.
 * Environment (set by Meson): DEVMM_PLUGIN_PATH (the plugins' build directory), DEVMM_TEST_PYTHON
 * (an interpreter), DEVMM_TEST_PYTHONPATH (the source tree's python/), DEVMM_TEST_LIBRARY. */
#include <dlfcn.h>
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <devmm/devmm.h>

#include "testres.h"

static const devmm_dtype I32 = {DEVMM_DTYPE_INT, 32, 1};
static const devmm_dtype U8 = {DEVMM_DTYPE_UINT, 8, 1};

/* Offsets of ipc.h's table, written out again: the test must fail if the library's move. */
enum { VERSION = 6, BUFFER = 8, DTYPE = 264, NDIM = 280, FLAGS = 284, OFFSET = 288, CRC = 296 };
#define DIMS 300

static void init(void) {
  unsetenv("DEVMM_CONFIG");
  char path[TESTRES_PATH_MAX];
  int fd = testres_mkstemp(path, sizeof path, "ipc-tensor-ini");
  const char *text = "[devmm]\nplugins = cpu\n";
  ck_assert_int_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
  close(fd);
  int rc = devmm_init(path);
  unlink(path);
  ck_assert_msg(rc == DEVMM_OK, "devmm_init: %s", devmm_last_error());
}

static devmm_resource *shm(void) {
  devmm_resource *r = NULL;
  int rc = devmm_resource_create_kind("cpu.shm", 0, NULL, 0, &r);
  ck_assert_msg(rc == DEVMM_OK, "cpu.shm: %s", devmm_last_error());
  return r;
}

/* A cpu.shm buffer of n bytes, byte i holding i * 7 + 1. */
static devmm_buffer *shared_buffer(devmm_resource *r, size_t n) {
  devmm_buffer *b = NULL;
  ck_assert_msg(devmm_buffer_allocate(r, n, 0, NULL, &b) == DEVMM_OK, "%s", devmm_last_error());
  unsigned char *p = devmm_buffer_ptr(b);
  for (size_t i = 0; i < n; i++)
    p[i] = (unsigned char)(i * 7 + 1);
  return b;
}

static devmm_tensor *view(devmm_buffer *b, devmm_dtype dt, int ndim, const int64_t *shape,
                          const int64_t *strides, size_t offset, int readonly) {
  devmm_tensor *t = NULL;
  int rc = devmm_tensor_create(b, dt, ndim, shape, strides, offset, readonly, &t);
  ck_assert_msg(rc == DEVMM_OK, "devmm_tensor_create: %s", devmm_last_error());
  return t;
}

static size_t export_tensor(const devmm_tensor *t, unsigned char *h) {
  size_t n = 0;
  int rc = devmm_ipc_get_tensor_handle(t, h, DEVMM_IPC_TENSOR_HANDLE_MAX, &n);
  ck_assert_msg(rc == DEVMM_OK, "devmm_ipc_get_tensor_handle: %s", devmm_last_error());
  return n;
}

static devmm_tensor *open_tensor(const unsigned char *h, size_t n) {
  devmm_tensor *u = NULL;
  int rc = devmm_ipc_open_tensor(NULL, h, n, &u);
  ck_assert_msg(rc == DEVMM_OK, "devmm_ipc_open_tensor: %s", devmm_last_error());
  return u;
}

/* u has t's layout, views other addresses of the same memory (a second mapping). */
static void same_view(const devmm_tensor *t, const devmm_tensor *u) {
  int n = devmm_tensor_ndim(t);
  ck_assert_int_eq(devmm_tensor_ndim(u), n);
  ck_assert_mem_eq(devmm_tensor_shape(u), devmm_tensor_shape(t), (size_t)n * sizeof(int64_t));
  ck_assert_mem_eq(devmm_tensor_strides(u), devmm_tensor_strides(t), (size_t)n * sizeof(int64_t));
  devmm_dtype a = devmm_tensor_dtype(t), b = devmm_tensor_dtype(u);
  ck_assert(a.code == b.code && a.bits == b.bits && a.lanes == b.lanes);
  ck_assert_uint_eq(devmm_tensor_byte_offset(u), devmm_tensor_byte_offset(t));
  ck_assert_int_eq(devmm_tensor_readonly(u), devmm_tensor_readonly(t));
  ck_assert_ptr_ne(devmm_tensor_data(u), devmm_tensor_data(t));
  ck_assert_uint_eq(devmm_buffer_nbytes(devmm_tensor_buffer(u)),
                    devmm_buffer_nbytes(devmm_tensor_buffer(t)));
  unsigned char *p = devmm_tensor_data(t), *q = devmm_tensor_data(u);
  ck_assert_int_eq(q[0], p[0]);
  p[0] ^= 0x5a; /* the same memory */
  ck_assert_int_eq(q[0], p[0]);
}

/* How many mappings of this process are cpu.shm memfds. */
static int shm_maps(void) {
  FILE *f = fopen("/proc/self/maps", "re");
  ck_assert_ptr_nonnull(f);
  char line[512];
  int n = 0;
  while (fgets(line, sizeof line, f))
    n += strstr(line, "devmm-cpu.shm") != NULL;
  fclose(f);
  return n;
}

static void put32(unsigned char *p, uint32_t v) {
  for (int i = 0; i < 4; i++)
    p[i] = (unsigned char)(v >> 8 * i);
}
static void put64(unsigned char *p, uint64_t v) {
  for (int i = 0; i < 8; i++)
    p[i] = (unsigned char)(v >> 8 * i);
}
static uint32_t get32(const unsigned char *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static int64_t get64(const unsigned char *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--)
    v = v << 8 | p[i];
  return (int64_t)v;
}

/* zlib's CRC-32, bit by bit (the library has its own, four bits at a time). */
static uint32_t crc32_bits(const unsigned char *p, size_t n) {
  uint32_t c = 0xffffffffu;
  for (size_t i = 0; i < n; i++) {
    c ^= p[i];
    for (int k = 0; k < 8; k++)
      c = c & 1 ? (c >> 1) ^ 0xedb88320u : c >> 1;
  }
  return ~c;
}

/* Recomputes a handle's CRC-32, as a forger would: the checks past it must hold on their own. */
static void reseal(unsigned char *h, size_t n) {
  put32(h + CRC, 0);
  put32(h + CRC, crc32_bits(h + DTYPE, n - DTYPE));
}

/* ---------------------------------------------------------------- round trips */

START_TEST(tensor_handles_round_trip_every_layout) {
  init();
  devmm_resource *r = shm();
  int maps = shm_maps();
  devmm_buffer *b = shared_buffer(r, 4096);
  int64_t shape[DEVMM_MAX_NDIM], strides[DEVMM_MAX_NDIM];
  for (int i = 0; i < DEVMM_MAX_NDIM; i++)
    shape[i] = 1, strides[i] = 1;
  struct {
    devmm_dtype dt;
    int ndim;
    int64_t shape[2], strides[2];
    size_t offset;
    int readonly;
  } cases[] = {
      {I32, 2, {3, 4}, {1, 3}, 16, 1}, /* column-major, offset, read-only */
      {I32, 2, {4, 3}, {100, 2}, 8, 0},
      {{DEVMM_DTYPE_FLOAT, 64, 1}, 0, {0}, {0}, 8, 0},             /* 0-d */
      {{DEVMM_DTYPE_FLOAT8_E4M3FNUZ, 8, 1}, 1, {4096}, {1}, 0, 0}, /* all of it */
      {{DEVMM_DTYPE_COMPLEX, 128, 1}, 2, {2, 3}, {0, 2}, 32, 1},   /* a 0 stride */
      {{DEVMM_DTYPE_UINT, 16, 1}, 1, {2047}, {1}, 2, 0},           /* to the last byte */
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    devmm_tensor *t = view(b, cases[c].dt, cases[c].ndim, cases[c].shape, cases[c].strides,
                           cases[c].offset, cases[c].readonly);
    unsigned char h[DEVMM_IPC_TENSOR_HANDLE_MAX];
    size_t n = export_tensor(t, h);
    ck_assert_uint_eq(n, DIMS + 16 * (size_t)cases[c].ndim);
    devmm_ipc_tensor_info ti = {.struct_size = sizeof ti};
    ck_assert_msg(devmm_ipc_tensor_handle_info(h, n, &ti) == DEVMM_OK, "%s", devmm_last_error());
    ck_assert_int_eq(ti.is_tensor, 1);
    ck_assert_int_eq(ti.ndim, cases[c].ndim);
    ck_assert_int_eq(ti.readonly, cases[c].readonly);
    ck_assert_uint_eq(ti.byte_offset, cases[c].offset);
    devmm_tensor *u = open_tensor(h, n);
    same_view(t, u);
    devmm_tensor_destroy(u);
    devmm_tensor_destroy(t);
  }
  /* the most dimensions a tensor has: the largest handle */
  devmm_tensor *t = view(b, I32, DEVMM_MAX_NDIM, shape, strides, 4, 0);
  unsigned char h[DEVMM_IPC_TENSOR_HANDLE_MAX];
  ck_assert_uint_eq(export_tensor(t, h), DEVMM_IPC_TENSOR_HANDLE_MAX);
  devmm_tensor *u = open_tensor(h, DEVMM_IPC_TENSOR_HANDLE_MAX);
  same_view(t, u);
  /* an opened cpu.shm mapping exports again (ADR 33), its layout with it */
  size_t n2 = export_tensor(u, h);
  devmm_tensor *w = open_tensor(h, n2);
  same_view(u, w);
  devmm_tensor_destroy(w);
  devmm_tensor_destroy(u);
  devmm_tensor_destroy(t);
  devmm_buffer_free(b);
  devmm_buffer_release(b);
  ck_assert_int_eq(shm_maps(), maps); /* each opened tensor unmapped with its last reference */
  devmm_resource_release(r);
}
END_TEST

START_TEST(the_bytes_are_version_2_of_the_table_in_ipc_h) {
  init();
  devmm_resource *r = shm();
  devmm_buffer *b = shared_buffer(r, 4096);
  devmm_tensor *t = view(b, I32, 2, (int64_t[]){3, 4}, (int64_t[]){1, 3}, 16, 1);
  unsigned char h[DEVMM_IPC_TENSOR_HANDLE_MAX];
  size_t n = export_tensor(t, h);
  ck_assert_uint_eq(n, 332);
  ck_assert_mem_eq(h, "devmmT\x02\x00", 8);
  devmm_ipc_handle bh;
  ck_assert_int_eq(devmm_ipc_get_handle(r, devmm_buffer_ptr(b), 4096, &bh), DEVMM_OK);
  ck_assert_mem_eq(h + BUFFER, bh.bytes, DEVMM_IPC_HANDLE_SIZE);
  ck_assert_mem_eq(h + DTYPE, "int32\0\0\0\0\0\0\0\0\0\0\0", 16);
  ck_assert_uint_eq(get32(h + NDIM), 2);
  ck_assert_uint_eq(get32(h + FLAGS), 1);
  ck_assert_int_eq(get64(h + OFFSET), 16);
  ck_assert_int_eq(get64(h + DIMS), 3);
  ck_assert_int_eq(get64(h + DIMS + 8), 4);
  ck_assert_int_eq(get64(h + DIMS + 16), 1);
  ck_assert_int_eq(get64(h + DIMS + 24), 3);
  uint32_t crc = get32(h + CRC);
  put32(h + CRC, 0);
  ck_assert_uint_eq(crc, crc32_bits(h + DTYPE, n - DTYPE));
  devmm_tensor_destroy(t);
  devmm_buffer_free(b);
  devmm_buffer_release(b);
  devmm_resource_release(r);
}
END_TEST

START_TEST(a_buffers_handle_opens_as_its_bytes) {
  init();
  devmm_resource *r = shm();
  devmm_buffer *b = shared_buffer(r, 1000);
  devmm_ipc_handle bh;
  ck_assert_int_eq(devmm_ipc_get_handle(r, devmm_buffer_ptr(b), 1000, &bh), DEVMM_OK);
  devmm_ipc_tensor_info ti = {.struct_size = sizeof ti};
  ck_assert_int_eq(devmm_ipc_tensor_handle_info(bh.bytes, sizeof bh.bytes, &ti), DEVMM_OK);
  ck_assert_int_eq(ti.is_tensor, 0);
  ck_assert_mem_eq(ti.buffer.bytes, bh.bytes, sizeof bh.bytes);
  devmm_tensor *u = open_tensor(bh.bytes, sizeof bh.bytes);
  ck_assert_int_eq(devmm_tensor_ndim(u), 1);
  ck_assert_int_eq(devmm_tensor_shape(u)[0], 1000);
  ck_assert_int_eq(devmm_tensor_strides(u)[0], 1);
  ck_assert(devmm_tensor_dtype(u).code == U8.code && devmm_tensor_dtype(u).bits == 8);
  ck_assert_int_eq(((unsigned char *)devmm_tensor_data(u))[999], (unsigned char)(999 * 7 + 1));
  devmm_tensor_destroy(u);
  devmm_buffer_free(b);
  devmm_buffer_release(b);
  devmm_resource_release(r);
}
END_TEST

START_TEST(tensor_handles_open_from_a_descriptor) {
  init();
  devmm_resource *r = shm();
  devmm_buffer *b = shared_buffer(r, 4096);
  devmm_tensor *t = view(b, I32, 2, (int64_t[]){4, 3}, (int64_t[]){100, 2}, 8, 1);
  unsigned char h[DEVMM_IPC_TENSOR_HANDLE_MAX];
  size_t n = export_tensor(t, h);
  devmm_ipc_tensor_info ti = {.struct_size = sizeof ti};
  ck_assert_int_eq(devmm_ipc_tensor_handle_info(h, n, &ti), DEVMM_OK);
  int fd = -1;
  ck_assert_msg(devmm_ipc_handle_fd(&ti.buffer, &fd) == DEVMM_OK, "%s", devmm_last_error());
  devmm_tensor *u = NULL;
  ck_assert_msg(devmm_ipc_open_tensor_fd(NULL, h, n, fd, &u) == DEVMM_OK, "%s", devmm_last_error());
  same_view(t, u);
  devmm_tensor_destroy(u);
  ck_assert_int_eq(devmm_ipc_open_tensor_fd(NULL, h, n, -1, &u), DEVMM_EINVAL);
  ck_assert_ptr_null(u);
  ck_assert_error_contains("descriptor -1 is not one");
  devmm_tensor_destroy(t);
  devmm_buffer_free(b);
  devmm_buffer_release(b);
  devmm_resource_release(r);
}
END_TEST

/* ---------------------------------------------------------------- with Python */

/* Python writes handles of version 2 with struct and zlib alone (not devmm: the format as ADR 35
 * writes it down), then hands over a tensor of devmm's Python package and checks C's write to it.
 */
static const char *const python_side =
    "import ctypes, struct, sys, zlib\n"
    "def handle(buf, dtype, shape, strides, offset, readonly):\n"
    "    n = len(shape)\n"
    "    layout = struct.pack('<16sIIQ', dtype.encode(), n, int(readonly), offset)\n"
    "    dims = struct.pack(f'<{2 * n}q', *shape, *strides)\n"
    "    crc = zlib.crc32(layout + bytes(4) + dims)\n"
    "    return b'devmmT' + struct.pack('<H', 2) + buf + layout + struct.pack('<I', crc) + dims\n"
    "buf = bytes.fromhex(sys.argv[1])\n"
    "print(handle(buf, 'int32', (3, 4), (1, 3), 16, True).hex())\n"
    "print(handle(buf, 'float64', (), (), 8, False).hex())\n"
    "print(handle(buf, 'uint16', (5,), (3,), 2, False).hex())\n"
    "sys.stdout.flush()\n"
    "import devmm\n"
    "from devmm.mrs.cpu import SharedMemoryResource\n"
    "t = devmm.empty((2, 8), 'int16', resource=SharedMemoryResource())\n"
    "for i in range(16):\n"
    "    ctypes.c_int16.from_address(t.data_ptr + 2 * i).value = 3 * i\n"
    "print(t.ipc_handle().hex(), flush=True)\n"
    "sys.stdin.readline()\n"
    "v = ctypes.c_int16.from_address(t.data_ptr + 30).value\n"
    "print('ok' if v == 1234 else f'C wrote {v}', flush=True)\n";

static const char *need_env(const char *name) {
  const char *v = getenv(name);
  ck_assert_msg(v && *v, "%s is not set: run this suite with meson test (tests/meson.build)", name);
  return v;
}

/* One line of the child's, hex, into h: its length. */
static size_t read_hex(FILE *f, unsigned char *h, size_t cap) {
  char line[4 * DEVMM_IPC_TENSOR_HANDLE_MAX];
  ck_assert_msg(fgets(line, sizeof line, f) != NULL, "the Python side wrote nothing more");
  size_t n = strcspn(line, "\n") / 2;
  ck_assert_uint_le(n, cap);
  for (size_t i = 0; i < n; i++) {
    unsigned v;
    ck_assert_int_eq(sscanf(line + 2 * i, "%2x", &v), 1);
    h[i] = (unsigned char)v;
  }
  return n;
}

START_TEST(python_writes_the_bytes_c_writes_and_each_opens_the_others) {
  const char *python = need_env("DEVMM_TEST_PYTHON");
  const char *pythonpath = need_env("DEVMM_TEST_PYTHONPATH");
  const char *library = need_env("DEVMM_TEST_LIBRARY");
  init();
  devmm_resource *r = shm();
  devmm_buffer *b = shared_buffer(r, 4096);
  devmm_ipc_handle bh;
  ck_assert_int_eq(devmm_ipc_get_handle(r, devmm_buffer_ptr(b), 4096, &bh), DEVMM_OK);
  char hex[2 * DEVMM_IPC_HANDLE_SIZE + 1];
  for (size_t i = 0; i < sizeof bh.bytes; i++)
    snprintf(hex + 2 * i, 3, "%02x", bh.bytes[i]);
  int in[2], out[2];
  ck_assert_int_eq(pipe(in), 0);
  ck_assert_int_eq(pipe(out), 0);
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    dup2(in[0], 0);
    dup2(out[1], 1);
    close(in[1]);
    close(out[0]);
    setenv("PYTHONPATH", pythonpath, 1);
    setenv("DEVMM_LIBRARY", library, 1);
#ifdef __SANITIZE_ADDRESS__
    /* make asan: Python is not instrumented, so the ASan runtime of this libdevmm must be loaded
     * first, as tests/run-python-asan.sh does; CPython's own allocations at exit are no leaks */
    extern void __asan_init(void);
    Dl_info asan;
    if (dladdr((void *)__asan_init, &asan) && asan.dli_fname)
      setenv("LD_PRELOAD", asan.dli_fname, 1);
    setenv("ASAN_OPTIONS", "detect_leaks=0:allocator_may_return_null=1", 1);
#endif
    execl(python, python, "-c", python_side, hex, (char *)NULL);
    perror(python);
    _exit(127);
  }
  close(in[0]);
  close(out[1]);
  FILE *from = fdopen(out[0], "r");
  ck_assert_ptr_nonnull(from);
  /* the same layouts made in C: byte for byte what Python wrote, and Python's open here */
  struct {
    devmm_dtype dt;
    int ndim;
    int64_t shape[2], strides[2];
    size_t offset;
    int readonly;
  } cases[] = {
      {I32, 2, {3, 4}, {1, 3}, 16, 1},
      {{DEVMM_DTYPE_FLOAT, 64, 1}, 0, {0}, {0}, 8, 0},
      {{DEVMM_DTYPE_UINT, 16, 1}, 1, {5}, {3}, 2, 0},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    unsigned char py[DEVMM_IPC_TENSOR_HANDLE_MAX], mine[DEVMM_IPC_TENSOR_HANDLE_MAX];
    size_t n = read_hex(from, py, sizeof py);
    devmm_tensor *t = view(b, cases[c].dt, cases[c].ndim, cases[c].shape, cases[c].strides,
                           cases[c].offset, cases[c].readonly);
    ck_assert_uint_eq(export_tensor(t, mine), n);
    for (size_t i = 0; i < n; i++)
      ck_assert_msg(py[i] == mine[i],
                    "case %zu: byte %zu is 0x%02x in Python's handle, 0x%02x in C's", c, i, py[i],
                    mine[i]);
    devmm_tensor *u = open_tensor(py, n);
    same_view(t, u);
    devmm_tensor_destroy(u);
    devmm_tensor_destroy(t);
  }
  /* a tensor of devmm's Python package, in the Python process: C sees and writes its memory */
  unsigned char h[DEVMM_IPC_TENSOR_HANDLE_MAX];
  size_t n = read_hex(from, h, sizeof h);
  devmm_tensor *u = open_tensor(h, n);
  ck_assert_int_eq(devmm_tensor_ndim(u), 2);
  ck_assert_int_eq(devmm_tensor_shape(u)[0], 2);
  ck_assert_int_eq(devmm_tensor_shape(u)[1], 8);
  ck_assert_int_eq(devmm_tensor_dtype(u).bits, 16);
  int16_t *v = devmm_tensor_data(u);
  for (int i = 0; i < 16; i++)
    ck_assert_int_eq(v[i], 3 * i);
  v[15] = 1234;
  devmm_tensor_destroy(u);
  ck_assert_int_eq(write(in[1], "\n", 1), 1);
  char last[128] = "";
  ck_assert_ptr_nonnull(fgets(last, sizeof last, from));
  ck_assert_str_eq(last, "ok\n");
  fclose(from);
  close(in[1]);
  int status = 0;
  ck_assert_int_eq(waitpid(pid, &status, 0), pid);
  ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the Python side failed (%d)",
                status);
  devmm_buffer_free(b);
  devmm_buffer_release(b);
  devmm_resource_release(r);
}
END_TEST

/* ---------------------------------------------------------------- refusals */

START_TEST(exports_that_cannot_be_made_say_why) {
  init();
  devmm_resource *r = shm();
  devmm_buffer *b = shared_buffer(r, 4096);
  devmm_tensor *t = view(b, I32, 2, (int64_t[]){3, 4}, (int64_t[]){4, 1}, 0, 0);
  unsigned char h[DEVMM_IPC_TENSOR_HANDLE_MAX];
  size_t n = 99;
  ck_assert_int_eq(devmm_ipc_get_tensor_handle(NULL, h, sizeof h, &n), DEVMM_EINVAL);
  ck_assert_error_contains("devmm_ipc_get_tensor_handle: tensor is NULL");
  ck_assert_uint_eq(n, 0);
  ck_assert_int_eq(devmm_ipc_get_tensor_handle(t, NULL, sizeof h, &n), DEVMM_EINVAL);
  ck_assert_error_contains("out is NULL");
  ck_assert_int_eq(devmm_ipc_get_tensor_handle(t, h, sizeof h, NULL), DEVMM_EINVAL);
  ck_assert_error_contains("len is NULL");
  ck_assert_int_eq(devmm_ipc_get_tensor_handle(t, h, 331, &n), DEVMM_EINVAL);
  ck_assert_error_contains("out holds 331 bytes: the handle of a 2-dimensional tensor is 332");
  devmm_tensor *e = view(b, I32, 2, (int64_t[]){0, 3}, (int64_t[]){3, 1}, 0, 0);
  ck_assert_int_eq(devmm_ipc_get_tensor_handle(e, h, sizeof h, &n), DEVMM_EINVAL);
  ck_assert_error_contains("a 0-byte tensor (shape (0, 3)) has no memory to share");
  devmm_tensor_destroy(e);
  e = view(b, (devmm_dtype){DEVMM_DTYPE_FLOAT8_E4M3B11FNUZ, 8, 1}, 1, (int64_t[]){4},
           (int64_t[]){1}, 0, 0);
  ck_assert_int_eq(devmm_ipc_get_tensor_handle(e, h, sizeof h, &n), DEVMM_EINVAL);
  ck_assert_error_contains("dtype name 'float8_e4m3b11fnuz' is over 16 bytes");
  devmm_tensor_destroy(e);
  testres *st;
  devmm_resource *heap = testres_create(&st);
  devmm_buffer *hb = NULL;
  ck_assert_int_eq(devmm_buffer_allocate(heap, 64, 0, NULL, &hb), DEVMM_OK);
  e = view(hb, I32, 1, (int64_t[]){16}, (int64_t[]){1}, 0, 0);
  ck_assert_int_eq(devmm_ipc_get_tensor_handle(e, h, sizeof h, &n), DEVMM_ENOTSUP);
  ck_assert_error_contains("cannot share memory with other processes");
  ck_assert_uint_eq(n, 0);
  devmm_tensor_destroy(e);
  devmm_buffer_free(hb);
  devmm_buffer_release(hb);
  devmm_resource_release(heap);
  devmm_tensor_destroy(t);
  devmm_buffer_free(b);
  devmm_buffer_release(b);
  devmm_resource_release(r);
}
END_TEST

/* Opening h (n bytes) fails with status and a message containing needle, and so does the
 * info call for the handle's own fields (info: 1); nothing stays mapped. */
static void refused(const unsigned char *h, size_t n, int status, const char *needle, int info) {
  int maps = shm_maps();
  static int sentinel;
  devmm_tensor *u = (devmm_tensor *)&sentinel; /* must come back NULL */
  ck_assert_int_eq(devmm_ipc_open_tensor(NULL, h, n, &u), status);
  ck_assert_ptr_null(u);
  ck_assert_error_contains(needle);
  ck_assert_int_eq(shm_maps(), maps);
  devmm_ipc_tensor_info ti = {.struct_size = sizeof ti};
  if (info) {
    ck_assert_int_eq(devmm_ipc_tensor_handle_info(h, n, &ti), status);
    ck_assert_error_contains(needle);
  }
}

START_TEST(bad_tensor_handles_are_refused_with_a_reason) {
  init();
  devmm_resource *r = shm();
  devmm_buffer *b = shared_buffer(r, 4096);
  devmm_tensor *t = view(b, I32, 2, (int64_t[]){3, 4}, (int64_t[]){4, 1}, 16, 0);
  unsigned char good[DEVMM_IPC_TENSOR_HANDLE_MAX], h[DEVMM_IPC_TENSOR_HANDLE_MAX + 16];
  size_t n = export_tensor(t, good);
  int maps = shm_maps();
#define FRESH() memcpy(h, good, n)
  /* the caller's mistakes */
  devmm_tensor *u = NULL;
  ck_assert_int_eq(devmm_ipc_open_tensor(NULL, NULL, n, &u), DEVMM_EINVAL);
  ck_assert_error_contains("devmm_ipc_open_tensor: handle is NULL");
  ck_assert_int_eq(devmm_ipc_open_tensor(NULL, good, n, NULL), DEVMM_EINVAL);
  ck_assert_error_contains("devmm_ipc_open_tensor: out is NULL");
  devmm_ipc_tensor_info ti = {.struct_size = sizeof ti - 1};
  ck_assert_int_eq(devmm_ipc_tensor_handle_info(good, n, &ti), DEVMM_EINVAL);
  ck_assert_error_contains("set it to sizeof(devmm_ipc_tensor_info)");
  ck_assert_int_eq(devmm_ipc_tensor_handle_info(good, n, NULL), DEVMM_EINVAL);
  ck_assert_error_contains("devmm_ipc_tensor_handle_info: out is NULL");
  ti.struct_size = sizeof ti;
  ck_assert_int_eq(devmm_ipc_tensor_handle_info(NULL, n, &ti), DEVMM_EINVAL);
  ck_assert_error_contains("devmm_ipc_tensor_handle_info: handle is NULL");
  ck_assert_int_eq(devmm_ipc_open_tensor_fd(NULL, good, n, 0, NULL), DEVMM_EINVAL);
  ck_assert_error_contains("devmm_ipc_open_tensor_fd: out is NULL");
  /* sizes */
  refused(good, n - 1, DEVMM_EINVAL,
          "a tensor handle of 331 bytes for 2 dimensions: expected 332 "
          "(truncated?",
          1);
  FRESH();
  refused(h, n + 16, DEVMM_EINVAL, "of 348 bytes for 2 dimensions: expected 332", 1);
  refused(good, 40, DEVMM_EINVAL, "a tensor handle of 40 bytes is truncated: it holds at least 300",
          1);
  refused(good, 7, DEVMM_EINVAL, "a tensor handle of 7 bytes is truncated", 1);
  refused(good + BUFFER, 100, DEVMM_EINVAL, "a handle of 100 bytes: expected the 256 bytes", 1);
  /* the version (outside the checksum: read first) */
  FRESH();
  h[VERSION] = 3;
  refused(h, n, DEVMM_EINVAL, "a tensor handle of version 3: this devmm reads version 2", 1);
  FRESH();
  h[VERSION] = 1;
  refused(h, n, DEVMM_EINVAL, "a tensor handle of version 1", 1);
  /* the checksum: every byte of the layout counts */
  for (size_t at = DTYPE; at < n; at++) {
    FRESH();
    h[at] ^= 0x10; /* in ndim: a length that does not match, first */
    refused(h, n, DEVMM_EINVAL, at >= NDIM && at < FLAGS ? "dimensions" : "layout is corrupted", 1);
  }
  /* the buffer's handle inside has its own checksum; info reads the tensor's fields only */
  FRESH();
  h[BUFFER + 200] ^= 1;
  refused(h, n, DEVMM_EINVAL, "IPC handle corrupted", 0);
  FRESH();
  h[BUFFER] ^= 0xff;
  refused(h, n, DEVMM_EINVAL, "not a devmm IPC handle", 0);
  /* forged fields under a recomputed CRC-32 */
  FRESH();
  put32(h + NDIM, DEVMM_MAX_NDIM + 1);
  refused(h, n, DEVMM_EINVAL, "a tensor handle of 33 dimensions: a devmm tensor has at most 32", 1);
  FRESH();
  memcpy(h + DTYPE, "float99\0", 8);
  reseal(h, n);
  refused(h, n, DEVMM_EINVAL, "the tensor handle's dtype: unknown dtype 'float99'", 1);
  FRESH();
  h[DTYPE + 10] = 'x'; /* after "int32"'s NUL */
  reseal(h, n);
  refused(h, n, DEVMM_EINVAL, "dtype name 'int32' has bytes after its end", 1);
  FRESH();
  memcpy(h + DTYPE, "float4_e2m1fn\0\0\0", 16);
  reseal(h, n);
  refused(h, n, DEVMM_EINVAL, "dtype 'float4_e2m1fn' is sub-byte", 1);
  FRESH();
  put32(h + FLAGS, 3);
  reseal(h, n);
  refused(h, n, DEVMM_EINVAL, "the tensor handle's flags are 0x3: this devmm knows bit 0", 1);
  FRESH();
  put64(h + DIMS + 16, (uint64_t)-4); /* strides[0] */
  reseal(h, n);
  refused(h, n, DEVMM_EINVAL, "shape[0] = 3 and strides[0] = -4: expected both >= 0", 1);
  FRESH();
  put64(h + DIMS + 8, (uint64_t)-1); /* shape[1] */
  reseal(h, n);
  refused(h, n, DEVMM_EINVAL, "shape[1] = -1 and strides[1] = 1", 1);
  /* overflow: of an extent, of the bytes it covers */
  FRESH();
  put64(h + DIMS, (uint64_t)1 << 62);
  put64(h + DIMS + 16, 8);
  reseal(h, n);
  refused(h, n, DEVMM_EOVERFLOW, "layout overflows 64 bits at dimension 0", 1);
  FRESH();
  put64(h + OFFSET, UINT64_MAX - 8);
  reseal(h, n);
  refused(h, n, DEVMM_EOVERFLOW, "layout overflows 64 bits (offset 18446744073709551607", 1);
  FRESH();
  put64(h + DIMS, (uint64_t)1 << 61); /* last element 2^63 - 1: its bytes, 2^65 */
  reseal(h, n);
  refused(h, n, DEVMM_EOVERFLOW, "layout overflows 64 bits (offset 16, last element", 1);
  /* a layout outside the buffer: checked before anything is mapped, not by the info call */
  FRESH();
  put64(h + DIMS, (uint64_t)1 << 40);
  reseal(h, n);
  refused(h, n, DEVMM_EINVAL, "does not fit the 4096 bytes of its buffer", 0);
  FRESH();
  put64(h + DIMS + 16, 1 << 20);
  reseal(h, n);
  refused(h, n, DEVMM_EINVAL, "layout (shape (3, 4), offset 16: 8388640 bytes) does not fit", 0);
  FRESH();
  put64(h + OFFSET, 4096 - 47); /* one byte short: the last element ends at 4097 */
  reseal(h, n);
  refused(h, n, DEVMM_EINVAL, "offset 4049: 4097 bytes) does not fit the 4096 bytes", 0);
  FRESH();
  put64(h + OFFSET, 4096 - 48); /* to the last byte: opens */
  reseal(h, n);
  ck_assert_msg(devmm_ipc_open_tensor(NULL, h, n, &u) == DEVMM_OK, "%s", devmm_last_error());
  devmm_tensor_destroy(u);
  ck_assert_int_eq(shm_maps(), maps);
#undef FRESH
  devmm_tensor_destroy(t);
  devmm_buffer_free(b);
  devmm_buffer_release(b);
  devmm_resource_release(r);
}
END_TEST

Suite *ipc_tensor_suite(void) {
  Suite *s = suite_create("ipc_tensor");
  TCase *tc = tcase_create("ipc_tensor");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, tensor_handles_round_trip_every_layout);
  tcase_add_test(tc, the_bytes_are_version_2_of_the_table_in_ipc_h);
  tcase_add_test(tc, a_buffers_handle_opens_as_its_bytes);
  tcase_add_test(tc, tensor_handles_open_from_a_descriptor);
  tcase_add_test(tc, python_writes_the_bytes_c_writes_and_each_opens_the_others);
  tcase_add_test(tc, exports_that_cannot_be_made_say_why);
  tcase_add_test(tc, bad_tensor_handles_are_refused_with_a_reason);
  suite_add_tcase(s, tc);
  return s;
}
