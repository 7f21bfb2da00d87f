/* core/config: devmm.ini to devices with stacks (ADR 28). Uses core/plugin_host, core/adaptors
 * and the layers below; nothing below uses it (the registry and the host services ask through
 * hooks init.c installs).
 *   parse.c     devmm.ini text -> devmm__config (pure: no globals, no I/O, fuzzable)
 *   stack.c     the one table of adaptors and their keys; checking a section against its kind;
 *               building one device's stack
 *   lookup.c    finding and reading the file, the plugin path
 *   init.c      devmm_init/devmm_shutdown, lazy init, the device_total service
 *   ondemand.c  loading a kind's plugin on demand (devmm_resource_create_kind)
 *   info.c      introspection (plugins, devices, kinds, warnings) and the JSON document */
#ifndef DEVMM_CONFIG_INTERNAL_H
#define DEVMM_CONFIG_INTERNAL_H

#include "../plugin_host/plugin_host_internal.h"

#include <pthread.h>

/* ================================================================ the parsed file */

typedef struct {
  char *key, *value;
  int line;
} devmm__kv;

/* What a device section says about its stack, parsed once by parse.c through the table
 * in stack.c. Strings point into the section's options. */
#define DEVMM__MAX_ADAPTORS 32
typedef struct {
  unsigned char adaptor[DEVMM__MAX_ADAPTORS]; /* indices into the adaptor table, in order */
  size_t nadaptors;
  int has_limit;
  devmm__size_spec limit;
  const char *limit_text;
  int sharded, backtraces, log_flush;
  const char *log_file; /* NULL: stderr */
  size_t alignment, alignment_threshold;
  size_t history; /* tracking: events kept (0: none) */
} devmm__stack_values;

typedef struct {
  devmm_device dev;
  int wildcard, line;
  devmm__kv *opts;
  size_t nopts;
  char *plugin; /* [plugin <name>]: the plugin's own options (dev and stack are then unused) */
  devmm__stack_values stack;
} devmm__section;

typedef struct {
  char *source; /* the file, or "built-in default" */
  char *dir;    /* its directory, absolute (relative plugin_path entries start there); or NULL */
  char **plugins;
  size_t nplugins;
  char **paths; /* plugin_path, absolute when dir is set (relative entries dropped otherwise) */
  size_t npaths;
  int log_level; /* -1: not set */
  devmm__section *sections;
  size_t nsections;
} devmm__config;

/* parse.c: parses len bytes of devmm.ini text (no NUL needed) named `source` in messages,
 * relative plugin_path entries joined to dir (NULL: dropped). Fills *out (freed with
 * devmm__config_free, also on failure); returns DEVMM_OK, DEVMM_ECONFIG with
 * "source:line: ..." or DEVMM_ENOMEM. Plugin-dependent checks (kinds, their options) come later,
 * in stack.c. */
int devmm__config_parse(const char *text, size_t len, const char *source, const char *dir,
                        devmm__config *out);
void devmm__config_free(devmm__config *c);
/* The option `key` of a section (NULL if absent or sec is NULL). */
const devmm__kv *devmm__section_opt(const devmm__section *sec, const char *key);
/* Tidies an absolute path in place, as written, without touching the file system: "//" and
 * "/./" become "/", a trailing "/." or "/" goes ("/" stays "/"). ".." is kept: only the file
 * system knows what it means under a link. Returns path. */
char *devmm__path_tidy(char *path);
/* Splits "a, b ,c" into a new array of trimmed strings (blank items skipped); -1 if out of
 * memory (what was split so far is in *out). */
int devmm__split_list(const char *text, char ***out, size_t *n);
void devmm__free_list(char **list, size_t n);
/* 1 if s is in the NULL-terminated list. */
int devmm__in_list(const char *const *list, const char *s);
/* list joined with ", " into buf. */
void devmm__join(const char *const *list, char *buf, size_t cap);

/* ================================================================ the adaptor table */

/* stack.c: 1 if key is one devmm reads in a device section (resource, adaptors, an adaptor's
 * key, bare or as <adaptor>.<key>); a bare adaptor key the section's kind also declares reaches
 * its factory too (devmm__check_section sorts out whose it is). */
int devmm__stack_is_devmm_key(const char *key);
/* Parses one devmm key of a device section into *v (o->line for messages); DEVMM_ECONFIG with
 * "source:line: ..." if the value is bad. A bare adaptor key waits for the whole section. */
