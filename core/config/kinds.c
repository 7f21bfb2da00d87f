/* Resource kinds by name: finding a loaded kind, listing a plugin's, and why resource = X names
 * none (tests/config/resource-*.ini, unknown-kind.ini, kind-of-unlisted-plugin.ini). */
#include "config_internal.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

/* Appends the kind names of plugin d (NULL: none) to the ", "-separated list in buf. */
void devmm__append_kinds(char *buf, size_t cap, const devmm_plugin *d) {
  for (size_t j = 0; d && j < d->nkinds; j++) {
    size_t n = strlen(buf);
    snprintf(buf + n, cap - n, "%s%s", n ? ", " : "", d->kinds[j]->name);
  }
}

const devmm_resource_kind *devmm__find_kind(devmm__state *s, const char *name,
                                            devmm__plugin **owner) {
  for (size_t i = 0; i < s->nplugins; i++) {
    const devmm_plugin *d = s->plugins[i]->desc;
    for (size_t k = 0; d && k < d->nkinds; k++)
      if (strcmp(d->kinds[k]->name, name) == 0) {
        if (owner)
          *owner = s->plugins[i];
        return d->kinds[k];
      }
  }
  return NULL;
}

/* The loaded kind whose name is `name` but for case (NULL: none). */
static const devmm_resource_kind *kind_but_case(devmm__state *s, const char *name) {
  for (size_t i = 0; i < s->nplugins; i++)
    for (size_t k = 0; s->plugins[i]->desc && k < s->plugins[i]->desc->nkinds; k++)
      if (strcasecmp(s->plugins[i]->desc->kinds[k]->name, name) == 0)
        return s->plugins[i]->desc->kinds[k];
  return NULL;
}

/* resource = X names no loaded kind: why (tests/config/resource-*.ini). */
int devmm__unknown_kind(devmm__state *s, const devmm__kv *res) {
  const char *v = res->value;
  size_t len = strlen(v);
  if (len >= 2 && (v[0] == '"' || v[0] == '\'') && v[len - 1] == v[0])
    return devmm_set_error(DEVMM_ECONFIG,
                           "%s:%d: resource = %s: quotes are part of the value: write "
                           "resource = %.*s",
                           s->c.source, res->line, v, (int)(len - 2), v + 1);
  const devmm_resource_kind *lower = kind_but_case(s, v);
  if (lower)
    return devmm_set_error(DEVMM_ECONFIG,
                           "%s:%d: unknown resource kind '%s': kind names are lower case: write "
                           "resource = %s",
                           s->c.source, res->line, v, lower->name);
  const char *dot = strchr(v, '.');
  size_t pl = dot ? (size_t)(dot - v) : len;
  devmm__plugin *named = NULL;
  for (size_t i = 0; i < s->nplugins; i++)
    if (strlen(s->plugins[i]->name) == pl && strncmp(s->plugins[i]->name, v, pl) == 0)
      named = s->plugins[i];
  if (!dot || !named) {
    char offer[1024] = "";
    for (size_t i = 0; i < s->nplugins; i++)
      devmm__append_kinds(offer, sizeof offer, s->plugins[i]->desc);
    if (!dot)
      return devmm_set_error(DEVMM_ECONFIG,
                             "%s:%d: unknown resource kind '%s': expected <plugin>.<kind>, one "
                             "of %s",
                             s->c.source, res->line, v, *offer ? offer : "(no plugin loaded)");
    return devmm_set_error(DEVMM_ECONFIG,
                           "%s:%d: unknown resource kind '%s': no plugin '%.*s' in plugins = ... "
                           "in [devmm] (the kinds on offer: %s)",
                           s->c.source, res->line, v, (int)pl, v,
                           *offer ? offer : "none, no plugin loaded");
  }
  if (!named->desc)
    return DEVMM_OK; /* its plugin failed to load: reported with the plugin */
  char valid[512] = "";
  devmm__append_kinds(valid, sizeof valid, named->desc);
  return devmm_set_error(DEVMM_ECONFIG, "%s:%d: unknown resource kind '%s': plugin '%s' offers %s",
                         s->c.source, res->line, res->value, named->name, valid);
}
