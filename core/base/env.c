/* The environment, read in one place, and where this installation keeps its plugins and default
 * configuration (devmm's own diagnostics, DEVMM_LOG_LEVEL, are in diag.c).
 *
 * | variable          | meaning                                                        |
 * |-------------------|----------------------------------------------------------------|
 * | DEVMM_CONFIG      | path of devmm.ini (before XDG and sysconfdir)                  |
 * | XDG_CONFIG_HOME   | where $XDG_CONFIG_HOME/devmm/devmm.ini is looked for           |
 * | HOME              | ~/.config when XDG_CONFIG_HOME is unset                        |
 * | DEVMM_PLUGIN_PATH | colon-separated plugin directories searched first (development) |
 * | DEVMM_LOG_LEVEL   | error, warn (default), info or debug                           |
 * | DEVMM_LIBRARY     | (Python only) the libdevmm.so to load                          |
 * | DEVMM_LOG_FILE    | (Python only) devmm.enable_logging's file (docs/from-rmm.md)   |
 * All are read with secure_getenv: a set-uid or set-gid process sees none of them. */
#include "base.h"

#include "devmm-config.h"

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *devmm__getenv(const char *name) {
  const char *v = secure_getenv(name);
  return v && *v ? v : NULL;
}

/* A normal installation keeps its plugins and devmm.ini at the absolute paths it was configured
 * with. A relocatable one (-Dwheel=true: the Python wheel, installed wherever pip puts it) keeps
 * them at paths relative to the directory libdevmm itself was loaded from, found with dladdr. */
static char installed_plugin_dir[PATH_MAX], installed_config[PATH_MAX];
static pthread_once_t installed_once = PTHREAD_ONCE_INIT;

static void find_installation(void) {
#ifdef DEVMM_RELOCATABLE
  Dl_info self;
  char dir[PATH_MAX];
  if (!dladdr((void *)&find_installation, &self) || !self.dli_fname ||
      !realpath(self.dli_fname, dir) || !strrchr(dir, '/'))
    return; /* no installed directory: $DEVMM_PLUGIN_PATH and plugin_path still work */
  *strrchr(dir, '/') = '\0';
  if (snprintf(installed_plugin_dir, sizeof installed_plugin_dir, "%s/%s", dir, DEVMM_PLUGIN_DIR) >=
          (int)sizeof installed_plugin_dir ||
      snprintf(installed_config, sizeof installed_config, "%s%s%s/devmm.ini", dir,
               *DEVMM_SYSCONF_DIR ? "/" : "", DEVMM_SYSCONF_DIR) >= (int)sizeof installed_config)
    installed_plugin_dir[0] = installed_config[0] = '\0';
#else
  snprintf(installed_plugin_dir, sizeof installed_plugin_dir, "%s", DEVMM_PLUGIN_DIR);
  snprintf(installed_config, sizeof installed_config, "%s/devmm.ini", DEVMM_SYSCONF_DIR);
#endif
}

const char *devmm__installed_plugin_dir(void) {
  pthread_once(&installed_once, find_installation);
  return installed_plugin_dir;
}

const char *devmm__installed_config(void) {
  pthread_once(&installed_once, find_installation);
  return installed_config;
}
