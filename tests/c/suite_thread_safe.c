/* Suite thread_safe: the thread-safe adaptor serialises an upstream that is not. */
#include <check.h>
#include <pthread.h>
#include <stdlib.h>

#include "testres.h"

typedef struct {
  int inside; /* deliberately not atomic: the upstream is not thread-safe */
  int overlaps;
  long n;
} unsafe_state;

static int unsafe_alloc(devmm_resource *self, size_t b, size_t a, devmm_stream s, void **o) {
  (void)a, (void)s;
  unsafe_state *u = devmm_resource_context(self);
  if (__atomic_fetch_add(&u->inside, 1, __ATOMIC_SEQ_CST))
    __atomic_fetch_add(&u->overlaps, 1, __ATOMIC_SEQ_CST);
  u->n++;
  *o = malloc(b);
  for (volatile int i = 0; i < 50; i++)
    ;
  __atomic_fetch_sub(&u->inside, 1, __ATOMIC_SEQ_CST);
  return DEVMM_OK;
}
static int unsafe_free(devmm_resource *self, void *p, size_t b, size_t a, devmm_stream s) {
  (void)b, (void)a, (void)s;
  unsafe_state *u = devmm_resource_context(self);
  if (__atomic_fetch_add(&u->inside, 1, __ATOMIC_SEQ_CST))
    __atomic_fetch_add(&u->overlaps, 1, __ATOMIC_SEQ_CST);
  u->n++;
  free(p);
  __atomic_fetch_sub(&u->inside, 1, __ATOMIC_SEQ_CST);
  return DEVMM_OK;
}

static void *hammer(void *arg) {
  devmm_resource *r = arg;
  for (int i = 0; i < 20000; i++) {
    void *p;
    ck_assert_int_eq(devmm_allocate(r, 32, 0, NULL, &p), DEVMM_OK);
    devmm_deallocate(r, p, 32, 0, NULL);
  }
  return NULL;
}

START_TEST(thread_safe_serialises) {
  static const devmm_resource_ops ops = {sizeof ops, unsafe_alloc, unsafe_free};
  unsafe_state u = {0};
  devmm_resource *raw, *ts;
  devmm_device cpu = {DEVMM_DEVICE_CPU, 0};
  ck_assert_int_eq(devmm_resource_create(&ops, &u, cpu, "unsafe", 0, &raw), DEVMM_OK);
  ck_assert_int_eq(devmm_thread_safe_adaptor_create(raw, &ts), DEVMM_OK);
  ck_assert(devmm_resource_flags(ts) & DEVMM_RESOURCE_THREAD_SAFE);
  pthread_t t[2];
  for (int i = 0; i < 2; i++)
    pthread_create(&t[i], NULL, hammer, ts);
  for (int i = 0; i < 2; i++)
    pthread_join(t[i], NULL);
  ck_assert_int_eq(u.overlaps, 0);
  ck_assert_int_eq(u.n, 2 * 2 * 20000); /* no lost updates of the non-atomic counter */
  devmm_resource_release(ts);
  devmm_resource_release(raw);
}
END_TEST

Suite *thread_safe_suite(void) {
  Suite *s = suite_create("thread_safe");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, thread_safe_serialises);
  suite_add_tcase(s, tc);
  return s;
}
