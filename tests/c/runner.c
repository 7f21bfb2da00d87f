/* The Check runner: `test-core SUITE` runs one suite (Meson registers one test per suite);
 * `test-host-oom host_oom` is the same runner over the host out-of-memory suite alone.
 * A test may skip (testres_skip): when every test that ran skipped, the runner prints the reasons
 * and exits 77, which Meson reports as SKIP; a run where only some skipped fails. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testres.h"

// clang-format off
#ifdef DEVMM_TEST_HOST_OOM /* test-host-oom: its own executable, since it replaces malloc */
#define SUITES(X) X(host_oom)
#else
#define SUITES(X)                                                              \
  X(error) X(dtype) X(layout) X(resource) X(adaptors) X(statistics)          \
  X(limiting) X(tracking) X(logging) X(aligned) X(failure) X(thread_safe)     \
  X(registry) X(buffer) X(stress) X(config) X(plugins) X(faults)             \
  X(untrusted) X(interchange) X(sim_runtime) X(sim_gpu) X(sim_core)         \
  X(log) X(oom) X(tracking_history) X(setuid) X(plugin_owner) X(ipc)
#endif
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
  char skips[TESTRES_PATH_MAX];
  snprintf(skips, sizeof skips, "%s/devmm-skips-XXXXXX", testres_tmpdir());
  int fd = mkstemp(skips);
  if (fd < 0) {
    perror(skips);
    return 2;
  }
  close(fd);
  setenv("DEVMM_TEST_SKIPS", skips, 1);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr), run = srunner_ntests_run(sr), skipped = 0;
  srunner_free(sr);
  FILE *f = fopen(skips, "r");
  char line[1024];
  while (f && fgets(line, sizeof line, f)) {
    printf("skipped: %s", line);
    skipped++;
  }
  if (f)
    fclose(f);
  unlink(skips);
  if (failed)
    return EXIT_FAILURE;
  if (skipped && skipped != run) {
    printf("FAIL: %d of %d tests skipped: only a whole suite may skip\n", skipped, run);
    return EXIT_FAILURE;
  }
  return skipped ? 77 : EXIT_SUCCESS;
}
