/* Suite tracking: the tracking adaptor: lookups, double frees and size mismatches, reports,
 * backtraces, the sharded index's lookups and order. (Its history and hooks: tracking_history.) */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testres.h"

static int count_cb(const devmm_allocation_info *i, void *user) {
  size_t *n = user;
  ck_assert_uint_gt(i->bytes, 0);
  (*n)++;
  return 0;
}

START_TEST(tracking_lookup_inside) {
  devmm_resource *up = testres_create(NULL), *tr;
  ck_assert_int_eq(devmm_tracking_adaptor_create(up, 0, &tr), DEVMM_OK);
  enum { N = 500 };
  char *p[N];
  for (int i = 0; i < N; i++)
    ck_assert_int_eq(devmm_allocate(tr, (size_t)(i + 1) * 8, 0, NULL, (void **)&p[i]), 0);
  for (int i = 0; i < N; i += 7) {
    devmm_allocation_info info;
    ck_assert_int_eq(devmm_tracking_lookup(tr, p[i] + i * 8 + 7, &info), DEVMM_OK);
    ck_assert_ptr_eq(info.ptr, p[i]);
    ck_assert_uint_eq(info.bytes, (size_t)(i + 1) * 8);
    ck_assert_int_eq(info.nframes, 0);
  }
  size_t count, bytes, walked = 0;
  devmm_tracking_outstanding(tr, &count, &bytes);
  ck_assert_uint_eq(count, N);
  ck_assert_uint_eq(bytes, 8u * N * (N + 1) / 2);
  devmm_tracking_foreach(tr, count_cb, &walked);
  ck_assert_uint_eq(walked, N);
  for (int i = 0; i < N; i += 2)
    devmm_deallocate(tr, p[i], (size_t)(i + 1) * 8, 0, NULL);
  devmm_allocation_info info;
  devmm_tracking_outstanding(tr, &count, NULL);
  ck_assert_uint_eq(count, N / 2);
  for (int i = 1; i < N; i += 2)
    devmm_deallocate(tr, p[i], (size_t)(i + 1) * 8, 0, NULL);
  ck_assert_int_eq(devmm_tracking_lookup(tr, p[3], &info), DEVMM_ENOENT);
  ck_assert_error_contains("is not inside a live allocation");
  devmm_tracking_outstanding(tr, &count, &bytes);
  ck_assert_uint_eq(count, 0);
  ck_assert_uint_eq(bytes, 0);
  devmm_resource_release(tr);
  devmm_resource_release(up);
}
END_TEST

/* The first and last byte of a live allocation are inside it; one past the end and one before
 * the start are not. */
START_TEST(tracking_lookup_bounds) {
  devmm_resource *up = testres_create(NULL), *tr;
  ck_assert_int_eq(devmm_tracking_adaptor_create(up, 0, &tr), DEVMM_OK);
  char *p;
  ck_assert_int_eq(devmm_allocate(tr, 64, 0, NULL, (void **)&p), DEVMM_OK);
  devmm_allocation_info info;
  ck_assert_int_eq(devmm_tracking_lookup(tr, p, &info), DEVMM_OK);
  ck_assert_ptr_eq(info.ptr, p);
  ck_assert_uint_eq(info.bytes, 64);
  ck_assert_int_eq(devmm_tracking_lookup(tr, p + 63, &info), DEVMM_OK);
  ck_assert_ptr_eq(info.ptr, p);
  ck_assert_int_eq(devmm_tracking_lookup(tr, p + 64, &info), DEVMM_ENOENT);
  ck_assert_error_contains("is not inside a live allocation");
  ck_assert_int_eq(devmm_tracking_lookup(tr, p - 1, &info), DEVMM_ENOENT);
  ck_assert_int_eq(devmm_deallocate(tr, p, 64, 0, NULL), DEVMM_OK);
  devmm_resource_release(tr);
  devmm_resource_release(up);
}
END_TEST

START_TEST(tracking_catches_double_free_and_size_mismatch) {
  testres *ts;
  devmm_resource *up = testres_create(&ts), *tr;
  devmm_tracking_adaptor_create(up, 0, &tr);
  void *p;
  devmm_allocate(tr, 64, 0, NULL, &p);
  ck_assert_int_eq(devmm_deallocate(tr, p, 32, 0, NULL), DEVMM_EINVAL);
  ck_assert_error_contains("allocated with 64 bytes but freed with 32");
  ck_assert_int_eq(ts->frees, 0);
  ck_assert_int_eq(devmm_deallocate(tr, p, 64, 0, NULL), DEVMM_OK);
  ck_assert_int_eq(devmm_deallocate(tr, p, 64, 0, NULL), DEVMM_EINVAL);
  ck_assert_error_contains("not a live allocation");
  ck_assert_int_eq(ts->frees, 1); /* the double free never reached the upstream */
  devmm_resource_release(tr);
  devmm_resource_release(up);
}
END_TEST

