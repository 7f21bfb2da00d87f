/* Suite sim_gpu: the GPU plugin's source (plugins/gpu) run over the simulator: devices, the NULL
 * stream, failed calls and their messages, pools, events, pinned memory, options.
 * Environment (set by Meson): DEVMM_PLUGIN_PATH (the plugins' build directory). */
#include <check.h>
#include <sys/sysinfo.h>

#include "sim_env.h"

/* The event must be made on the buffer's device: recording it on that device's stream from a
 * thread whose current device is another one failed (cudaErrorInvalidResourceHandle). */
START_TEST(stream_wait_on_another_device) {
  sim_init(300, 7);
  devmm_resource *r1 = kind("sim.async", 1), *r0 = kind("sim.device", 0);
  void *s1 = stream(1), *s0 = stream(0), *p;
  sim.set_device(0); /* the calling thread works on sim:0; the buffer lives on sim:1 */
  ck_assert_int_eq(devmm_allocate(r1, 4096, 0, s1, &p), DEVMM_OK);
  for (int i = 0; i < 10; i++) {
    unsigned char host[4096];
    sim.fill(s1, p, i + 1, 4096);
    ck_assert_msg(devmm_stream_wait(r1, s0, s1) == DEVMM_OK, "%s", devmm_last_error());
    /* sim:0's stream copies the bytes out (a peer copy), after the fill */
    ck_assert_int_eq(devmm_copy(r0, host, p, 4096, s0), DEVMM_OK);
    ck_assert_int_eq(sim.stream_synchronize(s0), DEVMM_OK);
    ck_assert_int_eq(host[0], i + 1);
    ck_assert_int_eq(host[4095], i + 1);
  }
  ck_assert_int_eq(devmm_deallocate(r1, p, 4096, 0, s1), DEVMM_OK);
  sim.stream_destroy(s0);
  sim.stream_destroy(s1);
  devmm_resource_release(r0);
  devmm_resource_release(r1);
}
END_TEST

/* Copies, memsets and synchronisation on the NULL stream mean the resource's device, whatever
 * the calling thread's current device is. */
START_TEST(null_stream_ops_use_the_resources_device) {
  sim_init(500, 8);
  devmm_resource *r1 = kind("sim.device", 1);
  void *p;
  sim.set_device(0);
  ck_assert_int_eq(devmm_allocate(r1, 1 << 16, 0, NULL, &p), DEVMM_OK);
  ck_assert_msg(devmm_memset(r1, p, 0x22, 1 << 16, NULL) == DEVMM_OK, "%s", devmm_last_error());
  ck_assert_int_eq(devmm_synchronize(r1, NULL), DEVMM_OK);
  const unsigned char *v = sim.view(p, 1 << 16);
  for (int i = 0; i < 1 << 16; i++)
    ck_assert_int_eq(v[i], 0x22);
  unsigned char host[64];
  ck_assert_int_eq(devmm_copy(r1, host, p, sizeof host, NULL), DEVMM_OK);
  ck_assert_int_eq(devmm_synchronize(r1, NULL), DEVMM_OK);
  ck_assert_int_eq(host[0], 0x22);
  ck_assert_int_eq(host[63], 0x22);
  ck_assert_int_eq(devmm_deallocate(r1, p, 1 << 16, 0, NULL), DEVMM_OK);
  devmm_resource_release(r1);
}
END_TEST

START_TEST(failed_set_device_is_an_error) {
  sim_init(0, 9);
  devmm_resource *r1 = kind("sim.device", 1);
  sim.set_device(0);
  ck_assert_int_eq(sim.inject("SetDevice", 0, 101), DEVMM_OK);
  void *p = (void *)1;
  ck_assert_int_eq(devmm_allocate(r1, 256, 0, NULL, &p), DEVMM_EDEVICE);
  ck_assert_error_contains("sim.device on sim:1: simSetDevice(1) failed: invalid device ordinal");
  ck_assert_ptr_null(p);
  devmm_resource_release(r1);
}
END_TEST

