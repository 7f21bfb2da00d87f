/* Prints the configuration devmm chose, then whether the loader ran it in secure (set-uid) mode,
 * for the set-uid test in suite_setuid.c. It loads the libdevmm.so.0 that lies in its own
 * directory (the test copies both into a directory of its own): a set-uid program ignores
 * LD_LIBRARY_PATH and $ORIGIN, and a build tree's RUNPATH may lie where the probe's user cannot
 * go. Only that file is loaded, so the set-uid copy runs nothing another user could put there. */
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/auxv.h>
#include <unistd.h>

int main(void) {
  char lib[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", lib, sizeof lib - 32);
  if (n <= 0) {
    perror("setuid-probe: readlink /proc/self/exe");
    return 2;
  }
  lib[n] = '\0';
  strcpy(strrchr(lib, '/') + 1, "libdevmm.so.0");
  void *h = dlopen(lib, RTLD_NOW);
  if (!h) {
    fprintf(stderr, "setuid-probe: %s\n", dlerror());
    return 2;
  }
  int (*init)(const char *) = (int (*)(const char *))dlsym(h, "devmm_init");
  const char *(*source)(void) = (const char *(*)(void))dlsym(h, "devmm_config_source");
  if (!init || !source) {
    fprintf(stderr, "setuid-probe: %s\n", dlerror());
    return 2;
  }
  init(NULL); /* a missing plugin is fine here: only the choice of file matters */
  printf("%s\nsecure %lu\n", source(), getauxval(AT_SECURE));
  return 0;
}
