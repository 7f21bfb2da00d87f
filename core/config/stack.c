/* Resource stacks from device sections: the one table of adaptors and the devmm.ini keys each
 * reads (as mimalloc keeps its options: name, type, where the value goes), checking a section
 * against its resource kind, and building one device's stack.
 *
 * Everything devmm knows about an adaptor is its row: its name in adaptors = ..., its keys
 * (an error names the adaptor a key needs), how each value is parsed (once, when the file is
 * read, into devmm__stack_values) and how the adaptor is created from those values. */
#include "config_internal.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ================================================================ the table */

typedef enum { KEY_SIZE, KEY_SIZE_OR_PERCENT, KEY_BOOL, KEY_CHOICE, KEY_TEXT, KEY_COUNT } key_type;

typedef struct {
  const char *name;
  key_type type;
  size_t offset;              /* of the value in devmm__stack_values */
  const char *const *choices; /* KEY_CHOICE: the value is the index of the text */
} key_desc;

typedef int (*adaptor_create_fn)(devmm_resource *upstream, const devmm__stack_values *v,
                                 const devmm_device_info *info, devmm_resource **out);

typedef struct {
  const char *name; /* in adaptors = ... */
  adaptor_create_fn create;
  key_desc keys[2]; /* the keys it reads (name NULL: no more) */
} adaptor_desc;

static int make_statistics(devmm_resource *up, const devmm__stack_values *v,
                           const devmm_device_info *info, devmm_resource **out) {
  (void)info;
  return devmm_statistics_adaptor_create_ex(up, v->sharded ? DEVMM_STATISTICS_SHARDED : 0, out);
}

static int make_limiting(devmm_resource *up, const devmm__stack_values *v,
                         const devmm_device_info *info, devmm_resource **out) {
  size_t limit = SIZE_MAX;
  if (v->has_limit && devmm__size_resolve(&v->limit, v->limit_text, info->total_bytes, &limit)) {
    char why[DEVMM__MSG_MAX]; /* a percentage of a device that reports no total: the file's */
    snprintf(why, sizeof why, "%s", devmm_last_error());
    return devmm_set_error(DEVMM_ECONFIG, "limit: %.400s", why);
  }
  if (limit == 0) { /* a percentage too small for this device: as limit = 0 (parse_value) */
    char dev[32];
    devmm_device_format(info->device, dev, sizeof dev);
    return devmm_set_error(DEVMM_ECONFIG,
                           "limit = %.100s is 0 bytes of %s: it would refuse every allocation: "
                           "expected a size or a percentage above 0 bytes (to limit nothing, "
                           "leave limiting out of adaptors = ...)",
                           v->limit_text, dev);
  }
  return devmm_limiting_adaptor_create(up, limit, out);
}

static int make_tracking(devmm_resource *up, const devmm__stack_values *v,
                         const devmm_device_info *info, devmm_resource **out) {
  (void)info;
  if (!v->history)
    return devmm_tracking_adaptor_create(up, v->backtraces, out);
  devmm_tracking_options o = {
      .struct_size = sizeof o, .backtraces = v->backtraces, .history = v->history};
  return devmm_tracking_adaptor_create_ex(up, &o, out);
}

static int make_logging(devmm_resource *up, const devmm__stack_values *v,
                        const devmm_device_info *info, devmm_resource **out) {
  (void)info;
  return devmm_logging_adaptor_create(up, v->log_file, v->log_flush, out);
}

static int make_aligned(devmm_resource *up, const devmm__stack_values *v,
                        const devmm_device_info *info, devmm_resource **out) {
  (void)info;
  return devmm_aligned_adaptor_create(up, v->alignment, v->alignment_threshold, out);
}

static int make_thread_safe(devmm_resource *up, const devmm__stack_values *v,
                            const devmm_device_info *info, devmm_resource **out) {
  (void)v, (void)info;
  return devmm_thread_safe_adaptor_create(up, out);
}

static int make_prefetch(devmm_resource *up, const devmm__stack_values *v,
                         const devmm_device_info *info, devmm_resource **out) {
  (void)v, (void)info;
  return devmm_prefetch_adaptor_create(up, out);
}

static const char *const statistics_modes[] = {"exact", "sharded", NULL};