START_TEST(messages_name_the_failed_call) {
  sim_init(0, 10);
  devmm_resource *r = kind("sim.async", 0), *pin = kind("sim.pinned", 0);
  void *p, *h, *s = stream(0);
  ck_assert_int_eq(devmm_allocate(r, 512, 0, NULL, &p), DEVMM_OK);
  sim.inject("FreeAsync", 0, 999);
  ck_assert_int_eq(devmm_deallocate(r, p, 512, 0, NULL), DEVMM_EDEVICE);
  ck_assert_error_contains("sim.async on sim:0: simFreeAsync(512) failed");
  ck_assert_int_eq(devmm_deallocate(r, p, 512, 0, NULL), DEVMM_OK);
  ck_assert_int_eq(devmm_allocate(pin, 512, 0, NULL, &h), DEVMM_OK);
  sim.inject("FreeHost", 0, 999);
  ck_assert_int_eq(devmm_deallocate(pin, h, 512, 0, NULL), DEVMM_EDEVICE);
  ck_assert_error_contains("simFreeHost(512) failed");
  ck_assert_int_eq(devmm_deallocate(pin, h, 512, 0, NULL), DEVMM_OK);
  sim.inject("EventRecord", 0, 999);
  ck_assert_int_eq(devmm_stream_wait(r, s, NULL), DEVMM_EDEVICE);
  ck_assert_error_contains("simEventRecord(0) failed");
  sim.stream_destroy(s);
  devmm_resource_release(r);
  devmm_resource_release(pin);
}
END_TEST

START_TEST(release_threshold_only_on_an_own_pool) {
  sim_init(0, 11);
  uint64_t before, after;
  ck_assert_int_eq(sim.default_pool_threshold(0, &before), DEVMM_OK);
  devmm_option o[] = {{"release_threshold", "1MiB", 0}, {"pool", "own", 0}};
  devmm_resource *r = NULL;
  ck_assert_int_eq(devmm_resource_create_kind("sim.async", 0, o, 1, &r), DEVMM_EINVAL);
  ck_assert_error_contains("sim.async: release_threshold needs pool = own: the device's default "
                           "pool is shared by the whole process");
  ck_assert_int_eq(sim.default_pool_threshold(0, &after), DEVMM_OK);
  ck_assert_int_eq(after, before); /* the process-wide pool is untouched */
  ck_assert_msg(devmm_resource_create_kind("sim.async", 0, o, 2, &r) == DEVMM_OK, "%s",
                devmm_last_error());
  ck_assert_str_eq(devmm_resource_name(r), "sim.async(own pool)");
  ck_assert_int_eq(sim.default_pool_threshold(0, &after), DEVMM_OK);
  ck_assert_int_eq(after, before);
  devmm_resource_release(r);
}
END_TEST

START_TEST(one_event_per_resource) {
  sim_init(0, 12);
  devmm_resource *r = kind("sim.async", 0);
  void *s = stream(0), *t = stream(0);
  uint64_t before = stats().events_created;
  for (int i = 0; i < 10; i++)
    ck_assert_int_eq(devmm_stream_wait(r, s, t), DEVMM_OK);
  ck_assert_int_eq(stats().events_created - before, 1);
  devmm_resource_release(r);
  ck_assert_int_eq(stats().events_live, 0); /* destroyed with the resource */
  sim.stream_destroy(s);
  sim.stream_destroy(t);
}
END_TEST

START_TEST(pinned_mem_info_is_host_memory) {
  sim_init(0, 13);
  devmm_resource *pin = kind("sim.pinned", 0);
  size_t f, t;
  ck_assert_int_eq(devmm_mem_info(pin, &f, &t), DEVMM_OK);
  struct sysinfo si;
  sysinfo(&si);
  ck_assert_uint_eq(t, (size_t)si.totalram * si.mem_unit);
  devmm_resource_release(pin);
}
END_TEST

