/* Finding and reading devmm.ini (DEVMM_CONFIG, then $XDG_CONFIG_HOME/devmm/devmm.ini, then the
 * installed one, else a built-in default) and the plugin path it implies (DEVMM_PLUGIN_PATH,
 * plugin_path, the installed directory). */
#include "config_internal.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

/* Reads the whole file into *text (its length *len). */
static int read_file(const char *name, char **text, size_t *len) {
  FILE *f = fopen(name, "re");
  if (!f)
    return devmm_set_error(DEVMM_ECONFIG, "cannot read configuration file '%s': %s", name,
                           strerror(errno));
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

/* The plugin search path, every entry absolute: $DEVMM_PLUGIN_PATH (a relative entry is taken
 * from the working directory now, at init), plugin_path (resolved against the configuration
 * file's directory when parsed), the installed directory. A new NULL-terminated list (free it
 * with devmm__free_list), or NULL with the error set. */
char **devmm__plugin_dirs(const devmm__config *c, size_t *n) {
  char **dirs = NULL;
  *n = 0;
  const char *env = devmm__getenv("DEVMM_PLUGIN_PATH");
  char *envcopy = env ? devmm__strdup(env) : NULL, *save = NULL;
  int oom = env && !envcopy;
  for (char *t = envcopy ? strtok_r(envcopy, ":", &save) : NULL; t && !oom;
       t = strtok_r(NULL, ":", &save)) {
    char *full = absolute(t);
    if (full)
      devmm__path_tidy(full);
    char **grown = full ? realloc(dirs, (*n + 1) * sizeof *dirs) : NULL;
    oom = !grown;
    if (grown)
      (dirs = grown)[(*n)++] = full;
    else
      free(full);
  }
  free(envcopy);
  size_t total = *n + c->npaths + 2;
  char **grown = oom ? NULL : realloc(dirs, total * sizeof *dirs);
  oom = oom || !grown;
  if (grown)
    dirs = grown;
  for (size_t i = 0; i <= c->npaths && !oom; i++) {
    const char *d = i < c->npaths ? c->paths[i] : devmm__installed_plugin_dir();
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