#define VAL(field) offsetof(devmm__stack_values, field)
static const adaptor_desc adaptors[] = {
    {.name = "statistics",
     .create = make_statistics,
     .keys = {{.name = "statistics",
               .type = KEY_CHOICE,
               .offset = VAL(sharded),
               .choices = statistics_modes}}},
    {.name = "limiting",
     .create = make_limiting,
     .keys = {{.name = "limit", .type = KEY_SIZE_OR_PERCENT, .offset = VAL(limit)}}},
    {.name = "tracking",
     .create = make_tracking,
     .keys = {{.name = "backtraces", .type = KEY_BOOL, .offset = VAL(backtraces)},
              {.name = "history", .type = KEY_COUNT, .offset = VAL(history)}}},
    {.name = "logging",
     .create = make_logging,
     .keys = {{.name = "log_file", .type = KEY_TEXT, .offset = VAL(log_file)},
              {.name = "log_flush", .type = KEY_BOOL, .offset = VAL(log_flush)}}},
    {.name = "aligned",
     .create = make_aligned,
     .keys = {{.name = "alignment", .type = KEY_SIZE, .offset = VAL(alignment)},
              {.name = "alignment_threshold",
               .type = KEY_SIZE,
               .offset = VAL(alignment_threshold)}}},
    {.name = "thread_safe", .create = make_thread_safe},
    {.name = "prefetch", .create = make_prefetch},
};
#undef VAL
#define NADAPTORS (sizeof adaptors / sizeof adaptors[0])
#define NKEYS (sizeof adaptors[0].keys / sizeof adaptors[0].keys[0])

void devmm__stack_defaults(devmm__stack_values *v) {
  memset(v, 0, sizeof *v);
  v->alignment = 256;
}

/* The row and key of an adaptor key, bare ("alignment") or prefixed with its adaptor
 * ("aligned.alignment", which is always the adaptor's); NULL if key is none. */
static const key_desc *find_key(const char *key, const adaptor_desc **owner) {
  const char *dot = strchr(key, '.');
  size_t pl = dot ? (size_t)(dot - key) : 0;
  for (size_t a = 0; a < NADAPTORS; a++)
    for (size_t k = 0; k < NKEYS && adaptors[a].keys[k].name; k++)
      if (dot ? strlen(adaptors[a].name) == pl && strncmp(adaptors[a].name, key, pl) == 0 &&
                    strcmp(adaptors[a].keys[k].name, dot + 1) == 0
              : strcmp(adaptors[a].keys[k].name, key) == 0) {
        if (owner)
          *owner = &adaptors[a];
        return &adaptors[a].keys[k];
      }
  return NULL;
}

int devmm__stack_is_devmm_key(const char *key) {
  return strcmp(key, "resource") == 0 || strcmp(key, "adaptors") == 0 || find_key(key, NULL);
}

/* Every key devmm reads in a device section, ", "-joined into buf. */
static void join_device_keys(char *buf, size_t cap) {
  snprintf(buf, cap, "resource, adaptors");
  for (size_t a = 0; a < NADAPTORS; a++)
    for (size_t k = 0; k < NKEYS && adaptors[a].keys[k].name; k++) {
      size_t n = strlen(buf);
      snprintf(buf + n, cap - n, ", %s", adaptors[a].keys[k].name);
    }
}

/* ================================================================ parsing values, once */

/* adaptors = a, b: each a row of the table, in order. */
static int parse_adaptors(const char *source, const devmm__kv *o, devmm__stack_values *v) {
  char **names = NULL;
  size_t n = 0;
  if (devmm__split_list(o->value, &names, &n)) {
    devmm__free_list(names, n);
    return devmm_set_error(DEVMM_ENOMEM, "%s:%d: out of memory", source, o->line);
  }
  int rc = DEVMM_OK;
  v->nadaptors = 0;
  for (size_t j = 0; j < n && !rc; j++) {
    size_t a = 0;
    while (a < NADAPTORS && strcmp(adaptors[a].name, names[j]) != 0)
      a++;
    if (a == NADAPTORS) {
      char valid[256] = "";
      for (size_t i = 0; i < NADAPTORS; i++) {
        size_t len = strlen(valid);
        snprintf(valid + len, sizeof valid - len, "%s%s", i ? ", " : "", adaptors[i].name);
      }
      rc = devmm_set_error(DEVMM_ECONFIG, "%s:%d: unknown adaptor '%.64s': valid adaptors are %s",
                           source, o->line, names[j], valid);
    } else if (v->nadaptors == DEVMM__MAX_ADAPTORS) {
      rc = devmm_set_error(DEVMM_ECONFIG, "%s:%d: more than %d adaptors", source, o->line,
                           DEVMM__MAX_ADAPTORS);
    } else {
      v->adaptor[v->nadaptors++] = (unsigned char)a;
    }
  }
  devmm__free_list(names, n);
  return rc;
}

