/* Suite ipc_trust: IPC handles from a process that is not trusted (ADR 40): a memfd shrunk
 * then sealed under the importer, kind names that are paths, unknown kinds, control characters,
 * and layouts whose element count wraps. Each test attacks; a race gets a bounded number of
 * tries and passes only if no try wins.
 * Environment (set by Meson): DEVMM_PLUGIN_PATH (the plugins' build directory). */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <devmm/devmm.h>

#include "testres.h"

/* devmm over the given plugins ("cpu"). */
static void init(const char *plugins) {
  unsetenv("DEVMM_CONFIG");
  char path[TESTRES_PATH_MAX], text[256];
  int fd = testres_mkstemp(path, sizeof path, "ipc-trust-ini");
  snprintf(text, sizeof text, "[devmm]\nplugins = %s\n", plugins);
  ck_assert_int_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
  close(fd);
  int rc = devmm_init(path);
  unlink(path);
  ck_assert_msg(rc == DEVMM_OK, "devmm_init: %s", devmm_last_error());
}

static devmm_resource *kind(const char *name) {
  devmm_resource *r = NULL;
  int rc = devmm_resource_create_kind(name, 0, NULL, 0, &r);
  ck_assert_msg(rc == DEVMM_OK, "%s: %s", name, devmm_last_error());
  return r;
}

/* A handle's checksum recomputed after a forgery (FNV-1a, the checksum field read as 0). */
static void reseal(devmm_ipc_handle *h) {
  uint32_t x = 2166136261u;
  for (size_t i = 0; i < sizeof h->bytes; i++)
    x = (x ^ (i >= 8 && i < 12 ? 0 : h->bytes[i])) * 16777619u;
  memcpy(h->bytes + 8, &x, 4);
}

/* The kind field: bytes 48..95 of the header (ipc.h). */
static void forge_kind(devmm_ipc_handle *h, const char *k) {
  memset(h->bytes + 48, 0, DEVMM_IPC_KIND_MAX);
  memcpy(h->bytes + 48, k, strlen(k) < DEVMM_IPC_KIND_MAX ? strlen(k) : DEVMM_IPC_KIND_MAX - 1);
  reseal(h);
}

/* The cpu.shm payload: ino, dev, offset (uint64), fd (int32), after the 96-byte header. */
static void forge_fd(devmm_ipc_handle *h, int fd) {
  struct stat st;
  ck_assert_int_eq(fstat(fd, &st), 0);
  uint64_t ino = (uint64_t)st.st_ino, dev = (uint64_t)st.st_dev, off = 0;
  memcpy(h->bytes + DEVMM_IPC_HEADER_SIZE, &ino, 8);
  memcpy(h->bytes + DEVMM_IPC_HEADER_SIZE + 8, &dev, 8);
  memcpy(h->bytes + DEVMM_IPC_HEADER_SIZE + 16, &off, 8);
  memcpy(h->bytes + DEVMM_IPC_HEADER_SIZE + 24, &fd, 4);
  reseal(h);
}

/* The allocations shm_handle made, freed after each test (the checked fixture below), so that
 * LeakSanitizer sees none (make asan). */
enum { KEPT_MAX = 8 };
static struct {
  devmm_resource *r;
  void *p;
  size_t n;
} kept[KEPT_MAX];
static int nkept;

static void free_kept(void) {
  while (nkept > 0) {
    nkept--;
    devmm_deallocate(kept[nkept].r, kept[nkept].p, kept[nkept].n, 0, NULL);
    devmm_resource_release(kept[nkept].r);
  }
}

/* A good cpu.shm handle of n bytes (its allocation lives until the test's end). */
static devmm_ipc_handle shm_handle(size_t n) {
  devmm_resource *r = kind("cpu.shm");
  void *p;
  ck_assert_int_eq(devmm_allocate(r, n, 0, NULL, &p), DEVMM_OK);
  ck_assert_int_lt(nkept, KEPT_MAX);
  kept[nkept].r = r, kept[nkept].p = p, kept[nkept].n = n, nkept++;
  devmm_ipc_handle h;
  ck_assert_int_eq(devmm_ipc_get_handle(r, p, n, &h), DEVMM_OK);
  return h;
}

/* ------------------------------------------------------------ shrink, then seal */

#define BIG (1u << 20)
#define SMALL 4096