int devmm__stack_parse_key(const char *source, const devmm__kv *o, devmm__stack_values *v);
/* After the whole section: parses the bare adaptor keys of listed adaptors; a limiting adaptor
 * needs a limit. (An adaptor key without its adaptor is checked against the kind, later.) */
int devmm__stack_check_section(const char *source, devmm__section *sec);
void devmm__stack_defaults(devmm__stack_values *v);

/* ================================================================ the built state */

typedef struct {
  devmm_device_info info;
  devmm__plugin *plugin;
  devmm_resource *resource; /* NULL if it could not be built */
  char *stack, *error;
  int file_error; /* error is the file's (file:line), found when the device was counted */
} devmm__dstate;

typedef struct {
  devmm__config c;
  char **dirs; /* the plugin path as this init resolved it (absolute, NULL-terminated) */
  size_t ndirs;
  devmm__plugin **plugins;
  size_t nplugins;
  devmm__dstate *devices;
  size_t ndevices;
  char **warnings; /* "source:line: ..." said when built (devmm_config_warning); under state_lock */
  size_t nwarnings;
} devmm__state;

/* kinds.c: the kind `name` among the state's loaded plugins (and its plugin). */
const devmm_resource_kind *devmm__find_kind(devmm__state *s, const char *name,
                                            devmm__plugin **owner);
/* Appends the kind names of plugin d (NULL: none) to the ", "-separated list in buf. */
void devmm__append_kinds(char *buf, size_t cap, const devmm_plugin *d);
/* kinds.c: the file's error for resource = ... (res) naming no loaded kind: a quoted value, a
 * case mismatch, no such plugin in plugins = ..., or the kinds its plugin offers. DEVMM_OK when
 * its plugin failed to load (said with the plugin). */
int devmm__unknown_kind(devmm__state *s, const devmm__kv *res);
/* Checks a section's resource and its factory options against the kind (when loaded). */
int devmm__check_section(devmm__state *s, const devmm__section *sec);
/* Builds one device's stack. A file error (a bad option value) is returned; a runtime failure
 * is recorded in ds->error and returns DEVMM_OK. */
int devmm__build_device(devmm__state *s, devmm__dstate *ds);
/* info.c: warns (and keeps in s->warnings, taking lock while it appends) about each [device T:N]
 * section naming a device no loaded plugin has, for the device types whose devices are all
 * counted (type -1: every type; a lazy type is checked once it is counted). */
void devmm__warn_unused_sections(devmm__state *s, int32_t type, pthread_mutex_t *lock);

/* init.c: the current state, under its lock (init_lock, then state_lock, never the reverse);
 * NULL before init. devmm__state_lock returns it locked; unlock when done. */
devmm__state *devmm__state_lock(void);
void devmm__state_unlock(void);
/* init.c: one devmm_init at a time (ondemand.c adds a plugin to the state under it). */
void devmm__init_lock(void);
void devmm__init_unlock(void);
/* init.c: the state this thread is building (or, in ondemand.c, the current one while it holds
 * state_lock), which host->device_total then reads without taking a lock; NULL when done. */
void devmm__state_building(devmm__state *s);

/* lookup.c: reads the configuration at path (NULL: DEVMM_CONFIG, XDG, the installed one, else
 * the built-in default) into *c; DEVMM_ECONFIG/DEVMM_EIO with the message on failure. */
int devmm__config_load(const char *path, devmm__config *c);
/* lookup.c: the len bytes of devmm.ini text into *c, named name in messages ("<ini text>" if
 * NULL); relative plugin_path entries start at the working directory (devmm_init_text). */
int devmm__config_load_text(const char *text, size_t len, const char *name, devmm__config *c);
/* lookup.c: the plugin path (DEVMM_PLUGIN_PATH from the working directory now, plugin_path, the
 * installed directory): a new NULL-terminated list (free with devmm__free_list), or NULL with
 * the error set. */
char **devmm__plugin_dirs(const devmm__config *c, size_t *n);
/* Initialises lazily (once) if devmm_init has not run; logs a failure and returns its status. */
int devmm__ensure_init(void);
/* init.c: devmm__ensure_init, then counts the devices of every plugin that counts them on first
 * use, and builds their stacks (ADR 38): what a question about every device needs (info.c). */
void devmm__ensure_devices(void);

#endif
