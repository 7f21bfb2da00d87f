/* Logging adaptor: one CSV line per event, in RMM's columns Thread,Time,Action,Pointer,Size,Stream
 * so RMM's log tooling reads it. A single fprintf per line keeps lines whole across threads.
 * The log file is opened by rules that keep it from being turned against its user (docs/api.md,
 * "The log file"; tests/c/suite_logging.c, suite_log_file_owner.c), and adaptors of one process
 * that name one file share one open stream. */
#include "../resource/resource_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <limits.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#if defined(SYS_openat2) && __has_include(<linux/openat2.h>)
#include <linux/openat2.h>
#define HAVE_OPENAT2 1
#endif

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

static int refuse(const char *path, const char *why, const char *expected) {
  return devmm_set_error(DEVMM_EIO, "logging adaptor: refusing log file '%s': %s: %s", path, why,
                         expected);
}

/* Checks what was opened from path (st: its fstat): a regular file of this user's with one
 * name, or a character device (/dev/null); anything else is refused. */
static int check_file(const char *path, const struct stat *st) {
  char why[96];
  if (S_ISCHR(st->st_mode))
    return DEVMM_OK;
  if (!S_ISREG(st->st_mode)) {
    snprintf(why, sizeof why, "it is %s", devmm__file_type(st->st_mode));
    return refuse(path, why,
                  "expected a regular file of this user's or a character device such as "
                  "/dev/null");
  }
  if (st->st_uid != geteuid()) {
    snprintf(why, sizeof why, "it is owned by uid %u, not by this user (uid %u)",
             (unsigned)st->st_uid, (unsigned)geteuid());
    return refuse(path, why,
                  "expected a file of this user's, or a new name (created with mode 0600)");
  }
  if (st->st_nlink != 1) {
    snprintf(why, sizeof why, "it has %lu names (hard links)", (unsigned long)st->st_nlink);
    return refuse(path, why, "expected a file with one name");
  }
  return DEVMM_OK;
}

#define LOG_FLAGS (O_WRONLY | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC)
#define DIR_FLAGS (O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
#define LINKS_EXPECTED                                                                             \
  "expected a path whose links are root's or this user's, to directories of theirs"

static int cannot_open(const char *path, int e) {
  return devmm_set_error(DEVMM_EIO, "logging adaptor: cannot open log file '%s' for writing: %s",
                         path, strerror(e));
}

static int trusted_uid(uid_t uid) { return uid == 0 || uid == geteuid(); }

/* The links a walk followed, for the limits and the messages. */
typedef struct {
  const char *path; /* the log file's path as given */
  int links, depth;
} walk;

/* The directory that the n bytes of dir name, resolved from at (not closed) one component at a
 * time, never through a link that is not root's or this user's or that leads to a directory of
 * another user's, and with no '..' after a link (ADR 42); *out: an O_PATH descriptor of it.
 * shown: how messages name what dir is the target of ("" at the top). */
