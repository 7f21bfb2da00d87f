/* devmm_init and devmm_shutdown: building a new state from the file lookup.c found and swapping
 * it in, lazy initialisation on the registry's first miss (through the hook the registry asks),
 * and the device_total host service. Kinds on demand are in ondemand.c.
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

static pthread_mutex_t init_lock = PTHREAD_MUTEX_INITIALIZER;
/* One lazy initialisation at a time, taken before init_lock: the threads that miss while one
 * initialises wait for its outcome (on_registry_miss). */
static pthread_mutex_t lazy_lock = PTHREAD_MUTEX_INITIALIZER;
/* The state this thread's devmm_init is building, or the current one while this thread holds
 * state_lock for an on-demand load: what host->device_total reads without taking a lock. */
static _Thread_local devmm__state *building;
static pthread_mutex_t state_lock = PTHREAD_MUTEX_INITIALIZER;
static devmm__state *current;
static atomic_int initialized;
static atomic_int lazy_tried;           /* the registry's miss tries a lazy init once */
static char lazy_error[DEVMM__MSG_MAX]; /* why it failed, told at every later miss */

devmm__state *devmm__state_lock(void) {
  pthread_mutex_lock(&state_lock);
  return current;
}

void devmm__state_unlock(void) { pthread_mutex_unlock(&state_lock); }

void devmm__init_lock(void) { pthread_mutex_lock(&init_lock); }
void devmm__init_unlock(void) { pthread_mutex_unlock(&init_lock); }
void devmm__state_building(devmm__state *s) { building = s; }

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
  devmm__free_list(s->warnings, s->nwarnings);
  devmm__config_free(&s->c);
  free(s);
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
    devmm__diag(DEVMM_LOG_WARN, NULL, "plugin '%s' not loaded: %s", p->name, p->error);
  else if (p->error)
    devmm__diag(DEVMM_LOG_INFO, NULL, "plugin '%s': %s", p->name, p->error);
  return DEVMM_OK;
}

static int load_plugins(devmm__state *s) {
  if (!(s->dirs =
            devmm__plugin_dirs(&s->c, &s->ndirs))) /* resolved once: kinds on demand reuse it */
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
        devmm__diag(DEVMM_LOG_WARN, s->plugins[i]->name, "%s", note);
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
        devmm__diag(DEVMM_LOG_WARN, NULL, "device %s has no resource: %s", name, ds->error);
      }
    }
  return DEVMM_OK;
}

/* ================================================================ devices on first use
 * A plugin with a lazy device type (a GPU plugin: counting its devices initialises its runtime)
 * has its devices counted and their stacks built at the first use of a device of that type (the
 * registry's miss), or when every device is asked about (info.c), never at devmm_init (ADR 38).
 * They are added to the state under state_lock; the counting and the factories run under
 * init_lock, which keeps the state from being swapped meanwhile. */

/* 1 if a configured plugin of lazy device type `type` (-1: any) has not counted its devices. */
static int lazy_pending(const devmm__state *s, int32_t type) {
  for (size_t i = 0; s && i < s->nplugins && i < s->c.nplugins; i++) {
    const devmm__plugin *p = s->plugins[i];
    if (p->desc && p->lazy_type && !p->enumerated && (type < 0 || p->lazy_type == type))
      return 1;
  }
  return 0;
}

/* The devices of plugin p (just counted) that no earlier device has, each with its stack (a
 * factory's refusal is the device's error here: devmm_init has returned), added to s. */
static size_t build_lazy_devices(devmm__state *s, devmm__plugin *p, devmm__registry_mode mode) {
  devmm__dstate *add = calloc(p->ndevices ? p->ndevices : 1, sizeof *add);
  if (!add)
    return 0;
  size_t nadd = 0;
  for (size_t k = 0; k < p->ndevices; k++) {
    devmm_device dev = p->devices[k].device;
    int seen = 0;
    for (size_t j = 0; j < s->ndevices && !seen; j++) /* only this thread adds (init_lock) */
      seen = s->devices[j].info.device.device_type == dev.device_type &&
             s->devices[j].info.device.device_id == dev.device_id;
    if (seen)
      continue; /* the first in plugins = ... keeps it (it was counted first) */
    devmm__dstate *ds = &add[nadd++];
    ds->info = p->devices[k];
    ds->plugin = p;
    building = s;
    if (devmm__build_device(s, ds) != DEVMM_OK && !ds->error) {
      ds->error = devmm__strdup(devmm_last_error());
      ds->file_error = 1; /* devmm_device_config_error */
    }
    building = NULL;
    if (ds->error) {
      char name[32];
      devmm_device_format(ds->info.device, name, sizeof name);
      devmm__diag(DEVMM_LOG_WARN, NULL, "device %s has no resource: %s", name, ds->error);
    }
  }
  pthread_mutex_lock(&state_lock);
  devmm__dstate *grown = realloc(s->devices, (s->ndevices + nadd + 1) * sizeof *grown);
  if (grown) {
    memcpy(grown + s->ndevices, add, nadd * sizeof *add);
    s->devices = grown;
    s->ndevices += nadd;
  }
  pthread_mutex_unlock(&state_lock);
  size_t fresh = 0;
  for (size_t k = 0; k < nadd; k++) {
    if (!grown) { /* out of memory: nothing was added */
      devmm_resource_release(add[k].resource);
      free(add[k].stack);
      free(add[k].error);
    } else if (add[k].resource) {
      devmm__registry_replace(add[k].info.device, NULL, add[k].resource, mode);
      fresh++;
    }
  }
  free(add);
  return fresh;
}

