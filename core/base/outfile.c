/* The files devmm writes (ADR 42): a log file (core/adaptors/logging.c) and a timeline page
 * (python/devmm/timeline.py, through devmm_ffi_open_page) are opened by one set of rules, so a
 * path cannot be turned against its user: no link at the end of the path, none on the way unless
 * root's or this user's and to a directory of theirs, no '..' after a link; nothing blocks (a
 * FIFO would wait for its reader); only a regular file of this user's with one name (or, where
 * the rules allow, a character device such as /dev/null) is used. Tests: suite_log_file_owner.c,
 * suite_logging.c, test_observability.py (test_timeline_output_is_never_turned_against_its_user).
 */
#include "base.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#if defined(SYS_openat2) && __has_include(<linux/openat2.h>)
#include <linux/openat2.h>
#define HAVE_OPENAT2 1
#endif

#define OPEN_FLAGS (O_WRONLY | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC)
#define DIR_FLAGS (O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
#define LINKS_EXPECTED                                                                             \
  "expected a path whose links are root's or this user's, to directories of theirs"

/* One open: the path as given, its rules, and the links followed (for the limits). */
typedef struct {
  const char *path;
  const devmm__output_rules *rules;
  int links, depth;
} walk;

static int refuse(const walk *w, const char *why, const char *expected) {
  return devmm_set_error(DEVMM_EIO, "%s '%s': %s: %s", w->rules->refusing, w->path, why, expected);
}

static int cannot_open(const walk *w, int e) {
  return devmm_set_error(DEVMM_EIO, "%s '%s' for writing: %s", w->rules->cannot, w->path,
                         strerror(e));
}

static int trusted_uid(uid_t uid) { return uid == 0 || uid == geteuid(); }

/* Checks what was opened (st: its fstat): a regular file of this user's with one name, or a
 * character device where the rules allow one; anything else is refused. */
static int check_file(const walk *w, const struct stat *st) {
  char why[96], expected[128];
  if (S_ISCHR(st->st_mode) && w->rules->char_devices)
    return DEVMM_OK;
  if (!S_ISREG(st->st_mode)) {
    snprintf(why, sizeof why, "it is %s", devmm__file_type(st->st_mode));
    return refuse(w, why, w->rules->expected_file);
  }
  if (st->st_uid != geteuid()) {
    snprintf(why, sizeof why, "it is owned by uid %u, not by this user (uid %u)",
             (unsigned)st->st_uid, (unsigned)geteuid());
    snprintf(expected, sizeof expected,
             "expected a file of this user's, or a new name (created with mode %04o)",
             (unsigned)w->rules->mode);
    return refuse(w, why, expected);
  }
  if (st->st_nlink != 1) {
    snprintf(why, sizeof why, "it has %lu names (hard links)", (unsigned long)st->st_nlink);
    return refuse(w, why, "expected a file with one name");
  }
  return DEVMM_OK;
}

/* The directory that the n bytes of dir name, resolved from at (not closed) one component at a
 * time, never through a link that is not root's or this user's or that leads to a directory of
 * another user's, and with no '..' after a link (ADR 42); *out: an O_PATH descriptor of it.
 * shown: how messages name what dir is the target of ("" at the top). */
