/* Suite sim_runtime: the simulated accelerator's own rules (ADR 10): device memory the host
 * cannot touch, events across streams, jitter that exposes a missing wait, stream-ordered frees.
 * Environment (set by Meson): DEVMM_PLUGIN_PATH (the plugins' build directory). */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sim_env.h"

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

/* A wait holds the record made before it (CUDA: cudaStreamWaitEvent captures the event's
 * state at call time): a later record of the same event, done first on a fast stream, must not
 * release a wait for an earlier record still queued behind a slow kernel (ADR 37). */
START_TEST(a_wait_holds_the_record_of_its_call) {
  sim_init(0, 7);
  devmm_resource *r = kind("sim.device", 0);
  void *p, *slow = stream(0), *fast = stream(0), *waiter = stream(0), *ev;
  ck_assert_int_eq(devmm_allocate(r, 4096, 0, NULL, &p), DEVMM_OK);
  ck_assert_int_eq(sim.event_create(0, &ev), DEVMM_OK);
  int ok;
  ck_assert_int_eq(sim.launch(slow, sleep_kernel, (void *)(intptr_t)200), DEVMM_OK);
  ck_assert_int_eq(sim.fill(slow, p, 0x42, 4096), DEVMM_OK);
  ck_assert_int_eq(sim.event_record(ev, slow), DEVMM_OK);        /* record 1: after the fill */
  ck_assert_int_eq(sim.stream_wait_event(waiter, ev), DEVMM_OK); /* holds record 1 */
  ck_assert_int_eq(sim.check(waiter, p, 0x42, 4096, &ok), DEVMM_OK);
  ck_assert_int_eq(sim.event_record(ev, fast), DEVMM_OK); /* record 2 completes at once */
  ck_assert_int_eq(sim.stream_synchronize(waiter), DEVMM_OK);
  ck_assert_msg(ok == 1, "a later record released a wait for an earlier one (ok = %d)", ok);
  sim.stream_synchronize(slow);
  sim.event_destroy(ev);
  sim.stream_destroy(slow);
  sim.stream_destroy(fast);
  sim.stream_destroy(waiter);
  devmm_deallocate(r, p, 4096, 0, NULL);
  devmm_resource_release(r);
}
END_TEST

/* Ordinary (pageable) host memory, as CUDA treats it (ADR 37): a memset or kernel on it is
 * refused, a copy from it is staged at the call (overwriting it after the call returns does not
 * reach the device), a copy to it returns only once done. */
START_TEST(pageable_host_memory_follows_cudas_rules) {
  sim_init(0, 8);
  devmm_resource *r = kind("sim.device", 0);
  void *p, *s = stream(0);
  ck_assert_int_eq(devmm_allocate(r, 4096, 0, NULL, &p), DEVMM_OK);
  unsigned char *host = malloc(4096);
  ck_assert_int_eq(devmm_memset(r, host, 0, 4096, s), DEVMM_EDEVICE);
  ck_assert_error_contains("simMemsetAsync(4096) failed: invalid argument");
  ck_assert_int_eq(sim.fill(s, host, 1, 4096), DEVMM_EINVAL);
  ck_assert_error_contains("simLaunchHostFunc failed: invalid argument");
  memset(host, 0x31, 4096);
  ck_assert_int_eq(sim.launch(s, sleep_kernel, (void *)(intptr_t)100), DEVMM_OK);
  ck_assert_int_eq(devmm_copy(r, p, host, 4096, s), DEVMM_OK);
  memset(host, 0x99, 4096); /* allowed at once: the copy took the bytes at the call */
  int ok;
  ck_assert_int_eq(sim.check(s, p, 0x31, 4096, &ok), DEVMM_OK);
  ck_assert_int_eq(sim.stream_synchronize(s), DEVMM_OK);
  ck_assert_msg(ok == 1, "a pageable source was read when the copy ran, not at the call");
  ck_assert_int_eq(sim.launch(s, sleep_kernel, (void *)(intptr_t)100), DEVMM_OK);
  ck_assert_int_eq(sim.fill(s, p, 0x77, 4096), DEVMM_OK);
  ck_assert_int_eq(devmm_copy(r, host, p, 4096, s), DEVMM_OK);
  ck_assert_msg(host[0] == 0x77 && host[4095] == 0x77,
                "a copy to pageable memory returned before it was done (%#x)", host[0]);
  free(host);
  sim.stream_destroy(s);
  devmm_deallocate(r, p, 4096, 0, NULL);
  devmm_resource_release(r);
}
END_TEST

