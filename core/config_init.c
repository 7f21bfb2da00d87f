/* devmm_init and devmm_shutdown: finding devmm.ini, the plugin path, building a new state and
 * swapping it in, lazy initialisation on the registry's first miss (through the hook the
 * registry asks), and loading a kind's plugin on demand.
 *
 * devmm_init is transactional for the file: everything is parsed, checked and built into a
 * new state first; only then is it swapped in and the registry updated. A plugin that fails
 * to load is not a file error: it is recorded in the state (and logged) and the others work.
 * Locks: init_lock (one devmm_init at a time), then state_lock (guards `current` and
 * lazy_error), never the reverse. */
#include "config_internal.h"

#include "devmm-config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_FILE (1 << 20) /* a devmm.ini is a few hundred bytes; refuse what cannot be one */

static pthread_mutex_t init_lock = PTHREAD_MUTEX_INITIALIZER;
/* The state this thread's devmm_init is building, or the current one while this thread holds
 * state_lock for an on-demand load: what host->device_total reads without taking a lock. */
static _Thread_local devmm__state *building;
static pthread_mutex_t state_lock = PTHREAD_MUTEX_INITIALIZER;
static devmm__state *current;
static atomic_int initialized;
static atomic_int lazy_tried;           /* the registry's miss tries a lazy init once */
static char lazy_error[DEVMM__MSG_MAX]; /* why it failed, told at every later miss */

static const char builtin_config[] = "[devmm]\n"
                                     "plugins = cpu\n"
                                     "[device cpu]\n"
                                     "resource = cpu.malloc\n";

devmm__state *devmm__state_lock(void) {
  pthread_mutex_lock(&state_lock);
  return current;
}

void devmm__state_unlock(void) { pthread_mutex_unlock(&state_lock); }

static void state_free(devmm__state *s) {
  if (!s)
    return;
  for (size_t i = 0; i < s->ndevices; i++) {
    devmm_resource_release(s->devices[i].resource);
    free(s->devices[i].stack);
    free(s->devices[i].error);
  }
  free(s->devices);
  for (size_t i = 0; i < s->nplugins; i++)
    devmm__plugin_free(s->plugins[i]);
  free(s->plugins);
  devmm__free_list(s->dirs, s->ndirs);
  devmm__config_free(&s->c);
  free(s);
}