static int parse_value(const char *source, const devmm__kv *o, const key_desc *k, void *dst) {
  switch (k->type) {
  case KEY_SIZE:
    if (devmm_parse_size(o->value, 0, dst) == DEVMM_OK)
      return DEVMM_OK;
    break;
  case KEY_SIZE_OR_PERCENT: {
    const devmm__size_spec *spec = dst;
    if (devmm__parse_size_spec(o->value, dst) != DEVMM_OK)
      break;
    if (spec->percent ? spec->value > 0 : spec->bytes > 0)
      return DEVMM_OK;
    return devmm_set_error(DEVMM_ECONFIG,
                           "%s:%d: %s = %s would refuse every allocation: expected a size or a "
                           "percentage above 0 (to limit nothing, leave limiting out of "
                           "adaptors = ...)",
                           source, o->line, o->key, o->value);
  }
  case KEY_COUNT: {
    char *end = NULL;
    unsigned long long n =
        o->value[0] >= '0' && o->value[0] <= '9' ? strtoull(o->value, &end, 10) : 0;
    if (end && !*end && n <= SIZE_MAX / 64)
      return *(size_t *)dst = (size_t)n, DEVMM_OK;
    return devmm_set_error(DEVMM_ECONFIG,
                           "%s:%d: %s = %s: expected a count of events (a whole number, 0 for "
                           "none)",
                           source, o->line, o->key, o->value);
  }
  case KEY_BOOL:
    if (devmm__parse_bool(o->value, dst) == DEVMM_OK)
      return DEVMM_OK;
    break;
  case KEY_CHOICE:
    for (int i = 0; k->choices[i]; i++)
      if (strcmp(k->choices[i], o->value) == 0)
        return *(int *)dst = i, DEVMM_OK;
    char valid[128] = "";
    for (int i = 0; k->choices[i]; i++) { /* "a, b or c" */
      size_t len = strlen(valid);
      snprintf(valid + len, sizeof valid - len, "%s%s",
               !i                  ? ""
               : k->choices[i + 1] ? ", "
                                   : " or ",
               k->choices[i]);
    }
    return devmm_set_error(DEVMM_ECONFIG, "%s:%d: %s = %s: expected %s", source, o->line, o->key,
                           o->value, valid);
  case KEY_TEXT: /* log_file: "-" and "stderr" mean stderr */
    *(const char **)dst =
        strcmp(o->value, "-") == 0 || strcmp(o->value, "stderr") == 0 ? NULL : o->value;
    return DEVMM_OK;
  }
  return devmm_set_error(DEVMM_ECONFIG, "%s:%d: %s: %s", source, o->line, o->key,
                         devmm_last_error());
}

int devmm__stack_parse_key(const char *source, const devmm__kv *o, devmm__stack_values *v) {
  if (strcmp(o->key, "resource") == 0)
    return DEVMM_OK; /* checked against the loaded plugins' kinds, later */
  if (strcmp(o->key, "adaptors") == 0)
    return parse_adaptors(source, o, v);
  if (!strchr(o->key, '.'))
    return DEVMM_OK; /* bare: the adaptor's or the kind's, seen with the whole section */
  const key_desc *k = find_key(o->key, NULL);
  if (k->type == KEY_SIZE_OR_PERCENT) /* the limit: resolved per device, named in messages */
    v->has_limit = 1, v->limit_text = o->value;
  return parse_value(source, o, k, (char *)v + k->offset);
}

/* 1 if adaptor a is in the section's adaptors = ... */
static int listed(const devmm__section *sec, const adaptor_desc *a) {
  for (size_t j = 0; j < sec->stack.nadaptors; j++)
    if (&adaptors[sec->stack.adaptor[j]] == a)
      return 1;
  return 0;
}