/* The sender: on each go, after `delay` spins, shrinks the memfd, then seals it. */
static struct {
  atomic_int go, done, stop;
  atomic_long delay;
  int fd;
} sender;

static void *sender_main(void *arg) {
  (void)arg;
  for (;;) {
    while (!atomic_load(&sender.go))
      if (atomic_load(&sender.stop))
        return NULL;
    atomic_store(&sender.go, 0);
    for (volatile long i = 0, n = atomic_load(&sender.delay); i < n; i++)
      ;
    (void)!ftruncate(sender.fd, SMALL);
    (void)!fcntl(sender.fd, F_ADD_SEALS, F_SEAL_SHRINK);
    atomic_store(&sender.done, 1);
  }
}

/* Tries of the race on one path (use_fd: the descriptor path), at most 10 s of them; the number
 * of tries in which the importer mapped BIG bytes of a SMALL-byte file (a touch past the end:
 * SIGBUS), in *won. */
static void race(const devmm_ipc_handle *good, int use_fd, int tries, int *won, int *opened,
                 int *at) {
  *won = *opened = *at = 0;
  time_t start = time(NULL);
  for (int t = 0; t < tries && !*won && time(NULL) - start < 10; t++) {
    /* named with the handle's token, as the sender's own export would be (ADR 40) */
    char name[96] = "devmm-cpu.shm:";
    for (int i = 0; i < 16; i++)
      snprintf(name + 14 + 2 * i, 3, "%02x", good->bytes[DEVMM_IPC_HEADER_SIZE + 32 + i]);
    snprintf(name + 46, sizeof name - 46, ":%u", BIG);
    int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(ftruncate(fd, BIG), 0);
    devmm_ipc_handle h = *good;
    forge_fd(&h, fd);
    sender.fd = fd;
    atomic_store(&sender.delay, (t * 97) % 40000);
    atomic_store(&sender.done, 0);
    atomic_store(&sender.go, 1);
    devmm_buffer *b = NULL;
    int rc = use_fd ? devmm_ipc_open_fd(NULL, &h, fd, &b) : devmm_ipc_open(NULL, &h, &b);
    while (!atomic_load(&sender.done))
      sched_yield(); /* a busy machine: let the sender run */
    if (rc == DEVMM_OK) {
      (*opened)++;
      struct stat st;
      ck_assert_int_eq(fstat(fd, &st), 0);
      if ((uint64_t)st.st_size < devmm_buffer_nbytes(b))
        (*won)++, *at = t + 1; /* touching the last byte now would be SIGBUS */
      devmm_ipc_close(b);
    } else {
      ck_assert_msg(rc == DEVMM_EINVAL, "try %d: %d: %s", t, rc, devmm_last_error());
    }
    close(fd);
  }
}

/* ADR 40: the memfd's size is read after its seals are verified, on the /proc path and on the
 * descriptor path; a sender that shrinks its file and then seals it gets a refusal. */
START_TEST(shrink_then_seal_is_refused_on_both_paths) {
  init("cpu");
  devmm_ipc_handle good = shm_handle(BIG);
  pthread_t th;
  ck_assert_int_eq(pthread_create(&th, NULL, sender_main, NULL), 0);
  int won[2], opened[2], at[2];
  for (int use_fd = 0; use_fd < 2; use_fd++)
    race(&good, use_fd, 4000, &won[use_fd], &opened[use_fd], &at[use_fd]);
  atomic_store(&sender.stop, 1);
  pthread_join(th, NULL);
  ck_assert_msg(
      !won[0] && !won[1],
      "a shrunk-then-sealed memfd was mapped past its end (SIGBUS on touch): /proc path "
      "%d (try %d), descriptor path %d (try %d); expected every try (4000 a path at most) refused",
      won[0], at[0], won[1], at[1]);
  ck_assert_int_eq(opened[0] + opened[1], 0);
}
END_TEST

/* ------------------------------------------------------------ kind names */

/* ADR 40: a handle's kind is a plain kind name of a plugin already loaded: a path is refused,
 * and a kind whose plugin is not loaded loads nothing. */