START_TEST(options_are_checked_before_the_device) {
  sim_init(0, 14);
  devmm_option o[] = {{"pool", "shared", 0}};
  devmm_resource *r;
  ck_assert_int_eq(devmm_resource_create_kind("sim.async", 7, o, 1, &r), DEVMM_EINVAL);
  ck_assert_error_contains(
      "sim.async: pool = shared: expected default, own, managed or the address of a pool");
}
END_TEST

/* devmm's pinned memory is portable (cudaHostAllocPortable): pinned for every device, so a
 * kernel of sim:1 reaches sim.pinned memory, whichever device allocated it (ADR 38). */
START_TEST(pinned_memory_is_portable) {
  sim_init(0, 21);
  devmm_resource *pin = kind("sim.pinned", 0);
  void *p, *s1 = stream(1);
  ck_assert_int_eq(devmm_allocate(pin, 4096, 0, NULL, &p), DEVMM_OK);
  ck_assert_msg(sim.fill(s1, p, 7, 4096) == DEVMM_OK, "%s", devmm_last_error());
  sim.stream_synchronize(s1);
  ck_assert_int_eq(((unsigned char *)p)[4095], 7);
  sim.stream_destroy(s1);
  ck_assert_int_eq(devmm_deallocate(pin, p, 4096, 0, NULL), DEVMM_OK);
  devmm_resource_release(pin);
}
END_TEST

/* A pool of devmm's own grants its peers access (cudaMemPoolSetAccess): a kernel of sim:1 reads
 * sim.async (pool = own) memory of sim:0, as it would read sim.device memory under peer access
 * (ADR 38). */
START_TEST(own_pools_grant_their_peers_access) {
  sim_init(0, 22);
  devmm_option own = {"pool", "own", 0};
  devmm_resource *r;
  ck_assert_int_eq(devmm_resource_create_kind("sim.async", 0, &own, 1, &r), DEVMM_OK);
  void *p, *s0 = stream(0), *s1 = stream(1);
  ck_assert_int_eq(devmm_allocate(r, 4096, 0, s0, &p), DEVMM_OK);
  sim.stream_synchronize(s0);
  int ok = 0;
  ck_assert_msg(sim.check(s1, p, 0xCD, 4096, &ok) == DEVMM_OK, "%s", devmm_last_error());
  sim.stream_synchronize(s1);
  ck_assert_msg(ok == 1, "a kernel of sim:1 could not read sim:0's own-pool memory");
  ck_assert_int_eq(devmm_deallocate(r, p, 4096, 0, s0), DEVMM_OK);
  sim.stream_destroy(s0);
  sim.stream_destroy(s1);
  devmm_resource_release(r);
}
END_TEST

/* enter/leave keep a caller's own context: a devmm call on sim:1's resource from a thread bound
 * to a context of sim:0's own (cuCtxCreate) leaves that context bound, not sim:0's primary one,
 * which restoring the device with SetDevice binds (ADR 38). */
START_TEST(a_callers_own_context_survives_a_call_on_another_device) {
  sim_init(0, 23);
  devmm_resource *r1 = kind("sim.device", 1);
  void *ctx, *cur, *p;
  ck_assert_int_eq(sim.ctx_create(0, &ctx), DEVMM_OK);
  ck_assert_int_eq(devmm_allocate(r1, 4096, 0, NULL, &p), DEVMM_OK);
  ck_assert_int_eq(sim.ctx_current(&cur), DEVMM_OK);
  ck_assert_msg(cur == ctx, "the caller's context %p became %p after a call on sim:1", ctx, cur);
  ck_assert_int_eq(devmm_memset(r1, p, 0, 4096, NULL), DEVMM_OK);
  ck_assert_int_eq(devmm_deallocate(r1, p, 4096, 0, NULL), DEVMM_OK);
  ck_assert_int_eq(sim.ctx_current(&cur), DEVMM_OK);
  ck_assert_ptr_eq(cur, ctx);
  sim.set_device(0); /* sim:0's primary context again */
  devmm_resource_release(r1);
}
END_TEST

