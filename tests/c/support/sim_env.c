/* The simulator suites' shared helpers (sim_env.h). */
#include "sim_env.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

sim_entry sim;

/* devmm initialised with the sim plugin (2 devices, sim.async on each) and the given jitter. */
void sim_init(unsigned jitter_us, unsigned seed) {
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
  BIND(peer_access);
  BIND(pool_set_access);
  BIND(host_alloc);
  BIND(free_host);
  BIND(ctx_create);
  BIND(ctx_current);
#undef BIND
  sim.inject(NULL, 0, 0);
  sim.set_device(0);
}

devmm_resource *kind(const char *name, int device) {
  devmm_resource *r;
  ck_assert_msg(devmm_resource_create_kind(name, device, NULL, 0, &r) == DEVMM_OK, "%s: %s", name,
                devmm_last_error());
  return r;
}

void *stream(int device) {
  void *s;
  ck_assert_int_eq(sim.stream_create(device, 0, &s), DEVMM_OK);
  return s;
}

devmm_sim_stats stats(void) {
  devmm_sim_stats st = {.struct_size = sizeof st};
  ck_assert_int_eq(sim.stats_get(&st), DEVMM_OK);
  return st;
}

void sleep_kernel(void *ms) {
  struct timespec ts = {0, (long)(intptr_t)ms * 1000000L};
  nanosleep(&ts, NULL);
}
Suite *suite_of(const char *name, const TTest *const *tests) {
  Suite *s = suite_create(name);
  TCase *tc = tcase_create(name);
  tcase_set_timeout(tc, 60);
  for (; *tests; tests++)
    tcase_add_test(tc, *tests);
  suite_add_tcase(s, tc);
  return s;
}
