/* devmm's own diagnostics: one line on stderr per message, "devmm[ who]: level: text", at or
 * above the level DEVMM_LOG_LEVEL (error, warn (default), info, debug) or devmm.ini's log_level
 * sets. Not the logging adaptor (adaptors/logging.c), which writes an allocation log. */
#include "base.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <strings.h>

static atomic_int log_level = -1;

int devmm__diag_parse_level(const char *text) {
  static const char *names[] = {"error", "warn", "info", "debug"};
  for (int i = 0; i < 4; i++)
    if (strcasecmp(text, names[i]) == 0)
      return i;
  if (strcasecmp(text, "warning") == 0)
    return DEVMM_LOG_WARN;
  return -1;
}

void devmm__diag_set_level(int level) { atomic_store(&log_level, level); }

static int current_level(void) {
  int l = atomic_load(&log_level);
  if (l < 0) {
    const char *e = devmm__getenv("DEVMM_LOG_LEVEL");
    l = e ? devmm__diag_parse_level(e) : -1;
    if (l < 0)
      l = DEVMM_LOG_WARN;
    atomic_store(&log_level, l);
  }
  return l;
}

void devmm__vdiag(int level, const char *who, const char *fmt, va_list ap) {
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

void devmm__diag(int level, const char *who, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  devmm__vdiag(level, who, fmt, ap);
  va_end(ap);
}