/* Counts the devices of s's configured plugins of lazy device type `type` (-1: every type) that
 * have not counted theirs, and builds their stacks, which go into the registry in `mode`.
 * Caller holds init_lock. Returns how many devices got a resource. */
static size_t count_lazy(devmm__state *s, int32_t type, devmm__registry_mode mode) {
  size_t fresh = 0;
  for (size_t i = 0; i < s->nplugins; i++) {
    devmm__plugin *p = s->plugins[i];
    if (!p->desc || !p->lazy_type || p->enumerated || (type >= 0 && p->lazy_type != type))
      continue;
    pthread_mutex_lock(&state_lock); /* readers see it counted or not, never half */
    building = s;
    int rc = devmm__plugin_enumerate(p);
    building = NULL;
    pthread_mutex_unlock(&state_lock);
    if (p->error)
      devmm__diag(DEVMM_LOG_INFO, NULL, "plugin '%s': %s", p->name, p->error);
    if (rc == DEVMM_OK && i < s->c.nplugins) { /* a plugin loaded for a kind gets no stacks */
      fresh += build_lazy_devices(s, p, mode);
      devmm__warn_unused_sections(s, p->lazy_type, &state_lock);
    }
  }
  return fresh;
}

void devmm__ensure_devices(void) {
  devmm__ensure_init();
  pthread_mutex_lock(&state_lock);
  int pending = !building && lazy_pending(current, -1);
  pthread_mutex_unlock(&state_lock);
  if (!pending)
    return;
  pthread_mutex_lock(&init_lock);
  if (current)
    count_lazy(current, -1, DEVMM__REGISTRY_FILL);
  pthread_mutex_unlock(&init_lock);
}

/* What to read: a path (NULL: the lookup), or text given in memory (devmm_init_text). */
typedef struct {
  const char *path, *text, *name;
  size_t len;
} config_from;

