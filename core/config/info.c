/* What devmm_init built, for devmm-info and front ends: the configuration's source, the
 * plugins, the devices and their stacks, the kinds, the configuration's warnings (a section no
 * device uses), and all of it as one JSON document. Every
 * reader takes state_lock (devmm__state_lock); the strings handed out live until the next
 * devmm_init or devmm_shutdown. */
#include "config_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The source string lives as long as its state: until the next devmm_init or devmm_shutdown,
 * as config.h says. Read under the lock its writers take. */
const char *devmm_config_source(void) {
  const devmm__state *s = devmm__state_lock();
  const char *source = s ? s->c.source : "";
  devmm__state_unlock();
  return source;
}

size_t devmm_plugin_count(void) {
  devmm__ensure_init();
  const devmm__state *s = devmm__state_lock();
  size_t n = s ? s->nplugins : 0;
  devmm__state_unlock();
  return n;
}

int devmm_plugin_get(size_t i, devmm_plugin_status *out) {
  if (!out)
    return devmm_set_error(DEVMM_EINVAL, "devmm_plugin_get: out is NULL");
  devmm__ensure_devices(); /* its device count: counted now if it counts them on first use */
  const devmm__state *s = devmm__state_lock();
  if (!s || i >= s->nplugins) {
    devmm__state_unlock();
    return devmm_set_error(DEVMM_EINVAL, "devmm_plugin_get: no plugin #%zu", i);
  }
  const devmm__plugin *p = s->plugins[i];
  *out = (devmm_plugin_status){
      .name = p->name,
      .path = p->path ? p->path : "",
      .version = p->desc && p->desc->version ? p->desc->version : "",
      .abi_major = p->desc ? p->desc->abi_major : 0,
      .abi_minor = p->desc ? p->desc->abi_minor : 0,
      .loaded = p->desc != NULL,
      .error = p->error ? p->error : "",
      .ndevices = p->ndevices,
      .nkinds = p->desc ? p->desc->nkinds : 0,
  };
  devmm__state_unlock();
  return DEVMM_OK;
}

size_t devmm_device_count(void) {
  devmm__ensure_devices(); /* every device: GPU plugins count theirs now (ADR 38) */
  const devmm__state *s = devmm__state_lock();
  size_t n = s ? s->ndevices : 0;
  devmm__state_unlock();
  return n;
}

int devmm_device_get(size_t i, devmm_device_status *out) {
  if (!out)
    return devmm_set_error(DEVMM_EINVAL, "devmm_device_get: out is NULL");
  devmm__ensure_devices();
  const devmm__state *s = devmm__state_lock();
  if (!s || i >= s->ndevices) {
    devmm__state_unlock();
    return devmm_set_error(DEVMM_EINVAL, "devmm_device_get: no device #%zu", i);
  }
  const devmm__dstate *d = &s->devices[i];
  *out = (devmm_device_status){
      .info = d->info,
      .plugin = d->plugin->name,
      .stack = d->stack ? d->stack : "",
      .error = d->error ? d->error : "",
  };
  devmm__state_unlock();
  return DEVMM_OK;
}

const char *devmm_device_config_error(size_t i) {
  devmm__ensure_devices();
  const devmm__state *s = devmm__state_lock();
  const char *e = s && i < s->ndevices && s->devices[i].file_error ? s->devices[i].error : NULL;
  devmm__state_unlock();
  return e;
}

const char *devmm_kind_name(size_t i) {
  devmm__ensure_init();
  const char *name = NULL;
  const devmm__state *s = devmm__state_lock();
  for (size_t p = 0; s && p < s->nplugins && !name; p++) {
    const devmm_plugin *d = s->plugins[p]->desc;
    if (!d)
      continue;
    if (i < d->nkinds)
      name = d->kinds[i]->name;
    else
      i -= d->nkinds;
  }
  devmm__state_unlock();
  return name;
}

