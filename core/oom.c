/* Out-of-memory explanations (see include/devmm/oom.h). Runs only on the failure path, once, at
 * the outermost call (devmm_allocate): adaptors call their upstream's ops directly, so no layer
 * below builds one. */
#include "internal.h"

#include <stdio.h>
#include <string.h>

static _Thread_local unsigned last_seq;
static _Thread_local int last_set;

static void human(char *buf, size_t cap, double v) {
  const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int i = 0;
  while (v >= 1024 && i < 5)
    v /= 1024, i++;
  snprintf(buf, cap, i ? "%.2f %s" : "%.0f %s", v, u[i]);
}

/* Where an allocation came from: the innermost line of its context, else its first C frame. */
static void where_of(devmm_resource *tr, const devmm_allocation_info *i, char *buf, size_t cap) {
  buf[0] = '\0';
  if (i->tag) {
    char text[1024];
    devmm__tracking_describe_tag(tr, i->tag, text, sizeof text);
    size_t n = strcspn(text, "\n");
    snprintf(buf, cap, "%.*s", (int)n, text);
  }
  if (!buf[0] && i->nframes)
    devmm_frame_describe(i->frames[0], buf, cap);
}

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

  devmm_resource *stats = NULL, *lim = NULL, *tr = NULL;
  for (devmm_resource *a = r; a; a = a->upstream) {
    devmm_statistics s;
    size_t used, limit;
    if (!stats && devmm__statistics_peek(a, &s) == DEVMM_OK) {
      stats = a;
      o->current_bytes = s.current_bytes;
      o->peak_bytes = s.peak_bytes;
    } else if (!lim && devmm__limiting_peek(a, &used, &limit) == DEVMM_OK) {
      lim = a;
    } else if (!tr && devmm__is_tracking(a)) {
      tr = a;
    }
  }
  if (stats) {
    snprintf(o->counted_by, sizeof o->counted_by, "%s", stats->name);
  } else if (lim) {
    size_t used, limit;
    devmm__limiting_peek(lim, &used, &limit);
    o->current_bytes = (int64_t)used;
    snprintf(o->counted_by, sizeof o->counted_by, "%s", lim->name);
  }
  size_t f, t;
  if (devmm_mem_info(r, &f, &t) == DEVMM_OK) {
    o->free_bytes = (int64_t)f;
    o->total_bytes = (int64_t)t;
  }
  devmm_allocation_info big[DEVMM_OOM_LARGEST];
  if (tr) {
    snprintf(o->tracking, sizeof o->tracking, "%s", tr->name);
    o->nlargest =
        devmm__tracking_largest(tr, big, DEVMM_OOM_LARGEST, &o->live_count, &o->live_bytes);
    for (size_t i = 0; i < o->nlargest; i++) {
      o->largest[i].ptr = big[i].ptr;
      o->largest[i].bytes = big[i].bytes;
      o->largest[i].thread_id = big[i].thread_id;
      where_of(tr, &big[i], o->largest[i].where, sizeof o->largest[i].where);
    }
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
  human(h1, sizeof h1, (double)bytes);
  PUT("%s\n  request: %s (%zu bytes) on %s through %s", o->reason, h1, bytes, dev, r->name);
  if (alignment)
    PUT(", alignment %zu", alignment);
  if (stats) {
    human(h1, sizeof h1, (double)o->current_bytes);
    human(h2, sizeof h2, (double)o->peak_bytes);
    PUT("\n  devmm on %s: %s in use, peak %s (counted by %s)", dev, h1, h2, stats->name);
  } else if (lim) {
    human(h1, sizeof h1, (double)o->current_bytes);
    PUT("\n  devmm on %s: %s in use through %s (peak unknown: no statistics adaptor in the "
        "stack)",
        dev, h1, lim->name);
  } else {
    PUT("\n  devmm on %s: not counted (no statistics adaptor in the stack)", dev);
  }
  if (o->total_bytes >= 0) {
    human(h1, sizeof h1, (double)o->free_bytes);
    human(h2, sizeof h2, (double)o->total_bytes);
    PUT("\n  device: %s free of %s", h1, h2);
  } else {
    PUT("\n  device: free and total memory unknown (the stack has no mem_info)");
  }
  if (tr) {
    human(h1, sizeof h1, (double)o->live_bytes);
    PUT("\n  largest live allocations (%s: %zu live, %s):", tr->name, o->live_count, h1);
    for (size_t i = 0; i < o->nlargest; i++) {
      const devmm_oom_allocation *a = &o->largest[i];
      human(h1, sizeof h1, (double)a->bytes);
      PUT("\n    %s at %p", h1, a->ptr);
      if (a->thread_id)
        PUT("  thread %llu", (unsigned long long)a->thread_id);
      PUT("  %s", a->where[0] ? a->where : "(no stack recorded)");
    }
    if (!o->nlargest)
      PUT(" none");
  } else {
    PUT("\n  (a tracking adaptor in the stack would list the largest live allocations)");
  }
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
