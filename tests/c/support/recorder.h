/* A resource that records every optional op it is asked for, so that a test can see what an
 * adaptor passed down: the call, its arguments, and the status coming back up. Its allocations
 * are malloc's; with fail set, each optional op fails with DEVMM_EIO and "recorder: <op> failed".
 * Make one with devmm_resource_create(&recorder_ops, &state, device, "recorder", 0, &r). */
#ifndef DEVMM_TEST_RECORDER_H
#define DEVMM_TEST_RECORDER_H

#include <devmm/devmm.h>

typedef struct {
  int mem_info, copy, memset, stream_wait, synchronize, fail;
  void *dst;
  const void *src;
  size_t bytes;
  int value;
  devmm_stream a, b;
} recorder;

/* mem_info answers 111 free of 222 total. */
extern const devmm_resource_ops recorder_ops;

#endif
