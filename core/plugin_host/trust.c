/* The plugin trust walk: a plugin name resolved to a file in the plugin path, and that path,
 * every link on it and every directory it passes through checked before anything is opened
 * (ADR 27): nothing on the way may be writable by someone other than root and this user. */
#include "plugin_host_internal.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Refuses one file or directory that someone else may write to (a way to plant code): writable
 * by others, or by a group other than root's or this user's own (sudo allows root's; the user's
 * own primary group is the private group of umask-002 systems), unless it is a sticky directory
 * (/tmp: nobody can replace another's entry there); or owned by a user other than root and this
 * one. The message shows the full permission bits, the sticky bit included. */
static char *check_not_writable(const char *what, const char *path) {
  struct stat st;
  if (stat(path, &st) != 0)
    return devmm__fmt_dup("cannot stat %s '%s': %s", what, path, strerror(errno));
  unsigned mode = (unsigned)(st.st_mode & 07777);
  int sticky = S_ISDIR(st.st_mode) && (st.st_mode & S_ISVTX);
  if ((st.st_mode & S_IWOTH) && !sticky)
    return devmm__fmt_dup(
        "refusing %s '%s': it is writable by others (mode %04o); fix with chmod o-w", what, path,
        mode);
  if ((st.st_mode & S_IWGRP) && st.st_gid != 0 && st.st_gid != getegid() && !sticky)
    return devmm__fmt_dup(
        "refusing %s '%s': it is writable by its group, gid %u (mode %04o); fix with "
        "chmod g-w",
        what, path, (unsigned)st.st_gid, mode);
  if (st.st_uid != 0 && st.st_uid != geteuid())
    return devmm__fmt_dup("refusing %s '%s': it is owned by uid %u, neither root nor this user",
                          what, path, (unsigned)st.st_uid);
  return NULL;
}

/* Walks `path` (absolute, as given) component by component with lstat, as the kernel would
 * resolve it, and checks what it passes: every directory with check_not_writable, the last
 * component as `what`, and every symbolic link, whose owner must be root or this user (in a
 * sticky directory its owner may swap it for a link to anything; sudo and OpenSSH refuse such
 * links too). A link's target continues the walk, so the directories a link leads to, and the
 * directory a link sits in, are all checked. Nothing is opened. */
static char *check_walk(const char *what, const char *path) {
  char done[4096] = "", rest[4096], target[4096];
  if (snprintf(rest, sizeof rest, "%s", path) >= (int)sizeof rest)
    return devmm__fmt_dup("path '%.256s...' is too long", path);
  char *err = check_not_writable("plugin directory", "/");
  for (int hops = 0; !err;) {
    char *c = rest;
    while (*c == '/')
      c++;
    if (!*c)
      return NULL;
    size_t clen = strcspn(c, "/");
    char *next = c + clen;
    while (*next == '/')
      next++;
    int last = !*next;
    if ((clen == 1 && c[0] == '.') || (clen == 2 && c[0] == '.' && c[1] == '.')) {
      char *up = clen == 2 ? strrchr(done, '/') : NULL;
      if (up) /* done has no links: its parent is the real parent */
        *up = '\0';
      memmove(rest, next, strlen(next) + 1);
      continue;
    }
    char cand[4096];
    if (snprintf(cand, sizeof cand, "%s/%.*s", done, (int)clen, c) >= (int)sizeof cand)
      return devmm__fmt_dup("path '%.256s...' is too long", path);
    struct stat st;
    if (lstat(cand, &st) != 0)
      return devmm__fmt_dup("cannot stat %s '%s': %s", last ? what : "plugin directory", cand,
                            strerror(errno));
    if (S_ISLNK(st.st_mode)) {
      if (st.st_uid != 0 && st.st_uid != geteuid())
        return devmm__fmt_dup(
            "refusing plugin link '%s': it is a symbolic link owned by uid %u, neither "
            "root nor this user",
            cand, (unsigned)st.st_uid);
      if (++hops > 40)
        return devmm__fmt_dup("cannot resolve '%s': too many levels of symbolic links", path);
      ssize_t n = readlink(cand, target, sizeof target - 1);
      if (n <= 0)
        return devmm__fmt_dup("cannot read the link '%s': %s", cand, n ? strerror(errno) : "empty");
      target[n] = '\0';
      char joined[4096];
      if (snprintf(joined, sizeof joined, "%s/%s", target, next) >= (int)sizeof joined)
        return devmm__fmt_dup("path '%.256s...' is too long", path);
      memcpy(rest, joined, strlen(joined) + 1);
      if (target[0] == '/')
        done[0] = '\0';
      continue;
    }
    err = check_not_writable(last ? what : "plugin directory", cand);
    memcpy(done, cand, strlen(cand) + 1);
    memmove(rest, next, strlen(next) + 1);
  }
  return err;
}

/* Resolves a plugin name to a checked file path, or returns NULL with *error set. */
char *devmm__plugin_resolve(const char *name, const char *const *dirs, char **error, int *missing) {
  *error = NULL;
  *missing = 0;
  if (!*name) {
    *error = devmm__fmt_dup("empty plugin name");
    return NULL;
  }
  char candidate[4096];
  if (name[0] == '/') {
    snprintf(candidate, sizeof candidate, "%s", name);
    if (access(candidate, F_OK) != 0) {
      *error = devmm__fmt_dup("plugin file '%s' does not exist", name);
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
    const char *const *d = dirs;
    for (; *d; d++) {
      if ((*d)[0] != '/')
        continue; /* never relative to the current directory */
      snprintf(candidate, sizeof candidate, "%s/devmm-%s.so", *d, name);
      if (access(candidate, F_OK) == 0)
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
  char *real = realpath(candidate, NULL);
  if (!real) {
    *error = devmm__fmt_dup("cannot resolve plugin file '%s': %s", candidate, strerror(errno));
    return NULL;
  }
  /* the path as given, every link on it and every directory it passes through, down to the real
   * file; only then is anything opened */
  *error = check_walk("plugin file", candidate);
  if (*error) {
    free(real);
    return NULL;
  }
  return real;
}