START_TEST(kind_names_are_plain_names_of_loaded_plugins) {
  init("cpu");
  devmm_ipc_handle good = shm_handle(4096), h = good;
  size_t before = devmm_plugin_count();
  devmm_buffer *b = NULL;
  char path[TESTRES_PATH_MAX];
  snprintf(path, sizeof path, "%s/devmm-forged.so", testres_tmpdir());
  forge_kind(&h, path);
  ck_assert_int_eq(devmm_ipc_open(NULL, &h, &b), DEVMM_EINVAL);
  ck_assert_ptr_null(b);
  ck_assert_error_contains("is not a plain kind name");
  devmm_ipc_info info = {.struct_size = sizeof info};
  ck_assert_int_eq(devmm_ipc_handle_info(&h, &info), DEVMM_EINVAL);
  ck_assert_error_contains("is not a plain kind name");
  const char *bad[] = {"../cpu.shm", "cpu", ".shm", "cpu.", "cpu..shm", "cpu shm.x", "a/b.c"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    h = good;
    forge_kind(&h, bad[i]);
    ck_assert_msg(devmm_ipc_open(NULL, &h, &b) == DEVMM_EINVAL, "%s: %s", bad[i],
                  devmm_last_error());
    ck_assert_error_contains("is not a plain kind name");
  }
  /* the sim plugin is in the plugin path but not loaded: the handle must not load it */
  h = good;
  forge_kind(&h, "sim.device");
  ck_assert_int_eq(devmm_ipc_open(NULL, &h, &b), DEVMM_ENOTSUP);
  ck_assert_error_contains("no loaded plugin offers kind 'sim.device'");
  ck_assert_msg(devmm_plugin_count() == before, "a handle loaded a plugin: %zu plugins, was %zu",
                devmm_plugin_count(), before);
  /* asked by this process, a path is no kind either: nothing is loaded for it */
  devmm_resource *r = NULL;
  ck_assert_int_eq(devmm_resource_create_kind(path, 0, NULL, 0, &r), DEVMM_ENOENT);
  ck_assert_error_contains("it is not a plain kind name (<plugin>.<name>), so no plugin was");
  ck_assert_int_eq(devmm_plugin_count(), before);
  /* the genuine handle still opens */
  ck_assert_msg(devmm_ipc_open(NULL, &good, &b) == DEVMM_OK, "%s", devmm_last_error());
  devmm_ipc_close(b);
}
END_TEST

/* ADR 40: a resource whose IPC kind is no plain kind name makes no handle (no importer would
 * open it), and says so escaped. */
START_TEST(handles_are_made_only_of_plain_kind_names) {
  devmm_resource_ipc_ops group;
  devmm_resource_ops ops;
  testres_ipc_stub(&ops, &group, "bad kind\n.x");
  devmm_resource *r;
  ck_assert_int_eq(
      devmm_resource_create(&ops, NULL, (devmm_device){DEVMM_DEVICE_CPU, 0}, "test.ipc", 0, &r),
      DEVMM_OK);
  int x;
  devmm_ipc_handle h;
  ck_assert_int_eq(devmm_ipc_get_handle(r, &x, 4, &h), DEVMM_EINVAL);
  ck_assert_error_contains("IPC kind name 'bad kind\\x0a.x' is not a plain kind name");
  group.kind = "test.ipc";
  ck_assert_msg(devmm_ipc_get_handle(r, &x, 4, &h) == DEVMM_OK, "%s", devmm_last_error());
  devmm_resource_release(r);
}
END_TEST

/* ADR 40: forged kind names leave no record behind, through a handle or through
 * devmm_resource_create_kind (an unknown plugin name is answered, not remembered). */
START_TEST(forged_kinds_leave_no_records) {
  init("cpu");
  devmm_ipc_handle good = shm_handle(4096);
  size_t before = devmm_plugin_count();
  for (int i = 0; i < 200; i++) {
    char k[32];
    snprintf(k, sizeof k, "forged%d.device", i);
    devmm_ipc_handle h = good;
    forge_kind(&h, k);
    devmm_buffer *b = NULL;
    ck_assert_int_eq(devmm_ipc_open(NULL, &h, &b), DEVMM_ENOTSUP);
    devmm_resource *r = NULL;
    snprintf(k, sizeof k, "absent%d.kind", i);
    ck_assert_int_eq(devmm_resource_create_kind(k, 0, NULL, 0, &r), DEVMM_ENOENT);
  }
  ck_assert_error_contains("plugin 'absent199' could not be loaded");
  ck_assert_msg(devmm_plugin_count() == before,
                "forged kind names added plugin records: %zu, expected %zu", devmm_plugin_count(),
                before);
}
END_TEST

