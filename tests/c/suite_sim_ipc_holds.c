/* Suite sim_ipc_holds: an exporter's free of <gpu>.device memory waits for importers that map it
 * (ADR 38 §IPC opens), but not for importers that are gone (ADR 44): a SIGKILLed importer's hold
 * is dropped at the exporter's free, and one that exits without closing at the next reap; a live
 * importer still holds. Processes: each importer is forked before either side starts devmm (ADR
 * 37 §fork) and speaks through pipes.
 * Environment (set by Meson): DEVMM_PLUGIN_PATH (the plugins' build directory). */
#include <check.h>
#include <fcntl.h>
#include <stdint.h>
#include <sys/mman.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "sim_env.h"

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

/* An importer forked before devmm starts: opens the handle the parent sends, says so, then on
 * the parent's word 'c' closes and exits, 'x' exits without closing; or is killed. */
static int importer(int from, int to) {
  devmm_ipc_handle h;
  if (!get(from, h.bytes, sizeof h.bytes))
    return 10;
  sim_init(0, 1);
  devmm_buffer *b = NULL;
  if (devmm_ipc_open(NULL, &h, &b)) {
    fprintf(stderr, "importer: %s\n", devmm_last_error());
    return 11;
  }
  char c = 1;
  put(to, &c, 1);
  if (!get(from, &c, 1))
    return 12;
  if (c == 'c')
    devmm_ipc_close(b);
  return 0; /* 'x': _exit without closing */
}

static pid_t fork_importer(int *to_child, int *from_child) {
  int a[2], b[2];
  ck_assert_int_eq(pipe(a), 0);
  ck_assert_int_eq(pipe(b), 0);
  fflush(NULL);
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    close(a[1]);
    close(b[0]);
    _exit(importer(a[0], b[1]));
  }
  close(a[0]);
  close(b[1]);
  *to_child = a[1];
  *from_child = b[0];
  return pid;
}

/* Waits until pid has exited, leaving it a zombie (not reaped) when keep. */
static void wait_exit(pid_t pid, int keep) {
  siginfo_t si;
  ck_assert_int_eq(waitid(P_PID, (id_t)pid, &si, WEXITED | (keep ? WNOWAIT : 0)), 0);
}

static void pause_ms(long ms) {
  struct timespec ts = {0, ms * 1000000L};
  nanosleep(&ts, NULL);
}

/* An allocation and free of the exporter: its reap point (ADR 38). */
static void reap(devmm_resource *r) {
  void *q;
  ck_assert_int_eq(devmm_allocate(r, 4096, 0, NULL, &q), DEVMM_OK);
  ck_assert_int_eq(devmm_deallocate(r, q, 4096, 0, NULL), DEVMM_OK);
}

/* A SIGKILLed importer (a zombie, not yet reaped, then reaped) holds nothing: the exporter's
 * free is done at once. Before ADR 44 the memory stayed held until the exporter exited. */
START_TEST(a_killed_importers_hold_is_dropped_at_the_exporters_free) {
  int to, from;
  pid_t pid = fork_importer(&to, &from);
  sim_init(0, 1);
  devmm_resource *r = kind("sim.device", 0);
  void *p;
  ck_assert_int_eq(devmm_allocate(r, 4096, 0, NULL, &p), DEVMM_OK);
  devmm_ipc_handle h;
  ck_assert_int_eq(devmm_ipc_get_handle(r, p, 4096, &h), DEVMM_OK);
  put(to, h.bytes, sizeof h.bytes);
  char c;
  ck_assert(get(from, &c, 1)); /* it maps p */
  uint64_t live = stats().allocations_live;
  ck_assert_int_eq(kill(pid, SIGKILL), 0);
  wait_exit(pid, 1); /* a zombie: exited, its mappings gone */
  ck_assert_int_eq(devmm_deallocate(r, p, 4096, 0, NULL), DEVMM_OK);
  ck_assert_msg(stats().allocations_live == live - 1,
                "a killed importer still holds the exporter's memory: %llu allocations live, "
                "expected %llu",
                (unsigned long long)stats().allocations_live, (unsigned long long)(live - 1));
  wait_exit(pid, 0);
  devmm_resource_release(r);
}
END_TEST

/* A live importer holds (its free deferred past reaps); once it exits without closing, the next
 * reap does the free. */
START_TEST(an_importer_that_exits_without_closing_is_dropped_at_the_next_reap) {
  int to, from;
  pid_t pid = fork_importer(&to, &from);
  sim_init(0, 1);
  devmm_resource *r = kind("sim.device", 0);
  void *p;
  ck_assert_int_eq(devmm_allocate(r, 4096, 0, NULL, &p), DEVMM_OK);
  devmm_ipc_handle h;
  ck_assert_int_eq(devmm_ipc_get_handle(r, p, 4096, &h), DEVMM_OK);
  put(to, h.bytes, sizeof h.bytes);
  char c;
  ck_assert(get(from, &c, 1));
  uint64_t live = stats().allocations_live;
  ck_assert_int_eq(devmm_deallocate(r, p, 4096, 0, NULL), DEVMM_OK);
  pause_ms(30);
  reap(r);
  ck_assert_uint_eq(stats().allocations_live, live); /* it lives and maps p: held */
  c = 'x';
  put(to, &c, 1);
  wait_exit(pid, 0);
  pause_ms(30); /* past the ledger's 10 ms between liveness checks (ADR 44) */
  reap(r);
  ck_assert_msg(stats().allocations_live == live - 1,
                "an importer that exited without closing still holds: %llu live, expected %llu",
                (unsigned long long)stats().allocations_live, (unsigned long long)(live - 1));
  devmm_resource_release(r);
}
END_TEST

