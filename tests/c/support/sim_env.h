/* What the simulator's suites (sim_runtime, sim_gpu, sim_core) share: devmm initialised over the
 * sim plugin, the plugin's test entry (include/devmm/sim.h) bound from the copy devmm loaded, and
 * small helpers. Environment (set by Meson): DEVMM_PLUGIN_PATH (the plugins' build directory). */
#ifndef DEVMM_TEST_SIM_ENV_H
#define DEVMM_TEST_SIM_ENV_H

#include <check.h>
#include <devmm/devmm.h>
#include <devmm/sim.h>

#include "testres.h"

/* The test entry of devmm-sim.so, found in the copy devmm loaded (bound by sim_init). */
typedef struct {
  __typeof__(devmm_sim_set_device) *set_device;
  __typeof__(devmm_sim_stream_create) *stream_create;
  __typeof__(devmm_sim_stream_destroy) *stream_destroy;
  __typeof__(devmm_sim_stream_synchronize) *stream_synchronize;
  __typeof__(devmm_sim_device_synchronize) *device_synchronize;
  __typeof__(devmm_sim_event_create) *event_create;
  __typeof__(devmm_sim_event_record) *event_record;
  __typeof__(devmm_sim_stream_wait_event) *stream_wait_event;
  __typeof__(devmm_sim_event_destroy) *event_destroy;
  __typeof__(devmm_sim_launch) *launch;
  __typeof__(devmm_sim_view) *view;
  __typeof__(devmm_sim_fill) *fill;
  __typeof__(devmm_sim_check) *check;
  __typeof__(devmm_sim_inject) *inject;
  __typeof__(devmm_sim_stats_get) *stats_get;
  __typeof__(devmm_sim_default_pool_threshold) *default_pool_threshold;
  __typeof__(devmm_sim_peer_access) *peer_access;
  __typeof__(devmm_sim_pool_set_access) *pool_set_access;
  __typeof__(devmm_sim_host_alloc) *host_alloc;
  __typeof__(devmm_sim_free_host) *free_host;
  __typeof__(devmm_sim_ctx_create) *ctx_create;
  __typeof__(devmm_sim_ctx_current) *ctx_current;
} sim_entry;
extern sim_entry sim;

static const devmm_device CPU = {DEVMM_DEVICE_CPU, 0};
static const devmm_dtype U8 = {DEVMM_DTYPE_UINT, 8, 1};

/* devmm initialised with the sim plugin (2 devices, sim.async on each) and the given jitter. */
void sim_init(unsigned jitter_us, unsigned seed);
/* A resource of the kind name on device; fails the test when it cannot be made. */
devmm_resource *kind(const char *name, int device);
/* A new stream on device. */
void *stream(int device);
/* The simulator's counters. */
devmm_sim_stats stats(void);
/* A kernel that sleeps (intptr_t)ms milliseconds. */
void sleep_kernel(void *ms);
/* A suite of one test case named name, of the NULL-terminated tests, 60 s each. */
Suite *suite_of(const char *name, const TTest *const *tests);

#endif