/* Whether s holds a control character (a forged line, a terminal escape). */
static int has_control(const char *s) {
  for (; *s; s++)
    if ((unsigned char)*s < 0x20 || (unsigned char)*s == 0x7f)
      return 1;
  return 0;
}

/* ADR 40: what a handle says reaches messages and the log escaped, control characters as
 * \xNN: no forged line, no terminal escape. */
START_TEST(what_a_handle_says_is_escaped) {
  setenv("DEVMM_LOG_LEVEL", "debug", 1);
  char logpath[TESTRES_PATH_MAX];
  int logfd = testres_mkstemp(logpath, sizeof logpath, "ipc-trust-log");
  unlink(logpath);
  int saved = dup(2);
  ck_assert_int_eq(dup2(logfd, 2), 2);
  init("cpu");
  devmm_ipc_handle h = shm_handle(4096);
  forge_kind(&h, "x.y\ndevmm: info: IPC handle verified OK\x1b[2K");
  devmm_buffer *b = NULL;
  int rc = devmm_ipc_open(NULL, &h, &b);
  char msg[1024];
  snprintf(msg, sizeof msg, "%s", devmm_last_error());
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  char log[8192] = "";
  ssize_t n = pread(logfd, log, sizeof log - 1, 0);
  log[n > 0 ? n : 0] = '\0';
  close(logfd);
  ck_assert_int_ne(rc, DEVMM_OK);
  ck_assert_msg(!has_control(msg), "the message holds the handle's control characters: '%s'", msg);
  ck_assert_msg(strstr(msg, "x.y\\x0adevmm: info: IPC handle verified OK\\x1b[2K") != NULL,
                "the message does not show the kind escaped: '%s'", msg);
  ck_assert_msg(strstr(log, "\ndevmm: info: IPC handle verified OK") == NULL,
                "the handle forged a log line: '%s'", log);
  ck_assert_msg(strchr(log, '\x1b') == NULL, "the log holds a terminal escape: '%s'", log);
  devmm_ipc_info info = {.struct_size = sizeof info};
  ck_assert_int_eq(devmm_ipc_handle_info(&h, &info), DEVMM_EINVAL);
  ck_assert_msg(!has_control(devmm_last_error()), "%s", devmm_last_error());
}
END_TEST

/* ------------------------------------------------------------ element counts */

/* A tensor handle's CRC-32 (zlib's) over bytes 264.. with its own field (296..299) read as 0. */
static void tensor_reseal(unsigned char *th, size_t len) {
  uint32_t crc = 0xffffffffu;
  memset(th + 296, 0, 4);
  for (size_t i = 264; i < len; i++) {
    crc ^= th[i];
    for (int k = 0; k < 8; k++)
      crc = crc >> 1 ^ (0xedb88320u & -(crc & 1));
  }
  crc = ~crc;
  for (int k = 0; k < 4; k++)
    th[296 + k] = (unsigned char)(crc >> 8 * k);
}

/* The handle of a 1 x 1 uint8 view of buf (stride 0), in th; its length. */
static size_t small_handle(devmm_buffer *buf, unsigned char *th) {
  devmm_dtype u8;
  ck_assert_int_eq(devmm_dtype_parse("uint8", &u8), DEVMM_OK);
  int64_t one[2] = {1, 1}, strides[2] = {0, 0};
  devmm_tensor *t = NULL;
  ck_assert_int_eq(devmm_tensor_create(buf, u8, 2, one, strides, 0, 0, &t), DEVMM_OK);
  size_t len = 0;
  ck_assert_msg(devmm_ipc_get_tensor_handle(t, th, DEVMM_IPC_TENSOR_HANDLE_MAX, &len) == DEVMM_OK,
                "%s", devmm_last_error());
  devmm_tensor_destroy(t);
  return len;
}

/* ADR 40: a stride-0 view of 2^64 elements (which wraps to 0 in 64 bits) is refused, built
 * directly or opened from a tensor handle; so is one whose byte size wraps. */
