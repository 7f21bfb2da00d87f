/* devmm.ini: lookup, parsing (inih), validation, and building every device's resource stack.
 *
 * devmm_init is transactional for the file: everything is parsed, checked and built into a
 * new `state` first; only then is it swapped in and the registry updated. A plugin that fails
 * to load is not a file error: it is recorded in the state (and logged) and the others work. */
#include "internal.h"

#include "devmm-config.h"

#include <errno.h>
#include <ini.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#define MAX_LINE 199 /* Debian's inih r55 reads lines of at most 200 bytes with the newline */

/* ================================================================ the parsed file */

typedef struct {
  char *key, *value;
  int line;
} kv;

typedef struct {
  devmm_device dev;
  int wildcard, line;
  kv *opts;
  size_t nopts;
  char *plugin; /* [plugin <name>]: the plugin's own options (dev is then unused) */
} dsection;

typedef struct {
  char *source; /* the file, or "built-in default" */
  char *dir;    /* its directory (relative plugin_path entries start there) */
  char **plugins;
  size_t nplugins;
  char **paths;
  size_t npaths;
  int log_level;
  dsection *sections;
  size_t nsections;
  /* parser state */
  int line, in_devmm;
  dsection *cur;
  int failed;
  char error[DEVMM__MSG_MAX * 2];
} cfg;

static const char *const devmm_keys[] = {"plugins", "plugin_path", "log_level", NULL};
/* keys of a device section that devmm itself reads; the others go to the resource's factory */
static const char *const device_keys[] = {
    "resource",   "adaptors",   "limit",     "log_file",
    "log_flush",  "backtraces", "alignment", "alignment_threshold",
    "statistics", NULL};
static const char *const adaptor_names[] = {"statistics", "limiting",    "tracking", "logging",
                                            "aligned",    "thread_safe", NULL};

static const char builtin_config[] = "[devmm]\n"
                                     "plugins = cpu\n"
                                     "[device cpu]\n"
                                     "resource = cpu.malloc\n";

static int in_list(const char *const *list, const char *s) {
  for (; list && *list; list++)
    if (strcmp(*list, s) == 0)
      return 1;
  return 0;
}

static void join(const char *const *list, char *buf, size_t cap) {
  buf[0] = '\0';
  for (size_t n = 0; list && *list; list++) {
    n = strlen(buf);
    snprintf(buf + n, cap - n, "%s%s", n ? ", " : "", *list);
  }
}

