/* Finding and reading devmm.ini (DEVMM_CONFIG, then $XDG_CONFIG_HOME/devmm/devmm.ini, then the
 * installed one, else a built-in default) and the plugin path it implies (DEVMM_PLUGIN_PATH,
 * plugin_path, the installed directory). */
#include "config_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_FILE (1 << 20) /* a devmm.ini is a few hundred bytes; refuse what cannot be one */

static const char builtin_config[] = "[devmm]\n"
                                     "plugins = cpu\n"
                                     "[device cpu]\n"
                                     "resource = cpu.malloc\n";

/* path made absolute against the working directory (as it is now); NULL with errno set if the
 * working directory is unknown or memory ran out. */
static char *absolute(const char *path) {
  if (path[0] == '/')
    return devmm__strdup(path);
  char cwd[4096];
  if (!getcwd(cwd, sizeof cwd))
    return NULL;
  while (path[0] == '.' && path[1] == '/')
    path += 2;
  if (strcmp(path, ".") == 0)
    path = "";
  size_t n = strlen(cwd) + strlen(path) + 2;
  char *out = malloc(n);
  if (out)
    snprintf(out, n, "%s%s%s", cwd, *path && strcmp(cwd, "/") != 0 ? "/" : "", path);
  return out;
}

/* The file to read: path, $DEVMM_CONFIG, XDG, the installed one; NULL: the built-in default.
 * xdg is room for the XDG path. */
static const char *choose(const char *path, char *xdg, size_t cap) {
  if (path)
    return path;
  const char *chosen = devmm__getenv("DEVMM_CONFIG");
  if (chosen)
    return chosen;
  const char *x = devmm__getenv("XDG_CONFIG_HOME"), *home = devmm__getenv("HOME");
  if (x && x[0] == '/')
    snprintf(xdg, cap, "%s/devmm/devmm.ini", x);
  else if (home && home[0] == '/')
    snprintf(xdg, cap, "%s/.config/devmm/devmm.ini", home);
  else
    xdg[0] = '\0';
  if (xdg[0] && access(xdg, F_OK) == 0)
    return xdg;
  if (*devmm__installed_config() && access(devmm__installed_config(), F_OK) == 0)
    return devmm__installed_config();
  return NULL;
}

/* Opens a regular file for reading; anything else is refused without blocking: the open does not
 * wait (O_NONBLOCK: a FIFO opens at once), fstat decides, and only then does the descriptor
 * block again (tests/c/suite_config.c config_not_a_regular_file). */
static int open_regular(const char *name, FILE **out) {
  int fd = open(name, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0)
    return devmm_set_error(DEVMM_ECONFIG, "cannot read configuration file '%s': %s", name,
                           strerror(errno));
  struct stat st;
  int rc = DEVMM_OK;
  if (fstat(fd, &st) != 0)
    rc = devmm_set_error(DEVMM_ECONFIG, "cannot read configuration file '%s': %s", name,
                         strerror(errno));
  else if (!S_ISREG(st.st_mode))
    rc = devmm_set_error(DEVMM_ECONFIG,
                         "cannot read configuration file '%s': it is %s: expected a regular file",
                         name, devmm__file_type(st.st_mode));
  else if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) != 0 || !(*out = fdopen(fd, "r")))
    rc = devmm_set_error(errno == ENOMEM ? DEVMM_ENOMEM : DEVMM_ECONFIG,
                         "cannot read configuration file '%s': %s", name, strerror(errno));
  if (rc)
    close(fd);
  return rc;
}

/* Reads the whole file into *text (its length *len). */
static int read_file(const char *name, char **text, size_t *len) {
  FILE *f = NULL;
  int rc = open_regular(name, &f);
  if (rc)
    return rc;
  char *buf = malloc(MAX_FILE + 1);
  size_t n = buf ? fread(buf, 1, MAX_FILE + 1, f) : 0;
  int err = ferror(f);
  fclose(f);
  if (!buf)
    return devmm_set_error(DEVMM_ENOMEM, "out of memory");
  if (err || n > MAX_FILE) {
    free(buf);
    return devmm_set_error(DEVMM_ECONFIG, "%s: %s", name,
                           err ? "cannot read it" : "larger than 1 MiB: not a devmm.ini");
  }
  *text = buf;
  *len = n;
  return DEVMM_OK;
}

