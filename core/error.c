/* Status codes and the thread-local error message (see include/devmm/error.h). */
#include "internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static _Thread_local char last_message[DEVMM__MSG_MAX];
static _Thread_local int last_status;

const char *devmm_last_error(void) { return last_message; }

devmm_status devmm_last_status(void) { return (devmm_status)last_status; }

void devmm_clear_error(void) {
  last_message[0] = '\0';
  last_status = DEVMM_OK;
}

const char *devmm_status_name(int status) {
  switch (status) {
#define DEVMM__STATUS_NAME(name, value, text)                                                      \
  case value:                                                                                      \
    return "DEVMM_" #name;
    DEVMM_STATUS_MAP(DEVMM__STATUS_NAME)
#undef DEVMM__STATUS_NAME
  default:
    return "DEVMM_UNKNOWN";
  }
}

const char *devmm_strerror(int status) {
  switch (status) {
#define DEVMM__STATUS_TEXT(name, value, text)                                                      \
  case value:                                                                                      \
    return text;
    DEVMM_STATUS_MAP(DEVMM__STATUS_TEXT)
#undef DEVMM__STATUS_TEXT
  default:
    return "unknown status";
  }
}

int devmm_set_error(int status, const char *fmt, ...) {
  /* format into a scratch buffer first: callers often pass devmm_last_error() as an argument */
  char buf[DEVMM__MSG_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  memcpy(last_message, buf, sizeof buf);
  last_status = status;
  return status;
}
