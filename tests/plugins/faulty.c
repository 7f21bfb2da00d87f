/* Test plugins that fail in one way each, chosen by -DFAULT=... at build time:
 *   FAULT_NONE        a working plugin "faulty" with kind faulty.heap on cpu:0
 *   FAULT_ABI_MAJOR   descriptor says ABI 99.0
 *   FAULT_ABI_MINOR   descriptor says ABI 1.99 (newer than the host)
 *   FAULT_NO_ENTRY    no devmm_plugin_entry symbol at all
 *   FAULT_INIT        entry fails (returns NULL after set_error)
 *   FAULT_FACTORY     the factory returns an error
 *   FAULT_FACTORY_NULL the factory returns DEVMM_OK but no resource
 *   FAULT_DUP_KINDS   two kinds with the same name
 *   FAULT_NO_DEVICES  device_count fails with a reason
 *   FAULT_NEXT_MINOR  descriptor says ABI major.(host minor + 1): one minor newer than the host
 *   FAULT_INCOMPLETE  descriptor with device_count but without device_info
 *   FAULT_KIND_NAME   a kind named aaa.heap (not <plugin>.<kind>)
 *   FAULT_KIND_NO_FACTORY a kind without a factory
 *   FAULT_OLD_KINDS   built with an older, shorter devmm_resource_kind and devmm_plugin (ABI 1.0
 *                     as first drafted: no option_help, no options/configure): two kinds
 *   FAULT_KINDS_ONLY  no device_count/device_info: it only adds a kind for cpu:0
 *   FAULT_SHUTDOWN    a shutdown hook that appends "shutdown\n" to the file named by its
 *                     [plugin shutdownrec] option record = PATH
 *   FAULT_FACTORY_NAMED the factory fails with a message that already starts with the kind
 *   FAULT_KIND_NULL   a NULL pointer in the kinds array
 *   FAULT_KIND_SIZE   a kind whose struct_size is 8 (no kind is that small)
 *   FAULT_FACTORY_SILENT the factory returns DEVMM_EDEVICE without setting a message
 * Each is built as devmm-<variant>.so under tests/plugins in the build tree. */
#include <devmm/plugin.h>

#include <stddef.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FAULT_NONE 0
#define FAULT_ABI_MAJOR 1
#define FAULT_ABI_MINOR 2
#define FAULT_NO_ENTRY 3
#define FAULT_INIT 4
#define FAULT_FACTORY 5
#define FAULT_FACTORY_NULL 6
#define FAULT_DUP_KINDS 7
#define FAULT_NO_DEVICES 8
#define FAULT_NEXT_MINOR 9
#define FAULT_INCOMPLETE 10
#define FAULT_KIND_NAME 11
#define FAULT_KIND_NO_FACTORY 12
#define FAULT_OLD_KINDS 13
#define FAULT_KINDS_ONLY 14
#define FAULT_SHUTDOWN 15
#define FAULT_FACTORY_NAMED 16
#define FAULT_KIND_NULL 17
#define FAULT_KIND_SIZE 18
#define FAULT_FACTORY_SILENT 19

#ifndef FAULT /* Meson passes both; these defaults only serve tools that read the file alone */
#define FAULT FAULT_NONE
#endif
#ifndef PLUGIN_NAME
#define PLUGIN_NAME "faulty"
#endif

static const devmm_host_services *host;

static int heap_alloc(devmm_resource *self, size_t b, size_t a, devmm_stream s, void **out) {
  (void)self, (void)a, (void)s;
  *out = malloc(b);
  return *out ? DEVMM_OK : host->set_error(DEVMM_ENOMEM, PLUGIN_NAME ": malloc failed");
}
static int heap_free(devmm_resource *self, void *p, size_t b, size_t a, devmm_stream s) {
  (void)self, (void)b, (void)a, (void)s;
  free(p);
  return DEVMM_OK;
}
static const devmm_resource_ops heap_ops = {sizeof heap_ops, heap_alloc, heap_free};

