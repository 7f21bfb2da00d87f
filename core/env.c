/* The environment, read in one place; where this installation keeps its plugins and default
 * configuration; and devmm's own log.
 *
 * | variable          | meaning                                                        |
 * |-------------------|----------------------------------------------------------------|
 * | DEVMM_CONFIG      | path of devmm.ini (before XDG and sysconfdir)                  |
 * | XDG_CONFIG_HOME   | where $XDG_CONFIG_HOME/devmm/devmm.ini is looked for           |
 * | HOME              | ~/.config when XDG_CONFIG_HOME is unset                        |
 * | DEVMM_PLUGIN_PATH | colon-separated plugin directories searched first (development) |
 * | DEVMM_LOG_LEVEL   | error, warn (default), info or debug                           |
 * | DEVMM_LIBRARY     | (Python only) the libdevmm.so to load                          |
 * All are read with secure_getenv: a set-uid or set-gid process sees none of them. */
#include "internal.h"

#include "devmm-config.h"

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

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

static atomic_int log_level = -1;

int devmm__parse_log_level(const char *text) {
  static const char *names[] = {"error", "warn", "info", "debug"};
  for (int i = 0; i < 4; i++)
    if (strcasecmp(text, names[i]) == 0)
      return i;
  if (strcasecmp(text, "warning") == 0)
    return DEVMM_LOG_WARN;
  return -1;
}

void devmm__set_log_level(int level) { atomic_store(&log_level, level); }

static int current_level(void) {
  int l = atomic_load(&log_level);
  if (l < 0) {
    const char *e = devmm__getenv("DEVMM_LOG_LEVEL");
    l = e ? devmm__parse_log_level(e) : -1;
    if (l < 0)
      l = DEVMM_LOG_WARN;
    atomic_store(&log_level, l);
  }
  return l;
}

void devmm__vlog(int level, const char *who, const char *fmt, va_list ap) {
  if (level > current_level())
    return;
  static const char *tag[] = {"error", "warning", "info", "debug"};
  char msg[1024];
  vsnprintf(msg, sizeof msg, fmt, ap);
  fprintf(stderr, "devmm%s%s: %s: %s\n", who ? " " : "", who ? who : "",
          tag[level < 0   ? 0
              : level > 3 ? 3
                          : level],
          msg);
}

void devmm__log(int level, const char *who, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  devmm__vlog(level, who, fmt, ap);
  va_end(ap);
}
