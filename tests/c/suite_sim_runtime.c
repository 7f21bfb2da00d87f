/* Suite sim_runtime: the simulated accelerator's own rules (ADR 10): device memory the host
 * cannot touch, events across streams, jitter that exposes a missing wait, stream-ordered frees.
 * Environment (set by Meson): DEVMM_PLUGIN_PATH (the plugins' build directory). */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

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