/* ================================================================ finding and reading the file */

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
static int load_config(const char *path, devmm__config *c) {
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
static char **plugin_dirs(const devmm__config *c, size_t *n) {
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

/* ================================================================ building a state */

/* The [plugin name] section's options, as the plugin's configure() takes them. */
static size_t plugin_options(const devmm__config *c, const char *name, devmm_option *out,
                             size_t cap, const devmm__section **section) {
  *section = NULL;
  for (size_t k = 0; k < c->nsections; k++)
    if (c->sections[k].plugin && strcmp(c->sections[k].plugin, name) == 0)
      *section = &c->sections[k];
  size_t n = 0;
  for (size_t k = 0; *section && k < (*section)->nopts && n < cap; k++)
    out[n++] = (devmm_option){(*section)->opts[k].key, (*section)->opts[k].value,
                              (*section)->opts[k].line};
  return n;
}

/* Loads plugin i of the file into s->plugins; a refused [plugin ...] option is a file error. */
static int load_plugin(devmm__state *s, size_t i, char **dirs) {
  const char *name = s->c.plugins[i];
  for (size_t j = 0; j < i; j++)
    if (strcmp(name, s->c.plugins[j]) == 0)
      return devmm_set_error(DEVMM_ECONFIG, "%s: plugin '%s' is listed twice in plugins = ...",
                             s->c.source, name);
  const devmm__section *ps;
  devmm_option popts[64];
  size_t np = plugin_options(&s->c, name, popts, 64, &ps);
  devmm__plugin *p = devmm__plugin_load(name, (const char *const *)dirs, popts, np);
  if (!p)
    return devmm_set_error(DEVMM_ENOMEM, "out of memory");
  s->plugins[s->nplugins++] = p;
  if (p->config_failed) /* a bad [plugin ...] option is an error of the file */
    return devmm_set_error(DEVMM_ECONFIG, "%s:%d: [plugin %s]: %s", s->c.source,
                           p->config_line ? p->config_line
                           : ps           ? ps->line
                                          : 0,
                           p->name, p->error);
  if (!p->desc)
    devmm__log(DEVMM_LOG_WARN, NULL, "plugin '%s' not loaded: %s", p->name, p->error);
  else if (p->error)
    devmm__log(DEVMM_LOG_INFO, NULL, "plugin '%s': %s", p->name, p->error);
  return DEVMM_OK;
}

static int load_plugins(devmm__state *s) {
  if (!(s->dirs = plugin_dirs(&s->c, &s->ndirs))) /* resolved once: kinds on demand reuse it */
    return DEVMM_ENOMEM;
  int rc = DEVMM_OK;
  if (!(s->plugins = calloc(s->c.nplugins ? s->c.nplugins : 1, sizeof *s->plugins)))
    rc = devmm_set_error(DEVMM_ENOMEM, "out of memory");
  for (size_t i = 0; !rc && i < s->c.nplugins; i++)
    rc = load_plugin(s, i, s->dirs);
  /* two plugins may not offer the same kind */
  for (size_t i = 0; !rc && i < s->nplugins; i++)
    for (size_t j = 0; !rc && s->plugins[i]->desc && j < s->nplugins; j++)
      if (i != j && s->plugins[j]->desc &&
          strcmp(s->plugins[i]->desc->name, s->plugins[j]->desc->name) == 0)
        rc = devmm_set_error(DEVMM_ECONFIG, "%s: plugins '%s' and '%s' both call themselves '%s'",
                             s->c.source, s->plugins[i]->name, s->plugins[j]->name,
                             s->plugins[i]->desc->name);
  return rc;
}

/* Every device the plugins enumerate (a device two plugins enumerate belongs to the first),
 * each with its stack. */
static int build_devices(devmm__state *s) {
  size_t total = 0;
  for (size_t i = 0; i < s->nplugins; i++)
    total += s->plugins[i]->ndevices;
  if (!(s->devices = calloc(total ? total : 1, sizeof *s->devices)))
    return devmm_set_error(DEVMM_ENOMEM, "out of memory");
  for (size_t i = 0; i < s->nplugins; i++)
    for (size_t k = 0; k < s->plugins[i]->ndevices; k++) {
      devmm_device dev = s->plugins[i]->devices[k].device;
      const devmm__dstate *seen = NULL;
      for (size_t j = 0; j < s->ndevices && !seen; j++)
        if (s->devices[j].info.device.device_type == dev.device_type &&
            s->devices[j].info.device.device_id == dev.device_id)
          seen = &s->devices[j];
      if (seen) { /* said, not silently dropped */
        char name[32], note[192];
        devmm_device_format(dev, name, sizeof name);
        snprintf(note, sizeof note,
                 "device %s is also enumerated by plugin '%.64s', which keeps it (the first in "
                 "plugins = ...)",
                 name, seen->plugin->name);
        devmm__log(DEVMM_LOG_WARN, s->plugins[i]->name, "%s", note);
        if (!s->plugins[i]->error)
          s->plugins[i]->error = devmm__strdup(note);
        continue;
      }
      devmm__dstate *ds = &s->devices[s->ndevices++];
      ds->info = s->plugins[i]->devices[k];
      ds->plugin = s->plugins[i];
      int rc = devmm__build_device(s, ds);
      if (rc)
        return rc;
      if (ds->error) {
        char name[32];
        devmm_device_format(ds->info.device, name, sizeof name);
        devmm__log(DEVMM_LOG_WARN, NULL, "device %s has no resource: %s", name, ds->error);
      }
    }
  return DEVMM_OK;
}

static int build(const char *path, devmm__state **out) {
  devmm__state *s = calloc(1, sizeof *s);
  if (!s)
    return devmm_set_error(DEVMM_ENOMEM, "out of memory");
  int rc = load_config(path, &s->c);
  if (!rc && s->c.log_level >= 0)
    devmm__set_log_level(s->c.log_level);
  building = s;
  if (!rc)
    rc = load_plugins(s);
  for (size_t i = 0; !rc && i < s->c.nsections; i++)
    rc = devmm__check_section(s, &s->c.sections[i]);
  if (!rc)
    rc = build_devices(s);
  building = NULL;
  if (rc) {
    state_free(s);
    return rc;
  }
  *out = s;
  return DEVMM_OK;
}

/* ================================================================ init, shutdown, lazy */

/* Makes s the current state (caller holds init_lock) and takes the previous state's resources
 * out of the registry where they are still the current ones; returns the previous state. */
static devmm__state *swap_state(devmm__state *s) {
  pthread_mutex_lock(&state_lock);
  devmm__state *old = current;
  current = s;
  lazy_error[0] = '\0';
  pthread_mutex_unlock(&state_lock);
  for (size_t i = 0; old && i < old->ndevices; i++)
    if (old->devices[i].resource)
      devmm__registry_replace(old->devices[i].info.device, old->devices[i].resource, NULL,
                              DEVMM__REGISTRY_CLEAR);
  return old;
}

static int init(const char *path, int lazy) {
  pthread_mutex_lock(&init_lock);
  if (lazy && atomic_load(&initialized)) { /* another thread got there first */
    pthread_mutex_unlock(&init_lock);
    return DEVMM_OK;
  }
  devmm__state *s = NULL;
  int rc = build(path, &s);
  if (rc) {
    pthread_mutex_unlock(&init_lock);
    return rc;
  }
  /* Replace what the previous configuration set; leave what the user set alone (a lazy init
   * only fills devices that have no resource yet). */
  devmm__state *old = swap_state(s);
  for (size_t i = 0; i < s->ndevices; i++)
    if (s->devices[i].resource)
      devmm__registry_replace(s->devices[i].info.device, NULL, s->devices[i].resource,
                              lazy ? DEVMM__REGISTRY_FILL : DEVMM__REGISTRY_REPLACE);
  atomic_store(&initialized, 1);
  pthread_mutex_unlock(&init_lock);
  state_free(old);
  return DEVMM_OK;
}

int devmm_init(const char *path) { return init(path, 0); }

void devmm_shutdown(void) {
  pthread_mutex_lock(&init_lock);
  devmm__state *old = swap_state(NULL);
  atomic_store(&initialized, 0);
  atomic_store(&lazy_tried, 0);
  pthread_mutex_unlock(&init_lock);
  state_free(old);
}

int devmm_is_initialized(void) { return atomic_load(&initialized); }

void devmm__ensure_init(void) {
  if (!atomic_load(&initialized) && init(NULL, 1) != DEVMM_OK)
    devmm__log(DEVMM_LOG_ERROR, NULL, "initialisation failed: %s", devmm_last_error());
}

/* Why the state has no resource for device (state_lock held). */
static void explain(const devmm__state *s, devmm_device device, char *why, size_t cap) {
  why[0] = '\0';
  if (!s) {
    if (lazy_error[0])
      snprintf(why, cap, "devmm could not initialise: %.440s", lazy_error);
    else
      snprintf(why, cap, "set one with devmm_set_current_resource() or call devmm_init()");
    return;
  }
  for (size_t i = 0; i < s->ndevices && !why[0]; i++)
    if (s->devices[i].info.device.device_type == device.device_type &&
        s->devices[i].info.device.device_id == device.device_id && s->devices[i].error)
      snprintf(why, cap, "%s", s->devices[i].error);
  for (size_t i = 0; i < s->nplugins && !why[0]; i++)
    if (s->plugins[i]->error)
      snprintf(why, cap, "no loaded plugin has this device (plugin '%s': %.400s)",
               s->plugins[i]->name, s->plugins[i]->error);
  if (!why[0])
    snprintf(why, cap, "no plugin of %s has this device", s->c.source);
}

/* The registry's miss hook: initialise lazily, once; then say why device has no resource.
 * Returns 1 when this call initialised devmm (the registry looks again). */
static int on_registry_miss(devmm_device device, char *why, size_t cap) {
  int fresh = 0;
  if (!atomic_load(&initialized) && !atomic_exchange(&lazy_tried, 1)) {
    devmm__ensure_init();
    fresh = atomic_load(&initialized);
    if (!fresh) {
      char saved[DEVMM__MSG_MAX];
      snprintf(saved, sizeof saved, "%s", devmm_last_error());
      pthread_mutex_lock(&state_lock);
      snprintf(lazy_error, sizeof lazy_error, "%s", saved);
      pthread_mutex_unlock(&state_lock);
    }
  }
  explain(devmm__state_lock(), device, why, cap);
  devmm__state_unlock();
  return fresh;
}

__attribute__((constructor)) static void install_registry_hook(void) {
  devmm__registry_set_miss_hook(on_registry_miss);
}

/* ================================================================ the device_total service */

int devmm__device_total(devmm_device device, size_t *total_bytes) {
  if (!total_bytes)
    return devmm_set_error(DEVMM_EINVAL, "device_total: total_bytes is NULL");
  *total_bytes = 0;
  devmm__state *s = building;
  if (!s)
    pthread_mutex_lock(&state_lock);
  const devmm__state *st = s ? s : current;
  int found = 0;
  for (size_t i = 0; st && !found && i < st->nplugins; i++) /* the first enumerating it owns it */
    for (size_t k = 0; !found && st->plugins[i]->desc && k < st->plugins[i]->ndevices; k++) {
      const devmm_device_info *d = &st->plugins[i]->devices[k];
      if (d->device.device_type == device.device_type && d->device.device_id == device.device_id) {
        found = 1;
        *total_bytes = d->total_bytes;
      }
    }
  if (!s)
    pthread_mutex_unlock(&state_lock);
  if (*total_bytes)
    return DEVMM_OK;
  char name[32];
  devmm_device_format(device, name, sizeof name);
  return devmm_set_error(DEVMM_ENOENT, "device %s: %s", name,
                         found ? "its plugin does not know its total memory"
                               : "no loaded plugin enumerates it");
}

/* ================================================================ kinds on demand */

/* A kind whose plugin the configuration did not name ("cuda.async" with only cpu loaded): load
 * that plugin from the plugin path on demand. Its devices get no current resource (only the
 * configuration decides those), but its kinds can be created. Caller holds both locks. */
static const devmm_resource_kind *load_for_kind(devmm__state *s, const char *kind) {
  const char *dot = strchr(kind, '.');
  char name[64];
  if (!dot || dot == kind || (size_t)(dot - kind) >= sizeof name)
    return NULL;
  snprintf(name, sizeof name, "%.*s", (int)(dot - kind), kind);
  for (size_t i = 0; i < s->nplugins; i++)
    if (strcmp(s->plugins[i]->name, name) == 0)
      return NULL; /* named already: loaded without that kind, or failed */
  devmm__plugin **grown = realloc(s->plugins, (s->nplugins + 1) * sizeof *grown);
  if (!grown)
    return NULL;
  s->plugins = grown;
  devmm__plugin *p = devmm__plugin_load(name, (const char *const *)s->dirs, NULL, 0);
  if (!p)
    return NULL;
  s->plugins[s->nplugins++] = p;
  if (!p->desc) { /* refused or broken: warn, as for a configured plugin; absent: asked, answered */
    devmm__log(p->missing ? DEVMM_LOG_INFO : DEVMM_LOG_WARN, NULL,
               "plugin '%s' (for %s) not loaded: %s", name, kind, p->error);
    return NULL;
  }
  return devmm__find_kind(s, kind, NULL);
}

/* The kind (loading its plugin on demand), or NULL with the kinds on offer in avail and, when
 * the plugin its name starts with failed to load, why in `why` ("" otherwise). */
static const devmm_resource_kind *kind_named(const char *kind, char *avail, size_t cap, char *why,
                                             size_t whycap) {
  pthread_mutex_lock(&init_lock); /* may add a plugin to the state: no devmm_init meanwhile */
  pthread_mutex_lock(&state_lock);
  const devmm_resource_kind *k = current ? devmm__find_kind(current, kind, NULL) : NULL;
  building = current; /* a plugin loaded here may ask for a device's total: no lock again */
  if (!k && current)
    k = load_for_kind(current, kind);
  building = NULL;
  avail[0] = why[0] = '\0';
  size_t pl = strcspn(kind, ".");
  for (size_t p = 0; !k && current && p < current->nplugins; p++) {
    const devmm__plugin *pp = current->plugins[p];
    devmm__append_kinds(avail, cap, pp->desc);
    if (!pp->desc && kind[pl] == '.' && strlen(pp->name) == pl && !strncmp(pp->name, kind, pl))
      snprintf(why, whycap, "plugin '%s' could not be loaded: %s; ", pp->name, pp->error);
  }
  pthread_mutex_unlock(&state_lock);
  pthread_mutex_unlock(&init_lock);
  return k;
}

int devmm_resource_create_kind(const char *kind, int32_t device_id, const devmm_option *options,
                               size_t noptions, devmm_resource **out) {
  if (!out)
    return devmm_set_error(DEVMM_EINVAL, "devmm_resource_create_kind: out is NULL");
  *out = NULL;
  if (!kind || (noptions && !options))
    return devmm_set_error(DEVMM_EINVAL, "devmm_resource_create_kind: %s is NULL",
                           !kind ? "kind" : "options");
  devmm__ensure_init();
  char avail[512], why[DEVMM__MSG_MAX];
  const devmm_resource_kind *k = kind_named(kind, avail, sizeof avail, why, sizeof why);
  if (!k)
    return devmm_set_error(DEVMM_ENOENT,
                           "unknown resource kind '%.64s': %sthe loaded plugins offer %s", kind,
                           why, *avail ? avail : "none");
  for (size_t i = 0; i < noptions; i++) {
    if (!options[i].key || !options[i].value)
      return devmm_set_error(DEVMM_EINVAL, "%s: option #%zu has a NULL key or value", kind, i);
    if (!devmm__in_list(k->options, options[i].key)) {
      char valid[256];
      devmm__join(k->options, valid, sizeof valid);
      return devmm_set_error(DEVMM_EINVAL, "%s: unknown option '%.64s': valid options are %s", kind,
                             options[i].key, *valid ? valid : "none");
    }
  }
  devmm_clear_error();
  int rc = k->create(devmm__host(), device_id, options, noptions, out);
  if (rc == DEVMM_OK && !*out)
    return devmm_set_error(DEVMM_EPLUGIN,
                           "%s: the factory reported success but returned no "
                           "resource",
                           kind);
  if (rc && *out) {
    devmm_resource_release(*out);
    *out = NULL;
  }
  if (rc) { /* "<kind>: " in front unless the message starts with it, as for a device's error */
    char msg[DEVMM__MSG_MAX];
    if (*devmm_last_error())
      snprintf(msg, sizeof msg, "%s", devmm_last_error());
    else
      devmm__factory_silent(rc, msg, sizeof msg);
    size_t kl = strlen(kind);
    int named = strncmp(msg, kind, kl) == 0 && (msg[kl] == ':' || msg[kl] == ' ');
    return devmm_set_error(rc, "%s%s%s", named ? "" : kind, named ? "" : ": ", msg);
  }
  return rc;
}