/* A GPU plugin counts its devices at their first use (ADR 38); a set is a use: the previous
 * resource it returns is the configured stack, never NULL (tests/python/test_rmm_identity.py). */
START_TEST(set_as_first_use_returns_the_configured_resource) {
  static const char ini[] = "[devmm]\nplugins = cpu, sim\n[plugin sim]\njitter_us = 0\n"
                            "[device sim:*]\nresource = sim.async\n";
  devmm_registry_clear();
  ck_assert_msg(devmm_init_text(ini, sizeof ini - 1, NULL) == DEVMM_OK, "%s", devmm_last_error());
  devmm_device sim0;
  ck_assert_int_eq(devmm_device_parse("sim:0", &sim0), DEVMM_OK);
  /* a host resource: a sim kind would count the devices before the set */
  devmm_resource *mine = testres_create(NULL), *prev = NULL, *got = NULL;
  ck_assert_int_eq(devmm_set_current_resource(sim0, mine, &prev), DEVMM_OK);
  ck_assert_msg(prev != NULL, "the first set on sim:0 returned no previous resource");
  ck_assert_str_eq(devmm_resource_name(prev), "sim.async");
  ck_assert_int_eq(devmm_set_current_resource(sim0, prev, NULL), DEVMM_OK);
  ck_assert_int_eq(devmm_get_current_resource(sim0, &got), DEVMM_OK);
  ck_assert_ptr_eq(got, prev);
  devmm_resource_release(got);
  devmm_resource_release(prev);
  devmm_resource_release(mine);
}
END_TEST

/* devmm_buffer_prefetch: an existing allocation of managed memory is prefetched through the
 * stack (RMM's DeviceBuffer.prefetch); memory that does not move, another device and a freed
 * buffer are refused, saying so. */
START_TEST(buffer_prefetch_moves_managed_memory) {
  sim_init(0, 17);
  devmm_resource *managed = kind("sim.managed", 0), *dev = kind("sim.device", 0), *stats;
  ck_assert_int_eq(devmm_statistics_adaptor_create(managed, &stats), DEVMM_OK);
  devmm_device sim0, sim1;
  ck_assert_int_eq(devmm_device_parse("sim:0", &sim0), DEVMM_OK);
  ck_assert_int_eq(devmm_device_parse("sim:1", &sim1), DEVMM_OK);
  devmm_buffer *b, *d;
  ck_assert_int_eq(devmm_buffer_allocate(stats, 4096, 0, NULL, &b), DEVMM_OK);
  ck_assert_msg(devmm_buffer_prefetch(b, sim0, NULL) == DEVMM_OK, "%s", devmm_last_error());
  ck_assert_int_eq(devmm_buffer_prefetch(b, devmm_buffer_device(b), NULL), DEVMM_OK);
  sim.inject("MemPrefetchAsync", 0, 999); /* it reaches the runtime: its failure is said */
  ck_assert_int_eq(devmm_buffer_prefetch(b, sim0, NULL), DEVMM_EDEVICE);
  ck_assert_error_contains("sim.managed on sim:0: simMemPrefetchAsync(4096) failed");
  sim.inject(NULL, 0, 0);
  ck_assert_int_eq(devmm_buffer_prefetch(b, sim1, NULL), DEVMM_EINVAL);
  ck_assert_error_contains("prefetch to sim:1: statistics(sim.managed) moves memory only to its "
                           "own device (sim:0)");
  ck_assert_int_eq(devmm_buffer_prefetch(b, CPU, NULL), DEVMM_EINVAL);
  ck_assert_int_eq(devmm_buffer_allocate(dev, 64, 0, NULL, &d), DEVMM_OK);
  ck_assert_int_eq(devmm_buffer_prefetch(d, sim0, NULL), DEVMM_ENOTSUP);
  ck_assert_error_contains("sim.device: its memory does not move");
  ck_assert_int_eq(devmm_buffer_prefetch(d, CPU, NULL), DEVMM_ENOTSUP); /* whatever the device */
  devmm_buffer_free(b);
  ck_assert_int_eq(devmm_buffer_prefetch(b, sim0, NULL), DEVMM_ESTATE);
  ck_assert_error_contains("was freed: nothing to prefetch");
  ck_assert_int_eq(devmm_buffer_prefetch(NULL, sim0, NULL), DEVMM_EINVAL);
  devmm_buffer_release(b);
  devmm_buffer_release(d);
  devmm_resource_release(stats);
  devmm_resource_release(managed);
  devmm_resource_release(dev);
}
END_TEST