/* The exporter's ledger (plugins/gpu/ipc_ledger.c): 4096 slots of 8 bytes, then 8 holder words
 * per slot (start time << 22 | pid); the handle's payload (after the 96-byte header) names the
 * slot's offset at 32 and the ledger's descriptor at 40. */
#define PL 96
static uint64_t *holder_words(const devmm_ipc_handle *h, void **map, size_t *len) {
  uint64_t off;
  int32_t fd;
  memcpy(&off, h->bytes + PL + 32, 8);
  memcpy(&fd, h->bytes + PL + 40, 4);
  char path[64];
  snprintf(path, sizeof path, "/proc/self/fd/%d", (int)fd);
  int f = open(path, O_RDWR);
  ck_assert_int_ge(f, 0);
  *len = 4096 * 8 + 4096 * 64;
  *map = mmap(NULL, *len, PROT_READ | PROT_WRITE, MAP_SHARED, f, 0);
  close(f);
  ck_assert_ptr_ne(*map, MAP_FAILED);
  return (uint64_t *)((char *)*map + 4096 * 8 + off / 8 * 64);
}

/* A holder word whose pid lives but whose start time is another's (the pid reused by a new
 * process) holds nothing: the free is done although that pid is alive. */
START_TEST(a_reused_pid_does_not_hold) {
  int to, from;
  pid_t pid = fork_importer(&to, &from);
  sim_init(0, 1);
  devmm_resource *r = kind("sim.device", 0);
  void *p;
  ck_assert_int_eq(devmm_allocate(r, 4096, 0, NULL, &p), DEVMM_OK);
  devmm_ipc_handle h;
  ck_assert_int_eq(devmm_ipc_get_handle(r, p, 4096, &h), DEVMM_OK);
  put(to, h.bytes, sizeof h.bytes);
  char c;
  ck_assert(get(from, &c, 1));
  void *map;
  size_t len;
  uint64_t *w = holder_words(&h, &map, &len);
  int found = 0;
  for (int i = 0; i < 8; i++)
    if (w[i] && (pid_t)(w[i] & ((1u << 22) - 1)) == pid) {
      w[i] += (uint64_t)1 << 22; /* the same pid, started a tick later: another process */
      found = 1;
    }
  ck_assert_msg(found, "no holder word names the importer %d", (int)pid);
  munmap(map, len);
  uint64_t live = stats().allocations_live;
  ck_assert_int_eq(devmm_deallocate(r, p, 4096, 0, NULL), DEVMM_OK);
  ck_assert_uint_eq(stats().allocations_live, live - 1);
  c = 'x'; /* exits without touching the memory (freed under it, by the forged word) */
  put(to, &c, 1);
  wait_exit(pid, 0);
  devmm_resource_release(r);
}
END_TEST

/* Importers past the 8 holder words are counted anonymously: gone holders are dropped, the
 * anonymous one holds until its close (had it died, until the exporter exits: ADR 44). */
START_TEST(importers_past_the_holder_words_hold_until_they_close) {
  enum { N = 9 };
  int to[N], from[N];
  pid_t pid[N];
  for (int i = 0; i < N; i++)
    pid[i] = fork_importer(&to[i], &from[i]);
  sim_init(0, 1);
  devmm_resource *r = kind("sim.device", 0);
  void *p;
  ck_assert_int_eq(devmm_allocate(r, 4096, 0, NULL, &p), DEVMM_OK);
  devmm_ipc_handle h;
  ck_assert_int_eq(devmm_ipc_get_handle(r, p, 4096, &h), DEVMM_OK);
  char c;
  for (int i = 0; i < N; i++) { /* in turn: the last finds every word taken */
    put(to[i], h.bytes, sizeof h.bytes);
    ck_assert(get(from[i], &c, 1));
  }
  uint64_t live = stats().allocations_live;
  ck_assert_int_eq(devmm_deallocate(r, p, 4096, 0, NULL), DEVMM_OK);
  for (int i = 0; i < N - 1; i++) {
    ck_assert_int_eq(kill(pid[i], SIGKILL), 0);
    wait_exit(pid[i], 0);
  }
  pause_ms(30);
  reap(r);
  ck_assert_uint_eq(stats().allocations_live, live); /* the anonymous importer maps it */
  c = 'c';
  put(to[N - 1], &c, 1);
  wait_exit(pid[N - 1], 0);
  reap(r);
  ck_assert_uint_eq(stats().allocations_live, live - 1);
  devmm_resource_release(r);
}
END_TEST

Suite *sim_ipc_holds_suite(void) {
  const TTest *const tests[] = {a_killed_importers_hold_is_dropped_at_the_exporters_free,
                                an_importer_that_exits_without_closing_is_dropped_at_the_next_reap,
                                a_reused_pid_does_not_hold,
                                importers_past_the_holder_words_hold_until_they_close, NULL};
  return suite_of("sim_ipc_holds", tests);
}