static int resolve_dir(walk *w, int at, const char *dir, size_t n, const char *shown, int *out) {
  int cur = openat(n && dir[0] == '/' ? AT_FDCWD : at, n && dir[0] == '/' ? "/" : ".", DIR_FLAGS);
  if (cur < 0)
    return cannot_open(w, errno);
  char here[PATH_MAX + 64], last_link[PATH_MAX + 64] = "", why[PATH_MAX + 192];
  for (size_t i = 0, j; i < n; i = j) {
    while (i < n && dir[i] == '/')
      i++;
    for (j = i; j < n && dir[j] != '/';)
      j++;
    char comp[NAME_MAX + 1];
    if (j - i > NAME_MAX) {
      close(cur);
      return cannot_open(w, ENAMETOOLONG);
    }
    snprintf(comp, sizeof comp, "%.*s", (int)(j - i), dir + i);
    snprintf(here, sizeof here, "%s%.*s", shown, (int)j, dir);
    if (!comp[0] || strcmp(comp, ".") == 0)
      continue;
    if (strcmp(comp, "..") == 0 && last_link[0]) {
      close(cur);
      snprintf(why, sizeof why, "'..' after the symbolic link '%s'", last_link);
      return refuse(w, why, "expected no '..' after a link (it climbs out of the link's target)");
    }
    int next = openat(cur, comp, DIR_FLAGS);
    struct stat st;
    if (next < 0) {
      int e = errno;
      if (fstatat(cur, comp, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISLNK(st.st_mode)) {
        close(cur);
        return cannot_open(w, e);
      }
      char target[PATH_MAX], inner[PATH_MAX + 96];
      ssize_t len = 0;
      if (!trusted_uid(st.st_uid)) {
        snprintf(why, sizeof why,
                 "'%s' is a symbolic link owned by uid %u, not by root or this user (uid %u)", here,
                 (unsigned)st.st_uid, (unsigned)geteuid());
        next = refuse(w, why, LINKS_EXPECTED);
      } else if (++w->links > 40 || w->depth >= 8) {
        next = cannot_open(w, ELOOP);
      } else if ((len = readlinkat(cur, comp, target, sizeof target)) < 0 ||
                 (size_t)len == sizeof target) {
        next = cannot_open(w, len < 0 ? errno : ENAMETOOLONG);
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
          next = cannot_open(w, fe);
        } else if (!trusted_uid(st.st_uid)) {
          snprintf(why, sizeof why,
                   "'%s' is a symbolic link to a directory owned by uid %u, not by root or this "
                   "user (uid %u)",
                   here, (unsigned)st.st_uid, (unsigned)geteuid());
          close(next);
          next = refuse(w, why, LINKS_EXPECTED);
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
static int refuse_last(const walk *w, int dirfd, const char *name, int e) {
  struct stat st;
  int known = fstatat(dirfd, *name ? name : ".", &st, AT_SYMLINK_NOFOLLOW) == 0;
  /* ELOOP, or EACCES in a sticky directory of another user's link (the kernel's check) */
  if ((e == ELOOP || e == EACCES) && known && S_ISLNK(st.st_mode))
    return refuse(w, "it is a symbolic link, which devmm does not follow", "name the file itself");
  /* another user's file in a sticky directory (fs.protected_regular): say why it is refused */
  if (e == EACCES && known && S_ISREG(st.st_mode) && st.st_uid != geteuid())
    return check_file(w, &st);
  if (e == EISDIR || e == ENXIO) /* ENXIO: a FIFO without a reader, or a socket */
    return refuse(w,
                  e == EISDIR                       ? "it is a directory"
                  : (known && S_ISFIFO(st.st_mode)) ? "it is a FIFO"
                                                    : "it is not a file",
                  w->rules->expected_file);
  return cannot_open(w, e);
}

/* path opened with OPEN_FLAGS, following no link on the way unless resolve_dir's rule allows
 * it. openat2 with RESOLVE_NO_SYMLINKS does it in one call where the kernel has it; where it
 * fails (a link on the way, or no openat2), the walk. */
static int open_fd(walk *w, int *out) {
  const char *path = w->path;
#ifdef HAVE_OPENAT2
  struct open_how how = {
      .flags = OPEN_FLAGS, .mode = w->rules->mode, .resolve = RESOLVE_NO_SYMLINKS};
  if ((*out = (int)syscall(SYS_openat2, AT_FDCWD, path, &how, sizeof how)) >= 0)
    return DEVMM_OK;
#endif
  const char *slash = strrchr(path, '/'), *name = slash ? slash + 1 : path;
  int dirfd;
  int rc = resolve_dir(w, AT_FDCWD, path, slash ? (size_t)(slash - path) + (slash == path) : 0, "",
                       &dirfd);
  if (rc)
    return rc;
  *out = openat(dirfd, *name ? name : ".", OPEN_FLAGS, w->rules->mode);
  rc = *out < 0 ? refuse_last(w, dirfd, name, errno) : DEVMM_OK;
  close(dirfd);
  return rc;
}

int devmm__open_output(const char *path, const devmm__output_rules *rules, int *fd,
                       struct stat *st) {
  walk w = {.path = path, .rules = rules};
  *fd = -1;
  int opened;
  int rc = open_fd(&w, &opened);
  if (rc)
    return rc;
  if (fstat(opened, st) != 0)
    rc = devmm_set_error(DEVMM_EIO, "%s '%s' for writing: cannot stat it: %s", rules->cannot, path,
                         strerror(errno));
  else
    rc = check_file(&w, st);
  if (!rc && fcntl(opened, F_SETFL, fcntl(opened, F_GETFL) & ~O_NONBLOCK) != 0)
    rc = cannot_open(&w, errno);
  if (rc) {
    close(opened);
    return rc;
  }
  *fd = opened;
  return DEVMM_OK;
}
