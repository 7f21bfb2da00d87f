/* What the configuration and plugin suites (config, plugins, plugin_owner) share: a clean
 * environment per test, temporary configuration files, the status of a loaded plugin, and a chain
 * of directories holding a copy of the fault plugin for the trust walk. Environment (set by
 * Meson): DEVMM_TEST_PLUGINS (the fault plugins' build directory). */
#ifndef DEVMM_TEST_PLUGIN_ENV_H
#define DEVMM_TEST_PLUGIN_ENV_H

#include <devmm/devmm.h>
#include <string.h>

#include "testres.h"

/* The directory in the environment variable name; fails the test when it is not set. */
const char *env_dir(const char *name);
/* Every test starts from a clean environment: no config from the user's machine. */
void isolate(void);
/* A temporary file holding text; its path, in a static buffer. */
char *write_temp(const char *text);
/* A whole (small) file, in a static buffer. */
char *slurp_all(const char *path);
/* The status of the loaded (or refused) plugin name; fails the test when there is none. */
devmm_plugin_status plugin_named(const char *name);
/* cpu:0's current resource allocates, and the memory can be written. */
void cpu_still_works(void);

/* A plugin file in <top>/mid/leaf, the config naming plugin_path = leaf (or `pathdir`). */
typedef struct {
  char top[TESTRES_PATH_MAX], mid[TESTRES_PATH_MAX + 8], leaf[TESTRES_PATH_MAX + 16];
  char so[TESTRES_PATH_MAX + 48], cfg[TESTRES_PATH_MAX];
} chain;
void chain_make(chain *c, const char *pathdir);
void chain_free(chain *c);
/* Loads c->cfg; returns faulty's error ("" when it loaded). */
const char *faulty_error(const chain *c);

#define ck_assert_refused(c, needle)                                                               \
  do {                                                                                             \
    const char *e_ = faulty_error(c);                                                              \
    ck_assert_msg(strstr(e_, (needle)) != NULL, "error '%s' lacks '%s'", e_, (needle));            \
  } while (0)

#endif
