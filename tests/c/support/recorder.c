/* The recording resource (recorder.h). */
#include "recorder.h"

#include <stdlib.h>

#define REC(self) ((recorder *)devmm_resource_context(self))
#define REC_RESULT(self, what)                                                                     \
  (REC(self)->fail ? devmm_set_error(DEVMM_EIO, "recorder: " what " failed") : DEVMM_OK)

static int rec_alloc(devmm_resource *self, size_t b, size_t a, devmm_stream s, void **o) {
  (void)self, (void)a, (void)s;
  *o = malloc(b);
  return *o ? DEVMM_OK : DEVMM_ENOMEM;
}
static int rec_free(devmm_resource *self, void *p, size_t b, size_t a, devmm_stream s) {
  (void)self, (void)b, (void)a, (void)s;
  free(p);
  return DEVMM_OK;
}
static int rec_mem_info(devmm_resource *self, size_t *f, size_t *t) {
  REC(self)->mem_info++;
  *f = 111, *t = 222;
  return REC_RESULT(self, "mem_info");
}
static int rec_copy(devmm_resource *self, void *d, const void *s, size_t n, devmm_stream st) {
  recorder *r = REC(self);
  r->copy++, r->dst = d, r->src = s, r->bytes = n, r->a = st;
  return REC_RESULT(self, "copy");
}
static int rec_memset(devmm_resource *self, void *d, int v, size_t n, devmm_stream st) {
  recorder *r = REC(self);
  r->memset++, r->dst = d, r->value = v, r->bytes = n, r->a = st;
  return REC_RESULT(self, "memset");
}
static int rec_stream_wait(devmm_resource *self, devmm_stream a, devmm_stream b) {
  recorder *r = REC(self);
  r->stream_wait++, r->a = a, r->b = b;
  return REC_RESULT(self, "stream_wait");
}
static int rec_synchronize(devmm_resource *self, devmm_stream s) {
  recorder *r = REC(self);
  r->synchronize++, r->a = s;
  return REC_RESULT(self, "synchronize");
}
const devmm_resource_ops recorder_ops = {sizeof recorder_ops, rec_alloc,       rec_free,
                                         rec_mem_info,        rec_copy,        rec_memset,
                                         rec_stream_wait,     rec_synchronize, NULL};
