/* The plugin host's loader: opens a checked plugin file with libltdl, through the descriptor the
 * trust walk checked (trust.c), reads its descriptor and kinds, hands it its options, enumerates
 * its devices, and runs its shutdown hooks at exit. This is the only file that knows libltdl
 * (devmm's "prim" layer).
 *
 * libltdl is not thread-safe: every lt_* call happens under `lt_lock`, and each error string
 * is copied out before the lock is dropped. Plugins are opened RTLD_LOCAL (lt_dladvise_local)
 * and never closed: resources they made may outlive any devmm_shutdown. */
#include "plugin_host_internal.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <ltdl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static pthread_mutex_t lt_lock = PTHREAD_MUTEX_INITIALIZER;
static int lt_ready;

/* ------------------------------------------------------------------ records */

char *devmm__fmt_dup(const char *fmt, ...) {
  char buf[DEVMM__MSG_MAX + 256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  return devmm__strdup(buf);
}

void devmm__plugin_free(devmm__plugin *p) {
  if (!p)
    return;
  free(p->name);
  free(p->path);
  free(p->error);
  free(p->devices);
  free(p->kinds);
  free(p);
}

static devmm__plugin *fail(devmm__plugin *p, char *error) {
  free(p->error);
  p->error = error ? error : devmm__strdup("out of memory");
  p->desc = NULL;
  return p;
}

/* ------------------------------------------------------------------ shutdown at exit */

/* Every descriptor with a shutdown hook that was ever loaded, in load order, each once (a
 * plugin loaded again by a later devmm_init returns the same descriptor). Plugins are never
 * unloaded (ADR 2), so the hooks run once, at process exit (ADR 25). */
static const devmm_plugin **exit_hooks;
static size_t nexit_hooks, exit_hooks_cap;
static int exit_hooks_ran;

/* Runs from atexit: registered again after each new plugin's load, so that it runs before the
 * exit handlers (C++ static destructors) of every plugin loaded so far; the first run calls the
 * hooks, newest plugin first, and the later ones find nothing left to do. */
static void run_exit_hooks(void) {
  pthread_mutex_lock(&lt_lock);
  size_t n = exit_hooks_ran ? 0 : nexit_hooks;
  exit_hooks_ran = 1;
  pthread_mutex_unlock(&lt_lock);
  while (n--)
    exit_hooks[n]->shutdown();
}

static int remember_shutdown(const devmm_plugin *d) {
  if (d->struct_size < offsetof(devmm_plugin, shutdown) + sizeof d->shutdown || !d->shutdown)
    return DEVMM_OK;
  int rc = DEVMM_OK, fresh = 1;
  pthread_mutex_lock(&lt_lock);
  for (size_t i = 0; i < nexit_hooks; i++)
    fresh &= exit_hooks[i] != d;
  if (fresh && nexit_hooks == exit_hooks_cap) {
    size_t cap = exit_hooks_cap ? 2 * exit_hooks_cap : 8;
    const devmm_plugin **grown = realloc(exit_hooks, cap * sizeof *grown);
    if (grown) {
      exit_hooks = grown;
      exit_hooks_cap = cap;
    } else {
      rc = DEVMM_ENOMEM;
    }
  }
  if (fresh && rc == DEVMM_OK) {
    exit_hooks[nexit_hooks++] = d;
    if (atexit(run_exit_hooks) != 0)
      rc = DEVMM_ENOMEM;
  }
  pthread_mutex_unlock(&lt_lock);
  return rc;
}

/* ------------------------------------------------------------------ loading */

/* Every plugin file loaded so far: its inode, the descriptor it was loaded through and its
 * handle. The descriptor stays open for good, as the plugin stays loaded: libltdl and the
 * dynamic loader both know the plugin by the name /proc/self/fd/N, and would hand it back for
 * any later file opened as N, so N must never name another file. The same file again (another
 * devmm_init) gets its first handle. Under lt_lock. */
typedef struct {
  dev_t dev;
  ino_t ino;
  int fd;
  lt_dlhandle handle;
} loaded_file;
static loaded_file *loaded;
static size_t nloaded, loaded_cap;

/* Loads the checked file open as fd (an O_PATH descriptor from the trust walk, which this
 * takes over) through /proc/self/fd/N: the kernel opens the very inode that was checked, and
 * libltdl, given a name with a directory and no extension, neither searches nor appends one nor
 * reads a .la (ADR 39). path (the file's real path) is for messages. */
static char *lt_open(const char *path, int fd, lt_dlhandle *out) {
  char *err = NULL;
  struct stat st;
  *out = NULL;
  if (fstat(fd, &st) != 0) {
    err = devmm__fmt_dup("cannot load '%s': fstat: %s", path, strerror(errno));
    close(fd);
    return err;
  }
  pthread_mutex_lock(&lt_lock);
  if (!lt_ready) {
    if (lt_dlinit() != 0) {
      const char *e = lt_dlerror();
      err = devmm__fmt_dup("libltdl failed to initialise: %s", e ? e : "unknown error");
      pthread_mutex_unlock(&lt_lock);
      close(fd);
      return err;
    }
    lt_ready = 1;
  }
  int maxfd = -1, reused = 0;
  for (size_t i = 0; i < nloaded; i++) {
    if (loaded[i].dev == st.st_dev && loaded[i].ino == st.st_ino) {
      *out = loaded[i].handle;
      pthread_mutex_unlock(&lt_lock);
      close(fd);
      return NULL;
    }
    maxfd = loaded[i].fd > maxfd ? loaded[i].fd : maxfd;
    reused |= loaded[i].fd == fd; /* our descriptor was closed behind our back */
  }
  if (reused) {
    int moved = fcntl(fd, F_DUPFD_CLOEXEC, maxfd + 1);
    close(fd);
    if (moved < 0) {
      pthread_mutex_unlock(&lt_lock);
      return devmm__fmt_dup("cannot load '%s': no descriptor free: %s", path, strerror(errno));
    }
    fd = moved;
  }
  if (nloaded == loaded_cap) { /* room first: a plugin that loads is always recorded */
    size_t cap = loaded_cap ? 2 * loaded_cap : 8;
    loaded_file *grown = realloc(loaded, cap * sizeof *grown);
    if (!grown) {
      pthread_mutex_unlock(&lt_lock);
      close(fd);
      return devmm__fmt_dup("out of memory");
    }
    loaded = grown;
    loaded_cap = cap;
  }
  char self[64];
  snprintf(self, sizeof self, "/proc/self/fd/%d", fd);
  if (access(self, F_OK) != 0) {
    err = devmm__fmt_dup("cannot load '%s': %s cannot be reached (%s): devmm loads a checked "
                         "plugin through /proc/self/fd, so /proc must be mounted",
                         path, self, strerror(errno));
    pthread_mutex_unlock(&lt_lock);
    close(fd);
    return err;
  }
  lt_dladvise advise;
  if (lt_dladvise_init(&advise) == 0 && lt_dladvise_local(&advise) == 0) {
    *out = lt_dlopenadvise(self, advise);
    if (!*out) {
      /* libltdl says only "file not found" when a dependency is missing: ask the dynamic
       * loader itself for the real reason */
      const char *e = lt_dlerror();
      void *h = dlopen(self, RTLD_LAZY | RTLD_LOCAL);
      const char *why = h ? NULL : dlerror();
      if (h)
        dlclose(h);
      why = why ? why : e ? e : "unknown error";
      size_t sl = strlen(self);
      if (strncmp(why, self, sl) == 0 && why[sl] == ':') /* its name for the file: the path */
        err = devmm__fmt_dup("cannot load '%s': %s", path, why + sl + 2);
      else
        err = devmm__fmt_dup("cannot load '%s': %s", path, why);
    }
  } else {
    err = devmm__fmt_dup("libltdl advise setup failed");
  }
  lt_dladvise_destroy(&advise);
  if (*out)
    loaded[nloaded++] = (loaded_file){st.st_dev, st.st_ino, fd, *out};
  else
    close(fd);
  pthread_mutex_unlock(&lt_lock);
  return err;
}

static void *lt_sym(lt_dlhandle h, const char *sym, char **err) {
  pthread_mutex_lock(&lt_lock);
  void *p = lt_dlsym(h, sym);
  if (!p) {
    const char *e = lt_dlerror();
    *err = devmm__fmt_dup("%s", e ? e : "symbol not found");
  }
  pthread_mutex_unlock(&lt_lock);
  return p;
}

/* Hands the [plugin <name>] options to the plugin: every key must be one it declares. */
static devmm__plugin *configure(devmm__plugin *p, const devmm_plugin *d, const devmm_option *o,
                                size_t n) {
  int has = d->struct_size >= offsetof(devmm_plugin, configure) + sizeof d->configure;
  const char *const *keys = has ? d->options : NULL;
  for (size_t i = 0; i < n; i++) {
    int known = 0;
    for (const char *const *k = keys; k && *k; k++)
      known |= strcmp(*k, o[i].key) == 0;
    if (!known) {
      char valid[256] = "";
      for (const char *const *k = keys; k && *k; k++) {
        size_t len = strlen(valid);
        snprintf(valid + len, sizeof valid - len, "%s%s", len ? ", " : "", *k);
      }
      p->config_failed = 1;
      p->config_line = o[i].line;
      return fail(p, devmm__fmt_dup("unknown key '%s': plugin '%s' takes %s%s", o[i].key, d->name,
                                    *valid ? "" : "no options", valid));
    }
  }
  if (!has || !d->configure)
    return p;
  devmm_clear_error();
  if (d->configure(o, n) != DEVMM_OK) {
    p->config_failed = 1;
    return fail(p, devmm__fmt_dup("%s", *devmm_last_error() ? devmm_last_error() : "refused"));
  }
  return p;
}

devmm__plugin *devmm__plugin_load(const char *name, const char *const *dirs,
                                  const devmm_option *options, size_t noptions) {
  devmm__plugin *p = calloc(1, sizeof *p);
  if (!p)
    return NULL;
  p->name = devmm__strdup(name);
  if (!p->name) { /* a record without its name is no use to anyone: out of memory */
    free(p);
    return NULL;
  }
  char *err = NULL;
  int fd;
  p->path = devmm__plugin_resolve(name, dirs, &err, &p->missing, &fd);
  if (!p->path)
    return fail(p, err);
  lt_dlhandle h;
  if ((err = lt_open(p->path, fd, &h)) != NULL)
    return fail(p, err);
  char *serr = NULL;
  devmm_plugin_entry_fn entry = (devmm_plugin_entry_fn)lt_sym(h, DEVMM_PLUGIN_ENTRY_SYMBOL, &serr);
  if (!entry) {
    err = devmm__fmt_dup("'%s' has no entry symbol %s(): %s (is it a devmm plugin?)", p->path,
                         DEVMM_PLUGIN_ENTRY_SYMBOL, serr ? serr : "");
    free(serr);
    return fail(p, err);
  }
  devmm_clear_error();
  const devmm_plugin *d = entry(DEVMM_PLUGIN_ABI_MAJOR, DEVMM_PLUGIN_ABI_MINOR, devmm__host());
  if (!d)
    return fail(p, devmm__fmt_dup("its initialisation failed: %s",
                                  *devmm_last_error() ? devmm_last_error() : "(no reason given)"));
  if (d->abi_major != DEVMM_PLUGIN_ABI_MAJOR)
    return fail(p, devmm__fmt_dup("it was built for plugin ABI %u.%u; this devmm speaks %u.x "
                                  "(rebuild it against this devmm's SDK)",
                                  d->abi_major, d->abi_minor, DEVMM_PLUGIN_ABI_MAJOR));
  if (d->abi_minor > DEVMM_PLUGIN_ABI_MINOR)
    return fail(p, devmm__fmt_dup("it needs plugin ABI %u.%u; this devmm provides only %u.%u",
                                  d->abi_major, d->abi_minor, DEVMM_PLUGIN_ABI_MAJOR,
                                  DEVMM_PLUGIN_ABI_MINOR));
  if (d->struct_size < offsetof(devmm_plugin, shutdown) || !d->name ||
      (d->device_count && !d->device_info) || (d->nkinds && !d->kinds))
    return fail(p, devmm__fmt_dup("its descriptor is incomplete (struct_size %zu; name, kinds, and "
                                  "device_info with device_count are required)",
                                  d->struct_size));
  if (d->nkinds > 4096)
    return fail(p, devmm__fmt_dup("it declares %zu resource kinds (at most 4096)", d->nkinds));
  /* kinds are pointers, each read up to its own struct_size into a host-side copy (ADR 25) */
  if (d->nkinds && !(p->kinds = calloc(d->nkinds, sizeof *p->kinds)))
    return fail(p, NULL);
  p->nkinds = d->nkinds;
  for (size_t i = 0; i < d->nkinds; i++) {
    const devmm_resource_kind *k = d->kinds[i];
    if (!k)
      return fail(p, devmm__fmt_dup("its resource kind #%zu is NULL", i));
    if (k->struct_size < DEVMM__KIND_MIN_SIZE || k->struct_size > 64 * sizeof *k)
      return fail(p,
                  devmm__fmt_dup("its resource kind #%zu has struct_size %zu: expected %zu (or an "
                                 "older version's, at least %zu)",
                                 i, k->struct_size, sizeof *k, (size_t)DEVMM__KIND_MIN_SIZE));
    memcpy(&p->kinds[i], k, k->struct_size < sizeof *k ? k->struct_size : sizeof *k);
    p->kinds[i].struct_size = sizeof *k;
    k = &p->kinds[i];
    if (!k->name || !k->create)
      return fail(p, devmm__fmt_dup("its resource kind #%zu has no name or factory", i));
    size_t pl = strlen(d->name);
    if (strncmp(k->name, d->name, pl) != 0 || k->name[pl] != '.')
      return fail(
          p, devmm__fmt_dup("its resource kind '%s' is not named '%s.<kind>'", k->name, d->name));
    for (size_t j = 0; j < i; j++)
      if (strcmp(p->kinds[j].name, k->name) == 0)
        return fail(p, devmm__fmt_dup("it declares the resource kind '%s' twice", k->name));
  }
  if (configure(p, d, options, noptions)->config_failed)
    return p;
  p->desc = d;
  if (remember_shutdown(d) != DEVMM_OK)
    return fail(p, NULL);
  if (d->struct_size >= offsetof(devmm_plugin, lazy_device_type) + sizeof d->lazy_device_type)
    p->lazy_type = d->lazy_device_type;
  if (!p->lazy_type && devmm__plugin_enumerate(p) != DEVMM_OK)
    return fail(p, NULL);
  return p;
}

int devmm__plugin_enumerate(devmm__plugin *p) {
  const devmm_plugin *d = p->desc;
  if (!d || p->enumerated)
    return DEVMM_OK;
  p->enumerated = 1;
  /* devices: a failure here is not a load failure, it is "0 devices: <reason>"; a plugin
   * without device_count only adds kinds (0 devices) */
  size_t n = 0;
  devmm_clear_error();
  if (d->device_count && d->device_count(&n) != DEVMM_OK) {
    free(p->error);
    p->error =
        devmm__fmt_dup("0 devices: %s", *devmm_last_error() ? devmm_last_error() : "unknown");
    n = 0;
  }
  if (n) {
    p->devices = calloc(n, sizeof *p->devices);
    if (!p->devices)
      return DEVMM_ENOMEM;
    for (size_t i = 0; i < n; i++) {
      p->devices[i].struct_size = sizeof p->devices[i];
      if (d->device_info(i, &p->devices[i]) != DEVMM_OK) {
        free(p->error);
        p->error = devmm__fmt_dup("device #%zu: %s", i, devmm_last_error());
        n = i;
        break;
      }
    }
  }
  p->ndevices = n;
  return DEVMM_OK;
}

/* ------------------------------------------------------------------ introspection */

void devmm__plugin_kinds_json(const devmm__plugin *p, FILE *f, void (*str)(FILE *, const char *)) {
  fprintf(f, "[");
  for (size_t k = 0; p->desc && k < p->nkinds; k++) {
    const devmm_resource_kind *kd = &p->kinds[k];
    char dev[32];
    devmm_device_format((devmm_device){kd->device_type, 0}, dev, sizeof dev);
    dev[strcspn(dev, ":")] = '\0';
    fprintf(f, "%s{\"name\": ", k ? ", " : "");
    str(f, kd->name);
    fprintf(f, ", \"description\": ");
    str(f, kd->description ? kd->description : "");
    fprintf(f, ", \"device_type\": ");
    str(f, dev);
    fprintf(f, ", \"options\": [");
    int help = kd->option_help != NULL;
    for (size_t o = 0; kd->options && kd->options[o]; o++) {
      fprintf(f, "%s{\"key\": ", o ? ", " : "");
      str(f, kd->options[o]);
      fprintf(f, ", \"help\": ");
      help = help && kd->option_help[o];
      str(f, help ? kd->option_help[o] : "");
      fprintf(f, "}");
    }
    fprintf(f, "]}");
  }
  fprintf(f, "]");
}
