/* Suite ipc: sharing allocations between processes (include/devmm/ipc.h, ADR 30) through
 * cpu.shm and the simulator's sim.device: round trips between real processes (fork), the
 * lifetime rules (an exporter's free or exit), bad and stale handles, adaptors, leaks.
 * Environment (set by Meson): DEVMM_PLUGIN_PATH (the plugins' build directory). */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <devmm/devmm.h>

#include "testres.h"

static const devmm_device CPU = {DEVMM_DEVICE_CPU, 0};
static const devmm_device SIM0 = {DEVMM_DEVICE_SIM, 0};

/* devmm over the cpu and sim plugins (one 16 MiB sim device, jitter so that order matters). */
static void init(void) {
  unsetenv("DEVMM_CONFIG");
  char path[TESTRES_PATH_MAX];
  int fd = testres_mkstemp(path, sizeof path, "ipc-ini");
  const char *text = "[devmm]\nplugins = cpu, sim\n[plugin sim]\ndevices = 1\nmemory = 16MiB\n"
                     "jitter_us = 200\n";
  ck_assert_int_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
  close(fd);
  int rc = devmm_init(path);
  unlink(path);
  ck_assert_msg(rc == DEVMM_OK, "devmm_init: %s", devmm_last_error());
}

static devmm_resource *kind(const char *name, const devmm_option *o, size_t n) {
  devmm_resource *r = NULL;
  int rc = devmm_resource_create_kind(name, 0, o, n, &r);
  ck_assert_msg(rc == DEVMM_OK, "%s: %s", name, devmm_last_error());
  return r;
}

static void fill(unsigned char *p, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++)
    p[i] = (unsigned char)(seed + i * 7);
}

static int same(const unsigned char *p, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++)
    if (p[i] != (unsigned char)(seed + i * 7))
      return 0;
  return 1;
}

/* How many descriptors and mappings of this process are cpu.shm memfds. */
static void shm_usage(int *fds, int *maps) {
  *fds = *maps = 0;
  DIR *d = opendir("/proc/self/fd");
  ck_assert_ptr_nonnull(d);
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    char path[300], target[256];
    snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
    ssize_t n = readlink(path, target, sizeof target - 1);
    if (n > 0) {
      target[n] = '\0';
      *fds += strstr(target, "memfd:devmm-cpu.shm") != NULL;
    }
  }
  closedir(d);
  FILE *f = fopen("/proc/self/maps", "re");
  ck_assert_ptr_nonnull(f);
  char line[512];
  while (fgets(line, sizeof line, f))
    *maps += strstr(line, "devmm-cpu.shm") != NULL;
  fclose(f);
}

static int wait_child(pid_t pid) {
  int status = 0;
  ck_assert_int_eq(waitpid(pid, &status, 0), pid);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 100 + WTERMSIG(status);
}

/* ---------------------------------------------------------------- cpu.shm */

/* The child is forked before devmm starts, so that each process initialises its own devmm (the
 * simulator's streams are threads, which a fork does not copy). It reads the handle from a
 * pipe, checks the bytes, writes new ones, closes, and reports through its exit status. */
static int importer(int from, int done, size_t n, int device_copy) {
  devmm_ipc_handle h;
  if (read(from, h.bytes, sizeof h.bytes) != (ssize_t)sizeof h.bytes)
    return 10;
  init();
  devmm_buffer *b = NULL;
  if (devmm_ipc_open(NULL, &h, &b) != DEVMM_OK) {
    fprintf(stderr, "child: %s\n", devmm_last_error());
    return 11;
  }
  if (devmm_buffer_nbytes(b) != n)
    return 12;
  unsigned char *host = malloc(n);
  devmm_resource *r = devmm_buffer_resource(b);
  if (device_copy) {
    if (devmm_copy(r, host, devmm_buffer_ptr(b), n, NULL) || devmm_synchronize(r, NULL))
      return 13;
  } else {
    memcpy(host, devmm_buffer_ptr(b), n);
  }
  if (!same(host, n, 3))
    return 14;
  fill(host, n, 9);
  if (device_copy) {
    if (devmm_copy(r, devmm_buffer_ptr(b), host, n, NULL) || devmm_synchronize(r, NULL))
      return 15;
  } else {
    memcpy(devmm_buffer_ptr(b), host, n);
  }
  free(host);
  devmm_ipc_close(b);
  char ok = 1;
  return write(done, &ok, 1) == 1 ? 0 : 16;
}