/* Pinned memory is pinned for the device current at its allocation, unless portable
 * (cudaHostAllocPortable): for any other device it is pageable (ADR 37). */
START_TEST(default_pinned_memory_is_pinned_for_its_device_only) {
  sim_init(0, 9);
  void *own, *portable, *s0 = stream(0), *s1 = stream(1);
  ck_assert_int_eq(sim.host_alloc(0, 4096, 0, &own), DEVMM_OK);
  ck_assert_int_eq(sim.host_alloc(0, 4096, 1, &portable), DEVMM_OK);
  ck_assert_int_eq(sim.fill(s0, own, 1, 4096), DEVMM_OK);
  ck_assert_int_eq(sim.fill(s1, portable, 2, 4096), DEVMM_OK);
  ck_assert_int_eq(sim.fill(s1, own, 3, 4096), DEVMM_EINVAL); /* pageable to sim:1 */
  sim.stream_synchronize(s0);
  sim.stream_synchronize(s1);
  ck_assert_int_eq(((unsigned char *)own)[0], 1);
  ck_assert_int_eq(((unsigned char *)portable)[0], 2);
  ck_assert_int_eq(sim.free_host(own), DEVMM_OK);
  ck_assert_int_eq(sim.free_host(portable), DEVMM_OK);
  sim.stream_destroy(s0);
  sim.stream_destroy(s1);
}
END_TEST

/* Another device's memory: reached by a kernel or memset of sim:1 only once sim:1 enabled peer
 * access to sim:0; a pool's memory only where the pool grants access, whatever peer access
 * says (cudaMemPoolSetAccess); copies need neither (ADR 37). */
START_TEST(peer_and_pool_access_follow_cudas_rules) {
  sim_init(0, 10);
  devmm_resource *r0 = kind("sim.device", 0), *a0 = kind("sim.async", 0);
  devmm_resource *r1 = kind("sim.device", 1);
  void *p, *q, *s0 = stream(0), *s1 = stream(1);
  ck_assert_int_eq(devmm_allocate(r0, 4096, 0, NULL, &p), DEVMM_OK);
  ck_assert_int_eq(devmm_allocate(a0, 4096, 0, s0, &q), DEVMM_OK);
  sim.stream_synchronize(s0);
  ck_assert_int_eq(sim.fill(s1, p, 1, 4096), DEVMM_EINVAL);
  ck_assert_int_eq(devmm_memset(r1, p, 1, 4096, s1), DEVMM_EDEVICE);
  ck_assert_int_eq(sim.peer_access(1, 0, 1), DEVMM_OK);
  ck_assert_int_eq(sim.peer_access(1, 0, 1), DEVMM_EDEVICE);
  ck_assert_error_contains("simErrorPeerAccessAlreadyEnabled");
  int ok;
  ck_assert_int_eq(devmm_memset(r1, p, 4, 4096, s1), DEVMM_OK);
  ck_assert_int_eq(sim.check(s1, p, 4, 4096, &ok), DEVMM_OK);
  sim.stream_synchronize(s1);
  ck_assert_int_eq(ok, 1);
  ck_assert_int_eq(sim.fill(s1, q, 5, 4096), DEVMM_EINVAL); /* pool memory: no pool access */
  ck_assert_int_eq(sim.pool_set_access(0, 1, 3), DEVMM_OK);
  ck_assert_int_eq(sim.fill(s1, q, 5, 4096), DEVMM_OK);
  ck_assert_int_eq(sim.check(s1, q, 5, 4096, &ok), DEVMM_OK);
  sim.stream_synchronize(s1);
  ck_assert_int_eq(ok, 1);
  ck_assert_int_eq(sim.peer_access(1, 0, 0), DEVMM_OK);
  ck_assert_int_eq(sim.fill(s1, p, 6, 4096), DEVMM_EINVAL);
  sim.stream_destroy(s0);
  sim.stream_destroy(s1);
  devmm_deallocate(r0, p, 4096, 0, NULL);
  devmm_deallocate(a0, q, 4096, 0, NULL);
  devmm_resource_release(r0);
  devmm_resource_release(r1);
  devmm_resource_release(a0);
}
END_TEST

