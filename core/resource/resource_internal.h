/* core/resource: memory resources (the struct, creation, the checked entry points, forwarding
 * for adaptors), devices as text, resources over function pointers (callback.c), the per-device
 * registry and the out-of-memory explanation (oom.c). Uses core/base only. */
#ifndef DEVMM_RESOURCE_INTERNAL_H
#define DEVMM_RESOURCE_INTERNAL_H

#include "../base/base.h"

struct devmm_resource;

/* A layer's part of an out-of-memory report: resource/oom.c walks the refusing stack from the
 * outermost layer down and calls each layer's hook once; a hook fills what it knows and leaves
 * what an outer layer already filled (a statistics layer's figures replace a limiting layer's,
 * which know no peak). Adaptors set it at creation; oom.c knows no adaptor by name (ADR 34). */
typedef void (*devmm__oom_hook)(struct devmm_resource *self, devmm_oom_report *report);

struct devmm_resource {
  devmm_resource_ops ops; /* copied and normalised: entries past struct_size are NULL */
  void *ctx;
  const void *kind;    /* the ops table given at creation: identifies adaptor types */
  const char *adaptor; /* an adaptor's type name ("statistics", ...), NULL for other resources */
  devmm_resource *upstream;
  devmm__oom_hook oom; /* NULL: the layer adds nothing to an out-of-memory report */
  atomic_long refs;
  devmm_device device;
  unsigned flags;
  char *name;
};

/* Creates an adaptor resource over upstream (retained), named "<prefix>(<upstream name>)". */
int devmm__adaptor_create(const devmm_resource_ops *ops, void *ctx, devmm_resource *upstream,
                          const char *prefix, devmm_resource **out);
/* forward.c: forwarding ops for adaptors: pass the optional operations to the upstream. */
int devmm__forward_mem_info(devmm_resource *self, size_t *f, size_t *t);
int devmm__forward_copy(devmm_resource *self, void *dst, const void *src, size_t bytes,
                        devmm_stream stream);
int devmm__forward_memset(devmm_resource *self, void *dst, int value, size_t bytes,
                          devmm_stream stream);
int devmm__forward_stream_wait(devmm_resource *self, devmm_stream a, devmm_stream b);
int devmm__forward_synchronize(devmm_resource *self, devmm_stream s);
/* 1 if r's memory lives on a device with streams (cuda, cuda_managed, rocm, sim, ...), 0 for
 * host memory (cpu, cuda_host, rocm_host). */
int devmm__has_streams(const devmm_resource *r);
/* Checks that r is an adaptor of the given kind; sets an error naming `what` if not. */
int devmm__check_kind(const devmm_resource *r, const devmm_resource_ops *kind, const char *what);

/* oom.c: completes the message of an allocation refused with DEVMM_ENOMEM (see oom.h), called
 * once by devmm_allocate, the outermost call; returns DEVMM_ENOMEM. */
int devmm__explain_oom(devmm_resource *r, size_t bytes, size_t alignment);

/* callback.c: 0 once devmm_callbacks_disable ran (a front end's hooks must not be called). */
int devmm__callbacks_enabled(void);

/* registry.c: how devmm__registry_replace changes a device's entry. */
typedef enum {
  DEVMM__REGISTRY_CLEAR,   /* remove the entry if it is still `expected` (r unused) */
  DEVMM__REGISTRY_FILL,    /* set r only if the device has none (lazy init: the user's stay) */
  DEVMM__REGISTRY_REPLACE, /* set r whatever the device has (an explicit devmm_init) */
} devmm__registry_mode;
/* Registry update used by init (see devmm__registry_mode). */
int devmm__registry_replace(devmm_device device, devmm_resource *expected, devmm_resource *r,
                            devmm__registry_mode mode);
/* Asked by the registry when a device has no resource: makes sure devmm is initialised (lazily,
 * once) and writes why the device has none into why; returns 1 when it initialised devmm just
 * now (the registry then looks again). The registry knows nothing else of the configuration:
 * config/init.c installs its hook when the library loads. */
typedef int (*devmm__registry_miss_fn)(devmm_device device, char *why, size_t cap);
void devmm__registry_set_miss_hook(devmm__registry_miss_fn fn);
/* 1 if the registry holds a resource for some device of that type (devmm_init asks, before it
 * counts a GPU plugin's devices at their first use only: ADR 38). */
int devmm__registry_has_type(int32_t device_type);
/* A resource of a kind an already loaded plugin offers, loading no plugin: for a kind another
 * process named (an IPC handle's, ADR 40). DEVMM_ENOENT with the message when no loaded plugin
 * offers it; config/ondemand.c installs the hook when the library loads (none: DEVMM_ENOENT). */
typedef int (*devmm__loaded_kind_fn)(const char *kind, int32_t device_id, devmm_resource **out);
void devmm__set_loaded_kind_hook(devmm__loaded_kind_fn fn);
int devmm__create_loaded_kind(const char *kind, int32_t device_id, devmm_resource **out);

#endif