static void round_trip(const char *kind_name, int device_copy) {
  int to_child[2], from_child[2];
  ck_assert_int_eq(pipe(to_child), 0);
  ck_assert_int_eq(pipe(from_child), 0);
  size_t n = 3 * 4096 + 123;
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    close(to_child[1]);
    close(from_child[0]);
    _exit(importer(to_child[0], from_child[1], n, device_copy));
  }
  close(to_child[0]);
  close(from_child[1]);
  init();
  devmm_resource *r = kind(kind_name, NULL, 0);
  void *p;
  ck_assert_int_eq(devmm_allocate(r, n, 0, NULL, &p), DEVMM_OK);
  unsigned char *host = malloc(n);
  fill(host, n, 3);
  ck_assert_int_eq(devmm_copy(r, p, host, n, NULL), DEVMM_OK);
  ck_assert_int_eq(devmm_synchronize(r, NULL), DEVMM_OK);
  devmm_ipc_handle h;
  ck_assert_msg(devmm_ipc_get_handle(r, p, n, &h) == DEVMM_OK, "%s", devmm_last_error());
  ck_assert_int_eq(write(to_child[1], h.bytes, sizeof h.bytes), (ssize_t)sizeof h.bytes);
  char ok = 0;
  ck_assert_int_eq(read(from_child[0], &ok, 1), 1); /* the child wrote and closed */
  ck_assert_int_eq(wait_child(pid), 0);
  memset(host, 0, n);
  ck_assert_int_eq(devmm_copy(r, host, p, n, NULL), DEVMM_OK);
  ck_assert_int_eq(devmm_synchronize(r, NULL), DEVMM_OK);
  ck_assert_msg(same(host, n, 9), "the parent does not see the child's write");
  free(host);
  ck_assert_int_eq(devmm_deallocate(r, p, n, 0, NULL), DEVMM_OK);
  devmm_resource_release(r);
  close(to_child[1]);
  close(from_child[0]);
}

START_TEST(shm_round_trip_between_processes) { round_trip("cpu.shm", 0); }
END_TEST

START_TEST(shm_exporter_free_keeps_an_open_mapping) {
  init();
  devmm_resource *r = kind("cpu.shm", NULL, 0);
  void *p;
  size_t n = 10000;
  ck_assert_int_eq(devmm_allocate(r, n, 0, NULL, &p), DEVMM_OK);
  fill(p, n, 3);
  devmm_ipc_handle h;
  ck_assert_int_eq(devmm_ipc_get_handle(r, p, n, &h), DEVMM_OK);
  devmm_buffer *b;
  ck_assert_msg(devmm_ipc_open(NULL, &h, &b) == DEVMM_OK, "%s", devmm_last_error());
  unsigned char *q = devmm_buffer_ptr(b);
  ck_assert_ptr_ne(q, p); /* a mapping of its own */
  ck_assert_int_eq(devmm_deallocate(r, p, n, 0, NULL), DEVMM_OK);
  ck_assert_msg(same(q, n, 3), "the exporter's free took the importer's bytes");
  fill(q, n, 5); /* still writable */
  ck_assert(same(q, n, 5));
  int fds, maps;
  shm_usage(&fds, &maps);
  ck_assert_int_eq(fds, 1); /* the exporter's went with its free; the mapping keeps its own */
  ck_assert_int_eq(maps, 1);
  devmm_ipc_close(b);
  shm_usage(&fds, &maps);
  ck_assert_int_eq(fds + maps, 0);
  devmm_resource_release(r);
}
END_TEST

START_TEST(shm_handle_after_the_exporter_freed_is_stale) {
  init();
  devmm_resource *r = kind("cpu.shm", NULL, 0);
  void *p;
  ck_assert_int_eq(devmm_allocate(r, 4096, 0, NULL, &p), DEVMM_OK);
  devmm_ipc_handle h;
  ck_assert_int_eq(devmm_ipc_get_handle(r, p, 4096, &h), DEVMM_OK);
  ck_assert_int_eq(devmm_deallocate(r, p, 4096, 0, NULL), DEVMM_OK);
  devmm_buffer *b = (devmm_buffer *)1;
  ck_assert_int_eq(devmm_ipc_open(NULL, &h, &b), DEVMM_ENOENT);
  ck_assert_ptr_null(b);
  ck_assert_error_contains("cpu.shm: cannot open the IPC handle: the exporting process");
  ck_assert_error_contains("freed the memory");
  /* a new allocation may reuse the descriptor number: the inode tells them apart */
  void *p2;
  ck_assert_int_eq(devmm_allocate(r, 4096, 0, NULL, &p2), DEVMM_OK);
  ck_assert_int_eq(devmm_ipc_open(NULL, &h, &b), DEVMM_ENOENT);
  ck_assert_error_contains("freed the memory");
  ck_assert_int_eq(devmm_deallocate(r, p2, 4096, 0, NULL), DEVMM_OK);
  devmm_resource_release(r);
}
END_TEST

START_TEST(shm_handle_of_an_exited_exporter_is_stale) {
  int fds[2];
  ck_assert_int_eq(pipe(fds), 0);
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    init();
    devmm_resource *r = kind("cpu.shm", NULL, 0);
    void *p;
    devmm_ipc_handle h;
    int bad = devmm_allocate(r, 4096, 0, NULL, &p) || devmm_ipc_get_handle(r, p, 4096, &h) ||
              write(fds[1], h.bytes, sizeof h.bytes) != (ssize_t)sizeof h.bytes;
    _exit(bad); /* without freeing: the kernel closes the memfd */
  }
  close(fds[1]);
  devmm_ipc_handle h;
  ck_assert_int_eq(read(fds[0], h.bytes, sizeof h.bytes), (ssize_t)sizeof h.bytes);
  ck_assert_int_eq(wait_child(pid), 0);
  close(fds[0]);
  init();
  devmm_ipc_info info = {.struct_size = sizeof info};
  ck_assert_int_eq(devmm_ipc_handle_info(&h, &info), DEVMM_OK);
  ck_assert_str_eq(info.kind, "cpu.shm");
  ck_assert_int_eq(info.pid, pid);
  ck_assert_int_eq(info.bytes, 4096);
  ck_assert_int_eq(info.same_machine, 1);
  devmm_buffer *b;
  ck_assert_int_eq(devmm_ipc_open(NULL, &h, &b), DEVMM_ENOENT);
  ck_assert_error_contains("has exited or freed the memory");
}
END_TEST

