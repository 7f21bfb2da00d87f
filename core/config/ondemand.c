/* Kinds on demand: devmm_resource_create_kind for a kind whose plugin the configuration did not
 * name loads that plugin from the plugin path (its devices get no current resource: only the
 * configuration decides those). */
#include "config_internal.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A kind whose plugin the configuration did not name ("cuda.async" with only cpu loaded): load
 * that plugin from the plugin path on demand. Its devices get no current resource (only the
 * configuration decides those), but its kinds can be created. Only a plain kind name loads
 * anything, and only by its plugin's plain name, never a path; a plugin that is not in the path
 * leaves no record (forged names cannot pile up: ADR 40), why says so. Caller holds both locks. */
static const devmm_resource_kind *load_for_kind(devmm__state *s, const char *kind, char *why,
                                                size_t whycap) {
  const char *dot = strchr(kind, '.');
  char name[64];
  if (!devmm__kind_name_plain(kind) || (size_t)(dot - kind) >= sizeof name)
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
  if (p->missing) { /* asked, answered, not remembered */
    devmm__diag(DEVMM_LOG_INFO, NULL, "plugin '%s' (for %s) not loaded: %s", name, kind, p->error);
    snprintf(why, whycap, "plugin '%s' could not be loaded: %s; ", name, p->error);
    devmm__plugin_free(p);
    return NULL;
  }
  s->plugins[s->nplugins++] = p;
  if (!p->desc) { /* refused or broken: warn, as for a configured plugin */
    devmm__diag(DEVMM_LOG_WARN, NULL, "plugin '%s' (for %s) not loaded: %s", name, kind, p->error);
    return NULL;
  }
  return devmm__find_kind(s, kind, NULL);
}

/* The kind (loading its plugin on demand when may_load), or NULL with the kinds on offer in
 * avail and, when the plugin its name starts with failed to load, why in `why` ("" otherwise). */
static const devmm_resource_kind *kind_named(const char *kind, int may_load, char *avail,
                                             size_t cap, char *why, size_t whycap) {
  devmm__init_lock(); /* may add a plugin to the state: no devmm_init meanwhile */
  devmm__state *current = devmm__state_lock();
  const devmm_resource_kind *k = current ? devmm__find_kind(current, kind, NULL) : NULL;
  avail[0] = why[0] = '\0';
  devmm__state_building(
      current); /* a plugin loaded here may ask for a device's total: no lock again */
  if (!k && current && may_load)
    k = load_for_kind(current, kind, why, whycap);
  devmm__state_building(NULL);
  size_t pl = strcspn(kind, ".");
  for (size_t p = 0; !k && current && p < current->nplugins; p++) {
    const devmm__plugin *pp = current->plugins[p];
    devmm__append_kinds(avail, cap, pp->desc);
    if (!pp->desc && kind[pl] == '.' && strlen(pp->name) == pl && !strncmp(pp->name, kind, pl))
      snprintf(why, whycap, "plugin '%s' could not be loaded: %s; ", pp->name, pp->error);
  }
  devmm__state_unlock();
  devmm__init_unlock();
  return k;
}

static int create_kind(const char *kind, int32_t device_id, const devmm_option *options,
                       size_t noptions, int may_load, devmm_resource **out);

int devmm_resource_create_kind(const char *kind, int32_t device_id, const devmm_option *options,
                               size_t noptions, devmm_resource **out) {
  return create_kind(kind, device_id, options, noptions, 1, out);
}

/* The hook core/ipc asks for a kind an IPC handle names: the loaded plugins' kinds only. */
static int create_loaded_kind(const char *kind, int32_t device_id, devmm_resource **out) {
  return create_kind(kind, device_id, NULL, 0, 0, out);
}

__attribute__((constructor)) static void install_loaded_kind_hook(void) {
  devmm__set_loaded_kind_hook(create_loaded_kind);
}

/* devmm_resource_create_kind; may_load 0: loading no plugin for it (devmm__create_loaded_kind). */
static int create_kind(const char *kind, int32_t device_id, const devmm_option *options,
                       size_t noptions, int may_load, devmm_resource **out) {
  if (!out)
    return devmm_set_error(DEVMM_EINVAL, "devmm_resource_create_kind: out is NULL");
  *out = NULL;
  if (!kind || (noptions && !options))
    return devmm_set_error(DEVMM_EINVAL, "devmm_resource_create_kind: %s is NULL",
                           !kind ? "kind" : "options");
  devmm__ensure_init();
  char avail[512], why[DEVMM__MSG_MAX], shown[96];
  const devmm_resource_kind *k = kind_named(kind, may_load, avail, sizeof avail, why, sizeof why);
  devmm__escape(kind, 64, shown, sizeof shown);
  if (!k && !may_load)
    return devmm_set_error(DEVMM_ENOENT,
                           "no loaded plugin offers kind '%s' (a kind another process names "
                           "loads no plugin: name its plugin in devmm.ini's plugins =); the "
                           "loaded plugins offer %s",
                           shown, *avail ? avail : "none");
  if (!k)
    return devmm_set_error(
        DEVMM_ENOENT, "unknown resource kind '%s': %s%sthe loaded plugins offer %s", shown, why,
        devmm__kind_name_plain(kind)
            ? ""
            : "it is not a plain kind name (<plugin>.<name>), so no plugin was "
              "looked for; ",
        *avail ? avail : "none");
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
