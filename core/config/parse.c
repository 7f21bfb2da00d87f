/* devmm.ini text -> devmm__config: a pure parser (no globals, no I/O; tests/fuzz/fuzz_config.c
 * drives it). inih reads through our own line reader, which counts lines, refuses over-long
 * ones and sees section headers first (inih calls no handler for a section without keys).
 * Device sections' devmm keys are parsed once, into devmm__stack_values, through the adaptor
 * table of stack.c; keys for a factory are kept as text for the plugin. */
#include "config_internal.h"

#include <ini.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The longest line, not counting its end ("\n" or "\r\n"), as conf/devmm.ini.in says: inih's
 * buffer (INI_MAX_LINE, 200 in Debian's r55) holds it and the terminating NUL; a line that
 * fills it is handed over without its end (tests/c/suite_config.c config_line_length_limit). */
#define MAX_LINE 199

typedef struct {
  devmm__config *c;
  const char *text, *end, *pos; /* the input and where reading is */
  int line, in_devmm;
  devmm__section *cur;
  int failed, status;
  char error[DEVMM__MSG_MAX * 2];
} parser;

static const char *const devmm_keys[] = {"plugins", "plugin_path", "log_level", NULL};

/* ---------------------------------------------------------------- small helpers */

int devmm__in_list(const char *const *list, const char *s) {
  for (; list && *list; list++)
    if (strcmp(*list, s) == 0)
      return 1;
  return 0;
}

void devmm__join(const char *const *list, char *buf, size_t cap) {
  buf[0] = '\0';
  for (size_t n = 0; list && *list; list++) {
    n = strlen(buf);
    snprintf(buf + n, cap - n, "%s%s", n ? ", " : "", *list);
  }
}

void devmm__free_list(char **list, size_t n) {
  for (size_t i = 0; i < n; i++)
    free(list[i]);
  free(list);
}

/* Appends a copy of s to the list; -1 if out of memory (nothing appended). */
static int append_copy(char ***list, size_t *n, const char *s) {
  char **grown = realloc(*list, (*n + 1) * sizeof **list);
  if (!grown)
    return -1;
  *list = grown; /* the grown array is the list now, whatever follows */
  if (!(grown[*n] = devmm__strdup(s)))
    return -1; /* counted only once copied: no NULL entry */
  (*n)++;
  return 0;
}

int devmm__split_list(const char *text, char ***out, size_t *n) {
  char *copy = devmm__strdup(text), *save = NULL;
  if (!copy)
    return -1;
  for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    while (*tok == ' ' || *tok == '\t')
      tok++;
    size_t len = strlen(tok);
    while (len && (tok[len - 1] == ' ' || tok[len - 1] == '\t'))
      tok[--len] = '\0';
    if (len && append_copy(out, n, tok)) {
      free(copy);
      return -1;
    }
  }
  free(copy);
  return 0;
}

const devmm__kv *devmm__section_opt(const devmm__section *sec, const char *key) {
  for (size_t i = 0; sec && i < sec->nopts; i++)
    if (strcmp(sec->opts[i].key, key) == 0)
      return &sec->opts[i];
  return NULL;
}