START_TEST(element_counts_never_wrap) {
  init("cpu");
  devmm_dtype u8, i64;
  ck_assert_int_eq(devmm_dtype_parse("uint8", &u8), DEVMM_OK);
  ck_assert_int_eq(devmm_dtype_parse("int64", &i64), DEVMM_OK);
  devmm_resource *r = kind("cpu.shm");
  devmm_buffer *buf = NULL;
  ck_assert_int_eq(devmm_buffer_allocate(r, 4096, 0, NULL, &buf), DEVMM_OK);
  int64_t shape[2] = {INT64_C(1) << 32, INT64_C(1) << 32}, strides[2] = {0, 0};
  devmm_tensor *t = NULL;
  ck_assert_int_eq(devmm_tensor_create(buf, u8, 2, shape, strides, 0, 0, &t), DEVMM_EOVERFLOW);
  ck_assert_ptr_null(t);
  ck_assert_error_contains("the number of elements overflows int64 at shape[1]");
  int64_t s2[2] = {INT64_C(1) << 61, 2}; /* 2^62 elements of 8 bytes: 2^65 bytes */
  ck_assert_int_eq(devmm_tensor_create(buf, i64, 2, s2, strides, 0, 0, &t), DEVMM_EOVERFLOW);
  ck_assert_error_contains("bytes overflows int64");
  /* the same view through a tensor handle: a real handle of a small view, its layout forged */
  unsigned char th[DEVMM_IPC_TENSOR_HANDLE_MAX];
  size_t len = small_handle(buf, th);
  for (int i = 0; i < 2; i++)
    for (int k = 0; k < 8; k++)
      th[DEVMM_IPC_TENSOR_HEADER_SIZE + 8 * i + k] = (unsigned char)(shape[i] >> 8 * k);
  tensor_reseal(th, len);
  devmm_ipc_tensor_info ti = {.struct_size = sizeof ti};
  ck_assert_int_eq(devmm_ipc_tensor_handle_info(th, len, &ti), DEVMM_EOVERFLOW);
  ck_assert_error_contains("the number of elements overflows int64 at shape[1]");
  devmm_tensor *opened = NULL;
  ck_assert_int_eq(devmm_ipc_open_tensor(NULL, th, len, &opened), DEVMM_EOVERFLOW);
  ck_assert_ptr_null(opened);
  devmm_buffer_release(buf);
  devmm_resource_release(r);
}
END_TEST

/* ADR 40: a tensor handle's dtype name reaches the message escaped. */
START_TEST(a_tensor_handles_dtype_is_shown_escaped) {
  init("cpu");
  devmm_resource *r = kind("cpu.shm");
  devmm_buffer *buf = NULL;
  ck_assert_int_eq(devmm_buffer_allocate(r, 4096, 0, NULL, &buf), DEVMM_OK);
  unsigned char th[DEVMM_IPC_TENSOR_HANDLE_MAX];
  size_t len = small_handle(buf, th);
  devmm_ipc_tensor_info ti = {.struct_size = sizeof ti};
  /* a dtype name of control characters: refused, and shown escaped */
  memcpy(th + 264, "x\n\x1b[2K\0\0\0\0\0\0\0\0\0", 16);
  tensor_reseal(th, len);
  ck_assert_int_eq(devmm_ipc_tensor_handle_info(th, len, &ti), DEVMM_EINVAL);
  ck_assert_msg(!has_control(devmm_last_error()), "%s", devmm_last_error());
  ck_assert_error_contains("unknown dtype 'x\\x0a\\x1b[2K'");
  memcpy(th + 264, "uint8\0\x1b\0\0\0\0\0\0\0\0\0", 16);
  tensor_reseal(th, len);
  ck_assert_int_eq(devmm_ipc_tensor_handle_info(th, len, &ti), DEVMM_EINVAL);
  ck_assert_msg(!has_control(devmm_last_error()), "%s", devmm_last_error());
  devmm_buffer_release(buf);
  devmm_resource_release(r);
}
END_TEST

/* ------------------------------------------------------------ handles only an export gives out */

/* A memfd of n bytes named name, sealed against shrinking as devmm's are. */
static int sealed_memfd(const char *name, size_t n) {
  int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(ftruncate(fd, (off_t)n), 0);
  ck_assert_int_eq(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_SEAL), 0);
  return fd;
}

/* The victim: a cpu.shm allocation it never exports, holding 0x5A; sends its descriptor number,
 * then waits for the parent to close the pipe. */