/* Finds, reads and parses the configuration into c. */
int devmm__config_load(const char *path, devmm__config *c) {
  char xdg[4096];
  const char *chosen = choose(path, xdg, sizeof xdg);
  if (!chosen)
    return devmm__config_parse(builtin_config, sizeof builtin_config - 1, "built-in default", NULL,
                               c);
  /* its directory, absolute now (at init): relative plugin_path entries start there */
  char *dir = absolute(chosen), *slash = dir ? strrchr(dir, '/') : NULL;
  if (!dir)
    return devmm_set_error(errno == ENOMEM ? DEVMM_ENOMEM : DEVMM_ECONFIG,
                           "cannot resolve configuration file '%s': %s", chosen, strerror(errno));
  *(slash == dir ? slash + 1 : slash) = '\0';
  char *text = NULL;
  size_t len = 0;
  int rc = read_file(chosen, &text, &len);
  if (!rc)
    rc = devmm__config_parse(text, len, chosen, dir, c);
  free(text);
  free(dir);
  return rc;
}

int devmm__config_load_text(const char *text, size_t len, const char *name, devmm__config *c) {
  if (!name)
    name = "<ini text>";
  if (len > MAX_FILE)
    return devmm_set_error(DEVMM_ECONFIG, "%s: larger than 1 MiB: not a devmm.ini", name);
  char *dir = absolute("."); /* relative plugin_path entries start at the working directory */
  if (!dir)
    return devmm_set_error(errno == ENOMEM ? DEVMM_ENOMEM : DEVMM_ECONFIG,
                           "%s: cannot resolve the working directory: %s", name, strerror(errno));
  int rc = devmm__config_parse(text, len, name, dir, c);
  free(dir);
  return rc;
}

/* The plugin search path, every entry absolute: $DEVMM_PLUGIN_PATH (a relative entry is taken
 * from the working directory now, at init), plugin_path (resolved against the configuration
 * file's directory when parsed), the installed directory. A new NULL-terminated list (free it
 * with devmm__free_list), or NULL with the error set. */
/* A DEVMM_PLUGIN_PATH entry that is no directory is said (once per value of the variable:
 * devmm__plugin_dirs; tests/c/suite_config_answers.c config_plugin_path_entry_missing). */
static void check_env_dir(const char *entry, const char *full) {
  struct stat st;
  int rc = stat(full, &st);
  if (rc == 0 && S_ISDIR(st.st_mode))
    return;
  devmm__diag(DEVMM_LOG_WARN, NULL,
              "DEVMM_PLUGIN_PATH: '%.512s' %s: expected a directory of devmm-<name>.so plugins",
              entry, rc ? "does not exist" : "is not a directory");
}

/* The same for the configuration's plugin_path = ... entries, at each read of the file (its line
 * numbers are not kept: the file and the resolved entry are named; config_answers
 * config_plugin_path_config_entry_missing). */
static void check_config_dir(const devmm__config *c, const char *full) {
  struct stat st;
  int rc = stat(full, &st);
  if (rc == 0 && S_ISDIR(st.st_mode))
    return;
  devmm__diag(DEVMM_LOG_WARN, NULL,
              "%.512s: plugin_path entry '%.512s' %s: expected a directory of devmm-<name>.so "
              "plugins",
              c->source, full, rc ? "does not exist" : "is not a directory");
}

char **devmm__plugin_dirs(const devmm__config *c, size_t *n) {
  static char checked[4096]; /* the DEVMM_PLUGIN_PATH whose entries were checked (init_lock) */
  char **dirs = NULL;
  *n = 0;
  const char *env = devmm__getenv("DEVMM_PLUGIN_PATH");
  int check = env && strcmp(checked, env) != 0;
  char *envcopy = env ? devmm__strdup(env) : NULL, *save = NULL;
  int oom = env && !envcopy;
  for (char *t = envcopy ? strtok_r(envcopy, ":", &save) : NULL; t && !oom;
       t = strtok_r(NULL, ":", &save)) {
    char *full = absolute(t);
    if (full)
      devmm__path_tidy(full);
    if (full && check)
      check_env_dir(t, full);
    char **grown = full ? realloc(dirs, (*n + 1) * sizeof *dirs) : NULL;
    oom = !grown;
    if (grown)
      (dirs = grown)[(*n)++] = full;
    else
      free(full);
  }
  free(envcopy);
  if (check)
    snprintf(checked, sizeof checked, "%s", env);
  size_t total = *n + c->npaths + 2;
  char **grown = oom ? NULL : realloc(dirs, total * sizeof *dirs);
  oom = oom || !grown;
  if (grown)
    dirs = grown;
  for (size_t i = 0; i <= c->npaths && !oom; i++) {
    const char *d = i < c->npaths ? c->paths[i] : devmm__installed_plugin_dir();
    if (i < c->npaths && *d)
      check_config_dir(c, d);
    if (*d && !(dirs[*n] = devmm__strdup(d)))
      oom = 1;
    else if (*d)
      (*n)++;
  }
  if (oom) {
    devmm__free_list(dirs, *n);
    *n = 0;
    devmm_set_error(DEVMM_ENOMEM, "out of memory (the plugin path)");
    return NULL;
  }
  dirs[*n] = NULL; /* room was made for it */
  return dirs;
}