START_TEST(bad_handles_are_refused_with_a_reason) {
  init();
  devmm_resource *r = kind("cpu.shm", NULL, 0);
  void *p;
  ck_assert_int_eq(devmm_allocate(r, 4096, 0, NULL, &p), DEVMM_OK);
  devmm_ipc_handle good, h;
  ck_assert_int_eq(devmm_ipc_get_handle(r, p, 4096, &good), DEVMM_OK);
  devmm_buffer *b;
  memset(&h, 0, sizeof h); /* nothing, or a truncated handle padded with zeros */
  ck_assert_int_eq(devmm_ipc_open(NULL, &h, &b), DEVMM_EINVAL);
  ck_assert_error_contains("not a devmm IPC handle: it starts with 0x00000000");
  h = good;
  h.bytes[0] ^= 1;
  ck_assert_int_eq(devmm_ipc_open(NULL, &h, &b), DEVMM_EINVAL);
  ck_assert_error_contains("expected the magic");
  h = good;
  h.bytes[4] = 9; /* version */
  ck_assert_int_eq(devmm_ipc_open(NULL, &h, &b), DEVMM_EINVAL);
  ck_assert_error_contains("IPC handle of version 9");
  h = good;
  h.bytes[DEVMM_IPC_HEADER_SIZE + 3] ^= 0x40; /* the payload */
  ck_assert_int_eq(devmm_ipc_open(NULL, &h, &b), DEVMM_EINVAL);
  ck_assert_error_contains("IPC handle corrupted");
  ck_assert_int_eq(
      devmm_ipc_handle_info(&h, &(devmm_ipc_info){.struct_size = sizeof(devmm_ipc_info)}),
      DEVMM_EINVAL);
  ck_assert_int_eq(devmm_ipc_open(NULL, NULL, &b), DEVMM_EINVAL);
  ck_assert_int_eq(devmm_ipc_open(NULL, &good, NULL), DEVMM_EINVAL);
  ck_assert_int_eq(devmm_ipc_get_handle(r, NULL, 1, &h), DEVMM_EINVAL);
  ck_assert_error_contains("ptr is NULL");
  ck_assert_int_eq(devmm_ipc_get_handle(r, p, 0, &h), DEVMM_EINVAL);
  ck_assert_error_contains("0 bytes");
  /* outside any allocation, or past its end */
  int local;
  ck_assert_int_eq(devmm_ipc_get_handle(r, &local, 4, &h), DEVMM_EINVAL);
  ck_assert_error_contains("is not inside a live cpu.shm allocation");
  ck_assert_int_eq(devmm_ipc_get_handle(r, (char *)p + 4000, 200, &h), DEVMM_EINVAL);
  ck_assert_error_contains("runs past its allocation");
  /* a handle of one kind through a stack of another */
  devmm_resource *sim = kind("sim.device", NULL, 0);
  ck_assert_int_eq(devmm_ipc_open(sim, &good, &b), DEVMM_EINVAL);
  ck_assert_error_contains("resource 'sim.device' cannot open an IPC handle of kind cpu.shm");
  devmm_resource_release(sim);
  ck_assert_int_eq(devmm_deallocate(r, p, 4096, 0, NULL), DEVMM_OK);
  devmm_resource_release(r);
}
END_TEST

START_TEST(a_stack_without_ipc_says_so) {
  init();
  devmm_resource *r = kind("cpu.malloc", NULL, 0), *st;
  ck_assert_int_eq(devmm_statistics_adaptor_create(r, &st), DEVMM_OK);
  void *p;
  ck_assert_int_eq(devmm_allocate(st, 64, 0, NULL, &p), DEVMM_OK);
  devmm_ipc_handle h;
  ck_assert_int_eq(devmm_ipc_supported(st), 0);
  ck_assert_int_eq(devmm_ipc_get_handle(st, p, 64, &h), DEVMM_ENOTSUP);
  ck_assert_error_contains("resource 'statistics(cpu.malloc)' cannot share memory with other "
                           "processes");
  ck_assert_error_contains("cpu.shm");
  ck_assert_int_eq(devmm_deallocate(st, p, 64, 0, NULL), DEVMM_OK);
  devmm_resource_release(st);
  devmm_resource_release(r);
}
END_TEST

/* An opened mapping is not the importer's allocation: its adaptors count nothing, and a limit
 * smaller than the mapping does not refuse it. */
