/* The plugin trust walk: a plugin name resolved to a file in the plugin path, and that path,
 * every link on it and every directory it passes through checked (ADR 27): nothing on the way
 * may be writable by someone other than root and this user. The walk opens each component
 * itself, one at a time, without following links (O_NOFOLLOW; O_PATH but for directories),
 * checks the descriptor it opened (writers.c), and hands the caller the descriptor of the file:
 * what is loaded is what was checked, and no name is looked up a second time (ADR 39). */
#include "plugin_host_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define OPEN_FLAGS (O_PATH | O_NOFOLLOW | O_CLOEXEC)

typedef struct {
  char *refusal; /* the first thing refused on the way (reported only if the file exists) */
  int missing;   /* a component is not there (or not a directory, or not reachable): errno */
} walk_state;

/* Opens one component in dir. A directory is opened for reading (O_DIRECTORY fails before any
 * device's open could run, and fgetxattr works on it); a file, a link or anything else as
 * O_PATH, which opens nothing. Either way without following a link. */
static int open_component(int dir, const char *name, int last) {
  if (!last) {
    int fd = openat(dir, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd >= 0 || (errno != ELOOP && errno != ENOTDIR && errno != EACCES))
      return fd;
  }
  return openat(dir, name, OPEN_FLAGS);
}

static void refuse(walk_state *w, char *msg) {
  if (!w->refusal)
    w->refusal = msg ? msg : devmm__strdup("out of memory");
  else
    free(msg);
}

/* Walks `path` (absolute, as given) from / as the kernel would resolve it, opening each
 * component relative to the directory before it: every directory is checked when it is opened,
 * every symbolic link's owner must be root or this user (in a sticky directory its owner may
 * swap it for a link to anything; sudo and OpenSSH refuse such links too) and its target,
 * read from the link that was opened, continues the walk; the last component must be a regular
 * file, checked as `what`. A refusal is remembered and the walk goes on, opening nothing but
 * O_PATH descriptors, to learn whether the file exists at all: a missing file is not refused.
 * Returns the file's descriptor (real: its path, links resolved), or -1 with *err set, or -1
 * with *missing set to the errno of the component that was not there (ENOENT, ENOTDIR, or
 * EACCES: nothing this user can reach, as access(2) would say). */
static int walk(const char *what, const char *path, char *real, size_t realcap, char **err,
                int *missing) {
  char done[PATH_MAX] = "", rest[PATH_MAX], target[PATH_MAX];
  walk_state w = {0};
  *err = NULL;
  *missing = 0;
  if (snprintf(rest, sizeof rest, "%s", path) >= (int)sizeof rest) {
    *err = devmm__fmt_dup("path '%.256s...' is too long", path);
    return -1;
  }
  int cur = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC), file = -1;
  struct stat st;
  if (cur < 0 || fstat(cur, &st) != 0) {
    *err = devmm__fmt_dup("cannot open the root directory: %s", strerror(errno));
    if (cur >= 0)
      close(cur);
    return -1;
  }
  char *e = devmm__trust_check_open("plugin directory", "/", cur, &st);
  if (e)
    refuse(&w, e);
  for (int hops = 0; file < 0 && !w.missing;) {
    char *c = rest;
    while (*c == '/')
      c++;
    if (!*c) { /* the path ends at a directory */
      refuse(&w, devmm__fmt_dup("refusing %s '%s': it is a directory, not a regular file", what,
                                *done ? done : "/"));
      break;
    }
    size_t clen = strcspn(c, "/");
    char *next = c + clen;
    while (*next == '/')
      next++;
    int last = !*next;
    char name[NAME_MAX + 1];
    if (clen > NAME_MAX) {
      refuse(&w, devmm__fmt_dup("path '%.256s...' has a component longer than %d bytes", path,
                                NAME_MAX));
      break;
    }
    memcpy(name, c, clen);
    name[clen] = '\0';
    memmove(rest, next, strlen(next) + 1);
    if (strcmp(name, ".") == 0 && !last)
      continue;
    char cand[PATH_MAX];
    if (strcmp(name, "..") == 0 && !last) {
      char *up = strrchr(done, '/');
      if (!up) /* the root's parent is the root */
        continue;
      *up = '\0';
      snprintf(cand, sizeof cand, "%s", *done ? done : "/");
    } else if (snprintf(cand, sizeof cand, "%s/%s", done, name) >= (int)sizeof cand) {
      refuse(&w, devmm__fmt_dup("path '%.256s...' is too long", path));
      break;
    }
    int fd = open_component(cur, name, last);
    if (fd < 0 || fstat(fd, &st) != 0) {
      int en = errno;
      if (fd >= 0)
        close(fd);
      if (en == ENOENT || en == ENOTDIR || en == EACCES) { /* nothing there this user reaches */
        w.missing = en;
        break;
      }
      refuse(&w, devmm__fmt_dup("cannot open %s '%s': %s", last ? what : "plugin directory", cand,
                                strerror(en)));
      break;
    }
    if (S_ISLNK(st.st_mode)) {
      if (st.st_uid != 0 && st.st_uid != geteuid())
        refuse(&w, devmm__fmt_dup("refusing plugin link '%s': it is a symbolic link owned by uid "
                                  "%u, neither root nor this user",
                                  cand, (unsigned)st.st_uid));
      ssize_t n = ++hops > 40 ? -2 : readlinkat(fd, "", target, sizeof target - 1);
      close(fd);
      if (n == -2 || n <= 0) {
        refuse(&w, n == -2 ? devmm__fmt_dup("cannot resolve '%s': too many levels of symbolic "
                                            "links",
                                            path)
                           : devmm__fmt_dup("cannot read the link '%s': %s", cand,
                                            n ? strerror(errno) : "empty"));
        break;
      }
      target[n] = '\0';
      char joined[PATH_MAX];
      if (snprintf(joined, sizeof joined, "%s/%s", target, rest) >= (int)sizeof joined) {
        refuse(&w, devmm__fmt_dup("path '%.256s...' is too long", path));
        break;
      }
      memcpy(rest, joined, strlen(joined) + 1);
      if (target[0] == '/') { /* from the root again */
        int root = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (root < 0) {
          refuse(&w, devmm__fmt_dup("cannot open the root directory: %s", strerror(errno)));
          break;
        }
        close(cur);
        cur = root;
        done[0] = '\0';
      }
      continue;
    }
    if (last) {
      if (!S_ISREG(st.st_mode))
        refuse(&w, devmm__fmt_dup("refusing %s '%s': it is not a regular file (mode %06o)", what,
                                  cand, (unsigned)st.st_mode));
      else if ((e = devmm__trust_check_open(what, cand, fd, &st)) != NULL)
        refuse(&w, e);
      file = fd;
      snprintf(real, realcap, "%s", cand);
      break;
    }
    if (!S_ISDIR(st.st_mode)) {
      close(fd);
      w.missing = ENOTDIR;
      break;
    }
    if ((e = devmm__trust_check_open("plugin directory", cand, fd, &st)) != NULL)
      refuse(&w, e);
    close(cur);
    cur = fd;
    snprintf(done, sizeof done, "%s", strcmp(cand, "/") == 0 ? "" : cand);
  }
  close(cur);
  if (w.missing) {
    free(w.refusal);
    *missing = w.missing;
    return -1;
  }
  if (w.refusal || file < 0) {
    if (file >= 0)
      close(file);
    *err = w.refusal ? w.refusal : devmm__fmt_dup("cannot resolve '%s'", path);
    return -1;
  }
  return file;
}

