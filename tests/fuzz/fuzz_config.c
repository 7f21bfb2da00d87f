/* libFuzzer target: whole devmm.ini files through devmm_init. Every input must either
 * initialise or fail with DEVMM_ECONFIG/DEVMM_ENOMEM and a message that names the file;
 * nothing may crash or leak. Inputs naming plugins by path are skipped: loading arbitrary
 * system libraries would run their constructors, which is not what is under test. */
#include <devmm/devmm.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char path[4096];

static void remove_file(void) { unlink(path); }

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  const char *tmp = getenv("TMPDIR");
  snprintf(path, sizeof path, "%s/devmm-fuzz-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  int fd = mkstemp(path);
  if (fd < 0) {
    perror(path);
    abort();
  }
  close(fd);
  atexit(remove_file);
  setenv("DEVMM_LOG_LEVEL", "error", 1);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (memchr(data, '/', size) || memchr(data, '\0', size))
    return -1; /* plugin paths, and NULs inih would stop at */
  FILE *f = fopen(path, "w");
  if (!f)
    abort();
  fwrite(data, 1, size, f);
  fclose(f);
  int rc = devmm_init(path);
  if (rc != DEVMM_OK) {
    if (rc != DEVMM_ECONFIG && rc != DEVMM_ENOMEM)
      abort(); /* an unexpected kind of failure */
    if (strncmp(devmm_last_error(), path, strlen(path)) != 0)
      abort(); /* a config error that does not say where */
  } else {
    devmm_resource *r;
    devmm_device cpu = {DEVMM_DEVICE_CPU, 0};
    if (devmm_get_current_resource(cpu, &r) == DEVMM_OK) { /* whatever was built must work */
      void *p;
      if (devmm_allocate(r, 64, 0, NULL, &p) == DEVMM_OK)
        devmm_deallocate(r, p, 64, 0, NULL);
      devmm_resource_release(r);
    }
  }
  devmm_shutdown();
  return 0;
}