START_TEST(adaptors_forward_and_count_nothing_for_a_mapping) {
  init();
  devmm_resource *shm = kind("cpu.shm", NULL, 0), *lim, *st;
  ck_assert_int_eq(devmm_limiting_adaptor_create(shm, 1 << 20, &lim), DEVMM_OK);
  ck_assert_int_eq(devmm_statistics_adaptor_create(lim, &st), DEVMM_OK);
  ck_assert_int_eq(devmm_ipc_supported(st), 1);
  void *p;
  size_t n = 768 << 10;
  ck_assert_int_eq(devmm_allocate(st, n, 0, NULL, &p), DEVMM_OK);
  fill(p, n, 1);
  devmm_ipc_handle h;
  ck_assert_msg(devmm_ipc_get_handle(st, p, n, &h) == DEVMM_OK, "%s", devmm_last_error());
  devmm_statistics before, after;
  ck_assert_int_eq(devmm_statistics_get(st, &before), DEVMM_OK);
  devmm_buffer *b;
  ck_assert_msg(devmm_ipc_open(st, &h, &b) == DEVMM_OK, "%s", devmm_last_error());
  ck_assert_str_eq(devmm_resource_name(devmm_buffer_resource(b)), "ipc(cpu.shm)");
  ck_assert(same(devmm_buffer_ptr(b), n, 1));
  ck_assert_int_eq(devmm_statistics_get(st, &after), DEVMM_OK);
  ck_assert_int_eq(after.current_bytes, before.current_bytes);
  ck_assert_int_eq(after.total_bytes, before.total_bytes);
  size_t used, limit;
  ck_assert_int_eq(devmm_limiting_get(lim, &used, &limit), DEVMM_OK);
  ck_assert_int_eq(used, n); /* the export alone */
  /* copies and fills go to the resource that opened it */
  ck_assert_int_eq(devmm_memset(devmm_buffer_resource(b), devmm_buffer_ptr(b), 0x5a, 16, NULL),
                   DEVMM_OK);
  ck_assert_int_eq(((unsigned char *)p)[15], 0x5a);
  void *none;
  ck_assert_int_eq(devmm_allocate(devmm_buffer_resource(b), 16, 0, NULL, &none), DEVMM_ENOTSUP);
  ck_assert_error_contains("is one opened IPC mapping: it allocates nothing");
  devmm_ipc_close(b);
  ck_assert_int_eq(devmm_deallocate(st, p, n, 0, NULL), DEVMM_OK);
  devmm_resource_release(st);
  devmm_resource_release(lim);
  devmm_resource_release(shm);
}
END_TEST

START_TEST(shm_interior_ranges_and_alignment) {
  init();
  devmm_resource *r = kind("cpu.shm", NULL, 0);
  void *p;
  size_t n = 3 * 4096;
  ck_assert_int_eq(devmm_allocate(r, n, 1 << 16, NULL, &p), DEVMM_OK);
  ck_assert_int_eq((uintptr_t)p % (1 << 16), 0);
  fill(p, n, 2);
  devmm_ipc_handle h;
  ck_assert_int_eq(devmm_ipc_get_handle(r, (char *)p + 5000, 100, &h), DEVMM_OK);
  devmm_buffer *b;
  ck_assert_int_eq(devmm_ipc_open(NULL, &h, &b), DEVMM_OK);
  ck_assert_int_eq(devmm_buffer_nbytes(b), 100);
  ck_assert_int_eq(memcmp(devmm_buffer_ptr(b), (char *)p + 5000, 100), 0);
  devmm_ipc_close(b);
  ck_assert_int_eq(devmm_deallocate(r, p, n, 1 << 16, NULL), DEVMM_OK);
  devmm_resource_release(r);
}
END_TEST

START_TEST(shm_leaves_no_descriptor_or_mapping) {
  init();
  int fds, maps;
  shm_usage(&fds, &maps);
  ck_assert_int_eq(fds + maps, 0);
  devmm_resource *r = kind("cpu.shm", NULL, 0);
  void *p[4];
  devmm_buffer *b[4];
  for (int i = 0; i < 4; i++) {
    devmm_ipc_handle h;
    ck_assert_int_eq(devmm_allocate(r, 4096 * (i + 1), 0, NULL, &p[i]), DEVMM_OK);
    ck_assert_int_eq(devmm_ipc_get_handle(r, p[i], 4096, &h), DEVMM_OK);
    ck_assert_int_eq(devmm_ipc_open(NULL, &h, &b[i]), DEVMM_OK);
  }
  shm_usage(&fds, &maps);
  ck_assert_int_eq(fds, 8); /* each mapping keeps a descriptor: it can export again */
  ck_assert_int_eq(maps, 8);
  for (int i = 0; i < 4; i++) {
    devmm_ipc_close(b[i]);
    ck_assert_int_eq(devmm_deallocate(r, p[i], 4096 * (i + 1), 0, NULL), DEVMM_OK);
  }
  shm_usage(&fds, &maps);
  ck_assert_int_eq(fds + maps, 0);
  devmm_resource_release(r);
}
END_TEST

/* ABI: an ops table compiled before the ipc field (a shorter struct_size) has no group, even
 * if the bytes past its end happen to be set; a group shorter than its last op is none. */