static int cfg_fail(cfg *c, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int cfg_fail(cfg *c, int line, const char *fmt, ...) {
  if (c->failed)
    return 0;
  char msg[DEVMM__MSG_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  snprintf(c->error, sizeof c->error, "%s:%d: %s", c->source, line, msg);
  c->failed = 1;
  return 0;
}

/* Splits "a, b ,c" into a new array of trimmed strings. */
static int split_list(const char *text, char ***out, size_t *n) {
  char *copy = devmm__strdup(text), *save = NULL;
  if (!copy)
    return -1;
  for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    while (*tok == ' ' || *tok == '\t')
      tok++;
    size_t len = strlen(tok);
    while (len && (tok[len - 1] == ' ' || tok[len - 1] == '\t'))
      tok[--len] = '\0';
    if (!len)
      continue;
    char **grown = realloc(*out, (*n + 1) * sizeof **out);
    if (!grown) {
      free(copy);
      return -1;
    }
    *out = grown;
    if (!((*out)[*n] = devmm__strdup(tok))) { /* counted only once copied: no NULL entry */
      free(copy);
      return -1;
    }
    (*n)++;
  }
  free(copy);
  return 0;
}

static void free_list(char **list, size_t n) {
  for (size_t i = 0; i < n; i++)
    free(list[i]);
  free(list);
}

static void cfg_free(cfg *c) {
  free(c->source);
  free(c->dir);
  free_list(c->plugins, c->nplugins);
  free_list(c->paths, c->npaths);
  for (size_t i = 0; i < c->nsections; i++) {
    for (size_t k = 0; k < c->sections[i].nopts; k++) {
      free(c->sections[i].opts[k].key);
      free(c->sections[i].opts[k].value);
    }
    free(c->sections[i].opts);
    free(c->sections[i].plugin);
  }
  free(c->sections);
  memset(c, 0, sizeof *c);
}

static dsection *new_section(cfg *c) {
  dsection *grown = realloc(c->sections, (c->nsections + 1) * sizeof *grown);
  if (!grown) {
    cfg_fail(c, c->line, "out of memory");
    return NULL;
  }
  c->sections = grown;
  dsection *s = &c->sections[c->nsections++];
  memset(s, 0, sizeof *s);
  s->line = c->line;
  return s;
}

/* [plugin <name>]: options handed to that plugin's configure() when it loads. */
static void on_plugin_section(cfg *c, const char *section, const char *name) {
  while (*name == ' ')
    name++;
  if (!*name) {
    cfg_fail(c, c->line, "section [%s]: expected [plugin <name>] with a name from plugins = ...",
             section);
    return;
  }
  for (size_t i = 0; i < c->nsections; i++)
    if (c->sections[i].plugin && strcmp(c->sections[i].plugin, name) == 0) {
      cfg_fail(c, c->line, "section [%s] appears twice (first at line %d)", section,
               c->sections[i].line);
      return;
    }
  char *copy = devmm__strdup(name);
  dsection *s = copy ? new_section(c) : NULL;
  if (!s) {
    free(copy);
    if (!copy)
      cfg_fail(c, c->line, "out of memory");
    return;
  }
  s->plugin = copy;
  c->cur = s;
}

/* A section header line "[name]": validated here because inih does not call the handler for
 * a section without keys, and this is where the line number is known. */
static void on_section(cfg *c, const char *name) {
  c->cur = NULL;
  c->in_devmm = 0;
  if (strcmp(name, "devmm") == 0) {
    c->in_devmm = 1;
    return;
  }
  if (strncmp(name, "plugin ", 7) == 0) {
    on_plugin_section(c, name, name + 7);
    return;
  }
  if (strncmp(name, "device ", 7) != 0) {
    cfg_fail(c, c->line,
             "unknown section [%s]: expected [devmm], [device cpu], [device cuda:N], "
             "[device cuda:*], [device rocm:N], [device rocm:*], [device sim:N] or "
             "[plugin <name>]",
             name);
    return;
  }
  const char *spec = name + 7;
  while (*spec == ' ')
    spec++;
  char buf[256];
  snprintf(buf, sizeof buf, "%s", spec);
  int wildcard = 0;
  size_t len = strlen(buf);
  if (len >= 2 && strcmp(buf + len - 2, ":*") == 0) {
    buf[len - 2] = '\0';
    wildcard = 1;
  } else if (!strchr(buf, ':') && strcmp(buf, "cpu") != 0) {
    wildcard = 1; /* [device cuda] means every cuda device */
  }
  devmm_device dev;
  if (devmm_device_parse(buf, &dev) != DEVMM_OK) {
    cfg_fail(c, c->line, "section [%s]: %s", name, devmm_last_error());
    return;
  }
  for (size_t i = 0; i < c->nsections; i++)
    if (!c->sections[i].plugin && c->sections[i].dev.device_type == dev.device_type &&
        c->sections[i].wildcard == wildcard &&
        (wildcard || c->sections[i].dev.device_id == dev.device_id)) {
      cfg_fail(c, c->line, "section [%s] appears twice (first at line %d)", name,
               c->sections[i].line);
      return;
    }
  if ((c->cur = new_section(c)) == NULL)
    return;
  c->cur->dev = dev;
  c->cur->wildcard = wildcard;
}

static int on_key(void *user, const char *section, const char *key, const char *value) {
  cfg *c = user;
  if (c->failed)
    return 0;
  if (!*section)
    return cfg_fail(c, c->line, "'%s' outside any section: put it under [devmm] or [device ...]",
                    key);
  if (c->in_devmm) {
    if (strcmp(key, "plugins") == 0) {
      free_list(c->plugins, c->nplugins);
      c->plugins = NULL;
      c->nplugins = 0;
      if (split_list(value, &c->plugins, &c->nplugins))
        return cfg_fail(c, c->line, "out of memory");
    } else if (strcmp(key, "plugin_path") == 0) {
      char **raw = NULL;
      size_t n = 0;
      if (split_list(value, &raw, &n)) {
        free_list(raw, n); /* what was split before memory ran out */
        return cfg_fail(c, c->line, "out of memory");
      }
      for (size_t i = 0; i < n; i++) { /* colons separate entries too */
        char *save = NULL;
        for (char *t = strtok_r(raw[i], ":", &save); t; t = strtok_r(NULL, ":", &save)) {
          char full[4096];
          if (t[0] == '/')
            snprintf(full, sizeof full, "%s", t);
          else if (c->dir)
            snprintf(full, sizeof full, "%s/%s", c->dir, t);
          else
            continue;
          char **g = realloc(c->paths, (c->npaths + 1) * sizeof *g);
          if (g) /* the grown array is the list now, whatever follows */
            c->paths = g;
          if (!g || !(g[c->npaths] = devmm__strdup(full))) {
            free_list(raw, n);
            return cfg_fail(c, c->line, "out of memory");
          }
          c->npaths++;
        }
      }
      free_list(raw, n);
    } else if (strcmp(key, "log_level") == 0) {
      c->log_level = devmm__parse_log_level(value);
      if (c->log_level < 0)
        return cfg_fail(c, c->line, "bad log_level '%s': expected error, warn, info or debug",
                        value);
    } else {
      char valid[256];
      join(devmm_keys, valid, sizeof valid);
      return cfg_fail(c, c->line, "unknown key '%s' in [devmm]: valid keys are %s", key, valid);
    }
    return 1;
  }
  if (!c->cur)
    return 0; /* the section was refused already */
  for (size_t i = 0; i < c->cur->nopts; i++)
    if (strcmp(c->cur->opts[i].key, key) == 0)
      return cfg_fail(c, c->line, "key '%s' appears twice in [%s] (first at line %d)", key, section,
                      c->cur->opts[i].line);
  kv *g = realloc(c->cur->opts, (c->cur->nopts + 1) * sizeof *g);
  if (!g)
    return cfg_fail(c, c->line, "out of memory");
  c->cur->opts = g;
  kv *o = &g[c->cur->nopts];
  o->key = devmm__strdup(key);
  o->value = devmm__strdup(value);
  o->line = c->line;
  if (!o->key || !o->value) {
    free(o->key);
    free(o->value);
    return cfg_fail(c, c->line, "out of memory");
  }
  c->cur->nopts++;
  return 1;
}

typedef struct {
  FILE *f;
  cfg *c;
} reader_ctx;

/* inih's reader: counts lines, refuses over-long ones, and sees section headers first. */
static char *read_line(char *str, int num, void *stream) {
  reader_ctx *r = stream;
  cfg *c = r->c;
  if (c->failed || !fgets(str, num, r->f))
    return NULL;
  c->line++;
  size_t len = strlen(str);
  if (len && str[len - 1] != '\n' && !feof(r->f)) {
    cfg_fail(c, c->line, "line longer than %d characters", MAX_LINE);
    return NULL;
  }
  const char *p = str;
  while (*p == ' ' || *p == '\t')
    p++;
  if (*p == '[') {
    const char *end = strchr(p, ']');
    if (end) {
      char name[256];
      snprintf(name, sizeof name, "%.*s", (int)(end - p - 1), p + 1);
      on_section(c, name);
    }
  }
  return str;
}

static int parse(cfg *c, FILE *f) {
  reader_ctx r = {f, c};
  int rc = ini_parse_stream(read_line, &r, on_key, c);
  if (c->failed)
    return devmm_set_error(DEVMM_ECONFIG, "%s", c->error);
  if (rc > 0)
    return devmm_set_error(DEVMM_ECONFIG,
                           "%s:%d: cannot parse this line: expected '[section]', 'key = value' "
                           "or a comment",
                           c->source, rc);
  if (rc < 0)
    return devmm_set_error(DEVMM_ECONFIG, "%s: cannot read it", c->source);
  if (!c->plugins) { /* no plugins = ...: the cpu plugin alone */
    c->plugins = calloc(1, sizeof *c->plugins);
    if (!c->plugins || !(c->plugins[0] = devmm__strdup("cpu")))
      return devmm_set_error(DEVMM_ENOMEM, "out of memory");
    c->nplugins = 1;
  }
  /* generic checks of the device sections; a plugin section names a listed plugin */
  for (size_t i = 0; i < c->nsections; i++) {
    dsection *s = &c->sections[i];
    if (s->plugin) {
      int listed = 0;
      for (size_t j = 0; j < c->nplugins; j++)
        listed |= strcmp(c->plugins[j], s->plugin) == 0;
      if (!listed)
        return devmm_set_error(DEVMM_ECONFIG,
                               "%s:%d: section [plugin %s]: plugin '%s' is not in plugins = ... "
                               "in [devmm]",
                               c->source, s->line, s->plugin, s->plugin);
      continue;
    }
    for (size_t k = 0; k < s->nopts; k++) {
      kv *o = &s->opts[k];
      if (strcmp(o->key, "adaptors") == 0) {
        char **names = NULL;
        size_t n = 0;
        if (split_list(o->value, &names, &n)) {
          free_list(names, n);
          return devmm_set_error(DEVMM_ENOMEM, "%s:%d: out of memory", c->source, o->line);
        }
        for (size_t j = 0; j < n; j++)
          if (!in_list(adaptor_names, names[j])) {
            char valid[256];
            join(adaptor_names, valid, sizeof valid);
            int line = o->line;
            char bad[64];
            snprintf(bad, sizeof bad, "%s", names[j]);
            free_list(names, n);
            return devmm_set_error(DEVMM_ECONFIG,
                                   "%s:%d: unknown adaptor '%s': valid adaptors are %s", c->source,
                                   line, bad, valid);
          }
        free_list(names, n);
      } else if (strcmp(o->key, "alignment") == 0 || strcmp(o->key, "alignment_threshold") == 0) {
        size_t v;
        if (devmm_parse_size(o->value, 0, &v))
          return devmm_set_error(DEVMM_ECONFIG, "%s:%d: %s: %s", c->source, o->line, o->key,
                                 devmm_last_error());
      } else if (strcmp(o->key, "limit") == 0) {
        size_t v;
        if (devmm_parse_size(o->value, 1, &v)) /* % resolves per device later */
          return devmm_set_error(DEVMM_ECONFIG, "%s:%d: limit: %s", c->source, o->line,
                                 devmm_last_error());
      } else if (strcmp(o->key, "log_flush") == 0 || strcmp(o->key, "backtraces") == 0) {
        int b;
        if (devmm__parse_bool(o->value, &b))
          return devmm_set_error(DEVMM_ECONFIG, "%s:%d: %s: %s", c->source, o->line, o->key,
                                 devmm_last_error());
      } else if (strcmp(o->key, "statistics") == 0 && strcmp(o->value, "exact") != 0 &&
                 strcmp(o->value, "sharded") != 0) {
        return devmm_set_error(DEVMM_ECONFIG, "%s:%d: statistics = %s: expected exact or sharded",
                               c->source, o->line, o->value);
      }
    }
  }
  return DEVMM_OK;
}

/* ================================================================ the built state */

typedef struct {
  devmm_device_info info;
  devmm__plugin *plugin;
  devmm_resource *resource; /* NULL if it could not be built */
  char *stack, *error;
} dstate;

typedef struct {
  cfg c;
  devmm__plugin **plugins;
  size_t nplugins;
  dstate *devices;
  size_t ndevices;
} state;

static pthread_mutex_t init_lock = PTHREAD_MUTEX_INITIALIZER;  /* serialises devmm_init */
static pthread_mutex_t state_lock = PTHREAD_MUTEX_INITIALIZER; /* guards `current` */
static state *current;
static atomic_int initialized;
static atomic_int lazy_tried; /* the registry's fallback tries a lazy init once */

static void state_free(state *s) {
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
  cfg_free(&s->c);
  free(s);
}

/* Appends the kind names of plugin d (NULL: none) to the ", "-separated list in buf. */
static void append_kinds(char *buf, size_t cap, const devmm_plugin *d) {
  for (size_t j = 0; d && j < d->nkinds; j++) {
    size_t n = strlen(buf);
    snprintf(buf + n, cap - n, "%s%s", n ? ", " : "", d->kinds[j]->name);
  }
}

static const devmm_resource_kind *find_kind(state *s, const char *name, devmm__plugin **owner) {
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

static const kv *opt(const dsection *sec, const char *key) {
  for (size_t i = 0; sec && i < sec->nopts; i++)
    if (strcmp(sec->opts[i].key, key) == 0)
      return &sec->opts[i];
  return NULL;
}

/* Validates a section's resource and its plugin options against the kind (when known). */
static int check_section(state *s, const dsection *sec) {
  if (sec->plugin)
    return DEVMM_OK; /* checked by the plugin when it loads */
  const kv *res = opt(sec, "resource");
  if (!res)
    return DEVMM_OK; /* the plugin's first kind for that device type */
  devmm__plugin *owner = NULL;
  const devmm_resource_kind *k = find_kind(s, res->value, &owner);
  const char *dot = strchr(res->value, '.');
  size_t pl = dot ? (size_t)(dot - res->value) : strlen(res->value);
  devmm__plugin *named = NULL;
  for (size_t i = 0; i < s->nplugins; i++)
    if (strlen(s->plugins[i]->name) == pl && strncmp(s->plugins[i]->name, res->value, pl) == 0)
      named = s->plugins[i];
  if (!k) {
    if (!dot || !named)
      return devmm_set_error(DEVMM_ECONFIG,
                             "%s:%d: resource = %s: expected <plugin>.<kind> with a plugin from "
                             "plugins = ... in [devmm]",
                             s->c.source, res->line, res->value);
    if (!named->desc)
      return DEVMM_OK; /* its plugin failed to load: reported with the plugin */
    char valid[512] = "";
    append_kinds(valid, sizeof valid, named->desc);
    return devmm_set_error(DEVMM_ECONFIG,
                           "%s:%d: unknown resource kind '%s': plugin '%s' offers %s", s->c.source,
                           res->line, res->value, named->name, valid);
  }
  if (k->device_type != sec->dev.device_type) {
    char want[32], have[32];
    devmm_device dk = {k->device_type, 0};
    devmm_device_format(dk, want, sizeof want);
    devmm_device_format(sec->dev, have, sizeof have);
    want[strcspn(want, ":")] = have[strcspn(have, ":")] = '\0';
    return devmm_set_error(DEVMM_ECONFIG,
                           "%s:%d: resource = %s allocates %s memory, but this section is for "
                           "%s devices",
                           s->c.source, res->line, res->value, want, have);
  }
  for (size_t i = 0; i < sec->nopts; i++) {
    const kv *o = &sec->opts[i];
    if (in_list(device_keys, o->key) || in_list(k->options, o->key))
      continue;
    char valid[512], kopts[256];
    join(device_keys, valid, sizeof valid);
    join(k->options, kopts, sizeof kopts);
    return devmm_set_error(DEVMM_ECONFIG,
                           "%s:%d: unknown key '%s' for a device using %s: valid keys are %s%s%s",
                           s->c.source, o->line, o->key, k->name, valid, *kopts ? ", " : "", kopts);
  }
  return DEVMM_OK;
}

/* Wraps *r in adaptor `name` configured from sec. */
static int wrap(const char *name, const dsection *sec, const devmm_device_info *info,
                devmm_resource **r) {
  devmm_resource *a = NULL;
  int rc, b = 0;
  const kv *o;
  if (strcmp(name, "statistics") == 0) {
    o = opt(sec, "statistics");
    unsigned flags = o && strcmp(o->value, "sharded") == 0 ? DEVMM_STATISTICS_SHARDED : 0;
    rc = devmm_statistics_adaptor_create_ex(*r, flags, &a);
  } else if (strcmp(name, "limiting") == 0) {
    size_t limit = SIZE_MAX;
    if ((o = opt(sec, "limit")) != NULL &&
        devmm_parse_size(o->value, info->total_bytes, &limit) != DEVMM_OK)
      return devmm_set_error(DEVMM_ECONFIG, "line %d: limit: %s", o->line, devmm_last_error());
    rc = devmm_limiting_adaptor_create(*r, limit, &a);
  } else if (strcmp(name, "tracking") == 0) {
    if ((o = opt(sec, "backtraces")) != NULL)
      devmm__parse_bool(o->value, &b);
    rc = devmm_tracking_adaptor_create(*r, b, &a);
  } else if (strcmp(name, "logging") == 0) {
    o = opt(sec, "log_file");
    const char *path =
        o && strcmp(o->value, "-") != 0 && strcmp(o->value, "stderr") != 0 ? o->value : NULL;
    const kv *fl = opt(sec, "log_flush");
    if (fl)
      devmm__parse_bool(fl->value, &b);
    rc = devmm_logging_adaptor_create(*r, path, b, &a);
  } else if (strcmp(name, "aligned") == 0) {
    size_t align = 256, threshold = 0;
    if ((o = opt(sec, "alignment")) != NULL)
      devmm_parse_size(o->value, 0, &align);
    if ((o = opt(sec, "alignment_threshold")) != NULL)
      devmm_parse_size(o->value, 0, &threshold);
    rc = devmm_aligned_adaptor_create(*r, align, threshold, &a);
  } else {
    rc = devmm_thread_safe_adaptor_create(*r, &a);
  }
  if (rc)
    return rc;
  devmm_resource_release(*r);
  *r = a;
  return DEVMM_OK;
}

static const dsection *section_for(const cfg *c, devmm_device d) {
  const dsection *wild = NULL;
  for (size_t i = 0; i < c->nsections; i++) {
    const dsection *s = &c->sections[i];
    if (s->plugin || s->dev.device_type != d.device_type)
      continue;
    if (!s->wildcard && s->dev.device_id == d.device_id)
      return s;
    if (s->wildcard)
      wild = s;
  }
  return wild;
}

/* Builds one device's stack. A file error (bad option value) is returned; a runtime failure
 * (the factory failed) is recorded in ds->error and returns DEVMM_OK. */
static int build_device(state *s, dstate *ds) {
  const dsection *sec = section_for(&s->c, ds->info.device);
  const kv *res = opt(sec, "resource");
  const devmm_resource_kind *k = NULL;
  if (res) {
    k = find_kind(s, res->value, NULL);
  } else {
    for (size_t i = 0; !k && i < ds->plugin->desc->nkinds; i++)
      if (ds->plugin->desc->kinds[i]->device_type == ds->info.device.device_type)
        k = ds->plugin->desc->kinds[i];
  }
  if (!k) {
    ds->error = devmm__strdup(res ? "its resource's plugin failed to load"
                                  : "its plugin offers no resource kind for it");
    return DEVMM_OK;
  }
  /* the factory sees only its own options */
  devmm_option opts[64];
  size_t n = 0;
  for (size_t i = 0; sec && i < sec->nopts && n < 64; i++)
    if (!in_list(device_keys, sec->opts[i].key))
      opts[n++] = (devmm_option){sec->opts[i].key, sec->opts[i].value, sec->opts[i].line};
  devmm_resource *r = NULL;
  devmm_clear_error();
  int frc = k->create(devmm__host(), ds->info.device.device_id, opts, n, &r);
  if (frc == DEVMM_EINVAL && sec) { /* a bad option value: the file's fault */
    char msg[DEVMM__MSG_MAX];
    snprintf(msg, sizeof msg, "%s", devmm_last_error());
    devmm_resource_release(r);
    char name[32];
    devmm_device_format(sec->dev, name, sizeof name);
    if (sec->wildcard)
      name[strcspn(name, ":")] = '\0';
    return devmm_set_error(DEVMM_ECONFIG, "%s:%d: [device %s%s] %s", s->c.source, sec->line, name,
                           sec->wildcard ? ":*" : "", msg);
  }
  if (frc != DEVMM_OK || !r) {
    char msg[DEVMM__MSG_MAX + 64];
    const char *why =
        r ? devmm_last_error()
          : (*devmm_last_error() ? devmm_last_error() : "the factory returned no resource");
    size_t kl = strlen(k->name); /* "<kind>: " unless the plugin's message starts with it */
    int named = strncmp(why, k->name, kl) == 0 && (why[kl] == ':' || why[kl] == ' ');
    snprintf(msg, sizeof msg, "%s%s%s", named ? "" : k->name, named ? "" : ": ", why);
    if (r)
      devmm_resource_release(r);
    ds->error = devmm__strdup(msg);
    return DEVMM_OK;
  }
  const kv *ad = opt(sec, "adaptors");
  char **names = NULL;
  size_t na = 0;
  if (ad && split_list(ad->value, &names, &na)) {
    free_list(names, na);
    devmm_resource_release(r);
    return devmm_set_error(DEVMM_ENOMEM, "%s:%d: out of memory", s->c.source, ad->line);
  }
  /* an adaptor option without its adaptor is a mistake worth stopping for */
  static const char *const needs[][2] = {
      {"limit", "limiting"},       {"log_file", "logging"},  {"log_flush", "logging"},
      {"backtraces", "tracking"},  {"alignment", "aligned"}, {"alignment_threshold", "aligned"},
      {"statistics", "statistics"}};
  for (size_t i = 0; i < sizeof needs / sizeof needs[0]; i++) {
    const kv *o = opt(sec, needs[i][0]);
    int listed = 0;
    for (size_t j = 0; j < na; j++)
      listed |= strcmp(names[j], needs[i][1]) == 0;
    if (o && !listed) {
      free_list(names, na);
      devmm_resource_release(r);
      return devmm_set_error(DEVMM_ECONFIG, "%s:%d: '%s' is set but '%s' is not in adaptors = ...",
                             s->c.source, o->line, needs[i][0], needs[i][1]);
    }
  }
  for (size_t j = 0; j < na; j++) {
    int rc = wrap(names[j], sec, &ds->info, &r);
    if (rc) {
      char msg[DEVMM__MSG_MAX];
      snprintf(msg, sizeof msg, "%s", devmm_last_error());
      free_list(names, na);
      devmm_resource_release(r);
      if (rc == DEVMM_ECONFIG)
        return devmm_set_error(rc, "%s:%s", s->c.source, msg + 4); /* "line N: ..." */
      ds->error = devmm__strdup(msg);
      return DEVMM_OK;
    }
  }
  free_list(names, na);
  ds->resource = r;
  ds->stack = devmm__strdup(devmm_resource_name(r));
  return DEVMM_OK;
}

/* ================================================================ init */

static int open_config(const char *path, cfg *c, FILE **f) {
  const char *chosen = path;
  char xdg[4096];
  *f = NULL;
  if (!chosen)
    chosen = devmm__getenv("DEVMM_CONFIG");
  if (!chosen) {
    const char *x = devmm__getenv("XDG_CONFIG_HOME"), *home = devmm__getenv("HOME");
    if (x && x[0] == '/')
      snprintf(xdg, sizeof xdg, "%s/devmm/devmm.ini", x);
    else if (home && home[0] == '/')
      snprintf(xdg, sizeof xdg, "%s/.config/devmm/devmm.ini", home);
    else
      xdg[0] = '\0';
    if (xdg[0] && access(xdg, F_OK) == 0)
      chosen = xdg;
    else if (*devmm__installed_config() && access(devmm__installed_config(), F_OK) == 0)
      chosen = devmm__installed_config();
  }
  if (!chosen) {
    c->source = devmm__strdup("built-in default");
    *f = fmemopen((void *)builtin_config, sizeof builtin_config - 1, "r");
    return c->source && *f ? DEVMM_OK : devmm_set_error(DEVMM_ENOMEM, "out of memory");
  }
  c->source = devmm__strdup(chosen);
  char *d = devmm__strdup(chosen), *slash = d ? strrchr(d, '/') : NULL;
  if (slash)
    *slash = '\0';
  c->dir = slash ? d : NULL;
  if (!slash)
    free(d);
  *f = fopen(chosen, "re");
  if (!*f)
    return devmm_set_error(DEVMM_ECONFIG, "cannot read configuration file '%s': %s", chosen,
                           strerror(errno));
  return DEVMM_OK;
}

/* The plugin search path: $DEVMM_PLUGIN_PATH, plugin_path, the installed directory; dirs has
 * room for 128 and is NULL-terminated. Returns the copy of the environment to free. */
static char *plugin_dirs(const cfg *c, const char **dirs) {
  size_t nd = 0;
  char *envcopy = NULL;
  const char *env = devmm__getenv("DEVMM_PLUGIN_PATH");
  if (env && (envcopy = devmm__strdup(env)) != NULL) {
    char *save = NULL;
    for (char *t = strtok_r(envcopy, ":", &save); t && nd < 64; t = strtok_r(NULL, ":", &save))
      dirs[nd++] = t;
  }
  for (size_t i = 0; i < c->npaths && nd < 126; i++)
    dirs[nd++] = c->paths[i];
  if (*devmm__installed_plugin_dir())
    dirs[nd++] = devmm__installed_plugin_dir();
  dirs[nd] = NULL;
  return envcopy;
}

static int build(const char *path, state **out) {
  state *s = calloc(1, sizeof *s);
  if (!s)
    return devmm_set_error(DEVMM_ENOMEM, "out of memory");
  s->c.log_level = -1;
  FILE *f;
  int rc = open_config(path, &s->c, &f);
  if (!rc) {
    rc = parse(&s->c, f);
  }
  if (f)
    fclose(f);
  if (rc)
    goto fail;
  if (s->c.log_level >= 0)
    devmm__set_log_level(s->c.log_level);
  /* plugin directories: $DEVMM_PLUGIN_PATH, plugin_path, the installed directory */
  const char *dirs[128];
  char *envcopy = plugin_dirs(&s->c, dirs);
  s->plugins = calloc(s->c.nplugins, sizeof *s->plugins);
  if (!s->plugins) {
    free(envcopy);
    rc = devmm_set_error(DEVMM_ENOMEM, "out of memory");
    goto fail;
  }
  for (size_t i = 0; i < s->c.nplugins; i++) {
    for (size_t j = 0; j < i; j++)
      if (strcmp(s->c.plugins[i], s->c.plugins[j]) == 0) {
        free(envcopy);
        rc = devmm_set_error(DEVMM_ECONFIG, "%s: plugin '%s' is listed twice in plugins = ...",
                             s->c.source, s->c.plugins[i]);
        goto fail;
      }
    const dsection *ps = NULL;
    for (size_t k = 0; k < s->c.nsections; k++)
      if (s->c.sections[k].plugin && strcmp(s->c.sections[k].plugin, s->c.plugins[i]) == 0)
        ps = &s->c.sections[k];
    devmm_option popts[64];
    size_t np = 0;
    for (size_t k = 0; ps && k < ps->nopts && np < 64; k++)
      popts[np++] = (devmm_option){ps->opts[k].key, ps->opts[k].value, ps->opts[k].line};
    devmm__plugin *p = devmm__plugin_load(s->c.plugins[i], dirs, popts, np);
    if (!p) {
      free(envcopy);
      rc = devmm_set_error(DEVMM_ENOMEM, "out of memory");
      goto fail;
    }
    s->plugins[s->nplugins++] = p;
    if (p->config_failed) { /* a bad [plugin ...] option is an error of the file */
      free(envcopy);
      rc = devmm_set_error(DEVMM_ECONFIG, "%s:%d: [plugin %s]: %s", s->c.source,
                           p->config_line ? p->config_line
                           : ps           ? ps->line
                                          : 0,
                           p->name, p->error);
      goto fail;
    }
    if (!p->desc)
      devmm__log(DEVMM_LOG_WARN, NULL, "plugin '%s' not loaded: %s", p->name, p->error);
    else if (p->error)
      devmm__log(DEVMM_LOG_INFO, NULL, "plugin '%s': %s", p->name, p->error);
  }
  free(envcopy);
  /* two plugins may not offer the same kind */
  for (size_t i = 0; i < s->nplugins; i++)
    for (size_t j = 0; s->plugins[i]->desc && j < s->nplugins; j++)
      if (i != j && s->plugins[j]->desc &&
          strcmp(s->plugins[i]->desc->name, s->plugins[j]->desc->name) == 0) {
        rc = devmm_set_error(DEVMM_ECONFIG, "%s: plugins '%s' and '%s' both call themselves '%s'",
                             s->c.source, s->plugins[i]->name, s->plugins[j]->name,
                             s->plugins[i]->desc->name);
        goto fail;
      }
  for (size_t i = 0; i < s->c.nsections; i++)
    if ((rc = check_section(s, &s->c.sections[i])) != 0)
      goto fail;
  /* devices */
  size_t total = 0;
  for (size_t i = 0; i < s->nplugins; i++)
    total += s->plugins[i]->ndevices;
  s->devices = calloc(total ? total : 1, sizeof *s->devices);
  if (!s->devices) {
    rc = devmm_set_error(DEVMM_ENOMEM, "out of memory");
    goto fail;
  }
  for (size_t i = 0; i < s->nplugins; i++)
    for (size_t k = 0; k < s->plugins[i]->ndevices; k++) {
      devmm_device dev = s->plugins[i]->devices[k].device;
      const dstate *seen = NULL; /* a device two plugins enumerate belongs to the first */
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
      dstate *ds = &s->devices[s->ndevices++];
      ds->info = s->plugins[i]->devices[k];
      ds->plugin = s->plugins[i];
      if ((rc = build_device(s, ds)) != 0)
        goto fail;
      if (ds->error) {
        char name[32];
        devmm_device_format(ds->info.device, name, sizeof name);
        devmm__log(DEVMM_LOG_WARN, NULL, "device %s has no resource: %s", name, ds->error);
      }
    }
  *out = s;
  return DEVMM_OK;
fail:
  state_free(s);
  return rc;
}

static int init(const char *path, int lazy) {
  pthread_mutex_lock(&init_lock);
  if (lazy && atomic_load(&initialized)) { /* another thread got there first */
    pthread_mutex_unlock(&init_lock);
    return DEVMM_OK;
  }
  state *s = NULL;
  int rc = build(path, &s);
  if (rc) {
    pthread_mutex_unlock(&init_lock);
    return rc;
  }
  pthread_mutex_lock(&state_lock);
  state *old = current;
  current = s;
  pthread_mutex_unlock(&state_lock);
  /* Replace what the previous configuration set; leave what the user set alone (a lazy init
   * only fills devices that have no resource yet). */
  for (size_t i = 0; old && i < old->ndevices; i++)
    if (old->devices[i].resource)
      devmm__registry_replace(old->devices[i].info.device, old->devices[i].resource, NULL, 0);
  for (size_t i = 0; i < s->ndevices; i++)
    if (s->devices[i].resource)
      devmm__registry_replace(s->devices[i].info.device, NULL, s->devices[i].resource,
                              lazy ? 1 : 2);
  atomic_store(&initialized, 1);
  pthread_mutex_unlock(&init_lock);
  state_free(old);
  return DEVMM_OK;
}

int devmm_init(const char *path) { return init(path, 0); }

void devmm_shutdown(void) {
  pthread_mutex_lock(&init_lock);
  pthread_mutex_lock(&state_lock);
  state *old = current;
  current = NULL;
  pthread_mutex_unlock(&state_lock);
  for (size_t i = 0; old && i < old->ndevices; i++)
    if (old->devices[i].resource)
      devmm__registry_replace(old->devices[i].info.device, old->devices[i].resource, NULL, 0);
  atomic_store(&initialized, 0);
  atomic_store(&lazy_tried, 0);
  pthread_mutex_unlock(&init_lock);
  state_free(old);
}

int devmm_is_initialized(void) { return atomic_load(&initialized); }

const char *devmm_config_source(void) { return current ? current->c.source : ""; }

static void ensure_init(void) {
  if (!atomic_load(&initialized) && init(NULL, 1) != DEVMM_OK)
    devmm__log(DEVMM_LOG_ERROR, NULL, "initialisation failed: %s", devmm_last_error());
}

int devmm__registry_fallback(devmm_device device, devmm_resource **out) {
  char name[32];
  devmm_device_format(device, name, sizeof name);
  *out = NULL;
  if (!atomic_load(&initialized) && !atomic_exchange(&lazy_tried, 1)) {
    char saved[DEVMM__MSG_MAX] = "";
    ensure_init();
    if (!atomic_load(&initialized)) {
      snprintf(saved, sizeof saved, "%s", devmm_last_error());
      return devmm_set_error(DEVMM_ENOENT,
                             "no current resource for device %s: devmm could not "
                             "initialise: %s",
                             name, saved);
    }
    if (devmm_get_current_resource(device, out) == DEVMM_OK)
      return DEVMM_OK;
  }
  /* explain why: a device that failed to build, a plugin with 0 devices, or nothing */
  char why[DEVMM__MSG_MAX] = "";
  pthread_mutex_lock(&state_lock);
  if (!current) {
    snprintf(why, sizeof why, "set one with devmm_set_current_resource() or call devmm_init()");
  } else {
    for (size_t i = 0; i < current->ndevices && !why[0]; i++)
      if (current->devices[i].info.device.device_type == device.device_type &&
          current->devices[i].info.device.device_id == device.device_id &&
          current->devices[i].error)
        snprintf(why, sizeof why, "%s", current->devices[i].error);
    for (size_t i = 0; i < current->nplugins && !why[0]; i++)
      if (current->plugins[i]->error)
        snprintf(why, sizeof why, "no loaded plugin has this device (plugin '%s': %.400s)",
                 current->plugins[i]->name, current->plugins[i]->error);
    if (!why[0])
      snprintf(why, sizeof why, "no plugin of %s has this device", current->c.source);
  }
  pthread_mutex_unlock(&state_lock);
  return devmm_set_error(DEVMM_ENOENT, "no current resource for device %s: %s", name, why);
}

/* ================================================================ queries */

size_t devmm_plugin_count(void) {
  ensure_init();
  pthread_mutex_lock(&state_lock);
  size_t n = current ? current->nplugins : 0;
  pthread_mutex_unlock(&state_lock);
  return n;
}

int devmm_plugin_get(size_t i, devmm_plugin_status *out) {
  if (!out)
    return devmm_set_error(DEVMM_EINVAL, "devmm_plugin_get: out is NULL");
  pthread_mutex_lock(&state_lock);
  if (!current || i >= current->nplugins) {
    pthread_mutex_unlock(&state_lock);
    return devmm_set_error(DEVMM_EINVAL, "devmm_plugin_get: no plugin #%zu", i);
  }
  devmm__plugin *p = current->plugins[i];
  out->name = p->name;
  out->path = p->path ? p->path : "";
  out->version = p->desc && p->desc->version ? p->desc->version : "";
  out->abi_major = p->desc ? p->desc->abi_major : 0;
  out->abi_minor = p->desc ? p->desc->abi_minor : 0;
  out->loaded = p->desc != NULL;
  out->error = p->error ? p->error : "";
  out->ndevices = p->ndevices;
  out->nkinds = p->desc ? p->desc->nkinds : 0;
  pthread_mutex_unlock(&state_lock);
  return DEVMM_OK;
}

size_t devmm_device_count(void) {
  ensure_init();
  pthread_mutex_lock(&state_lock);
  size_t n = current ? current->ndevices : 0;
  pthread_mutex_unlock(&state_lock);
  return n;
}

int devmm_device_get(size_t i, devmm_device_status *out) {
  if (!out)
    return devmm_set_error(DEVMM_EINVAL, "devmm_device_get: out is NULL");
  pthread_mutex_lock(&state_lock);
  if (!current || i >= current->ndevices) {
    pthread_mutex_unlock(&state_lock);
    return devmm_set_error(DEVMM_EINVAL, "devmm_device_get: no device #%zu", i);
  }
  dstate *d = &current->devices[i];
  out->info = d->info;
  out->plugin = d->plugin->name;
  out->stack = d->stack ? d->stack : "";
  out->error = d->error ? d->error : "";
  pthread_mutex_unlock(&state_lock);
  return DEVMM_OK;
}

const char *devmm_kind_name(size_t i) {
  ensure_init();
  const char *name = NULL;
  pthread_mutex_lock(&state_lock);
  for (size_t p = 0; current && p < current->nplugins && !name; p++) {
    const devmm_plugin *d = current->plugins[p]->desc;
    if (!d)
      continue;
    if (i < d->nkinds)
      name = d->kinds[i]->name;
    else
      i -= d->nkinds;
  }
  pthread_mutex_unlock(&state_lock);
  return name;
}

int devmm_kind_get(size_t i, devmm_kind_status *out) {
  if (!out)
    return devmm_set_error(DEVMM_EINVAL, "devmm_kind_get: out is NULL");
  ensure_init();
  int rc = DEVMM_EINVAL;
  size_t asked = i;
  pthread_mutex_lock(&state_lock);
  for (size_t p = 0; current && p < current->nplugins && rc; p++) {
    devmm__plugin *pl = current->plugins[p];
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
  pthread_mutex_unlock(&state_lock);
  return rc ? devmm_set_error(rc, "devmm_kind_get: no kind #%zu", asked) : rc;
}

/* A kind whose plugin the configuration did not name ("cuda.async" with only cpu loaded): load
 * that plugin from the plugin path on demand. Its devices get no current resource (only the
 * configuration decides those), but its kinds can be created. Caller holds both locks. */
static const devmm_resource_kind *load_for_kind(state *s, const char *kind) {
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
  const char *dirs[128];
  char *envcopy = plugin_dirs(&s->c, dirs);
  devmm__plugin *p = devmm__plugin_load(name, dirs, NULL, 0);
  free(envcopy);
  if (!p)
    return NULL;
  s->plugins[s->nplugins++] = p;
  if (!p->desc) {
    devmm__log(DEVMM_LOG_INFO, NULL, "plugin '%s' (for %s) not loaded: %s", name, kind, p->error);
    return NULL;
  }
  return find_kind(s, kind, NULL);
}

int devmm_resource_create_kind(const char *kind, int32_t device_id, const devmm_option *options,
                               size_t noptions, devmm_resource **out) {
  if (!out)
    return devmm_set_error(DEVMM_EINVAL, "devmm_resource_create_kind: out is NULL");
  *out = NULL;
  if (!kind || (noptions && !options))
    return devmm_set_error(DEVMM_EINVAL, "devmm_resource_create_kind: %s is NULL",
                           !kind ? "kind" : "options");
  ensure_init();
  pthread_mutex_lock(&init_lock); /* may add a plugin to the state: no devmm_init meanwhile */
  pthread_mutex_lock(&state_lock);
  const devmm_resource_kind *k = current ? find_kind(current, kind, NULL) : NULL;
  if (!k && current)
    k = load_for_kind(current, kind);
  char avail[512] = "";
  for (size_t p = 0; !k && current && p < current->nplugins; p++)
    append_kinds(avail, sizeof avail, current->plugins[p]->desc);
  pthread_mutex_unlock(&state_lock);
  pthread_mutex_unlock(&init_lock);
  if (!k)
    return devmm_set_error(DEVMM_ENOENT,
                           "unknown resource kind '%.64s': the loaded plugins offer %s", kind,
                           *avail ? avail : "none");
  for (size_t i = 0; i < noptions; i++) {
    if (!options[i].key || !options[i].value)
      return devmm_set_error(DEVMM_EINVAL, "%s: option #%zu has a NULL key or value", kind, i);
    if (!in_list(k->options, options[i].key)) {
      char valid[256];
      join(k->options, valid, sizeof valid);
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
  return rc;
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

int devmm_info_json(char **out) {
  if (!out)
    return devmm_set_error(DEVMM_EINVAL, "devmm_info_json: out is NULL");
  ensure_init();
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  if (!f)
    return devmm_set_error(DEVMM_ENOMEM, "out of memory");
  pthread_mutex_lock(&state_lock);
  fprintf(f, "{\"version\": ");
  json_str(f, devmm_version());
  fprintf(f, ", \"abi\": \"%d.%d\", \"config\": ", DEVMM_PLUGIN_ABI_MAJOR, DEVMM_PLUGIN_ABI_MINOR);
  json_str(f, current ? current->c.source : "");
  fprintf(f, ", \"plugins\": [");
  for (size_t i = 0; current && i < current->nplugins; i++) {
    devmm__plugin *p = current->plugins[i];
    fprintf(f, "%s{\"name\": ", i ? ", " : "");
    json_str(f, p->name);
    fprintf(f, ", \"path\": ");
    json_str(f, p->path ? p->path : "");
    fprintf(f, ", \"version\": ");
    json_str(f, p->desc && p->desc->version ? p->desc->version : "");
    fprintf(f, ", \"abi\": \"%u.%u\", \"status\": \"%s\", \"error\": ",
            p->desc ? p->desc->abi_major : 0, p->desc ? p->desc->abi_minor : 0,
            p->desc ? "loaded" : "failed");
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
  fprintf(f, "], \"devices\": [");
  for (size_t i = 0; current && i < current->ndevices; i++) {
    dstate *d = &current->devices[i];
    char name[32];
    devmm_device_format(d->info.device, name, sizeof name);
    fprintf(f, "%s{\"device\": ", i ? ", " : "");
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
  fprintf(f, "]}");
  pthread_mutex_unlock(&state_lock);
  fclose(f);
  *out = buf;
  return DEVMM_OK;
}