/* The prefetch op (ABI 1.1) reaches the leaf through adaptors; the prefetch adaptor prefetches
 * each allocation, gives back one whose prefetch failed, and is refused over memory that does not
 * move (ADR 41). */
START_TEST(prefetch_reaches_the_leaf_through_adaptors) {
  sim_init(0, 15);
  devmm_resource *managed = kind("sim.managed", 0), *dev = kind("sim.device", 0), *stats, *pf;
  ck_assert_int_eq(devmm_statistics_adaptor_create(managed, &stats), DEVMM_OK);
  ck_assert_msg(devmm_prefetch_adaptor_create(stats, &pf) == DEVMM_OK, "%s", devmm_last_error());
  void *p;
  ck_assert_int_eq(devmm_allocate(pf, 4096, 0, NULL, &p), DEVMM_OK);
  ck_assert_int_eq(devmm_prefetch(stats, p, 4096, NULL), DEVMM_OK);
  sim.inject("MemPrefetchAsync", 0, 999);
  void *q = (void *)1;
  ck_assert_int_eq(devmm_allocate(pf, 4096, 0, NULL, &q), DEVMM_EDEVICE);
  ck_assert_error_contains("sim.managed on sim:0: simMemPrefetchAsync(4096) failed");
  ck_assert_ptr_null(q);
  devmm_statistics st;
  ck_assert_int_eq(devmm_statistics_get(stats, &st), DEVMM_OK);
  ck_assert_int_eq(st.current_count, 1); /* the failed one was freed */
  ck_assert_int_eq(devmm_deallocate(pf, p, 4096, 0, NULL), DEVMM_OK);
  devmm_resource *none = (devmm_resource *)1;
  ck_assert_int_eq(devmm_prefetch_adaptor_create(dev, &none), DEVMM_ENOTSUP);
  ck_assert_ptr_null(none);
  ck_assert_error_contains("prefetch adaptor over sim.device: its memory does not move");
  ck_assert_int_eq(devmm_prefetch(dev, p, 1, NULL), DEVMM_ENOTSUP);
  devmm_resource_release(pf);
  devmm_resource_release(stats);
  devmm_resource_release(managed);
  devmm_resource_release(dev);
}
END_TEST

Suite *sim_gpu_suite(void) {
  const TTest *const tests[] = {stream_wait_on_another_device,
                                null_stream_ops_use_the_resources_device,
                                failed_set_device_is_an_error,
                                messages_name_the_failed_call,
                                release_threshold_only_on_an_own_pool,
                                one_event_per_resource,
                                pinned_mem_info_is_host_memory,
                                options_are_checked_before_the_device,
                                pinned_memory_is_portable,
                                own_pools_grant_their_peers_access,
                                a_callers_own_context_survives_a_call_on_another_device,
                                prefetch_reaches_the_leaf_through_adaptors,
                                set_as_first_use_returns_the_configured_resource,
                                buffer_prefetch_moves_managed_memory,
                                NULL};
  return suite_of("sim_gpu", tests);
}
