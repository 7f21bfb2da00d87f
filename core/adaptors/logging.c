/* Logging adaptor: one CSV line per event, in RMM's columns Thread,Time,Action,Pointer,Size,Stream
 * so RMM's log tooling reads it. A single fprintf per line keeps lines whole across threads. */
#include "../resource/resource_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
  FILE *f;
  int owned, auto_flush;
} logging;

static void log_line(devmm_resource *self, const char *action, void *ptr, size_t bytes,
                     devmm_stream stream) {
  logging *lg = self->ctx;
  struct timespec ts;
  struct tm tm;
  clock_gettime(CLOCK_REALTIME, &ts);
  localtime_r(&ts.tv_sec, &tm);
  fprintf(lg->f, "%llu,%02d:%02d:%02d:%06ld,%s,%p,%zu,%p\n", (unsigned long long)devmm__thread_id(),
          tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000, action, ptr, bytes, stream);
  if (lg->auto_flush)
    fflush(lg->f);
}

static int lg_allocate(devmm_resource *self, size_t bytes, size_t align, devmm_stream stream,
                       void **out) {
  devmm_resource *up = self->upstream;
  int rc = up->ops.allocate(up, bytes, align, stream, out);
  log_line(self, rc ? "allocate failure" : "allocate", rc ? NULL : *out, bytes, stream);
  return rc;
}

static int lg_deallocate(devmm_resource *self, void *ptr, size_t bytes, size_t align,
                         devmm_stream stream) {
  devmm_resource *up = self->upstream;
  int rc = up->ops.deallocate(up, ptr, bytes, align, stream);
  log_line(self, rc ? "free failure" : "free", ptr, bytes, stream);
  return rc;
}

static void lg_destroy(devmm_resource *self) {
  logging *lg = self->ctx;
  if (lg->owned)
    fclose(lg->f);
  else
    fflush(lg->f);
  free(lg);
}

static const devmm_resource_ops logging_ops = {
    .struct_size = sizeof(devmm_resource_ops),
    .allocate = lg_allocate,
    .deallocate = lg_deallocate,
    .mem_info = devmm__forward_mem_info,
    .copy = devmm__forward_copy,
    .memset = devmm__forward_memset,
    .stream_wait = devmm__forward_stream_wait,
    .synchronize = devmm__forward_synchronize,
    .destroy = lg_destroy,
};

int devmm_logging_adaptor_create(devmm_resource *upstream, const char *path, int auto_flush,
                                 devmm_resource **out) {
  if (out)
    *out = NULL;
  if (!upstream || !out)
    return devmm_set_error(DEVMM_EINVAL, "logging adaptor: %s is NULL",
                           !upstream ? "upstream" : "out");
  logging *lg = calloc(1, sizeof *lg);
  if (!lg)
    return devmm_set_error(DEVMM_ENOMEM, "logging adaptor: out of host memory");
  lg->auto_flush = auto_flush != 0;
  if (path) {
    lg->f = fopen(path, "we");
    if (!lg->f) {
      int e = errno;
      free(lg);
      return devmm_set_error(DEVMM_EIO,
                             "logging adaptor: cannot open log file '%s' for "
                             "writing: %s",
                             path, strerror(e));
    }
    lg->owned = 1;
  } else {
    lg->f = stderr;
  }
  fputs("Thread,Time,Action,Pointer,Size,Stream\n", lg->f);
  int rc = devmm__adaptor_create(&logging_ops, lg, upstream, "logging", out);
  if (rc) {
    if (lg->owned)
      fclose(lg->f);
    free(lg);
  }
  return rc;
}

int devmm_logging_flush(devmm_resource *r) {
  int rc = devmm__check_kind(r, &logging_ops, "logging adaptor");
  if (rc)
    return rc;
  return fflush(((logging *)r->ctx)->f) == 0
             ? DEVMM_OK
             : devmm_set_error(DEVMM_EIO, "logging adaptor '%s': flush failed", r->name);
}