START_TEST(the_group_is_read_only_as_far_as_struct_sizes_say) {
  devmm_resource_ipc_ops group;
  devmm_resource_ops ops;
  testres_ipc_stub(&ops, &group, "test.ipc");
  devmm_resource *r;
  ck_assert_int_eq(devmm_resource_create(&ops, NULL, CPU, "test.ipc", 0, &r), DEVMM_OK);
  ck_assert_int_eq(devmm_ipc_supported(r), 1);
  devmm_resource_release(r);
  ops.struct_size = offsetof(devmm_resource_ops, ipc); /* an older table: ipc is past its end */
  ck_assert_int_eq(devmm_resource_create(&ops, NULL, CPU, "test.old", 0, &r), DEVMM_OK);
  ck_assert_int_eq(devmm_ipc_supported(r), 0);
  int x;
  devmm_ipc_handle h;
  ck_assert_int_eq(devmm_ipc_get_handle(r, &x, 4, &h), DEVMM_ENOTSUP);
  ck_assert_error_contains("resource 'test.old' cannot share memory");
  devmm_resource_release(r);
  ops.struct_size = sizeof ops;
  group.struct_size = offsetof(devmm_resource_ipc_ops, close); /* no room for close */
  ck_assert_int_eq(devmm_resource_create(&ops, NULL, CPU, "test.short", 0, &r), DEVMM_OK);
  ck_assert_int_eq(devmm_ipc_supported(r), 0);
  devmm_resource_release(r);
  group.struct_size = sizeof group;
  group.close = NULL; /* an incomplete group is none */
  ck_assert_int_eq(devmm_resource_create(&ops, NULL, CPU, "test.partial", 0, &r), DEVMM_OK);
  ck_assert_int_eq(devmm_ipc_supported(r), 0);
  devmm_resource_release(r);
}
END_TEST

/* ---------------------------------------------------------------- the simulator */

START_TEST(sim_round_trip_between_processes) { round_trip("sim.device", 1); }
END_TEST

/* CUDA opens no handle in the process that made it; devmm opens it there as the exporter's own
 * memory (ADR 38 §IPC opens), so an exporter's free is seen at once: the memory is no longer live.
 * An exporter's free under another process's mapping: sim_ipc's
 * an_exporters_free_under_an_importer_is_a_fault. */
START_TEST(sim_a_handle_opened_by_its_exporter_is_its_own_memory) {
  init();
  devmm_resource *r = kind("sim.device", NULL, 0);
  void *p;
  size_t n = 1000;
  ck_assert_int_eq(devmm_allocate(r, n, 0, NULL, &p), DEVMM_OK);
  unsigned char host[1000];
  fill(host, n, 4);
  ck_assert_int_eq(devmm_copy(r, p, host, n, NULL), DEVMM_OK);
  ck_assert_int_eq(devmm_synchronize(r, NULL), DEVMM_OK);
  devmm_ipc_handle h;
  ck_assert_int_eq(devmm_ipc_get_handle(r, p, n, &h), DEVMM_OK);
  devmm_buffer *b;
  ck_assert_msg(devmm_ipc_open(NULL, &h, &b) == DEVMM_OK, "%s", devmm_last_error());
  void *q = devmm_buffer_ptr(b);
  ck_assert_ptr_eq(q, p);
  devmm_resource *mr = devmm_buffer_resource(b);
  ck_assert_int_eq(devmm_buffer_device(b).device_type, DEVMM_DEVICE_SIM);
  memset(host, 0, n);
  ck_assert_int_eq(devmm_copy(mr, host, q, n, NULL), DEVMM_OK);
  ck_assert_int_eq(devmm_synchronize(mr, NULL), DEVMM_OK);
  ck_assert(same(host, n, 4));
  ck_assert_int_eq(devmm_deallocate(r, p, n, 0, NULL), DEVMM_OK);
  ck_assert_int_eq(devmm_copy(mr, host, q, n, NULL), DEVMM_EDEVICE); /* not live any more */
  devmm_ipc_close(b);
  devmm_resource_release(r);
}
END_TEST

/* ADR 33: the range is checked against the allocation, and an interior
 * pointer maps the enclosing allocation (as CUDA's cudaIpcGetMemHandle does) with the offset
 * carried in devmm's payload: the importer sees the bytes at the pointer, not at the base. */