/* The option setting key k of adaptor a: "<a>.<k>" if set, else a bare "<k>" (NULL: neither). */
static const devmm__kv *adaptor_opt(const devmm__section *sec, const adaptor_desc *a,
                                    const key_desc *k) {
  char full[96];
  snprintf(full, sizeof full, "%s.%s", a->name, k->name);
  const devmm__kv *o = devmm__section_opt(sec, full);
  return o ? o : devmm__section_opt(sec, k->name);
}

/* A bare key of a listed adaptor is the adaptor's (unless its <adaptor>.<key> is set too: then
 * the bare one is the kind's); parsed here, once the whole section is known. */
int devmm__stack_check_section(const char *source, devmm__section *sec) {
  for (size_t i = 0; i < sec->nopts; i++) {
    const devmm__kv *o = &sec->opts[i];
    const adaptor_desc *a = NULL;
    const key_desc *k = strchr(o->key, '.') ? NULL : find_key(o->key, &a);
    if (!k || !listed(sec, a) || adaptor_opt(sec, a, k) != o)
      continue;
    if (k->type == KEY_SIZE_OR_PERCENT)
      sec->stack.has_limit = 1, sec->stack.limit_text = o->value;
    int rc = parse_value(source, o, k, (char *)&sec->stack + k->offset);
    if (rc)
      return rc;
  }
  const devmm__kv *list = devmm__section_opt(sec, "adaptors");
  for (size_t j = 0; j < sec->stack.nadaptors; j++)
    if (adaptors[sec->stack.adaptor[j]].create == make_limiting && !sec->stack.has_limit)
      return devmm_set_error(DEVMM_ECONFIG,
                             "%s:%d: 'limiting' is in adaptors = ... but this section sets no "
                             "limit: expected limit = <size> or <percent>%% (limiting alone "
                             "limits nothing)",
                             source, list ? list->line : sec->line);
  return DEVMM_OK;
}

/* Whose each adaptor key is, now that the kind k is known (NULL: none known): "<a>.<k>" needs
 * adaptor a listed; a bare key the kind declares is the kind's, unless a listed adaptor reads it
 * too without its "<a>.<k>" (which?); any other bare adaptor key needs its adaptor. */
static int check_adaptor_keys(const char *source, const devmm__section *sec,
                              const devmm_resource_kind *k) {
  for (size_t i = 0; i < sec->nopts; i++) {
    const devmm__kv *o = &sec->opts[i];
    const adaptor_desc *a = NULL;
    const key_desc *kd = find_key(o->key, &a);
    if (!kd)
      continue;
    int bare = !strchr(o->key, '.'), kinds = bare && k && devmm__in_list(k->options, o->key);
    if (kinds && listed(sec, a) && adaptor_opt(sec, a, kd) == o)
      return devmm_set_error(DEVMM_ECONFIG,
                             "%s:%d: '%s' is an option of both %s and the %s adaptor: expected "
                             "%s.%s = ... for the adaptor's (a bare '%s' is then %s's)",
                             source, o->line, o->key, k->name, a->name, a->name, o->key, o->key,
                             k->name);
    if (!kinds && !listed(sec, a))
      return devmm_set_error(DEVMM_ECONFIG, "%s:%d: '%s' is set but '%s' is not in adaptors = ...",
                             source, o->line, o->key, a->name);
  }
  return DEVMM_OK;
}

/* What a section without resource = ... gets: the first kind for device type t of the first
 * plugin that has (or counts on first use) devices of that type, as kind_for picks; NULL if
 * none. */
static const devmm_resource_kind *default_kind(devmm__state *s, int32_t t) {
  for (size_t i = 0; i < s->nplugins; i++) {
    const devmm__plugin *p = s->plugins[i];
    int owns = p->desc && p->lazy_type == t;
    for (size_t d = 0; p->desc && d < p->ndevices; d++)
      owns |= p->devices[d].device.device_type == t;
    for (size_t k = 0; owns && k < p->desc->nkinds; k++)
      if (p->desc->kinds[k]->device_type == t)
        return p->desc->kinds[k];
  }
  return NULL;
}

