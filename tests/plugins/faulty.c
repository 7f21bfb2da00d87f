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
 *   FAULT_INCOMPLETE  descriptor without device_count
 *   FAULT_KIND_NAME   a kind named aaa.heap (not <plugin>.<kind>)
 *   FAULT_KIND_NO_FACTORY a kind without a factory
 * Each is built as devmm-<variant>.so under tests/plugins in the build tree. */
#include <devmm/plugin.h>

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

static int device_info(size_t i, devmm_device_info *out) {
  (void)i;
  out->device = (devmm_device){DEVMM_DEVICE_CPU, 0};
  strcpy(out->name, "test CPU");
  return DEVMM_OK;
}

__attribute__((unused)) static const char *const options[] = {"flag", "size", NULL};

static const devmm_resource_kind kinds[] = {
#if FAULT == FAULT_KIND_NAME
    {sizeof(devmm_resource_kind), "aaa.heap", "a kind named after another plugin", DEVMM_DEVICE_CPU,
     NULL, create},
#elif FAULT == FAULT_KIND_NO_FACTORY
    {sizeof(devmm_resource_kind), PLUGIN_NAME ".heap", "no factory", DEVMM_DEVICE_CPU, NULL, NULL},
#else
    {sizeof(devmm_resource_kind), PLUGIN_NAME ".heap", "malloc for tests", DEVMM_DEVICE_CPU,
     options, create},
#endif
#if FAULT == FAULT_DUP_KINDS
    {sizeof(devmm_resource_kind), PLUGIN_NAME ".heap", "the same name again", DEVMM_DEVICE_CPU,
     NULL, create},
#endif
};

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
    sizeof(devmm_plugin),
    PLUGIN_NAME,
    "0.0.1",
    "a test plugin",
#if FAULT == FAULT_INCOMPLETE
    NULL,
#else
    device_count,
#endif
    device_info,
    sizeof kinds / sizeof kinds[0],
    kinds,
    NULL,
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