int devmm_kind_get(size_t i, devmm_kind_status *out) {
  if (!out)
    return devmm_set_error(DEVMM_EINVAL, "devmm_kind_get: out is NULL");
  devmm__ensure_init();
  int rc = DEVMM_EINVAL;
  size_t asked = i;
  const devmm__state *s = devmm__state_lock();
  for (size_t p = 0; s && p < s->nplugins && rc; p++) {
    const devmm__plugin *pl = s->plugins[p];
    if (!pl->desc)
      continue;
    if (i >= pl->nkinds) {
      i -= pl->nkinds;
      continue;
    }
    const devmm_resource_kind *k = &pl->kinds[i]; /* the host's copy: every field readable */
    *out = (devmm_kind_status){k->name,    k->description ? k->description : "",
                               pl->name,   k->device_type,
                               k->options, k->option_help};
    rc = DEVMM_OK;
  }
  devmm__state_unlock();
  return rc ? devmm_set_error(rc, "devmm_kind_get: no kind #%zu", asked) : rc;
}

/* ================================================================ sections nothing uses */

void devmm__warn_unused_sections(devmm__state *s, int32_t type, pthread_mutex_t *lock) {
  for (size_t i = 0; i < s->c.nsections; i++) {
    const devmm__section *sec = &s->c.sections[i];
    int32_t t = sec->dev.device_type;
    if (sec->plugin || sec->wildcard || (type >= 0 && t != type))
      continue;
    int counted = 1, found = 0;
    const char *owner = NULL, *other = NULL; /* has devices of this type; is for this type */
    char devs[128] = "";                     /* owner's devices of this type */
    for (size_t p = 0; p < s->nplugins; p++) {
      const devmm__plugin *pl = s->plugins[p];
      counted &= !(pl->desc && pl->lazy_type == t && !pl->enumerated);
      for (size_t k = 0; !other && pl->desc && k < pl->desc->nkinds; k++)
        if (pl->desc->kinds[k]->device_type == t)
          other = pl->name;
      for (size_t d = 0; d < pl->ndevices; d++) {
        if (pl->devices[d].device.device_type != t)
          continue;
        found |= pl->devices[d].device.device_id == sec->dev.device_id;
        owner = owner ? owner : pl->name;
        char name[32];
        size_t n = strlen(devs);
        devmm_device_format(pl->devices[d].device, name, sizeof name);
        if (owner == pl->name)
          snprintf(devs + n, sizeof devs - n, "%s%s", n ? ", " : "", name);
      }
    }
    if (found || !counted)
      continue;
    char dev[32], why[256], msg[DEVMM__MSG_MAX];
    devmm_device_format(sec->dev, dev, sizeof dev);
    if (owner)
      snprintf(why, sizeof why, "plugin '%.64s' has %s only", owner, devs);
    else if (other)
      snprintf(why, sizeof why, "plugin '%.64s' has no device of this type", other);
    else
      snprintf(why, sizeof why,
               "no loaded plugin is for this device type: expected its plugin in plugins = ... "
               "in [devmm]");
    snprintf(msg, sizeof msg,
             "%s:%d: [device %s]: no loaded plugin has device %s, so this section is not used "
             "(%s)",
             s->c.source, sec->line, dev, dev, why);
    devmm__diag(DEVMM_LOG_WARN, NULL, "%s", msg);
    char *copy = devmm__strdup(msg);
    if (lock)
      pthread_mutex_lock(lock);
    char **grown = copy ? realloc(s->warnings, (s->nwarnings + 1) * sizeof *grown) : NULL;
    if (grown)
      (s->warnings = grown)[s->nwarnings++] = copy;
    else
      free(copy);
    if (lock)
      pthread_mutex_unlock(lock);
  }
}

/* ================================================================ JSON */

static void json_str(FILE *f, const char *s) {
  fputc('"', f);
  for (; s && *s; s++) {
    unsigned char ch = (unsigned char)*s;
    if (ch == '"' || ch == '\\')
      fprintf(f, "\\%c", ch);
    else if (ch < 0x20)
      fprintf(f, "\\u%04x", ch);
    else
      fputc(ch, f);
  }
  fputc('"', f);
}