/* A libtool archive (.la) is a text file that names another file for libltdl to load: the
 * walk never saw that one. Only shared objects are loaded (ADR 39). */
static char *refuse_libtool_archive(const char *real) {
  size_t n = strlen(real);
  if (n < 3 || strcmp(real + n - 3, ".la") != 0)
    return NULL;
  return devmm__fmt_dup("refusing plugin file '%s': it is a libtool archive (.la), which names "
                        "another file to load; expected a shared object (.so): name the .so "
                        "itself",
                        real);
}

/* Resolves a plugin name to a checked file, or returns NULL with *error set. */
char *devmm__plugin_resolve(const char *name, const char *const *dirs, char **error, int *missing,
                            int *fd) {
  *error = NULL;
  *missing = 0;
  *fd = -1;
  if (!*name) {
    *error = devmm__fmt_dup("empty plugin name");
    return NULL;
  }
  char real[PATH_MAX], candidate[PATH_MAX];
  int file = -1;
  if (name[0] == '/') {
    file = walk("plugin file", name, real, sizeof real, error, missing);
    if (*missing) {
      *error = *missing == EACCES ? devmm__fmt_dup("plugin file '%s' cannot be reached: %s", name,
                                                   strerror(EACCES))
                                  : devmm__fmt_dup("plugin file '%s' does not exist", name);
      *missing = 1;
      return NULL;
    }
  } else {
    if (strchr(name, '/') || strcmp(name, ".") == 0 || strcmp(name, "..") == 0) {
      *error =
          devmm__fmt_dup("plugin name '%s' is not a plain name: give a name found in the plugin "
                         "path, or an absolute path",
                         name);
      return NULL;
    }
    /* the first directory where the file exists decides, refused or not (ADR 27) */
    const char *const *d = dirs;
    for (; *d; d++) {
      if ((*d)[0] != '/')
        continue; /* never relative to the current directory */
      if (snprintf(candidate, sizeof candidate, "%s/devmm-%s.so", *d, name) >=
          (int)sizeof candidate)
        continue;
      file = walk("plugin file", candidate, real, sizeof real, error, missing);
      if (!*missing)
        break;
    }
    if (!*d) {
      char searched[2048] = "";
      for (d = dirs; *d; d++) {
        size_t n = strlen(searched);
        snprintf(searched + n, sizeof searched - n, "%s%s", n ? ":" : "", *d);
      }
      *error = devmm__fmt_dup("plugin '%s' not found: no devmm-%s.so in the plugin path (%s)", name,
                              name, *searched ? searched : "empty");
      *missing = 1;
      return NULL;
    }
  }
  if (file < 0)
    return NULL;
  if ((*error = refuse_libtool_archive(real)) != NULL) {
    close(file);
    return NULL;
  }
  char *path = devmm__strdup(real);
  if (!path) {
    close(file);
    *error = devmm__fmt_dup("out of memory");
    return NULL;
  }
  *fd = file;
  return path;
}
