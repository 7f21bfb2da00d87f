/* Out-of-memory explanations (see include/devmm/oom.h). Runs only on the failure path, once, at
 * the outermost call (devmm_allocate): adaptors call their upstream's ops directly, so no layer
 * below builds one. Each layer of the stack fills its part of the report through its
 * devmm__oom_hook (resource_internal.h); this file knows no adaptor (ADR 34). */
#include "resource_internal.h"

#include <stdio.h>
#include <string.h>

static _Thread_local unsigned last_seq;
static _Thread_local int last_set;

int devmm__explain_oom(devmm_resource *r, size_t bytes, size_t alignment) {
  devmm_oom_report local = {0}, *kept = devmm__thread_heap(DEVMM__HEAP_OOM, sizeof local);
  devmm_oom_report *o = kept ? kept : &local; /* out of host memory: explained, not kept */
  memset(o, 0, sizeof *o);
  o->struct_size = sizeof *o;
  o->device = r->device;
  o->requested_bytes = bytes;
  o->alignment = alignment;
  snprintf(o->stack, sizeof o->stack, "%s", r->name);
  snprintf(o->reason, sizeof o->reason, "%s",
           *devmm_last_error() ? devmm_last_error() : "out of memory");
  o->current_bytes = o->peak_bytes = o->free_bytes = o->total_bytes = -1;

  /* each layer adds what it knows (resource_internal.h: devmm__oom_hook), outermost first */
  for (devmm_resource *a = r; a; a = a->upstream)
    if (a->oom)
      a->oom(a, o);
  size_t f, t;
  if (devmm_mem_info(r, &f, &t) == DEVMM_OK) {
    o->free_bytes = (int64_t)f;
    o->total_bytes = (int64_t)t;
  }

  /* the message: the refusing layer's reason first, then the figures */
  char msg[DEVMM__LONG_MSG_MAX], dev[32], h1[32], h2[32];
  size_t n = 0;
#define PUT(...)                                                                                   \
  do {                                                                                             \
    int k_ = snprintf(msg + n, sizeof msg - n, __VA_ARGS__);                                       \
    if (k_ > 0)                                                                                    \
      n = n + (size_t)k_ < sizeof msg ? n + (size_t)k_ : sizeof msg - 1;                           \
  } while (0)
  devmm_device_format(r->device, dev, sizeof dev);
#define SIZE(buf, v) devmm_format_size((double)(v), 2, buf, sizeof buf)
  SIZE(h1, bytes);
  PUT("%s\n  request: %s (%zu bytes) on %s through %s", o->reason, h1, bytes, dev, r->name);
  if (alignment)
    PUT(", alignment %zu", alignment);
  if (o->peak_bytes >= 0) { /* a statistics layer counted */
    SIZE(h1, o->current_bytes);
    SIZE(h2, o->peak_bytes);
    PUT("\n  devmm on %s: %s in use, peak %s (counted by %s)", dev, h1, h2, o->counted_by);
  } else if (o->counted_by[0]) { /* a layer that knows what is in use, not the peak */
    SIZE(h1, o->current_bytes);
    PUT("\n  devmm on %s: %s in use through %s (peak unknown: no statistics adaptor in the "
        "stack)",
        dev, h1, o->counted_by);
  } else {
    PUT("\n  devmm on %s: not counted (no statistics adaptor in the stack)", dev);
  }
  if (o->total_bytes >= 0) {
    SIZE(h1, o->free_bytes);
    SIZE(h2, o->total_bytes);
    PUT("\n  device: %s free of %s", h1, h2);
  } else {
    PUT("\n  device: free and total memory unknown (the stack has no mem_info)");
  }
  if (o->tracking[0]) {
    SIZE(h1, o->live_bytes);
    PUT("\n  largest live allocations (%s: %zu live, %s):", o->tracking, o->live_count, h1);
    int unrecorded = 0;
    for (size_t i = 0; i < o->nlargest; i++) {
      const devmm_oom_allocation *a = &o->largest[i];
      SIZE(h1, a->bytes);
      PUT("\n    %s at %p", h1, a->ptr);
      if (a->thread_id)
        PUT("  thread %llu", (unsigned long long)a->thread_id);
      PUT("  %s", a->where[0] ? a->where : "(no stack recorded)");
      unrecorded |= !a->where[0];
    }
    if (!o->nlargest)
      PUT(" none");
    else if (unrecorded) /* how to get them (suite oom: oom_largest_ties_by_address) */
      PUT("\n  (no stacks recorded: backtraces = true in devmm.ini, or "
          "TrackingAdaptor(python_stack=N) in Python, records where each was made)");
  } else {
    PUT("\n  (a tracking adaptor in the stack would list the largest live allocations)");
  }
#undef SIZE
#undef PUT
  devmm__set_error_text(DEVMM_ENOMEM, msg);
  last_seq = devmm__error_seq();
  last_set = kept != NULL;
  return DEVMM_ENOMEM;
}

int devmm_last_oom(devmm_oom_report *out) {
  if (!out)
    return devmm_set_error(DEVMM_EINVAL, "devmm_last_oom: out is NULL");
  if (out->struct_size < offsetof(devmm_oom_report, device))
    return devmm_set_error(DEVMM_EINVAL,
                           "devmm_last_oom: out->struct_size %zu: set it to "
                           "sizeof(devmm_oom_report)",
                           out->struct_size);
  const devmm_oom_report *last = devmm__thread_heap(DEVMM__HEAP_OOM, sizeof *last);
  if (!last_set || !last || last_seq != devmm__error_seq())
    return devmm_set_error(DEVMM_ENOENT, "devmm_last_oom: this thread's last error is not an "
                                         "allocation refused for lack of memory");
  size_t n = out->struct_size < sizeof *last ? out->struct_size : sizeof *last;
  memcpy(out, last, n);
  out->struct_size = n;
  return DEVMM_OK;
}