static void json_plugin(FILE *f, const devmm__plugin *p) {
  fprintf(f, "{\"name\": ");
  json_str(f, p->name);
  fprintf(f, ", \"path\": ");
  json_str(f, p->path ? p->path : "");
  fprintf(f, ", \"version\": ");
  json_str(f, p->desc && p->desc->version ? p->desc->version : "");
  fprintf(f,
          ", \"abi\": \"%u.%u\", \"status\": \"%s\", \"error\": ", p->desc ? p->desc->abi_major : 0,
          p->desc ? p->desc->abi_minor : 0, p->desc ? "loaded" : "failed");
  json_str(f, p->error ? p->error : "");
  fprintf(f, ", \"devices\": %zu, \"kinds\": [", p->ndevices);
  for (size_t k = 0; p->desc && k < p->desc->nkinds; k++) {
    fprintf(f, "%s", k ? ", " : "");
    json_str(f, p->desc->kinds[k]->name);
  }
  fprintf(f, "], \"kind_info\": ");
  devmm__plugin_kinds_json(p, f, json_str);
  fprintf(f, "}");
}

static void json_device(FILE *f, const devmm__dstate *d) {
  char name[32];
  devmm_device_format(d->info.device, name, sizeof name);
  fprintf(f, "{\"device\": ");
  json_str(f, name);
  fprintf(f, ", \"type\": %d, \"id\": %d, \"name\": ", d->info.device.device_type,
          d->info.device.device_id);
  json_str(f, d->info.name);
  fprintf(f, ", \"total_bytes\": %zu, \"free_bytes\": %zu, \"plugin\": ", d->info.total_bytes,
          d->info.free_bytes);
  json_str(f, d->plugin->name);
  fprintf(f, ", \"stack\": ");
  json_str(f, d->stack ? d->stack : "");
  fprintf(f, ", \"error\": ");
  json_str(f, d->error ? d->error : "");
  fprintf(f, "}");
}

static int info_json(char **out, int count_all) {
  if (!out)
    return devmm_set_error(DEVMM_EINVAL, "devmm_info_json: out is NULL");
  /* a configuration that does not load is its ConfigError (file:line), never an empty document
   * (test_info_says_why_a_broken_config_failed) */
  int rc = devmm__ensure_init();
  if (rc != DEVMM_OK)
    return rc;
  if (count_all)
    devmm__ensure_devices(); /* devmm-info's view: every device, counted now */
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  if (!f)
    return devmm_set_error(DEVMM_ENOMEM, "out of memory");
  const devmm__state *s = devmm__state_lock();
  fprintf(f, "{\"version\": ");
  json_str(f, devmm_version());
  fprintf(f, ", \"abi\": \"%d.%d\", \"config\": ", DEVMM_PLUGIN_ABI_MAJOR, DEVMM_PLUGIN_ABI_MINOR);
  json_str(f, s ? s->c.source : "");
  fprintf(f, ", \"plugins\": [");
  for (size_t i = 0; s && i < s->nplugins; i++) {
    fprintf(f, "%s", i ? ", " : "");
    json_plugin(f, s->plugins[i]);
  }
  fprintf(f, "], \"devices\": [");
  for (size_t i = 0; s && i < s->ndevices; i++) {
    fprintf(f, "%s", i ? ", " : "");
    json_device(f, &s->devices[i]);
  }
  fprintf(f, "], \"warnings\": [");
  for (size_t i = 0; s && i < s->nwarnings; i++) {
    fprintf(f, "%s", i ? ", " : "");
    json_str(f, s->warnings[i]);
  }
  fprintf(f, "]}");
  devmm__state_unlock();
  fclose(f);
  *out = buf;
  return DEVMM_OK;
}

int devmm_info_json(char **out) { return info_json(out, 1); }

int devmm_info_json_now(char **out) { return info_json(out, 0); }

const char *devmm_config_warning(size_t i) {
  devmm__ensure_devices(); /* a section for a device of a lazy type is checked once counted */
  const devmm__state *s = devmm__state_lock();
  const char *w = s && i < s->nwarnings ? s->warnings[i] : NULL;
  devmm__state_unlock();
  return w;
}