static int build(const config_from *from, devmm__state **out) {
  devmm__state *s = calloc(1, sizeof *s);
  if (!s)
    return devmm_set_error(DEVMM_ENOMEM, "out of memory");
  int rc = from->text ? devmm__config_load_text(from->text, from->len, from->name, &s->c)
                      : devmm__config_load(from->path, &s->c);
  if (!rc && s->c.log_level >= 0)
    devmm__diag_set_level(s->c.log_level);
  building = s;
  if (!rc)
    rc = load_plugins(s);
  for (size_t i = 0; !rc && i < s->c.nsections; i++)
    rc = devmm__check_section(s, &s->c.sections[i]);
  if (!rc)
    rc = build_devices(s);
  if (!rc) /* not in use yet: no lock */
    devmm__warn_unused_sections(s, -1, NULL);
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

static int init(const config_from *from, int lazy) {
  pthread_mutex_lock(&init_lock);
  if (lazy && atomic_load(&initialized)) { /* another thread got there first */
    pthread_mutex_unlock(&init_lock);
    return DEVMM_OK;
  }
  devmm__state *s = NULL;
  int rc = build(from, &s);
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
  /* devices counted on first use: an explicit init still replaces what was set for a device of
   * such a type before it (the runtime is in use already, so counting costs nothing new) */
  for (size_t i = 0; !lazy && i < s->nplugins && i < s->c.nplugins; i++)
    if (s->plugins[i]->lazy_type && devmm__registry_has_type(s->plugins[i]->lazy_type))
      count_lazy(s, s->plugins[i]->lazy_type, DEVMM__REGISTRY_REPLACE);
  atomic_store(&initialized, 1);
  pthread_mutex_unlock(&init_lock);
  state_free(old);
  return DEVMM_OK;
}

int devmm_init(const char *path) { return init(&(config_from){.path = path}, 0); }

int devmm_init_text(const char *text, size_t len, const char *name) {
  if (!text)
    return devmm_set_error(DEVMM_EINVAL, "devmm_init_text: text is NULL");
  return init(&(config_from){.text = text, .len = len, .name = name}, 0);
}

void devmm_shutdown(void) {
  pthread_mutex_lock(&init_lock);
  devmm__state *old = swap_state(NULL);
  atomic_store(&initialized, 0);
  atomic_store(&lazy_tried, 0);
  pthread_mutex_unlock(&init_lock);
  state_free(old);
}

int devmm_is_initialized(void) { return atomic_load(&initialized); }

int devmm__ensure_init(void) {
  int rc = atomic_load(&initialized) ? DEVMM_OK : init(&(config_from){0}, 1);
  if (rc != DEVMM_OK)
    devmm__diag(DEVMM_LOG_ERROR, NULL, "initialisation failed: %s", devmm_last_error());
  return rc; /* the message stays this thread's: devmm_info_json answers it (test_first_hour) */
}

/* A device no plugin has: how many of its type the plugin that has them has, or that none has
 * (test_a_device_past_its_plugin_s_last_says_how_many_it_has). */
static void say_devices_of_type(const devmm__state *s, devmm_device device, char *why, size_t cap) {
  char devs[256] = "", type[32];
  const char *owner = NULL;
  size_t count = 0;
  for (size_t i = 0; i < s->ndevices; i++) {
    if (s->devices[i].info.device.device_type != device.device_type)
      continue;
    char name[32];
    size_t n = strlen(devs);
    devmm_device_format(s->devices[i].info.device, name, sizeof name);
    if (count < 8)
      snprintf(devs + n, sizeof devs - n, "%s%s", count ? ", " : "", name);
    else if (count == 8)
      snprintf(devs + n, sizeof devs - n, ", ...");
    owner = owner ? owner : s->devices[i].plugin->name;
    count++;
  }
  if (count) {
    snprintf(why, cap, "the %s plugin has %zu device%s: %s", owner, count, count == 1 ? "" : "s",
             devs);
    return;
  }
  devmm_device_format(device, type, sizeof type);
  type[strcspn(type, ":")] = '\0';
  snprintf(why, cap,
           "no plugin of %s has a %s device: expected its plugin in plugins = ... in "
           "[devmm]",
           s->c.source, type);
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
  for (size_t i = 0; i < s->nplugins && !why[0]; i++) /* the plugin of its type first */
    if (s->plugins[i]->error && s->plugins[i]->lazy_type == device.device_type)
      snprintf(why, cap, "no loaded plugin has this device (plugin '%s': %.400s)",
               s->plugins[i]->name, s->plugins[i]->error);
  for (size_t i = 0; i < s->nplugins && !why[0]; i++)
    if (s->plugins[i]->error)
      snprintf(why, cap, "no loaded plugin has this device (plugin '%s': %.400s)",
               s->plugins[i]->name, s->plugins[i]->error);
  if (!why[0])
    say_devices_of_type(s, device, why, cap);
}

/* The registry's miss hook: initialise lazily, once; then say why device has no resource.
 * Returns 1 when devmm is initialised now, by this call or by the other thread's lazy init it
 * waited for (the registry looks again): a thread that misses while another initialises must
 * not answer "no current resource" meanwhile (test_first_calls_from_threads_bind_ctypes_once_
 * for_all). Not from inside a build or an on-demand load: this thread holds a lock init takes. */
static int on_registry_miss(devmm_device device, char *why, size_t cap) {
  int fresh = 0;
  if (!atomic_load(&initialized) && !building) {
    pthread_mutex_lock(&lazy_lock);
    if (!atomic_load(&initialized) && !atomic_exchange(&lazy_tried, 1)) {
      devmm__ensure_init();
      if (!atomic_load(&initialized)) {
        char saved[DEVMM__MSG_MAX];
        snprintf(saved, sizeof saved, "%s", devmm_last_error());
        pthread_mutex_lock(&state_lock);
        snprintf(lazy_error, sizeof lazy_error, "%s", saved);
        pthread_mutex_unlock(&state_lock);
      }
    }
    pthread_mutex_unlock(&lazy_lock);
    fresh = atomic_load(&initialized);
  }
  /* a device of a type whose plugin counts its devices on first use: count them now (not from
   * inside a build: this thread holds init_lock then) */
  pthread_mutex_lock(&state_lock);
  int pending = !building && lazy_pending(current, device.device_type);
  pthread_mutex_unlock(&state_lock);
  if (pending) {
    pthread_mutex_lock(&init_lock);
    if (current && count_lazy(current, device.device_type, DEVMM__REGISTRY_FILL))
      fresh = 1;
    pthread_mutex_unlock(&init_lock);
  }
  explain(devmm__state_lock(), device, why, cap);
  devmm__state_unlock();
  return fresh;
}

/* ================================================================ the device_total service */

static int device_total(devmm_device device, size_t *total_bytes) {
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

__attribute__((constructor)) static void install_registry_hook(void) {
  devmm__registry_set_miss_hook(on_registry_miss);
  devmm__set_device_total_hook(device_total);
}