static int resolve_dir(walk *w, int at, const char *dir, size_t n, const char *shown, int *out) {
  int cur = openat(n && dir[0] == '/' ? AT_FDCWD : at, n && dir[0] == '/' ? "/" : ".", DIR_FLAGS);
  if (cur < 0)
    return cannot_open(w->path, errno);
  char here[PATH_MAX + 64], last_link[PATH_MAX + 64] = "", why[PATH_MAX + 192];
  for (size_t i = 0, j; i < n; i = j) {
    while (i < n && dir[i] == '/')
      i++;
    for (j = i; j < n && dir[j] != '/';)
      j++;
    char comp[NAME_MAX + 1];
    if (j - i > NAME_MAX) {
      close(cur);
      return cannot_open(w->path, ENAMETOOLONG);
    }
    snprintf(comp, sizeof comp, "%.*s", (int)(j - i), dir + i);
    snprintf(here, sizeof here, "%s%.*s", shown, (int)j, dir);
    if (!comp[0] || strcmp(comp, ".") == 0)
      continue;
    if (strcmp(comp, "..") == 0 && last_link[0]) {
      close(cur);
      snprintf(why, sizeof why, "'..' after the symbolic link '%s'", last_link);
      return refuse(w->path, why,
                    "expected no '..' after a link (it climbs out of the link's target)");
    }
    int next = openat(cur, comp, DIR_FLAGS);
    struct stat st;
    if (next < 0) {
      int e = errno;
      if (fstatat(cur, comp, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISLNK(st.st_mode)) {
        close(cur);
        return cannot_open(w->path, e);
      }
      char target[PATH_MAX], inner[PATH_MAX + 96];
      ssize_t len = 0;
      if (!trusted_uid(st.st_uid)) {
        snprintf(why, sizeof why,
                 "'%s' is a symbolic link owned by uid %u, not by root or this user (uid %u)", here,
                 (unsigned)st.st_uid, (unsigned)geteuid());
        next = refuse(w->path, why, LINKS_EXPECTED);
      } else if (++w->links > 40 || w->depth >= 8) {
        next = cannot_open(w->path, ELOOP);
      } else if ((len = readlinkat(cur, comp, target, sizeof target)) < 0 ||
                 (size_t)len == sizeof target) {
        next = cannot_open(w->path, len < 0 ? errno : ENAMETOOLONG);
      } else {
        snprintf(inner, sizeof inner, "%s -> ", here);
        w->depth++;
        int rc = resolve_dir(w, cur, target, (size_t)len, inner, &next);
        w->depth--;
        if (rc) {
          next = rc;
        } else if (fstat(next, &st) != 0) {
          int fe = errno;
          close(next);
          next = cannot_open(w->path, fe);
        } else if (!trusted_uid(st.st_uid)) {
          snprintf(why, sizeof why,
                   "'%s' is a symbolic link to a directory owned by uid %u, not by root or this "
                   "user (uid %u)",
                   here, (unsigned)st.st_uid, (unsigned)geteuid());
          close(next);
          next = refuse(w->path, why, LINKS_EXPECTED);
        }
      }
      if (next < 0) {
        close(cur);
        return next;
      }
      snprintf(last_link, sizeof last_link, "%s", here);
    }
    close(cur);
    cur = next;
  }
  *out = cur;
  return DEVMM_OK;
}

/* Why the last component, name in dirfd, could not be opened (e: its errno). */
static int refuse_last(const char *path, int dirfd, const char *name, int e) {
  struct stat st;
  int known = fstatat(dirfd, *name ? name : ".", &st, AT_SYMLINK_NOFOLLOW) == 0;
  /* ELOOP, or EACCES in a sticky directory of another user's link (the kernel's check) */
  if ((e == ELOOP || e == EACCES) && known && S_ISLNK(st.st_mode))
    return refuse(path, "it is a symbolic link, which devmm does not follow",
                  "name the file itself");
  /* another user's file in a sticky directory (fs.protected_regular): say why it is refused */
  if (e == EACCES && known && S_ISREG(st.st_mode) && st.st_uid != geteuid())
    return check_file(path, &st);
  if (e == EISDIR || e == ENXIO) /* ENXIO: a FIFO without a reader, or a socket */
    return refuse(path,
                  e == EISDIR                       ? "it is a directory"
                  : (known && S_ISFIFO(st.st_mode)) ? "it is a FIFO"
                                                    : "it is not a file",
                  "expected a regular file of this user's or a character device such as "
                  "/dev/null");
  return cannot_open(path, e);
}

/* The log file's descriptor: path opened with LOG_FLAGS (a new file 0600), following no link on
 * the way unless resolve_dir's rule allows it. openat2 with RESOLVE_NO_SYMLINKS does it in one
 * call where the kernel has it; where it fails (a link on the way, or no openat2), the walk. */
static int open_fd(const char *path, int *out) {
#ifdef HAVE_OPENAT2
  struct open_how how = {.flags = LOG_FLAGS, .mode = 0600, .resolve = RESOLVE_NO_SYMLINKS};
  if ((*out = (int)syscall(SYS_openat2, AT_FDCWD, path, &how, sizeof how)) >= 0)
    return DEVMM_OK;
#endif
  const char *slash = strrchr(path, '/'), *name = slash ? slash + 1 : path;
  walk w = {.path = path};
  int dirfd;
  int rc = resolve_dir(&w, AT_FDCWD, path, slash ? (size_t)(slash - path) + (slash == path) : 0, "",
                       &dirfd);
  if (rc)
    return rc;
  *out = openat(dirfd, *name ? name : ".", LOG_FLAGS, 0600);
  rc = *out < 0 ? refuse_last(path, dirfd, name, errno) : DEVMM_OK;
  close(dirfd);
  return rc;
}

/* Opens path for the log (open_fd: no link followed but by ADR 42's rule, a new file 0600,
 * nothing blocks, as a FIFO would wait for its reader), and only what check_file accepts is
 * used. A file this process has open for another logging adaptor is shared as it is; any other
 * regular file is truncated, after the checks, on the descriptor that was checked. */
static int open_log(const char *path, shared_file **out) {
  int fd;
  int orc = open_fd(path, &fd);
  if (orc)
    return orc;
  struct stat st;
  int rc = fstat(fd, &st) == 0 ? check_file(path, &st)
                               : devmm_set_error(DEVMM_EIO,
                                                 "logging adaptor: cannot stat log "
                                                 "file '%s': %s",
                                                 path, strerror(errno));
  if (!rc && fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) != 0)
    rc = devmm_set_error(DEVMM_EIO, "logging adaptor: log file '%s': %s", path, strerror(errno));
  if (rc) {
    close(fd);
    return rc;
  }
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