__attribute__((unused)) /* not by every variant */
static int
create(const devmm_host_services *h, int32_t id, const devmm_option *o, size_t n,
       devmm_resource **out) {
  (void)o, (void)n, (void)id, (void)out;
#if FAULT == FAULT_FACTORY
  return h->set_error(DEVMM_EDEVICE, "simulated factory failure");
#elif FAULT == FAULT_FACTORY_NAMED
  return h->set_error(DEVMM_EDEVICE, PLUGIN_NAME ".heap: simulated factory failure");
#elif FAULT == FAULT_FACTORY_SILENT
  (void)h;
  return DEVMM_EDEVICE;
#elif FAULT == FAULT_FACTORY_NULL
  (void)h;
  *out = NULL;
  return DEVMM_OK;
#else
  /* option flag = <boolean>, parsed by the host's parse_bool, shows in the name */
  char name[64] = PLUGIN_NAME ".heap";
  for (size_t i = 0; i < n; i++) {
    int b;
    size_t size;
    if (strcmp(o[i].key, "size") == 0) { /* refused as a vendor may: DEVMM_ECONFIG */
      if (h->parse_size(o[i].value, 0, &size) == DEVMM_OK)
        continue;
      char why[256];
      snprintf(why, sizeof why, "%s", h->last_error());
      return h->set_error(DEVMM_ECONFIG, PLUGIN_NAME ".heap: size: %s", why);
    }
    if (h->parse_bool(o[i].value, &b) != DEVMM_OK)
      return DEVMM_EINVAL; /* the host's message says why */
    snprintf(name, sizeof name, PLUGIN_NAME ".heap(flag=%d)", b);
  }
  devmm_device cpu = {DEVMM_DEVICE_CPU, 0};
  return h->resource_create(&heap_ops, NULL, cpu, name,
                            DEVMM_RESOURCE_THREAD_SAFE | DEVMM_RESOURCE_HOST_ACCESSIBLE, out);
#endif
}

__attribute__((unused)) static int device_count(size_t *n) {
#if FAULT == FAULT_NO_DEVICES
  *n = 0;
  return host->set_error(DEVMM_EDEVICE, "simulated: no device present");
#else
  *n = 1;
  return DEVMM_OK;
#endif
}

__attribute__((unused)) static int device_info(size_t i, devmm_device_info *out) {
  (void)i;
  out->device = (devmm_device){DEVMM_DEVICE_CPU, 0};
  strcpy(out->name, "test CPU");
  return DEVMM_OK;
}

__attribute__((unused)) static const char *const options[] = {"flag", "size", NULL};
__attribute__((unused)) static const char *const options_help[] = {"a boolean shown in the name",
                                                                   "a size (refused if bad)", NULL};

#if FAULT == FAULT_OLD_KINDS
/* What a plugin compiled against a shorter devmm_resource_kind has: ABI 1.0's first fields
 * only, so its array of kinds has a smaller stride than the host's struct. */
typedef struct old_kind {
  size_t struct_size;
  const char *name, *description;
  int32_t device_type;
  const char *const *options;
  int (*create)(const devmm_host_services *, int32_t, const devmm_option *, size_t,
                devmm_resource **);
} old_kind;
/* laid out as the old ABI's array would be: tests/c/suite_plugins.c reads it by the new stride */
DEVMM_PLUGIN_EXPORT const old_kind devmm_test_old_kinds[3] = {
    {sizeof(old_kind), PLUGIN_NAME ".heap", "the first kind", DEVMM_DEVICE_CPU, options, create},
    {sizeof(old_kind), PLUGIN_NAME ".second", "the second kind", DEVMM_DEVICE_CPU, NULL, create},
    {sizeof(old_kind), PLUGIN_NAME ".third", "a guard: keeps an old-stride read in bounds",
     DEVMM_DEVICE_CPU, NULL, create},
};
static const devmm_resource_kind *const kinds[] = {
    (const devmm_resource_kind *)&devmm_test_old_kinds[0],
    (const devmm_resource_kind *)&devmm_test_old_kinds[1]};
#else
#if FAULT == FAULT_KIND_NAME
static const devmm_resource_kind kind0 = {sizeof(devmm_resource_kind),
                                          "aaa.heap",
                                          "a kind named after another plugin",
                                          DEVMM_DEVICE_CPU,
                                          NULL,
                                          create,
                                          NULL};