START_TEST(sim_handles_check_the_range_and_carry_an_interior_offset) {
  init();
  devmm_option packed[] = {{"ipc_isolate", "false", 1}}; /* the runtime's own sizes */
  devmm_resource *r = kind("sim.device", packed, 1);
  void *p;
  ck_assert_int_eq(devmm_allocate(r, 8192, 0, NULL, &p), DEVMM_OK);
  unsigned char host[8192];
  fill(host, sizeof host, 5);
  ck_assert_int_eq(devmm_copy(r, p, host, sizeof host, NULL), DEVMM_OK);
  ck_assert_int_eq(devmm_synchronize(r, NULL), DEVMM_OK);
  devmm_ipc_handle h;
  ck_assert_int_eq(devmm_ipc_get_handle(r, p, (size_t)1 << 40, &h), DEVMM_EINVAL);
  ck_assert_error_contains("sim.device: [");
  ck_assert_error_contains("+1099511627776) runs past its allocation of 8192 bytes");
  ck_assert_int_eq(devmm_ipc_get_handle(r, (char *)p + 4096, 4097, &h), DEVMM_EINVAL);
  ck_assert_error_contains("runs past its allocation of 8192 bytes");
  ck_assert_msg(devmm_ipc_get_handle(r, (char *)p + 4096 + 100, 1000, &h) == DEVMM_OK, "%s",
                devmm_last_error());
  devmm_buffer *b;
  ck_assert_msg(devmm_ipc_open(NULL, &h, &b) == DEVMM_OK, "%s", devmm_last_error());
  ck_assert_uint_eq(devmm_buffer_nbytes(b), 1000);
  devmm_resource *mr = devmm_buffer_resource(b);
  unsigned char back[1000];
  ck_assert_int_eq(devmm_copy(mr, back, devmm_buffer_ptr(b), sizeof back, NULL), DEVMM_OK);
  ck_assert_int_eq(devmm_synchronize(mr, NULL), DEVMM_OK);
  ck_assert_msg(memcmp(back, host + 4196, sizeof back) == 0,
                "the importer sees the allocation's base, not the interior pointer's bytes");
  devmm_ipc_close(b);
  /* the runtime itself maps the enclosing allocation, as CUDA does */
  ck_assert_int_eq(devmm_deallocate(r, p, 8192, 0, NULL), DEVMM_OK);
  devmm_resource_release(r);
  /* pools: sim.async has no IPC group, and ipc = true says why */
  devmm_resource *a = kind("sim.async", NULL, 0);
  ck_assert_int_eq(devmm_ipc_supported(a), 0);
  devmm_resource_release(a);
  devmm_option o[] = {{"pool", "own", 1}, {"ipc", "true", 2}};
  devmm_resource *x = NULL;
  ck_assert_int_eq(devmm_resource_create_kind("sim.async", 0, o, 2, &x), DEVMM_ENOTSUP);
  ck_assert_error_contains("this runtime's pools cannot be shared");
  devmm_option d[] = {{"ipc", "true", 1}};
  ck_assert_int_eq(devmm_resource_create_kind("sim.async", 0, d, 1, &x), DEVMM_EINVAL);
  ck_assert_error_contains("ipc = true needs pool = own");
  (void)SIM0;
  (void)CPU;
}
END_TEST

/* ---------------------------------------------------------------- the outside review */

/* A handle's checksum recomputed after a forgery (FNV-1a, the checksum field read as 0). */
static void reseal(devmm_ipc_handle *h) {
  uint32_t x = 2166136261u;
  for (size_t i = 0; i < sizeof h->bytes; i++)
    x = (x ^ (i >= 8 && i < 12 ? 0 : h->bytes[i])) * 16777619u;
  memcpy(h->bytes + 8, &x, 4);
}

/* The cpu.shm payload: ino, dev, offset (uint64), fd (int32), after the 96-byte header. */
static void forge_fd(devmm_ipc_handle *h, int fd) {
  struct stat st;
  ck_assert_int_eq(fstat(fd, &st), 0);
  uint64_t ino = (uint64_t)st.st_ino, dev = (uint64_t)st.st_dev;
  memcpy(h->bytes + DEVMM_IPC_HEADER_SIZE, &ino, 8);
  memcpy(h->bytes + DEVMM_IPC_HEADER_SIZE + 8, &dev, 8);
  memcpy(h->bytes + DEVMM_IPC_HEADER_SIZE + 24, &fd, 4);
  reseal(h);
}

static int shm_fd_of(const devmm_ipc_handle *h) {
  int fd;
  memcpy(&fd, h->bytes + DEVMM_IPC_HEADER_SIZE + 24, 4);
  return fd;
}

/* ADR 33: a forged handle (its checksum is no authentication) naming a regular file,
 * a pipe, or another boot opens nothing; the memfd is sealed against shrinking. */
START_TEST(forged_handles_open_only_devmm_memfds) {
  init();
  devmm_resource *r = kind("cpu.shm", NULL, 0);
  void *p;
  ck_assert_int_eq(devmm_allocate(r, 4096, 0, NULL, &p), DEVMM_OK);
  devmm_ipc_handle good, h;
  ck_assert_int_eq(devmm_ipc_get_handle(r, p, 4096, &good), DEVMM_OK);
  devmm_buffer *b = NULL;
  /* a regular file of this process, right inode and size: it must not be mapped */
  char path[TESTRES_PATH_MAX];
  int file = testres_mkstemp(path, sizeof path, "ipc-forged");
  unlink(path);
  ck_assert_int_eq(ftruncate(file, 8192), 0);
  h = good;
  forge_fd(&h, file);
  ck_assert_int_eq(devmm_ipc_open(NULL, &h, &b), DEVMM_EINVAL);
  ck_assert_ptr_null(b);
  ck_assert_error_contains("is not a cpu.shm memfd");
  int pipefd[2];
  ck_assert_int_eq(pipe(pipefd), 0);
  h = good;
  forge_fd(&h, pipefd[0]);
  ck_assert_int_eq(devmm_ipc_open(NULL, &h, &b), DEVMM_EINVAL);
  ck_assert_error_contains("is not a regular file (a devmm memfd)");
  close(pipefd[0]);
  close(pipefd[1]);
  close(file);
  /* another boot: refused, and said so */
  h = good;
  h.bytes[32] ^= 0x5a;
  reseal(&h);
  devmm_ipc_info info = {.struct_size = sizeof info};
  ck_assert_int_eq(devmm_ipc_handle_info(&h, &info), DEVMM_OK);
  ck_assert_int_eq(info.same_machine, 0);
  ck_assert_int_eq(devmm_ipc_open(NULL, &h, &b), DEVMM_EINVAL);
  ck_assert_error_contains("was made on another machine, or before this machine's last boot (its "
                           "boot id differs): it names nothing here");
  /* the memfd is sealed: a peer cannot shrink it under the other's mapping (SIGBUS) */
  char proc[64];
  snprintf(proc, sizeof proc, "/proc/self/fd/%d", shm_fd_of(&good));
  int fd = open(proc, O_RDWR | O_CLOEXEC);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_ne(ftruncate(fd, 0), 0);
  ck_assert_int_eq(errno, EPERM);
  close(fd);
  ck_assert_int_eq(devmm_deallocate(r, p, 4096, 0, NULL), DEVMM_OK);
  devmm_resource_release(r);
}
END_TEST