int devmm__check_section(devmm__state *s, const devmm__section *sec) {
  if (sec->plugin)
    return DEVMM_OK; /* checked by the plugin when it loads */
  const devmm__kv *res = devmm__section_opt(sec, "resource");
  const devmm_resource_kind *k =
      res ? devmm__find_kind(s, res->value, NULL) : default_kind(s, sec->dev.device_type);
  if (res && !k) /* its plugin failed to load (reported with the plugin): whose keys are which? */
    return devmm__unknown_kind(s, res);
  int rc = check_adaptor_keys(s->c.source, sec, k);
  if (rc || !k)
    return rc; /* no plugin of this device type: its keys are unknown */
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
    const devmm__kv *o = &sec->opts[i];
    if (devmm__stack_is_devmm_key(o->key) || devmm__in_list(k->options, o->key))
      continue;
    if (strcmp(o->key, "python_stack") == 0) /* where it is (tests/config/python-stack-key) */
      return devmm_set_error(DEVMM_ECONFIG,
                             "%s:%d: python_stack is not a devmm.ini key: a Python stack is taken "
                             "by the Python front end, expected devmm.TrackingAdaptor(upstream, "
                             "python_stack=N) (devmm.ini's tracking keys: backtraces, history)",
                             s->c.source, o->line);
    char valid[512], kopts[256];
    join_device_keys(valid, sizeof valid);
    devmm__join(k->options, kopts, sizeof kopts);
    return devmm_set_error(DEVMM_ECONFIG,
                           "%s:%d: unknown key '%s' for a device using %s: valid keys are %s%s%s",
                           s->c.source, o->line, o->key, k->name, valid, *kopts ? ", " : "", kopts);
  }
  return DEVMM_OK;
}

/* ================================================================ building a stack */

static const devmm__section *section_for(const devmm__config *c, devmm_device d) {
  const devmm__section *wild = NULL;
  for (size_t i = 0; i < c->nsections; i++) {
    const devmm__section *s = &c->sections[i];
    if (s->plugin || s->dev.device_type != d.device_type)
      continue;
    if (!s->wildcard && s->dev.device_id == d.device_id)
      return s;
    if (s->wildcard)
      wild = s;
  }
  return wild;
}

/* The line to blame for a factory's refusal `msg`: the option it names (its value quoted, or its
 * key), the only option it was given, or else the section's header. */
static int option_line(const devmm__section *sec, const devmm_option *opts, size_t n,
                       const char *msg) {
  char quoted[256];
  for (size_t i = 0; i < n; i++) {
    snprintf(quoted, sizeof quoted, "'%s'", opts[i].value);
    if (strstr(msg, quoted))
      return opts[i].line;
  }
  for (size_t i = 0; i < n; i++)
    if (strstr(msg, opts[i].key))
      return opts[i].line;
  return n == 1 ? opts[0].line : sec->line;
}

/* The kind a device's section names, or its plugin's first kind for its device type. */
static const devmm_resource_kind *kind_for(devmm__state *s, const devmm__dstate *ds,
                                           const devmm__kv *res) {
  const devmm_resource_kind *k = NULL;
  if (res) {
    k = devmm__find_kind(s, res->value, NULL);
  } else {
    for (size_t i = 0; !k && i < ds->plugin->desc->nkinds; i++)
      if (ds->plugin->desc->kinds[i]->device_type == ds->info.device.device_type)
        k = ds->plugin->desc->kinds[i];
  }
  return k;
}

/* A refused option value of section sec, at line: "source:line: [device X] msg". */
static int section_error(devmm__state *s, const devmm__section *sec, int line, const char *msg) {
  char name[32];
  devmm_device_format(sec->dev, name, sizeof name);
  if (sec->wildcard)
    name[strcspn(name, ":")] = '\0';
  return devmm_set_error(DEVMM_ECONFIG, "%s:%d: [device %s%s] %s", s->c.source, line, name,
                         sec->wildcard ? ":*" : "", msg);
}

/* Runs the factory with the section's options for it (only those). A refused option value
 * (DEVMM_EINVAL or DEVMM_ECONFIG) is the file's error; another failure is the device's. */