static int private_holder(int from, int to) {
  init("cpu");
  devmm_resource *r = kind("cpu.shm");
  void *p;
  if (devmm_allocate(r, 4096, 0, NULL, &p) != DEVMM_OK)
    return 10;
  memset(p, 0x5A, 4096);
  int found = -1;
  for (int fd = 3; fd < 1024 && found < 0; fd++) {
    char self[64], target[256] = "";
    snprintf(self, sizeof self, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(self, target, sizeof target - 1);
    if (n > 0 && strncmp(target, "/memfd:devmm-cpu.shm", 20) == 0)
      found = fd;
  }
  if (write(to, &found, sizeof found) != (ssize_t)sizeof found)
    return 11;
  char c;
  while (read(from, &c, 1) > 0)
    ;
  return 0;
}

/* ADR 40: the attacker's best case short of the export: the victim's pid, descriptor, device and
 * inode (read from /proc as root here, guessed by another user) in a handle with a good
 * checksum. The open is refused: only an export gives out the allocation's token. */
START_TEST(a_private_shm_memfd_is_refused_without_its_token) {
  int a[2], b[2];
  ck_assert_int_eq(pipe(a), 0);
  ck_assert_int_eq(pipe(b), 0);
  fflush(NULL);
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    close(a[1]);
    close(b[0]);
    _exit(private_holder(a[0], b[1]));
  }
  close(a[0]);
  close(b[1]);
  int victim_fd = -1;
  ck_assert_int_eq(read(b[0], &victim_fd, sizeof victim_fd), (ssize_t)sizeof victim_fd);
  ck_assert_int_ge(victim_fd, 0);
  init("cpu");
  devmm_ipc_handle h = shm_handle(4096);
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/fd/%d", (int)pid, victim_fd);
  struct stat st;
  ck_assert_int_eq(stat(path, &st), 0);
  uint64_t ino = (uint64_t)st.st_ino, dev = (uint64_t)st.st_dev, off = 0;
  int32_t vpid = (int32_t)pid;
  memcpy(h.bytes + 20, &vpid, 4);
  memcpy(h.bytes + DEVMM_IPC_HEADER_SIZE, &ino, 8);
  memcpy(h.bytes + DEVMM_IPC_HEADER_SIZE + 8, &dev, 8);
  memcpy(h.bytes + DEVMM_IPC_HEADER_SIZE + 16, &off, 8);
  memcpy(h.bytes + DEVMM_IPC_HEADER_SIZE + 24, &victim_fd, 4);
  reseal(&h);
  devmm_buffer *buf = NULL;
  int rc = devmm_ipc_open(NULL, &h, &buf);
  int leaked = rc == DEVMM_OK && ((unsigned char *)devmm_buffer_ptr(buf))[0] == 0x5A;
  if (rc == DEVMM_OK)
    devmm_ipc_close(buf);
  close(a[1]);
  int status = 0;
  waitpid(pid, &status, 0);
  ck_assert_msg(!leaked, "a forged handle mapped another process's private cpu.shm memory");
  ck_assert_int_eq(rc, DEVMM_EINVAL);
  ck_assert_error_contains("token");
}
END_TEST

/* ADR 40: a cpu.shm handle opens only a cpu.shm memfd: never the simulator's device memory nor
 * the GPU plugin's ledger, although both are devmm memfds. */
START_TEST(each_kind_opens_only_its_own_memfds) {
  init("cpu");
  devmm_ipc_handle good = shm_handle(4096);
  const char *names[] = {"devmm-sim", "devmm-ipc-ledger"};
  for (int i = 0; i < 2; i++) {
    int fd = sealed_memfd(names[i], 8192);
    devmm_ipc_handle h = good;
    forge_fd(&h, fd);
    for (int use_fd = 0; use_fd < 2; use_fd++) {
      devmm_buffer *b = NULL;
      int rc = use_fd ? devmm_ipc_open_fd(NULL, &h, fd, &b) : devmm_ipc_open(NULL, &h, &b);
      if (rc == DEVMM_OK)
        devmm_ipc_close(b);
      ck_assert_msg(rc == DEVMM_EINVAL, "a cpu.shm handle opened a %s memfd (%s path): %d",
                    names[i], use_fd ? "descriptor" : "/proc", rc);
      ck_assert_error_contains("not a cpu.shm memfd");
    }
    close(fd);
  }
}
END_TEST