/* Without backtraces the report lists each allocation on one line, and nothing else. */
START_TEST(tracking_report_lists_each) {
  devmm_resource *up = testres_create(NULL), *tr;
  ck_assert_int_eq(devmm_tracking_adaptor_create(up, 0, &tr), DEVMM_OK);
  void *p[3];
  size_t sizes[3] = {48, 16, 1000};
  for (int i = 0; i < 3; i++)
    ck_assert_int_eq(devmm_allocate(tr, sizes[i], 0, NULL, &p[i]), DEVMM_OK);
  char *report, line[128];
  ck_assert_int_eq(devmm_tracking_report(tr, &report), DEVMM_OK);
  const char *head = "tracking(test.malloc): 3 outstanding allocations, 1064 bytes\n";
  ck_assert_msg(strncmp(report, head, strlen(head)) == 0, "%s", report);
  for (int i = 0; i < 3; i++) {
    snprintf(line, sizeof line, "  %p  %zu bytes  stream (nil)\n", p[i], sizes[i]);
    ck_assert_msg(strstr(report, line) != NULL, "'%s' not in '%s'", line, report);
  }
  int lines = 0;
  for (char *c = report; *c; c++)
    lines += *c == '\n';
  ck_assert_int_eq(lines, 4);
  ck_assert_ptr_null(strstr(report, "thread"));
  devmm_string_free(report);
  for (int i = 0; i < 3; i++)
    devmm_deallocate(tr, p[i], sizes[i], 0, NULL);
  devmm_resource_release(tr);
  devmm_resource_release(up);
}
END_TEST

START_TEST(tracking_backtraces_and_report) {
  devmm_resource *up = testres_create(NULL), *tr;
  ck_assert_int_eq(devmm_tracking_adaptor_create(up, 1, &tr), DEVMM_OK);
  void *p, *q;
  devmm_allocate(tr, 48, 0, NULL, &p);
  devmm_allocate(tr, 16, 0, NULL, &q);
  devmm_allocation_info info;
  ck_assert_int_eq(devmm_tracking_lookup(tr, p, &info), DEVMM_OK);
  ck_assert_int_gt(info.nframes, 1);
  ck_assert_uint_gt(info.thread_id, 0);
  char *report;
  ck_assert_int_eq(devmm_tracking_report(tr, &report), DEVMM_OK);
  ck_assert_ptr_nonnull(strstr(report, "2 outstanding allocations, 64 bytes"));
  ck_assert_ptr_nonnull(strstr(report, "48 bytes"));
  ck_assert_ptr_nonnull(strstr(report, "16 bytes"));
  ck_assert_ptr_nonnull(strstr(report, "#0 "));
  devmm_string_free(report);
  devmm_deallocate(tr, p, 48, 0, NULL);
  /* q is still live: destroying the adaptor must not leak its frames (ASan checks) */
  devmm_resource_release(tr);
  devmm_resource_release(up);
  free(q);
}
END_TEST

static int stop_after_three(const devmm_allocation_info *i, void *user) {
  (void)i;
  return ++*(size_t *)user == 3;
}

static int ascending_cb(const devmm_allocation_info *i, void *user) {
  uintptr_t *st = user; /* last address, count, out of order */
  st[2] += (uintptr_t)i->ptr <= st[0];
  st[0] = (uintptr_t)i->ptr;
  st[1]++;
  return 0;
}

/* The table is sharded by a hash of each allocation's start (ADR 29): every 16-byte granule of
 * an allocation, whichever shard it hashes to, finds the allocation; the walk merges the shards
 * in address order; a walk stopped early stops. */
START_TEST(tracking_sharded_lookup_and_order) {
  devmm_resource *up = testres_create(NULL), *tr;
  ck_assert_int_eq(devmm_tracking_adaptor_create(up, 0, &tr), DEVMM_OK);
  enum { N = 300 };
  char *p[N];
  size_t size[N];
  for (int i = 0; i < N; i++) {
    size[i] = 16 + (size_t)(i * 37 % 8192);
    ck_assert_int_eq(devmm_allocate(tr, size[i], 0, NULL, (void **)&p[i]), DEVMM_OK);
  }
  for (int i = 0; i < N; i++) {
    devmm_allocation_info info;
    for (size_t off = 0; off < size[i]; off += 16) {
      ck_assert_int_eq(devmm_tracking_lookup(tr, p[i] + off, &info), DEVMM_OK);
      ck_assert_ptr_eq(info.ptr, p[i]);
      ck_assert_uint_eq(info.bytes, size[i]);
    }
    ck_assert_int_eq(devmm_tracking_lookup(tr, p[i] + size[i] - 1, &info), DEVMM_OK);
    ck_assert_ptr_eq(info.ptr, p[i]);
    if (devmm_tracking_lookup(tr, p[i] + size[i], &info) == DEVMM_OK)
      ck_assert_ptr_ne(info.ptr, p[i]); /* one past the end: another allocation or none */
  }
  uintptr_t st[3] = {0, 0, 0};
  ck_assert_int_eq(devmm_tracking_foreach(tr, ascending_cb, st), DEVMM_OK);
  ck_assert_uint_eq(st[1], N);
  ck_assert_uint_eq(st[2], 0);
  size_t seen = 0;
  ck_assert_int_eq(devmm_tracking_foreach(tr, stop_after_three, &seen), DEVMM_OK);
  ck_assert_uint_eq(seen, 3);
  for (int i = 0; i < N; i++)
    ck_assert_int_eq(devmm_deallocate(tr, p[i], size[i], 0, NULL), DEVMM_OK);
  st[0] = st[1] = st[2] = 0;
  ck_assert_int_eq(devmm_tracking_foreach(tr, ascending_cb, st), DEVMM_OK);
  ck_assert_uint_eq(st[1], 0);
  devmm_resource_release(tr);
  devmm_resource_release(up);
}
END_TEST

Suite *tracking_suite(void) {
  Suite *s = suite_create("tracking");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, tracking_lookup_inside);
  tcase_add_test(tc, tracking_lookup_bounds);
  tcase_add_test(tc, tracking_catches_double_free_and_size_mismatch);
  tcase_add_test(tc, tracking_report_lists_each);
  tcase_add_test(tc, tracking_backtraces_and_report);
  tcase_add_test(tc, tracking_sharded_lookup_and_order);
  suite_add_tcase(s, tc);
  return s;
}