static int run_factory(devmm__state *s, devmm__dstate *ds, const devmm__section *sec,
                       const devmm_resource_kind *k, devmm_resource **r) {
  devmm_option opts[64];
  size_t n = 0;
  for (size_t i = 0; sec && i < sec->nopts && n < 64; i++) /* and the kind's own (bare) keys */
    if (!devmm__stack_is_devmm_key(sec->opts[i].key) ||
        (!strchr(sec->opts[i].key, '.') && devmm__in_list(k->options, sec->opts[i].key)))
      opts[n++] = (devmm_option){sec->opts[i].key, sec->opts[i].value, sec->opts[i].line};
  devmm_clear_error();
  int frc = k->create(devmm__host(), ds->info.device.device_id, opts, n, r);
  char msg[DEVMM__MSG_MAX];
  if (frc == DEVMM_OK && *r)
    return DEVMM_OK;
  if (frc != DEVMM_OK && !*devmm_last_error())
    devmm__factory_silent(frc, msg, sizeof msg);
  else
    snprintf(msg, sizeof msg, "%s",
             frc == DEVMM_OK ? "the factory reported success but returned no resource"
                             : devmm_last_error());
  devmm_resource_release(*r);
  *r = NULL;
  if ((frc == DEVMM_EINVAL || frc == DEVMM_ECONFIG) && sec)
    return section_error(s, sec, option_line(sec, opts, n, msg), msg);
  char full[DEVMM__MSG_MAX + 128];
  const char *why = msg;
  size_t kl = strlen(k->name); /* "<kind>: " unless the plugin's message starts with it */
  int named = strncmp(why, k->name, kl) == 0 && (why[kl] == ':' || why[kl] == ' ');
  snprintf(full, sizeof full, "%.100s%s%s", named ? "" : k->name, named ? "" : ": ", why);
  ds->error = devmm__strdup(full);
  return DEVMM_OK;
}

/* Wraps r in the section's adaptors, in order. */
static int wrap_all(devmm__state *s, devmm__dstate *ds, const devmm__section *sec,
                    devmm_resource **r) {
  for (size_t j = 0; sec && j < sec->stack.nadaptors; j++) {
    devmm_resource *a = NULL;
    const adaptor_desc *ad = &adaptors[sec->stack.adaptor[j]];
    int rc = ad->create(*r, &sec->stack, &ds->info, &a);
    if (rc) {
      char msg[DEVMM__MSG_MAX];
      snprintf(msg, sizeof msg, "%s", devmm_last_error());
      devmm_resource_release(*r);
      *r = NULL;
      /* an adaptor its resource cannot take (prefetch over memory that does not move) is the
       * file's choice, at its adaptors line (suite config_answers:
       * config_deferred_adaptor_refusal_names_its_line) */
      if (rc == DEVMM_ENOTSUP) {
        const devmm__kv *list = devmm__section_opt(sec, "adaptors");
        return section_error(s, sec, list ? list->line : sec->line, msg);
      }
      if (rc != DEVMM_ECONFIG && rc != DEVMM_EINVAL) { /* not the file's: the device's */
        ds->error = devmm__strdup(msg);
        return DEVMM_OK;
      }
      /* a refused value is the file's, as a factory's is: the line of the key it names */
      const devmm__kv *o = NULL, *named = NULL;
      for (size_t k = 0; k < NKEYS && ad->keys[k].name; k++) {
        const devmm__kv *ko = adaptor_opt(sec, ad, &ad->keys[k]);
        o = o ? o : ko;
        named = !named && ko && strstr(msg, ad->keys[k].name) ? ko : named;
      }
      o = named ? named : o;
      if (rc == DEVMM_EINVAL)
        return section_error(s, sec, o ? o->line : sec->line, msg);
      return devmm_set_error(rc, "%s:%d: %s", s->c.source, o ? o->line : sec->line, msg);
    }
    devmm_resource_release(*r);
    *r = a;
  }
  return DEVMM_OK;
}

int devmm__build_device(devmm__state *s, devmm__dstate *ds) {
  const devmm__section *sec = section_for(&s->c, ds->info.device);
  const devmm__kv *res = devmm__section_opt(sec, "resource");
  const devmm_resource_kind *k = kind_for(s, ds, res);
  if (!k) {
    ds->error = devmm__strdup(res ? "its resource's plugin failed to load"
                                  : "its plugin offers no resource kind for it");
    return DEVMM_OK;
  }
  devmm_resource *r = NULL;
  int rc = run_factory(s, ds, sec, k, &r);
  if (rc || !r)
    return rc;
  if ((rc = wrap_all(s, ds, sec, &r)) != 0 || !r)
    return rc;
  ds->resource = r;
  ds->stack = devmm__strdup(devmm_resource_name(r));
  return DEVMM_OK;
}