/* ADR 33: an opened cpu.shm mapping exports again (the importer keeps its own descriptor). */
START_TEST(shm_mappings_export_again) {
  init();
  devmm_resource *r = kind("cpu.shm", NULL, 0);
  void *p;
  ck_assert_int_eq(devmm_allocate(r, 8192, 0, NULL, &p), DEVMM_OK);
  devmm_ipc_handle h, h2;
  ck_assert_int_eq(devmm_ipc_get_handle(r, p, 8192, &h), DEVMM_OK);
  devmm_buffer *b, *b2;
  ck_assert_int_eq(devmm_ipc_open(NULL, &h, &b), DEVMM_OK);
  ck_assert_int_eq(devmm_deallocate(r, p, 8192, 0, NULL), DEVMM_OK); /* the exporter lets go */
  char *q = devmm_buffer_ptr(b);
  ck_assert_msg(devmm_ipc_get_handle(devmm_buffer_resource(b), q + 100, 4000, &h2) == DEVMM_OK,
                "%s", devmm_last_error());
  ck_assert_int_eq(devmm_ipc_get_handle(devmm_buffer_resource(b), q + 100, 8093, &h2),
                   DEVMM_EINVAL);
  ck_assert_error_contains("runs past its allocation");
  ck_assert_int_eq(devmm_ipc_get_handle(devmm_buffer_resource(b), q + 100, 4000, &h2), DEVMM_OK);
  ck_assert_msg(devmm_ipc_open(NULL, &h2, &b2) == DEVMM_OK, "%s", devmm_last_error());
  ck_assert_uint_eq(devmm_buffer_nbytes(b2), 4000);
  ((char *)devmm_buffer_ptr(b2))[0] = 42;
  ck_assert_int_eq(q[100], 42);
  devmm_ipc_close(b); /* the second mapping has its own descriptor */
  ((char *)devmm_buffer_ptr(b2))[1] = 43;
  ck_assert_int_eq(((char *)devmm_buffer_ptr(b2))[1], 43);
  devmm_ipc_close(b2);
  int fds, maps;
  shm_usage(&fds, &maps);
  ck_assert_int_eq(fds, 0);
  ck_assert_int_eq(maps, 0);
  devmm_resource_release(r);
}
END_TEST

/* ADR 33: a cpu.shm handle's descriptor can travel itself (SCM_RIGHTS, DupFd): the receiver
 * maps it without /proc, after the exporter freed; a wrong descriptor is refused. */
