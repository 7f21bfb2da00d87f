/* The per-device registry: a small table of (device, resource) under one mutex. On a miss (a get
 * or a set of a device without one) it asks the hook the configuration installed
 * (devmm__registry_set_miss_hook) to initialise devmm and to say why; it calls nothing else outside
 * this file. */
#include "resource_internal.h"

#include <pthread.h>
#include <stdlib.h>

#define MAX_ENTRIES 256

typedef struct {
  devmm_device device;
  devmm_resource *resource;
} entry;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static entry table[MAX_ENTRIES];
static int nentries;

static entry *find(devmm_device d) {
  for (int i = 0; i < nentries; i++)
    if (table[i].device.device_type == d.device_type && table[i].device.device_id == d.device_id)
      return &table[i];
  return NULL;
}

static int lookup(devmm_device device, devmm_resource **out) {
  pthread_mutex_lock(&lock);
  entry *e = find(device);
  *out = e ? devmm_resource_retain(e->resource) : NULL;
  pthread_mutex_unlock(&lock);
  return *out != NULL;
}

static _Atomic(devmm__registry_miss_fn) miss_hook;

void devmm__registry_set_miss_hook(devmm__registry_miss_fn fn) { atomic_store(&miss_hook, fn); }

static _Atomic(devmm__loaded_kind_fn) loaded_kind_hook;

void devmm__set_loaded_kind_hook(devmm__loaded_kind_fn fn) { atomic_store(&loaded_kind_hook, fn); }

int devmm__create_loaded_kind(const char *kind, int32_t device_id, devmm_resource **out) {
  devmm__loaded_kind_fn hook = atomic_load(&loaded_kind_hook);
  *out = NULL;
  return hook ? hook(kind, device_id, out)
              : devmm_set_error(DEVMM_ENOENT, "no loaded plugin offers kind '%.48s'", kind);
}

/* A miss (a get or a set of a device with no entry): the hook may initialise devmm, or count
 * the devices of a plugin that counts on first use; why says what a get then answers. */
static void on_miss(devmm_device device, char *why, size_t cap) {
  devmm__registry_miss_fn hook = atomic_load(&miss_hook);
  if (hook)
    hook(device, why, cap);
}

int devmm_get_current_resource(devmm_device device, devmm_resource **out) {
  if (!out)
    return devmm_set_error(DEVMM_EINVAL, "devmm_get_current_resource: out is NULL");
  if (lookup(device, out))
    return DEVMM_OK;
  char why[DEVMM__MSG_MAX] = "set one with devmm_set_current_resource()";
  /* look again whatever the hook answers: another thread's init may have filled the table
   * between this thread's miss and its hook, which then finds devmm initialised and starts
   * nothing (suite config: config_lazy_init_from_threads_at_once, 3 runs in 100 before) */
  on_miss(device, why, sizeof why);
  if (lookup(device, out))
    return DEVMM_OK;
  char name[32];
  devmm_device_format(device, name, sizeof name);
  return devmm_set_error(DEVMM_ENOENT, "no current resource for device %s: %s", name, why);
}

int devmm_set_current_resource(devmm_device device, devmm_resource *r, devmm_resource **previous) {
  devmm_resource *old = NULL;
  /* a set is a use of the device: with none yet, devmm initialises (and a plugin counts its
   * devices on first use) as at a get's miss, so the previous resource is the configured one,
   * never NULL (suite registry: registry_first_set_returns_the_configured_resource) */
  if (!lookup(device, &old)) {
    char why[DEVMM__MSG_MAX];
    on_miss(device, why, sizeof why);
  }
  devmm_resource_release(old);
  old = NULL;
  pthread_mutex_lock(&lock);
  entry *e = find(device);
  if (e) {
    old = e->resource;
    if (r) {
      e->resource = devmm_resource_retain(r);
    } else {
      *e = table[--nentries];
    }
  } else if (r) {
    if (nentries == MAX_ENTRIES) {
      pthread_mutex_unlock(&lock);
      return devmm_set_error(DEVMM_ENOMEM, "registry: more than %d devices", MAX_ENTRIES);
    }
    table[nentries].device = device;
    table[nentries++].resource = devmm_resource_retain(r);
  }
  pthread_mutex_unlock(&lock);
  if (previous)
    *previous = old;
  else
    devmm_resource_release(old);
  return DEVMM_OK;
}

int devmm__registry_has_type(int32_t device_type) {
  pthread_mutex_lock(&lock);
  int found = 0;
  for (int i = 0; i < nentries && !found; i++)
    found = table[i].device.device_type == device_type;
  pthread_mutex_unlock(&lock);
  return found;
}

void devmm_registry_clear(void) {
  pthread_mutex_lock(&lock);
  int n = nentries;
  entry copy[MAX_ENTRIES];
  for (int i = 0; i < n; i++)
    copy[i] = table[i];
  nentries = 0;
  pthread_mutex_unlock(&lock);
  for (int i = 0; i < n; i++)
    devmm_resource_release(copy[i].resource);
}

int devmm__registry_replace(devmm_device device, devmm_resource *expected, devmm_resource *r,
                            devmm__registry_mode mode) {
  devmm_resource *drop = NULL;
  pthread_mutex_lock(&lock);
  entry *e = find(device);
  if (mode == DEVMM__REGISTRY_CLEAR) {
    if (e && e->resource == expected) {
      drop = e->resource;
      *e = table[--nentries];
    }
  } else if (e) {
    if (mode == DEVMM__REGISTRY_REPLACE) {
      drop = e->resource;
      e->resource = devmm_resource_retain(r);
    }
  } else if (nentries < MAX_ENTRIES) {
    table[nentries].device = device;
    table[nentries++].resource = devmm_resource_retain(r);
  }
  pthread_mutex_unlock(&lock);
  devmm_resource_release(drop);
  return DEVMM_OK;
}
