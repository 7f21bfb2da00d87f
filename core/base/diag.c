/* devmm's own diagnostics: one line on stderr per message, "devmm[ who]: level: text", at or
 * above the level DEVMM_LOG_LEVEL (error, warn (default), info, debug) or devmm.ini's log_level
 * sets. Not the logging adaptor (adaptors/logging.c), which writes an allocation log. */
#include "base.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
    int bad = e && l < 0;
    if (l < 0)
      l = DEVMM_LOG_WARN;
    if (atomic_exchange(&log_level, l) < 0 && bad) /* said once, not taken silently */
      fprintf(stderr,
              "devmm: warning: DEVMM_LOG_LEVEL='%.64s' is not a level: expected error, warn, "
              "info or debug (using warn)\n",
              e);
  }
  return l;
}

/* This thread's capture (devmm__diag_capture): lines kept for the caller instead of stderr. */
static _Thread_local struct {
  int on;
  char *buf;
  size_t len, cap;
} capture;

void devmm__diag_capture(int on) {
  capture.on = on;
  if (!on) {
    free(capture.buf);
    capture.buf = NULL;
    capture.len = capture.cap = 0;
  }
}

char *devmm__diag_captured(void) {
  char *out = capture.buf;
  capture.buf = NULL;
  capture.len = capture.cap = 0;
  return out;
}

static void keep(const char *line) {
  size_t n = strlen(line);
  if (capture.len + n + 2 > capture.cap) {
    size_t cap = (capture.cap ? capture.cap * 2 : 256) + n + 2;
    char *b = realloc(capture.buf, cap);
    if (!b) /* out of memory: said on stderr after all */
      return (void)fprintf(stderr, "devmm: %s\n", line);
    capture.buf = b;
    capture.cap = cap;
  }
  memcpy(capture.buf + capture.len, line, n);
  capture.len += n;
  capture.buf[capture.len++] = '\n';
  capture.buf[capture.len] = '\0';
}

void devmm__vdiag(int level, const char *who, const char *fmt, va_list ap) {
  /* a capture keeps errors and warnings whatever the level: its caller reports them its own
   * way (Python's warnings filters), as it did before there was a capture */
  int kept = capture.on && level <= DEVMM_LOG_WARN;
  if (!kept && level > current_level())
    return;
  static const char *tag[] = {"error", "warning", "info", "debug"};
  char msg[1024];
  vsnprintf(msg, sizeof msg, fmt, ap);
  const char *t = tag[level < 0 ? 0 : level > 3 ? 3 : level];
  if (kept) {
    char line[1200];
    snprintf(line, sizeof line, "%s%s%s: %s", who ? who : "", who ? ": " : "", t, msg);
    keep(line);
    return;
  }
  fprintf(stderr, "devmm%s%s: %s: %s\n", who ? " " : "", who ? who : "", t, msg);
}

void devmm__diag(int level, const char *who, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  devmm__vdiag(level, who, fmt, ap);
  va_end(ap);
}

/* The public setter and getter (error.h): RMM's level names map onto devmm's four (ADR 41). */
int devmm_set_log_level(const char *name) {
  int l = name ? devmm__diag_parse_level(name) : -1;
  if (l < 0 && name && strcasecmp(name, "critical") == 0)
    l = DEVMM_LOG_ERROR;
  if (l < 0 && name && strcasecmp(name, "trace") == 0)
    l = DEVMM_LOG_DEBUG;
  if (l < 0)
    return devmm_set_error(DEVMM_EINVAL,
                           "devmm_set_log_level: '%.64s' is not a level: expected error, warn, "
                           "info or debug (or RMM's critical, trace)",
                           name ? name : "(null)");
  devmm__diag_set_level(l);
  return DEVMM_OK;
}

const char *devmm_log_level(void) {
  static const char *names[] = {"error", "warn", "info", "debug"};
  int l = current_level();
  return names[l < 0 ? 0 : l > 3 ? 3 : l];
}