#elif FAULT == FAULT_KIND_SIZE
static const devmm_resource_kind kind0 = {
    8, PLUGIN_NAME ".heap", "too small", DEVMM_DEVICE_CPU, NULL, create, NULL};
#elif FAULT == FAULT_KIND_NO_FACTORY
static const devmm_resource_kind kind0 = {sizeof(devmm_resource_kind),
                                          PLUGIN_NAME ".heap",
                                          "no factory",
                                          DEVMM_DEVICE_CPU,
                                          NULL,
                                          NULL,
                                          NULL};
#else
static const devmm_resource_kind kind0 = {
    .struct_size = sizeof(devmm_resource_kind),
    .name = PLUGIN_NAME ".heap",
    .description = "malloc for tests",
    .device_type = DEVMM_DEVICE_CPU,
    .options = options,
    .create = create,
    .option_help = options_help,
};
#endif
#if FAULT == FAULT_DUP_KINDS
static const devmm_resource_kind kind1 = {sizeof(devmm_resource_kind),
                                          PLUGIN_NAME ".heap",
                                          "the same name again",
                                          DEVMM_DEVICE_CPU,
                                          NULL,
                                          create,
                                          NULL};
static const devmm_resource_kind *const kinds[] = {&kind0, &kind1};
#elif FAULT == FAULT_KIND_NULL
static const devmm_resource_kind *const kinds[] = {&kind0, NULL};
#else
static const devmm_resource_kind *const kinds[] = {&kind0};
#endif
#endif

#if FAULT == FAULT_SHUTDOWN
static char record[1024];
static const char *const plugin_options[] = {"record", NULL};
static int configure(const devmm_option *o, size_t n) {
  for (size_t i = 0; i < n; i++)
    snprintf(record, sizeof record, "%s", o[i].value);
  return DEVMM_OK;
}
static void shutdown_hook(void) {
  FILE *f = *record ? fopen(record, "a") : NULL;
  if (f) {
    fputs("shutdown\n", f);
    fclose(f);
  }
}
#endif

static const devmm_plugin descriptor = {
#if FAULT == FAULT_ABI_MAJOR
    99,
    0,
#elif FAULT == FAULT_ABI_MINOR
    DEVMM_PLUGIN_ABI_MAJOR,
    99,
#elif FAULT == FAULT_NEXT_MINOR
    DEVMM_PLUGIN_ABI_MAJOR,
    DEVMM_PLUGIN_ABI_MINOR + 1,
#else
    DEVMM_PLUGIN_ABI_MAJOR,
    DEVMM_PLUGIN_ABI_MINOR,
#endif
#if FAULT == FAULT_OLD_KINDS /* a descriptor that ends at shutdown: no options, no configure */
    offsetof(devmm_plugin, shutdown) + sizeof(void (*)(void)),
#else
    sizeof(devmm_plugin),
#endif
    PLUGIN_NAME,
    "0.0.1",
    "a test plugin",
#if FAULT == FAULT_INCOMPLETE
    device_count,
    NULL,
#elif FAULT == FAULT_KINDS_ONLY
    NULL,
    NULL,
#else
    device_count,
    device_info,
#endif
    sizeof kinds / sizeof kinds[0],
    kinds,
#if FAULT == FAULT_SHUTDOWN
    shutdown_hook,
    plugin_options,
    configure,
#else
    NULL,
    NULL,
    NULL,
#endif
};

#if FAULT != FAULT_NO_ENTRY
DEVMM_PLUGIN_EXPORT const devmm_plugin *devmm_plugin_entry(uint32_t major, uint32_t minor,
                                                           const devmm_host_services *h) {
  (void)major, (void)minor;
  host = h;
#if FAULT == FAULT_INIT
  (void)&descriptor;
  h->set_error(DEVMM_EPLUGIN, "simulated init failure");
  return NULL;
#else
  return &descriptor;
#endif
}
#else
DEVMM_PLUGIN_EXPORT const devmm_plugin *not_the_entry(void) { return &descriptor; }
#endif
