/* Logging adaptor: one CSV line per event, in RMM's columns Thread,Time,Action,Pointer,Size,Stream
 * so RMM's log tooling reads it. A single fprintf per line keeps lines whole across threads.
 * The log file is opened by rules that keep it from being turned against its user (docs/api.md,
 * "The log file"; tests/c/suite_logging.c, suite_log_file_owner.c), and adaptors of one process
 * that name one file share one open stream. */
#include "../resource/resource_internal.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* An open log file, shared by the adaptors of this process that named it (by device and inode),
 * so that the second one neither truncates the first one's lines nor writes a second header. */
typedef struct shared_file {
  FILE *f;
  dev_t dev;
  ino_t ino;
  size_t refs;
  struct shared_file *next;
} shared_file;

static pthread_mutex_t files_lock = PTHREAD_MUTEX_INITIALIZER;
static shared_file *files; /* under files_lock */

typedef struct {
  FILE *f;
  shared_file *file; /* NULL: stderr, which the adaptor does not own */
  int auto_flush;
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

/* Drops one adaptor's reference to its file; the last one closes it. */
static void file_release(shared_file *sf) {
  pthread_mutex_lock(&files_lock);
  int last = --sf->refs == 0;
  if (last)
    for (shared_file **at = &files; *at; at = &(*at)->next)
      if (*at == sf) {
        *at = sf->next;
        break;
      }
  pthread_mutex_unlock(&files_lock);
  if (last) {
    fclose(sf->f);
    free(sf);
  } else {
    fflush(sf->f);
  }
}

static void lg_destroy(devmm_resource *self) {
  logging *lg = self->ctx;
  if (lg->file)
    file_release(lg->file);
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

/* The log file's rules (core/base/outfile.c, ADR 42): a new file 0600, /dev/null accepted. */
static const devmm__output_rules log_rules = {
    .refusing = "logging adaptor: refusing log file",
    .cannot = "logging adaptor: cannot open log file",
    .expected_file = "expected a regular file of this user's or a character device such as "
                     "/dev/null",
    .mode = 0600,
    .char_devices = 1,
};

/* Opens path for the log by log_rules (devmm__open_output: no link followed but by ADR 42's
 * rule, nothing blocks, as a FIFO would wait for its reader). A file this process has open for
 * another logging adaptor is shared as it is; any other regular file is truncated, after the
 * checks, on the descriptor that was checked. */
static int open_log(const char *path, shared_file **out) {
  int fd, rc = DEVMM_OK;
  struct stat st;
  int orc = devmm__open_output(path, &log_rules, &fd, &st);
  if (orc)
    return orc;
  pthread_mutex_lock(&files_lock);
  shared_file *sf = files;
  while (sf && !(sf->dev == st.st_dev && sf->ino == st.st_ino))
    sf = sf->next;
  if (sf) { /* already open in this process: share it, truncate nothing */
    sf->refs++;
    pthread_mutex_unlock(&files_lock);
    close(fd);
    *out = sf;
    return DEVMM_OK;
  }
  sf = calloc(1, sizeof *sf);
  if (S_ISREG(st.st_mode) && ftruncate(fd, 0) != 0)
    rc = devmm_set_error(DEVMM_EIO, "logging adaptor: cannot truncate log file '%s': %s", path,
                         strerror(errno));
  else if (!sf || !(sf->f = fdopen(fd, "w")))
    rc = devmm_set_error(DEVMM_ENOMEM, "logging adaptor: out of host memory opening '%s'", path);
  if (rc) {
    pthread_mutex_unlock(&files_lock);
    free(sf);
    close(fd);
    return rc;
  }
  *sf = (shared_file){.f = sf->f, .dev = st.st_dev, .ino = st.st_ino, .refs = 1, .next = files};
  files = sf;
  fputs("Thread,Time,Action,Pointer,Size,Stream\n", sf->f);
  pthread_mutex_unlock(&files_lock);
  *out = sf;
  return DEVMM_OK;
}

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
    int rc = open_log(path, &lg->file);
    if (rc) {
      free(lg);
      return rc;
    }
    lg->f = lg->file->f;
  } else {
    lg->f = stderr;
    fputs("Thread,Time,Action,Pointer,Size,Stream\n", lg->f);
  }
  int rc = devmm__adaptor_create(&logging_ops, lg, upstream, "logging", out);
  if (rc) {
    if (lg->file)
      file_release(lg->file);
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
