/* Status codes and the thread-local error message (see include/devmm/error.h). */
#include "base.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Static TLS stays small (libdevmm uses the initial-exec model, whose room is limited when the
 * library is dlopen'ed): long messages live on the heap, one buffer per thread that needs one. */
static _Thread_local char last_message[DEVMM__MSG_MAX];
static _Thread_local int use_long; /* the message is in the heap buffer DEVMM__HEAP_MESSAGE */
static _Thread_local int last_status;
static _Thread_local unsigned error_seq; /* counts set/clear: tells a report from a later error */
static _Thread_local void *heap[DEVMM__HEAP_SLOTS];

unsigned devmm__error_seq(void) { return error_seq; }

static pthread_key_t exit_key;
static pthread_once_t exit_once = PTHREAD_ONCE_INIT;

static void free_heap(void *unused) { /* runs on the exiting thread */
  (void)unused;
  for (int i = 0; i < DEVMM__HEAP_SLOTS; i++) {
    free(heap[i]);
    heap[i] = NULL;
  }
  use_long = 0;
}

static void make_exit_key(void) { pthread_key_create(&exit_key, free_heap); }

void *devmm__thread_heap(int slot, size_t bytes) {
  if (!heap[slot]) {
    pthread_once(&exit_once, make_exit_key);
    heap[slot] = calloc(1, bytes);
    if (heap[slot])
      pthread_setspecific(exit_key, heap); /* any non-NULL value: the destructor runs */
  }
  return heap[slot];
}

const char *devmm_last_error(void) {
  return use_long && heap[DEVMM__HEAP_MESSAGE] ? heap[DEVMM__HEAP_MESSAGE] : last_message;
}

devmm_status devmm_last_status(void) { return (devmm_status)last_status; }

void devmm_clear_error(void) {
  last_message[0] = '\0';
  use_long = 0;
  last_status = DEVMM_OK;
  error_seq++;
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
  int n = vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  n = n < 0 ? 0 : n < (int)sizeof buf ? n : (int)sizeof buf - 1;
  buf[n] = '\0';
  memcpy(last_message, buf, (size_t)n + 1);
  use_long = 0;
  last_status = status;
  error_seq++;
  return status;
}

int devmm__set_error_text(int status, const char *text) {
  char *buf = devmm__thread_heap(DEVMM__HEAP_MESSAGE, DEVMM__LONG_MSG_MAX);
  char *dst = buf ? buf : last_message;
  size_t cap = buf ? DEVMM__LONG_MSG_MAX : DEVMM__MSG_MAX;
  size_t n = strnlen(text, cap - 1);
  memmove(dst, text, n); /* text may be the buffer itself */
  dst[n] = '\0';
  use_long = buf != NULL;
  last_status = status;
  error_seq++;
  return status;
}
