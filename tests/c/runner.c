/* The Check runner: `test-core SUITE` runs one suite (Meson registers one test per suite). */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// clang-format off
#define SUITES(X)                                                              \
  X(error) X(dtype) X(layout) X(resource) X(statistics) X(limiting)           \
  X(tracking) X(logging) X(aligned) X(failure) X(thread_safe) X(registry)     \
  X(buffer) X(stress) X(config) X(plugins) X(faults) X(untrusted)             \
  X(interchange) X(sim_runtime) X(sim_gpu) X(sim_core)                      \
  X(log) X(oom) X(tracking_history)
// clang-format on

#define DECLARE(name) Suite *name##_suite(void);
SUITES(DECLARE)

int main(int argc, char **argv) {
  struct {
    const char *name;
    Suite *(*make)(void);
  } all[] = {
#define ENTRY(name) {#name, name##_suite},
      SUITES(ENTRY)};
  SRunner *sr = NULL;
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
    if (argc < 2 || strcmp(argv[1], all[i].name) == 0) {
      if (!sr)
        sr = srunner_create(all[i].make());
      else
        srunner_add_suite(sr, all[i].make());
    }
  if (!sr) {
    fprintf(stderr, "unknown suite '%s'\n", argv[1]);
    return 2;
  }
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
