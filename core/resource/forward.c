/* The forwarding operations adaptors use for what they do not change: each passes the call to
 * the adaptor's upstream through the checked entry points. */
#include "resource_internal.h"

int devmm__forward_mem_info(devmm_resource *self, size_t *f, size_t *t) {
  return devmm_mem_info(self->upstream, f, t);
}
int devmm__forward_copy(devmm_resource *self, void *dst, const void *src, size_t bytes,
                        devmm_stream stream) {
  return devmm_copy(self->upstream, dst, src, bytes, stream);
}
int devmm__forward_memset(devmm_resource *self, void *dst, int value, size_t bytes,
                          devmm_stream stream) {
  return devmm_memset(self->upstream, dst, value, bytes, stream);
}
int devmm__forward_stream_wait(devmm_resource *self, devmm_stream a, devmm_stream b) {
  return devmm_stream_wait(self->upstream, a, b);
}
int devmm__forward_synchronize(devmm_resource *self, devmm_stream s) {
  return devmm_synchronize(self->upstream, s);
}