/* A pool reuses as CUDA's stream-ordered allocator (ADR 37): an allocation on the stream a free
 * is queued on takes any freed block that fits, at once, before the free ran; another stream
 * takes it only after the free ran. */
START_TEST(pool_reuse_follows_stream_order) {
  sim_init(0, 11);
  devmm_resource *a = kind("sim.async", 0);
  void *p, *q, *x, *s = stream(0), *other = stream(0);
  ck_assert_int_eq(devmm_allocate(a, 8192, 0, s, &p), DEVMM_OK);
  ck_assert_int_eq(sim.launch(s, sleep_kernel, (void *)(intptr_t)100), DEVMM_OK);
  ck_assert_int_eq(devmm_deallocate(a, p, 8192, 0, s), DEVMM_OK); /* queued behind 100 ms */
  ck_assert_int_eq(devmm_allocate(a, 8192, 0, other, &x), DEVMM_OK);
  ck_assert_ptr_ne(x, p); /* another stream: the free has not run */
  ck_assert_int_eq(devmm_allocate(a, 4096, 0, s, &q), DEVMM_OK);
  ck_assert_msg(q == p, "a smaller allocation on the free's stream did not reuse the block");
  ck_assert_int_eq(devmm_deallocate(a, q, 4096, 0, s), DEVMM_OK);
  ck_assert_int_eq(devmm_deallocate(a, x, 8192, 0, other), DEVMM_OK);
  sim.stream_synchronize(s);
  sim.stream_synchronize(other);
  sim.stream_destroy(s);
  sim.stream_destroy(other);
  devmm_resource_release(a);
}
END_TEST

/* MemGetInfo counts what a pool keeps reserved as used, until a synchronize trims the pool to
 * its release threshold (0 for the default pool), as CUDA's (ADR 37). */
START_TEST(mem_get_info_counts_pool_reserved_memory_as_used) {
  sim_init(0, 12);
  devmm_resource *a = kind("sim.async", 0);
  void *p, *s = stream(0);
  size_t before, total, reserved, trimmed;
  ck_assert_int_eq(devmm_mem_info(a, &before, &total), DEVMM_OK);
  ck_assert_int_eq(devmm_allocate(a, 4 << 20, 0, s, &p), DEVMM_OK);
  ck_assert_int_eq(devmm_deallocate(a, p, 4 << 20, 0, s), DEVMM_OK);
  for (int i = 0; i < 1000 && stats().frees_pending; i++) /* the free ran: no synchronize */
    usleep(1000);
  ck_assert_int_eq(devmm_mem_info(a, &reserved, &total), DEVMM_OK);
  ck_assert_msg(reserved + (4 << 20) <= before,
                "the pool's reserved 4 MiB counted as free (%zu of %zu before)", reserved, before);
  ck_assert_int_eq(sim.stream_synchronize(s), DEVMM_OK);
  ck_assert_int_eq(devmm_mem_info(a, &trimmed, &total), DEVMM_OK);
  ck_assert_uint_eq(trimmed, before);
  sim.stream_destroy(s);
  devmm_resource_release(a);
}
END_TEST

/* CUDA's sticky errors: after a fault (an illegal address), every later call fails with it
 * (ADR 37). */
