/* The environment, read in one place, and devmm's own log.
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

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>

const char *devmm__getenv(const char *name) {
  const char *v = secure_getenv(name);
  return v && *v ? v : NULL;
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
