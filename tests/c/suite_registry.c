/* Suite registry: the current resource of each device (set, get, swap), and a configuration
 * source asked while devmm initialises. */
#include <check.h>
#include <pthread.h>
#include <stdlib.h>

#include "testres.h"

static const devmm_device CPU = {DEVMM_DEVICE_CPU, 0};

START_TEST(registry_set_get_swap) {
  setenv("XDG_CONFIG_HOME", "/nonexistent-devmm-test", 1);
  unsetenv("DEVMM_CONFIG");
  ck_assert_msg(devmm_init(NULL) == DEVMM_OK, "%s", devmm_last_error());
  devmm_registry_clear(); /* initialised, with no current resource: the set finds none */
  devmm_resource *r = testres_create(NULL), *got = NULL, *prev = (void *)1;
  devmm_device cuda0 = {DEVMM_DEVICE_CUDA, 0};
  ck_assert_int_eq(devmm_set_current_resource(CPU, r, &prev), DEVMM_OK);
  ck_assert_ptr_null(prev);
  /* a miss initialises devmm lazily, which must not replace what the user set */
  ck_assert_int_eq(devmm_get_current_resource(cuda0, &got), DEVMM_ENOENT);
  ck_assert_error_contains("no current resource for device cuda:0");
  ck_assert_ptr_null(got);
  ck_assert_int_eq(devmm_get_current_resource(CPU, &got), DEVMM_OK);
  ck_assert_ptr_eq(got, r);
  ck_assert_int_eq(devmm_resource_refcount(r), 3); /* mine, registry's, got */
  devmm_resource_release(got);
  devmm_resource *r2 = testres_create(NULL);
  ck_assert_int_eq(devmm_set_current_resource(CPU, r2, &prev), DEVMM_OK);
  ck_assert_ptr_eq(prev, r); /* the previous one comes back, owned by the caller */
  devmm_resource_release(prev);
  ck_assert_int_eq(devmm_set_current_resource(CPU, NULL, NULL), DEVMM_OK);
  ck_assert_int_eq(devmm_resource_refcount(r2), 1);
  ck_assert_int_eq(devmm_get_current_resource(CPU, NULL), DEVMM_EINVAL);
  devmm_resource_release(r);
  devmm_resource_release(r2);
}
END_TEST

/* The first set of a process initialises devmm first (as the first get would), so the previous
 * resource is the configured one, never NULL: `prev = set(mine); ...; set(prev)` works
 * (docs/api.md; tests/python/test_rmm_identity.py). */
START_TEST(registry_first_set_returns_the_configured_resource) {
  setenv("XDG_CONFIG_HOME", "/nonexistent-devmm-test", 1);
  unsetenv("DEVMM_CONFIG");
  devmm_shutdown();
  devmm_registry_clear();
  devmm_resource *r = testres_create(NULL), *prev = NULL, *got = NULL;
  ck_assert_int_eq(devmm_set_current_resource(CPU, r, &prev), DEVMM_OK);
  ck_assert_msg(prev != NULL, "the first set on cpu returned no previous resource");
  ck_assert_str_eq(devmm_resource_name(prev), "cpu.malloc"); /* the built-in default's */
  ck_assert_int_eq(devmm_set_current_resource(CPU, prev, NULL), DEVMM_OK);
  ck_assert_int_eq(devmm_get_current_resource(CPU, &got), DEVMM_OK);
  ck_assert_ptr_eq(got, prev);
  devmm_resource_release(got);
  devmm_resource_release(prev);
  devmm_resource_release(r);
  devmm_shutdown();
}
END_TEST

/* devmm_config_source reads the state as the other queries do, under its lock: a thread asking
 * while another re-initialises is no data race (ThreadSanitizer, make tsan, saw one before). */
static atomic_int stop_asking, times_asked;

static void *ask_source(void *unused) {
  (void)unused;
  while (!atomic_load(&stop_asking)) /* the pointer only: its text lives until the next init */
    if (devmm_config_source() != NULL)
      atomic_fetch_add(&times_asked, 1);
  return NULL;
}

START_TEST(registry_config_source_during_init) {
  setenv("XDG_CONFIG_HOME", "/nonexistent-devmm-test", 1);
  unsetenv("DEVMM_CONFIG");
  pthread_t t;
  ck_assert_int_eq(pthread_create(&t, NULL, ask_source, NULL), 0);
  for (int i = 0; i < 50 || (atomic_load(&times_asked) < 100 && i < 100000); i++)
    ck_assert_msg(devmm_init(NULL) == DEVMM_OK, "%s", devmm_last_error());
  atomic_store(&stop_asking, 1);
  pthread_join(t, NULL);
  ck_assert_int_ge(atomic_load(&times_asked), 100); /* the two overlapped */
  ck_assert_str_eq(devmm_config_source(), "built-in default");
  devmm_shutdown();
}
END_TEST

Suite *registry_suite(void) {
  Suite *s = suite_create("registry");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, registry_set_get_swap);
  tcase_add_test(tc, registry_first_set_returns_the_configured_resource);
  tcase_add_test(tc, registry_config_source_during_init);
  suite_add_tcase(s, tc);
  return s;
}