START_TEST(a_fault_is_sticky) {
  sim_init(0, 13);
  devmm_resource *r = kind("sim.device", 0);
  void *p, *s = stream(0);
  ck_assert_int_eq(sim.inject("MemsetAsync", 0, 700), DEVMM_OK);
  ck_assert_int_eq(devmm_allocate(r, 4096, 0, NULL, &p), DEVMM_OK);
  ck_assert_int_eq(devmm_memset(r, p, 0, 4096, s), DEVMM_EDEVICE);
  ck_assert_error_contains("an illegal memory access was encountered (simErrorIllegalAddress)");
  void *q;
  ck_assert_int_eq(devmm_allocate(r, 4096, 0, NULL, &q), DEVMM_EDEVICE);
  ck_assert_error_contains("simMalloc(4096) failed: an illegal memory access");
  ck_assert_int_eq(sim.stream_synchronize(s), DEVMM_EDEVICE);
  ck_assert_int_eq(devmm_deallocate(r, p, 4096, 0, NULL), DEVMM_EDEVICE);
  sim.inject(NULL, 0, 0); /* a test's reset (CK_FORK=no runs the next test in this process) */
  devmm_deallocate(r, p, 4096, 0, NULL);
  sim.stream_destroy(s);
  devmm_resource_release(r);
}
END_TEST

/* An asynchronous error: a kernel that faults when it runs is reported by the next call, even
 * an unrelated one; a sticky one by every later call (ADR 37). */
START_TEST(a_fault_in_stream_work_is_reported_by_the_next_call) {
  sim_init(0, 14);
  devmm_resource *r = kind("sim.device", 0);
  void *p, *q, *s = stream(0);
  ck_assert_int_eq(devmm_allocate(r, 4096, 0, NULL, &p), DEVMM_OK);
  ck_assert_int_eq(sim.inject("Kernel", 0, 999), DEVMM_OK); /* not sticky */
  ck_assert_int_eq(sim.fill(s, p, 1, 4096), DEVMM_OK);      /* the launch itself succeeds */
  for (int i = 0; i < 1000 && sim.launch(s, sleep_kernel, (void *)(intptr_t)1) == DEVMM_OK; i++)
    usleep(1000); /* the fault is reported by a later call */
  ck_assert_error_contains("simLaunchHostFunc failed: unknown error");
  ck_assert_int_eq(devmm_allocate(r, 4096, 0, NULL, &q), DEVMM_OK); /* reported once */
  ck_assert_int_eq(sim.inject("Kernel", 0, 700), DEVMM_OK);         /* sticky */
  ck_assert_int_eq(sim.fill(s, p, 1, 4096), DEVMM_OK);
  int reported = 0;
  for (int i = 0; i < 1000 && !reported; i++) {
    void *x;
    reported = devmm_allocate(r, 256, 0, NULL, &x) != DEVMM_OK; /* unrelated to the stream */
    if (!reported) {
      devmm_deallocate(r, x, 256, 0, NULL);
      usleep(1000);
    }
  }
  ck_assert_error_contains("simMalloc(256) failed: an illegal memory access");
  ck_assert_int_eq(devmm_memset(r, q, 0, 4096, NULL), DEVMM_EDEVICE);
  ck_assert_error_contains("(simErrorIllegalAddress)");
  sim.inject(NULL, 0, 0); /* a test's reset (CK_FORK=no runs the next test in this process) */
  sim.stream_synchronize(s);
  devmm_deallocate(r, p, 4096, 0, NULL);
  devmm_deallocate(r, q, 4096, 0, NULL);
  sim.stream_destroy(s);
  devmm_resource_release(r);
}
END_TEST

Suite *sim_runtime_suite(void) {
  const TTest *const tests[] = {host_touch_of_device_memory_faults,
                                events_order_two_streams,
                                jitter_exposes_a_missing_wait,
                                runtime_rules_are_enforced,
                                stream_ordered_free_poisons,
                                device_count_cannot_change_under_live_memory,
                                a_wait_holds_the_record_of_its_call,
                                pageable_host_memory_follows_cudas_rules,
                                default_pinned_memory_is_pinned_for_its_device_only,
                                peer_and_pool_access_follow_cudas_rules,
                                pool_reuse_follows_stream_order,
                                mem_get_info_counts_pool_reserved_memory_as_used,
                                a_fault_is_sticky,
                                a_fault_in_stream_work_is_reported_by_the_next_call,
                                NULL};
  return suite_of("sim_runtime", tests);
}