void devmm__config_free(devmm__config *c) {
  free(c->source);
  free(c->dir);
  devmm__free_list(c->plugins, c->nplugins);
  devmm__free_list(c->paths, c->npaths);
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

static int fail(parser *p, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(parser *p, int line, const char *fmt, ...) {
  if (p->failed)
    return 0;
  char msg[DEVMM__MSG_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  snprintf(p->error, sizeof p->error, "%s:%d: %s", p->c->source, line, msg);
  p->failed = 1;
  p->status = DEVMM_ECONFIG;
  return 0;
}

/* Memory ran out: fail with DEVMM_ENOMEM (not the file's fault). */
static int fail_oom(parser *p) {
  int first = !p->failed;
  fail(p, p->line, "out of memory");
  if (first)
    p->status = DEVMM_ENOMEM;
  return 0;
}

/* ---------------------------------------------------------------- section headers */

static devmm__section *new_section(parser *p) {
  devmm__config *c = p->c;
  devmm__section *grown = realloc(c->sections, (c->nsections + 1) * sizeof *grown);
  if (!grown) {
    fail_oom(p);
    return NULL;
  }
  c->sections = grown;
  devmm__section *s = &c->sections[c->nsections++];
  memset(s, 0, sizeof *s);
  s->line = p->line;
  devmm__stack_defaults(&s->stack);
  return s;
}

/* [plugin <name>]: options handed to that plugin's configure() when it loads. */
static void on_plugin_section(parser *p, const char *section, const char *name) {
  while (*name == ' ')
    name++;
  if (!*name) {
    fail(p, p->line, "section [%s]: expected [plugin <name>] with a name from plugins = ...",
         section);
    return;
  }
  for (size_t i = 0; i < p->c->nsections; i++)
    if (p->c->sections[i].plugin && strcmp(p->c->sections[i].plugin, name) == 0) {
      fail(p, p->line, "section [%s] appears twice (first at line %d)", section,
           p->c->sections[i].line);
      return;
    }
  char *copy = devmm__strdup(name);
  devmm__section *s = copy ? new_section(p) : NULL;
  if (!s) {
    free(copy);
    if (!copy)
      fail_oom(p);
    return;
  }
  s->plugin = copy;
  p->cur = s;
}

/* "cuda:0" -> one device; "cuda:*" or "cuda" -> every cuda device; "cpu" -> cpu:0. */
static int parse_device_spec(const char *spec, devmm_device *dev, int *wildcard) {
  char buf[256];
  snprintf(buf, sizeof buf, "%s", spec);
  size_t len = strlen(buf);
  *wildcard = 0;
  if (len >= 2 && strcmp(buf + len - 2, ":*") == 0) {
    buf[len - 2] = '\0';
    *wildcard = 1;
  } else if (!strchr(buf, ':') && strcmp(buf, "cpu") != 0) {
    *wildcard = 1; /* [device cuda] means every cuda device */
  }
  return devmm_device_parse(buf, dev);
}

static void on_device_section(parser *p, const char *name, const char *spec) {
  while (*spec == ' ')
    spec++;
  devmm_device dev;
  int wildcard;
  if (parse_device_spec(spec, &dev, &wildcard) != DEVMM_OK) {
    fail(p, p->line, "section [%s]: %s", name, devmm_last_error());
    return;
  }
  for (size_t i = 0; i < p->c->nsections; i++) {
    const devmm__section *s = &p->c->sections[i];
    if (!s->plugin && s->dev.device_type == dev.device_type && s->wildcard == wildcard &&
        (wildcard || s->dev.device_id == dev.device_id)) {
      fail(p, p->line, "section [%s] appears twice (first at line %d)", name, s->line);
      return;
    }
  }
  if ((p->cur = new_section(p)) == NULL)
    return;
  p->cur->dev = dev;
  p->cur->wildcard = wildcard;
}

/* A section header line "[name]". */
static void on_section(parser *p, const char *name) {
  p->cur = NULL;
  p->in_devmm = 0;
  if (strcmp(name, "devmm") == 0)
    p->in_devmm = 1;
  else if (strncmp(name, "plugin ", 7) == 0)
    on_plugin_section(p, name, name + 7);
  else if (strncmp(name, "device ", 7) == 0)
    on_device_section(p, name, name + 7);
  else
    fail(p, p->line,
         "unknown section [%s]: expected [devmm], [device cpu], [device cuda:N], "
         "[device cuda:*], [device rocm:N], [device rocm:*], [device sim:N] or "
         "[plugin <name>]",
         name);
}

/* ---------------------------------------------------------------- keys */

char *devmm__path_tidy(char *path) {
  char *w = path;
  for (const char *r = path; *r;) {
    if (r[0] == '/' && (r[1] == '/' || (r[1] == '.' && (r[2] == '/' || !r[2])))) {
      r += r[1] == '/' ? 1 : 2; /* drop one "/" or one "/." */
      continue;
    }
    *w++ = *r++;
  }
  *w = '\0';
  while (w - path > 1 && w[-1] == '/')
    *--w = '\0';
  if (w == path) { /* "/." or "//." tidied away entirely: the root */
    path[0] = '/';
    path[1] = '\0';
  }
  return path;
}

/* plugin_path = a, b:c — commas and colons separate entries; relative ones join the file's
 * directory (dropped when there is none); each is tidied (devmm__path_tidy). */
static int on_plugin_path(parser *p, const char *value) {
  char **raw = NULL;
  size_t n = 0;
  int oom = devmm__split_list(value, &raw, &n) != 0;
  for (size_t i = 0; i < n && !oom; i++) {
    char *save = NULL;
    for (char *t = strtok_r(raw[i], ":", &save); t && !oom; t = strtok_r(NULL, ":", &save)) {
      char full[4096];
      if (t[0] == '/')
        snprintf(full, sizeof full, "%s", t);
      else if (p->c->dir)
        snprintf(full, sizeof full, "%s%s%s", p->c->dir, strcmp(p->c->dir, "/") ? "/" : "", t);
      else
        continue;
      oom = append_copy(&p->c->paths, &p->c->npaths, devmm__path_tidy(full)) != 0;
    }
  }
  devmm__free_list(raw, n); /* what was split, even when memory ran out */
  return oom ? fail_oom(p) : 1;
}

static int on_devmm_key(parser *p, const char *key, const char *value) {
  devmm__config *c = p->c;
  if (strcmp(key, "plugins") == 0) {
    devmm__free_list(c->plugins, c->nplugins);
    c->plugins = NULL;
    c->nplugins = 0;
    return devmm__split_list(value, &c->plugins, &c->nplugins) ? fail_oom(p) : 1;
  }
  if (strcmp(key, "plugin_path") == 0)
    return on_plugin_path(p, value);
  if (strcmp(key, "log_level") == 0) {
    c->log_level = devmm__diag_parse_level(value);
    return c->log_level < 0
               ? fail(p, p->line, "bad log_level '%s': expected error, warn, info or debug", value)
               : 1;
  }
  char valid[256];
  devmm__join(devmm_keys, valid, sizeof valid);
  return fail(p, p->line, "unknown key '%s' in [devmm]: valid keys are %s", key, valid);
}

/* A key of a [device ...] or [plugin ...] section: kept (a duplicate is an error); devmm's own
 * device keys are parsed here, once. */
static int on_section_key(parser *p, const char *section, const char *key, const char *value) {
  devmm__section *cur = p->cur;
  for (size_t i = 0; i < cur->nopts; i++)
    if (strcmp(cur->opts[i].key, key) == 0)
      return fail(p, p->line, "key '%s' appears twice in [%s] (first at line %d)", key, section,
                  cur->opts[i].line);
  devmm__kv *g = realloc(cur->opts, (cur->nopts + 1) * sizeof *g);
  if (!g)
    return fail_oom(p);
  cur->opts = g;
  devmm__kv *o = &g[cur->nopts];
  *o = (devmm__kv){.key = devmm__strdup(key), .value = devmm__strdup(value), .line = p->line};
  if (!o->key || !o->value) {
    free(o->key);
    free(o->value);
    return fail_oom(p);
  }
  cur->nopts++;
  int rc = !cur->plugin && devmm__stack_is_devmm_key(key)
               ? devmm__stack_parse_key(p->c->source, o, &cur->stack)
               : DEVMM_OK;
  if (rc) { /* the message names the file and line already */
    snprintf(p->error, sizeof p->error, "%s", devmm_last_error());
    p->failed = 1;
    p->status = rc;
    return 0;
  }
  return 1;
}

static int on_key(void *user, const char *section, const char *key, const char *value) {
  parser *p = user;
  if (p->failed)
    return 0;
  if (!*section)
    return fail(p, p->line, "'%s' outside any section: put it under [devmm] or [device ...]", key);
  if (p->in_devmm)
    return on_devmm_key(p, key, value);
  if (!p->cur)
    return 0; /* the section was refused already */
  return on_section_key(p, section, key, value);
}

/* inih's reader, over the text: fgets' contract (at most num - 1 bytes, up to a newline). */
static char *read_line(char *str, int num, void *stream) {
  parser *p = stream;
  if (p->failed || p->pos >= p->end)
    return NULL;
  const char *nl = memchr(p->pos, '\n', (size_t)(p->end - p->pos));
  size_t len = nl ? (size_t)(nl - p->pos) + 1 : (size_t)(p->end - p->pos), text = len;
  p->line++;
  if (p->line == 1 && text >= 3 && memcmp(p->pos, "\xef\xbb\xbf", 3) == 0) {
    p->pos += 3; /* a UTF-8 byte order mark, as some editors write: accepted (conf/devmm.ini.in) */
    len -= 3, text -= 3;
  }
  if (nl)
    text -= 1 + (text > 1 && nl[-1] == '\r'); /* the line without its end */
  const char *cr = memchr(p->pos, '\r', text);
  if (cr) { /* a CR-only file would be one line: its first section header, the rest ignored */
    fail(p, p->line, "a CR without LF at column %zu: expected LF or CRLF line ends",
         (size_t)(cr - p->pos) + 1);
    return NULL;
  }
  const char *nul = memchr(p->pos, '\0', text);
  if (nul) { /* inih reads C strings: a NUL would cut the line short, silently */
    fail(p, p->line, "a NUL byte at column %zu: expected text (the NUL would cut the value short)",
         (size_t)(nul - p->pos) + 1);
    return NULL;
  }
  if (text > MAX_LINE || text > (size_t)num - 1) {
    fail(p, p->line, "line longer than %d characters", MAX_LINE);
    return NULL;
  }
  size_t copy = len > (size_t)num - 1 ? text : len; /* the end, where it fits */
  memcpy(str, p->pos, copy);
  str[copy] = '\0';
  p->pos += len;
  char *s = str;
  while (*s == ' ' || *s == '\t')
    s++;
  /* An indented line is a line like any other: inih would take it as the previous value's
   * continuation (tests/c/suite_config_answers.c config_inline_comments). */
  memmove(str, s, strlen(s) + 1);
  s = str;
  /* '#' after a space or tab starts a comment, as ';' does in inih (conf/devmm.ini.in says so);
   * inside a word it is the value's */
  for (char *h = s; *s && *s != ';' && *s != '#' && (h = strchr(h + 1, '#')) != NULL;)
    if (h[-1] == ' ' || h[-1] == '\t') {
      h[0] = '\n';
      h[1] = '\0';
      break;
    }
  const char *end = *s == '[' ? strchr(s, ']') : NULL;
  if (*s == '[' && !end) { /* inih skips it: the keys below would be blamed, a line too late */
    size_t n = strcspn(s, ";#\r\n");
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t'))
      n--;
    fail(p, p->line,
         "section header '%.*s' has no closing ']': expected [devmm], [device ...] or "
         "[plugin ...]",
         (int)(n > 200 ? 200 : n), s);
    return NULL;
  }
  if (end) {
    char name[256];
    snprintf(name, sizeof name, "%.*s", (int)(end - s - 1), s + 1);
    const char *rest = end + 1 + strspn(end + 1, " \t\r\n");
    if (*rest && *rest != ';' && *rest != '#') { /* inih would ignore it, keys and all */
      fail(p, p->line, "text after the section header [%s]: expected a new line (or a comment)",
           name);
      return NULL;
    }
    on_section(p, name);
  }
  return str;
}

/* ---------------------------------------------------------------- the whole file */

/* Checks that need the whole file: [plugin X] names a listed plugin; adaptor keys have their
 * adaptor. No plugins = ... means the cpu plugin alone. */
static int finish(devmm__config *c) {
  if (!c->plugins) {
    if (append_copy(&c->plugins, &c->nplugins, "cpu"))
      return devmm_set_error(DEVMM_ENOMEM, "%s: out of memory", c->source);
  }
  for (size_t i = 0; i < c->nsections; i++) {
    devmm__section *s = &c->sections[i];
    int listed = !s->plugin;
    for (size_t j = 0; !listed && j < c->nplugins; j++) /* c->plugins has no NULL at its end */
      listed = strcmp(c->plugins[j], s->plugin) == 0;
    if (!listed)
      return devmm_set_error(DEVMM_ECONFIG,
                             "%s:%d: section [plugin %s]: plugin '%s' is not in plugins = ... "
                             "in [devmm]",
                             c->source, s->line, s->plugin, s->plugin);
    if (!s->plugin && devmm__stack_check_section(c->source, s) != DEVMM_OK)
      return DEVMM_ECONFIG;
  }
  return DEVMM_OK;
}

int devmm__config_parse(const char *text, size_t len, const char *source, const char *dir,
                        devmm__config *out) {
  memset(out, 0, sizeof *out);
  out->log_level = -1;
  out->source = devmm__strdup(source ? source : "(text)");
  out->dir = dir ? devmm__strdup(dir) : NULL;
  if (!out->source || (dir && !out->dir))
    return devmm_set_error(DEVMM_ENOMEM, "out of memory");
  parser p = {.c = out, .text = text, .end = text + len, .pos = text};
  int rc = ini_parse_stream(read_line, &p, on_key, &p);
  if (p.failed)
    return devmm_set_error(p.status, "%s", p.error);
  if (rc > 0)
    return devmm_set_error(DEVMM_ECONFIG,
                           "%s:%d: cannot parse this line: expected '[section]', 'key = value' "
                           "or a comment",
                           out->source, rc);
  if (rc < 0)
    return devmm_set_error(DEVMM_ENOMEM, "%s: out of memory", out->source);
  return finish(out);
}