/* ADR 40: the name of the file a handle names reaches the message escaped, on both paths. */
START_TEST(a_memfd_name_reaches_messages_escaped) {
  init("cpu");
  devmm_ipc_handle h = shm_handle(4096);
  int fd = sealed_memfd("x\n[devmm] IPC handle verified OK\x1b[2J", 4096);
  forge_fd(&h, fd);
  for (int use_fd = 0; use_fd < 2; use_fd++) {
    devmm_buffer *b = NULL;
    int rc = use_fd ? devmm_ipc_open_fd(NULL, &h, fd, &b) : devmm_ipc_open(NULL, &h, &b);
    ck_assert_int_eq(rc, DEVMM_EINVAL);
    ck_assert_msg(!has_control(devmm_last_error()), "%s", devmm_last_error());
    ck_assert_error_contains("x\\x0a[devmm]");
  }
  close(fd);
}
END_TEST

/* ADR 40: a handle whose range is shifted into the padding past the exporter's allocation (the
 * memfd is a page; the allocation 100 bytes) is refused. */
START_TEST(a_range_past_the_exporters_allocation_is_refused) {
  init("cpu");
  devmm_ipc_handle h = shm_handle(100);
  uint64_t off = 1;
  memcpy(h.bytes + DEVMM_IPC_HEADER_SIZE + 16, &off, 8);
  reseal(&h);
  devmm_buffer *b = NULL;
  int rc = devmm_ipc_open(NULL, &h, &b);
  if (rc == DEVMM_OK)
    devmm_ipc_close(b);
  ck_assert_int_eq(rc, DEVMM_EINVAL);
  ck_assert_error_contains("100-byte allocation");
}
END_TEST

/* ADR 40: a handle of this format always names its pid namespace: 0 does not turn the check off;
 * and a handle of the previous format is refused as one. */
START_TEST(a_handle_without_a_pid_namespace_or_of_an_older_format_is_refused) {
  init("cpu");
  devmm_ipc_handle good = shm_handle(4096), h = good;
  uint32_t zero = 0;
  memcpy(h.bytes + DEVMM_IPC_HEADER_SIZE + 28, &zero, 4);
  reseal(&h);
  devmm_buffer *b = NULL;
  int rc = devmm_ipc_open(NULL, &h, &b);
  if (rc == DEVMM_OK)
    devmm_ipc_close(b);
  ck_assert_int_eq(rc, DEVMM_EINVAL);
  ck_assert_error_contains("pid namespace");
  h = good;
  uint16_t old = 1;
  memcpy(h.bytes + 4, &old, 2);
  reseal(&h);
  rc = devmm_ipc_open(NULL, &h, &b);
  if (rc == DEVMM_OK)
    devmm_ipc_close(b);
  ck_assert_int_eq(rc, DEVMM_EINVAL);
  ck_assert_error_contains("older devmm");
}
END_TEST

Suite *ipc_trust_suite(void) {
  Suite *s = suite_create("ipc_trust");
  TCase *tc = tcase_create("ipc_trust");
  tcase_set_timeout(tc, 60);
  tcase_add_checked_fixture(tc, NULL, free_kept);
  tcase_add_test(tc, shrink_then_seal_is_refused_on_both_paths);
  tcase_add_test(tc, kind_names_are_plain_names_of_loaded_plugins);
  tcase_add_test(tc, handles_are_made_only_of_plain_kind_names);
  tcase_add_test(tc, forged_kinds_leave_no_records);
  tcase_add_test(tc, what_a_handle_says_is_escaped);
  tcase_add_test(tc, element_counts_never_wrap);
  tcase_add_test(tc, a_tensor_handles_dtype_is_shown_escaped);
  tcase_add_test(tc, a_private_shm_memfd_is_refused_without_its_token);
  tcase_add_test(tc, each_kind_opens_only_its_own_memfds);
  tcase_add_test(tc, a_memfd_name_reaches_messages_escaped);
  tcase_add_test(tc, a_range_past_the_exporters_allocation_is_refused);
  tcase_add_test(tc, a_handle_without_a_pid_namespace_or_of_an_older_format_is_refused);
  suite_add_tcase(s, tc);
  return s;
}