START_TEST(shm_handles_travel_as_descriptors) {
  init();
  devmm_resource *r = kind("cpu.shm", NULL, 0);
  void *p;
  ck_assert_int_eq(devmm_allocate(r, 8192, 0, NULL, &p), DEVMM_OK);
  fill(p, 8192, 6);
  devmm_ipc_handle h;
  ck_assert_int_eq(devmm_ipc_get_handle(r, (char *)p + 4096, 4096, &h), DEVMM_OK);
  int fd = -1;
  ck_assert_msg(devmm_ipc_handle_fd(&h, &fd) == DEVMM_OK, "%s", devmm_last_error());
  int sent = dup(fd); /* what the receiver gets */
  ck_assert_int_ge(sent, 0);
  ck_assert_int_eq(devmm_deallocate(r, p, 8192, 0, NULL), DEVMM_OK);
  ck_assert_int_eq(devmm_ipc_handle_fd(&h, &fd), DEVMM_EINVAL); /* freed: no descriptor */
  ck_assert_error_contains("no live cpu.shm allocation or mapping of this process");
  devmm_buffer *b = NULL;
  ck_assert_int_eq(devmm_ipc_open(NULL, &h, &b), DEVMM_ENOENT); /* /proc: gone */
  ck_assert_msg(devmm_ipc_open_fd(NULL, &h, sent, &b) == DEVMM_OK, "%s", devmm_last_error());
  close(sent); /* the mapping keeps its own duplicate */
  ck_assert(same(devmm_buffer_ptr(b), 4096, 6 + 4096 * 7));
  devmm_ipc_handle h2;
  ck_assert_int_eq(devmm_ipc_get_handle(devmm_buffer_resource(b), devmm_buffer_ptr(b), 4096, &h2),
                   DEVMM_OK);
  ck_assert_int_eq(devmm_ipc_handle_fd(&h2, &fd), DEVMM_OK); /* a mapping's own descriptor */
  devmm_ipc_close(b);
  /* a descriptor that is not the handle's memfd */
  char path[TESTRES_PATH_MAX];
  int file = testres_mkstemp(path, sizeof path, "ipc-adopt");
  unlink(path);
  ck_assert_int_eq(devmm_ipc_open_fd(NULL, &h, file, &b), DEVMM_EINVAL);
  ck_assert_error_contains("is not the memfd the handle names");
  close(file);
  ck_assert_int_eq(devmm_ipc_open_fd(NULL, &h, -1, &b), DEVMM_EINVAL);
  int fds, maps;
  shm_usage(&fds, &maps);
  ck_assert_int_eq(fds + maps, 0);
  devmm_resource_release(r);
  /* device memory has no descriptor to send */
  devmm_resource *sim = kind("sim.device", NULL, 0);
  ck_assert_int_eq(devmm_allocate(sim, 4096, 0, NULL, &p), DEVMM_OK);
  ck_assert_int_eq(devmm_ipc_get_handle(sim, p, 4096, &h), DEVMM_OK);
  ck_assert_int_eq(devmm_ipc_handle_fd(&h, &fd), DEVMM_ENOTSUP);
  ck_assert_error_contains("IPC handles of kind sim.device name no descriptor");
  ck_assert_int_eq(devmm_deallocate(sim, p, 4096, 0, NULL), DEVMM_OK);
  devmm_resource_release(sim);
}
END_TEST

/* ADR 33: devmm_ipc_info is versioned; resource ops sizes that end inside a field are
 * refused (copying them would copy half a pointer). */
START_TEST(the_info_struct_and_ops_sizes_are_versioned) {
  init();
  devmm_resource *r = kind("cpu.shm", NULL, 0);
  void *p;
  ck_assert_int_eq(devmm_allocate(r, 64, 0, NULL, &p), DEVMM_OK);
  devmm_ipc_handle h;
  ck_assert_int_eq(devmm_ipc_get_handle(r, p, 64, &h), DEVMM_OK);
  devmm_ipc_info info;
  memset(&info, 0, sizeof info);
  ck_assert_int_eq(devmm_ipc_handle_info(&h, &info), DEVMM_EINVAL);
  ck_assert_error_contains("devmm_ipc_handle_info: out->struct_size is 0: set it to "
                           "sizeof(devmm_ipc_info)");
  info.struct_size = sizeof info;
  ck_assert_int_eq(devmm_ipc_handle_info(&h, &info), DEVMM_OK);
  ck_assert_str_eq(info.kind, "cpu.shm");
  ck_assert_uint_eq(info.bytes, 64);
  ck_assert_int_eq(info.same_machine, 1);
  ck_assert_int_eq(devmm_deallocate(r, p, 64, 0, NULL), DEVMM_OK);
  devmm_resource_release(r);
  devmm_resource_ipc_ops group;
  devmm_resource_ops ops;
  testres_ipc_stub(&ops, &group, "test.ipc");
  ops.struct_size = offsetof(devmm_resource_ops, ipc) + 4; /* half of the ipc pointer */
  devmm_resource *x = NULL;
  ck_assert_int_eq(devmm_resource_create(&ops, NULL, CPU, "test.odd", 0, &x), DEVMM_EINVAL);
  ck_assert_ptr_null(x);
  ck_assert_error_contains("ops.struct_size");
  ck_assert_error_contains("ends inside a field");
}
END_TEST

Suite *ipc_suite(void) {
  Suite *s = suite_create("ipc");
  TCase *tc = tcase_create("ipc");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, shm_round_trip_between_processes);
  tcase_add_test(tc, shm_exporter_free_keeps_an_open_mapping);
  tcase_add_test(tc, shm_handle_after_the_exporter_freed_is_stale);
  tcase_add_test(tc, shm_handle_of_an_exited_exporter_is_stale);
  tcase_add_test(tc, bad_handles_are_refused_with_a_reason);
  tcase_add_test(tc, a_stack_without_ipc_says_so);
  tcase_add_test(tc, adaptors_forward_and_count_nothing_for_a_mapping);
  tcase_add_test(tc, shm_interior_ranges_and_alignment);
  tcase_add_test(tc, shm_leaves_no_descriptor_or_mapping);
  tcase_add_test(tc, the_group_is_read_only_as_far_as_struct_sizes_say);
  tcase_add_test(tc, sim_round_trip_between_processes);
  tcase_add_test(tc, sim_a_handle_opened_by_its_exporter_is_its_own_memory);
  tcase_add_test(tc, sim_handles_check_the_range_and_carry_an_interior_offset);
  tcase_add_test(tc, forged_handles_open_only_devmm_memfds);
  tcase_add_test(tc, shm_mappings_export_again);
  tcase_add_test(tc, the_info_struct_and_ops_sizes_are_versioned);
  tcase_add_test(tc, shm_handles_travel_as_descriptors);
  suite_add_tcase(s, tc);
  return s;
}
