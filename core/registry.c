/* The per-device registry: a small table of (device, resource) under one mutex. */
#include "internal.h"

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

int devmm_get_current_resource(devmm_device device, devmm_resource **out) {
  if (!out)
    return devmm_set_error(DEVMM_EINVAL, "devmm_get_current_resource: out is NULL");
  if (lookup(device, out))
    return DEVMM_OK;
  return devmm__registry_fallback(device, out);
}

int devmm_set_current_resource(devmm_device device, devmm_resource *r, devmm_resource **previous) {
  devmm_resource *old = NULL;
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
                            int mode) {
  devmm_resource *drop = NULL;
  pthread_mutex_lock(&lock);
  entry *e = find(device);
  if (mode == 0) { /* clear if it is still `expected` */
    if (e && e->resource == expected) {
      drop = e->resource;
      *e = table[--nentries];
    }
  } else if (e) { /* mode 1: only if empty; mode 2: always */
    if (mode == 2) {
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
