/* C benchmark: ns per allocate+deallocate pair for raw malloc/free, a plain resource, each
 * adaptor and a full stack; 1 and 2 threads; metadata bytes per live allocation. Everything is
 * reported as a ratio to raw malloc measured in the same run (median of 5 repetitions). */
#include <devmm/devmm.h>

#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ------------------------------------------------------------------ the plain resource */

static int m_alloc(devmm_resource *self, size_t b, size_t a, devmm_stream s, void **o) {
  (void)self, (void)s;
  if (a > 16) {
    if (posix_memalign(o, a, b))
      *o = NULL;
  } else {
    *o = malloc(b);
  }
  return *o ? DEVMM_OK : devmm_set_error(DEVMM_ENOMEM, "malloc(%zu) failed", b);
}
static int m_free(devmm_resource *self, void *p, size_t b, size_t a, devmm_stream s) {
  (void)self, (void)b, (void)a, (void)s;
  free(p);
  return DEVMM_OK;
}
static const devmm_resource_ops malloc_ops = {sizeof malloc_ops, m_alloc, m_free};

static int never_retry(size_t b, int attempt, void *u) {
  (void)b, (void)attempt, (void)u;
  return 0;
}

/* ------------------------------------------------------------------ timing */

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* The floor of any run-time dispatch: malloc/free reached through one function pointer each,
 * with no library in between (what a resource costs at the very least). */
static int (*volatile floor_alloc)(devmm_resource *, size_t, size_t, devmm_stream,
                                   void **) = m_alloc;
static int (*volatile floor_free)(devmm_resource *, void *, size_t, size_t, devmm_stream) = m_free;
#define FLOOR ((devmm_resource *)1)

typedef struct {
  devmm_resource *r; /* NULL: raw malloc/free; FLOOR: through function pointers */
  size_t size;
  long iters;
  double secs;
} job;

static void *loop(void *arg) {
  job *j = arg;
  double t0 = now();
  if (!j->r) {
    for (long i = 0; i < j->iters; i++) {
      void *p = malloc(j->size);
      *(volatile char *)p = 1;
      free(p);
    }
  } else if (j->r == FLOOR) {
    int (*a)(devmm_resource *, size_t, size_t, devmm_stream, void **) = floor_alloc;
    int (*f)(devmm_resource *, void *, size_t, size_t, devmm_stream) = floor_free;
    for (long i = 0; i < j->iters; i++) {
      void *p;
      if (a(NULL, j->size, 0, NULL, &p))
        abort();
      *(volatile char *)p = 1;
      f(NULL, p, j->size, 0, NULL);
    }
  } else {
    for (long i = 0; i < j->iters; i++) {
      void *p;
      if (devmm_allocate(j->r, j->size, 0, NULL, &p))
        abort();
      *(volatile char *)p = 1;
      devmm_deallocate(j->r, p, j->size, 0, NULL);
    }
  }
  j->secs = now() - t0;
  return NULL;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* One run: ns per pair (each thread's own time); *mops the throughput of all threads. */
static double once(devmm_resource *r, size_t size, int threads, long iters, double *mops) {
  job j[2];
  pthread_t t[2];
  double t0 = now();
  for (int k = 0; k < threads; k++) {
    j[k] = (job){r, size, iters, 0};
    pthread_create(&t[k], NULL, loop, &j[k]);
  }
  for (int k = 0; k < threads; k++)
    pthread_join(t[k], NULL);
  double wall = now() - t0;
  *mops = (double)threads * (double)iters / wall / 1e6;
  return wall / (double)iters * 1e9;
}

/* Median over 5 runs of ns per pair (per thread); with 2 threads also the throughput. */
static double measure(devmm_resource *r, size_t size, int threads, long iters, double *mops) {
  double ns[5], tp[5];
  for (int rep = 0; rep < 5; rep++)
    ns[rep] = once(r, size, threads, iters, &tp[rep]);
  qsort(ns, 5, sizeof ns[0], cmp);
  qsort(tp, 5, sizeof tp[0], cmp);
  if (mops)
    *mops = tp[2];
  return ns[2];
}

/* ------------------------------------------------------------------ metadata */

static double tracking_bytes_per_allocation(devmm_resource *plain) {
  enum { N = 100000 };
  void **p = malloc(N * sizeof *p);
  devmm_resource *tr;
  devmm_tracking_adaptor_create(plain, 0, &tr);
  size_t b0 = mallinfo2().uordblks;
  for (int i = 0; i < N; i++)
    devmm_allocate(plain, 64, 0, NULL, &p[i]);
  size_t b1 = mallinfo2().uordblks;
  for (int i = 0; i < N; i++)
    devmm_deallocate(plain, p[i], 64, 0, NULL);
  size_t b2 = mallinfo2().uordblks;
  for (int i = 0; i < N; i++)
    devmm_allocate(tr, 64, 0, NULL, &p[i]);
  size_t b3 = mallinfo2().uordblks;
  for (int i = 0; i < N; i++)
    devmm_deallocate(tr, p[i], 64, 0, NULL);
  devmm_resource_release(tr);
  free(p);
  return ((double)(b3 - b2) - (double)(b1 - b0)) / N;
}

static double buffer_tensor_bytes(devmm_resource *plain) {
  enum { N = 20000 };
  devmm_tensor **t = malloc(N * sizeof *t);
  void **raw = malloc(N * sizeof *raw);
  devmm_dtype f32 = {DEVMM_DTYPE_FLOAT, 32, 1};
  int64_t shape[2] = {2, 2};
  devmm_device cpu = {DEVMM_DEVICE_CPU, 0};
  size_t b0 = mallinfo2().uordblks;
  for (int i = 0; i < N; i++)
    raw[i] = malloc(16);
  size_t b1 = mallinfo2().uordblks;
  for (int i = 0; i < N; i++)
    free(raw[i]);
  size_t b2 = mallinfo2().uordblks;
  for (int i = 0; i < N; i++)
    devmm_tensor_empty(plain, cpu, NULL, 2, shape, f32, NULL, &t[i]);
  size_t b3 = mallinfo2().uordblks;
  for (int i = 0; i < N; i++)
    devmm_tensor_destroy(t[i]);
  free(t);
  free(raw);
  return ((double)(b3 - b2) - (double)(b1 - b0)) / N;
}

/* ------------------------------------------------------------------ main */

int main(int argc, char **argv) {
  long iters = argc > 1 ? atol(argv[1]) : 2000000;
  /* `bench-alloc N scaling`: only the 1 KiB scaling rows and their targets */
  int every_row = !(argc > 2 && strcmp(argv[2], "scaling") == 0);
  devmm_device cpu = {DEVMM_DEVICE_CPU, 0};
  devmm_resource *plain, *stats, *lim, *track, *logr, *al, *fc, *ts, *full_t, *full_l, *full;
  devmm_resource_create(&malloc_ops, NULL, cpu, "bench.malloc", DEVMM_RESOURCE_THREAD_SAFE, &plain);
  devmm_resource *sharded;
  devmm_statistics_adaptor_create(plain, &stats);
  devmm_statistics_adaptor_create_ex(plain, DEVMM_STATISTICS_SHARDED, &sharded);
  devmm_limiting_adaptor_create(plain, (size_t)1 << 40, &lim);
  devmm_tracking_adaptor_create(plain, 0, &track);
  devmm_logging_adaptor_create(plain, "/dev/null", 0, &logr);
  devmm_aligned_adaptor_create(plain, 256, 1 << 20, &al);
  devmm_failure_callback_adaptor_create(plain, never_retry, NULL, &fc);
  devmm_thread_safe_adaptor_create(plain, &ts);
  devmm_limiting_adaptor_create(plain, (size_t)1 << 40, &full_l);
  devmm_tracking_adaptor_create(full_l, 0, &full_t);
  devmm_statistics_adaptor_create(full_t, &full);
  /* What devmm.ini builds for "adaptors = statistics, limiting, tracking" with every other key
   * at its default (statistics = exact, backtraces = false; a limit given): the first adaptor
   * wraps the resource, so tracking(limiting(statistics(resource))). The same with
   * "statistics = sharded" beside it. */
  devmm_resource *ini_st, *ini_lim, *ini_full, *ini_sst, *ini_slim, *ini_sharded;
  devmm_statistics_adaptor_create(plain, &ini_st);
  devmm_limiting_adaptor_create(ini_st, (size_t)1 << 40, &ini_lim);
  devmm_tracking_adaptor_create(ini_lim, 0, &ini_full);
  devmm_statistics_adaptor_create_ex(plain, DEVMM_STATISTICS_SHARDED, &ini_sst);
  devmm_limiting_adaptor_create(ini_sst, (size_t)1 << 40, &ini_slim);
  devmm_tracking_adaptor_create(ini_slim, 0, &ini_sharded);

  struct {
    const char *name;
    devmm_resource *r;
    double target;
  } cfg[] = {
      {"(floor: 1 indirect call)", FLOOR, 0},
      {"plain resource", plain, 1.10},
      {"statistics", stats, 1.5},
      {"statistics (sharded)", sharded, 0},
      {"limiting", lim, 0},
      {"tracking", track, 0},
      {"logging(/dev/null)", logr, 0},
      {"aligned", al, 0},
      {"failure_callback", fc, 0},
      {"thread_safe", ts, 0},
      {"full stack (stat+lim+track)", full, 3.0},
  };
  enum { NCFG = sizeof cfg / sizeof cfg[0] };
  size_t sizes[] = {64, 256, 1024, 4096, 16384, 65536, 262144, 1048576};
  enum { NS = sizeof sizes / sizeof sizes[0] };
  double worst[NCFG] = {0};

  double raw1 = 0, raw2 = 0, st1 = 0, st2 = 0, sh1 = 0, sh2 = 0, full1 = 0, full2 = 0;
  if (every_row) {
    printf("devmm C benchmark: ns per allocate+free pair (median of 5 x %ld), ratio to raw "
           "malloc/free in the same run\n\n",
           iters);
    printf("%-28s", "size");
    for (int s = 0; s < NS; s++)
      printf(" %9zu", sizes[s]);
    printf("\n%-28s", "raw malloc/free (ns)");
    double raw[NS];
    for (int s = 0; s < NS; s++)
      printf(" %9.1f", raw[s] = measure(NULL, sizes[s], 1, iters, NULL));
    printf("\n");
    for (int c = 0; c < NCFG; c++) {
      printf("%-28s", cfg[c].name);
      for (int s = 0; s < NS; s++) {
        double ratio = measure(cfg[c].r, sizes[s], 1, iters, NULL) / raw[s];
        if (ratio > worst[c])
          worst[c] = ratio;
        printf(" %8.2fx", ratio);
      }
      printf("\n");
    }

    printf("\n2 threads, 64 B (throughput in M pairs/s)\n");
    measure(NULL, 64, 1, iters, &raw1);
    measure(NULL, 64, 2, iters, &raw2);
    measure(stats, 64, 1, iters, &st1);
    measure(stats, 64, 2, iters, &st2);
    measure(sharded, 64, 1, iters, &sh1);
    measure(sharded, 64, 2, iters, &sh2);
    measure(full, 64, 1, iters, &full1);
    measure(full, 64, 2, iters, &full2);
    printf("  raw malloc      1T %7.1f  2T %7.1f  scaling %.2fx\n", raw1, raw2, raw2 / raw1);
    printf("  statistics      1T %7.1f  2T %7.1f  scaling %.2fx\n", st1, st2, st2 / st1);
    printf("  stats (sharded) 1T %7.1f  2T %7.1f  scaling %.2fx\n", sh1, sh2, sh2 / sh1);
    printf("  full stack      1T %7.1f  2T %7.1f  scaling %.2fx\n", full1, full2, full2 / full1);
  }

  /* Scaling at 1 KiB (#11 item 8): each row's 1- and 2-thread time per pair (each thread's own
   * time), its ratio to raw malloc at the same thread count, and its throughput scaling (2T/1T)
   * beside malloc's own scaling measured here, in this run. */
  printf("\nscaling, 1 KiB pairs: ns per pair per thread (ratio to raw malloc), throughput "
         "2T/1T (best of 15 interleaved rounds, each run as long as %ld raw pairs)\n",
         iters / 4);
  struct {
    const char *name;
    devmm_resource *r;
    double ns1, ns2, tp1, tp2;
  } sc[] = {
      {"raw malloc/free", NULL, 1e30, 1e30, 0, 0},
      {"(floor: 1 indirect call)", FLOOR, 1e30, 1e30, 0, 0},
      {"plain resource", plain, 1e30, 1e30, 0, 0},
      {"full stack, devmm.ini default", ini_full, 1e30, 1e30, 0, 0},
      {"full stack, statistics=sharded", ini_sharded, 1e30, 1e30, 0, 0},
      {"statistics (exact)", stats, 1e30, 1e30, 0, 0},
      {"statistics (sharded)", sharded, 1e30, 1e30, 0, 0},
      {"limiting", lim, 1e30, 1e30, 0, 0},
      {"tracking", track, 1e30, 1e30, 0, 0},
  };
  enum { NSC = sizeof sc / sizeof sc[0], ROUNDS = 15 };
  /* short runs of about the same length for every row (raw malloc's: iters / 4 pairs), in rounds
   * that interleave the rows, so that a busy moment of a shared machine hits all of them alike;
   * the best of the rounds is kept (load only ever slows a run down); round 0 calibrates */
  long n[NSC];
  for (int round = 0; round <= ROUNDS; round++)
    for (int c = 0; c < NSC; c++) {
      if (round == 0)
        n[c] = iters / 40;
      else if (round == 1)
        n[c] = (long)((double)(iters / 4) * sc[0].ns1 / sc[c].ns1) + 1000;
      double tp, ns = once(sc[c].r, 1024, 1, n[c], &tp);
      if (ns < sc[c].ns1)
        sc[c].ns1 = ns, sc[c].tp1 = tp;
      ns = once(sc[c].r, 1024, 2, n[c], &tp);
      if (ns < sc[c].ns2)
        sc[c].ns2 = ns, sc[c].tp2 = tp;
    }
  double raw_scaling = sc[0].tp2 / sc[0].tp1;
  for (int c = 0; c < NSC; c++) {
    double r1 = sc[c].ns1 / sc[0].ns1, rel = sc[c].tp2 / sc[c].tp1 / raw_scaling;
    printf("  %-32s 1T %6.1f ns (%5.2fx)  2T %6.1f ns (%5.2fx)  scaling %.2fx (%.2f of "
           "malloc's)",
           sc[c].name, sc[c].ns1, r1, sc[c].ns2, sc[c].ns2 / sc[0].ns2, sc[c].tp2 / sc[c].tp1, rel);
    if (sc[c].r == plain) /* the rows with a target say how they did, here and below */
      printf("  1T <= 1.30x: %s", r1 <= 1.3 ? "PASS" : "FAIL");
    else if (sc[c].r == ini_full || sc[c].r == ini_sharded)
      printf("  scaling >= 0.80 of malloc's: %s", rel >= 0.8 ? "PASS" : "FAIL");
    printf("\n");
  }
  if (raw_scaling < 1.3)
    printf("  (raw malloc scaled only %.2fx with 2 threads: the machine is busy, and scaling "
           "figures compared with it mean little)\n",
           raw_scaling);
  double plain_1k = sc[2].ns1 / sc[0].ns1, floor_1k = sc[1].ns1 / sc[0].ns1;
  double full_rel = sc[3].tp2 / sc[3].tp1 / raw_scaling;
  double sharded_rel = sc[4].tp2 / sc[4].tp1 / raw_scaling;

  double meta = 0, bt = 0;
  if (every_row) {
    meta = tracking_bytes_per_allocation(plain);
    bt = buffer_tensor_bytes(plain);
    printf("\nmetadata: tracking %.1f bytes per live allocation; Buffer + 2-d Tensor %.1f bytes\n",
           meta, bt);
  }
  printf("\ntargets (worst ratio over all sizes; the 1 KiB scaling rows):\n");
  if (every_row) {

    for (int c = 0; c < NCFG; c++)
      if (cfg[c].target > 0)
        printf("  %-28s <= %.2fx : %.2fx %s\n", cfg[c].name, cfg[c].target, worst[c],
               worst[c] <= cfg[c].target ? "PASS" : "FAIL");
    printf("  %-28s >= 1.70x : %.2fx %s (raw malloc itself scales %.2fx here)\n",
           "statistics 2T/1T throughput", st2 / st1, st2 / st1 >= 1.7 ? "PASS" : "FAIL",
           raw2 / raw1);
    printf("  %-28s >= 1.70x : %.2fx %s\n", "stats (sharded) 2T/1T", sh2 / sh1,
           sh2 / sh1 >= 1.7 ? "PASS" : "FAIL");
    printf("  %-28s <= 64 B  : %.1f B %s\n", "tracking metadata", meta,
           meta <= 64 ? "PASS" : "FAIL");
    printf("  %-28s <= 256 B : %.1f B %s\n", "Buffer + 2-d Tensor", bt,
           bt <= 256 ? "PASS" : "FAIL");
  }
  printf("  %-28s <= 1.30x : %.2fx %s (floor, one indirect call: %.2fx)\n",
         "plain resource at 1 KiB", plain_1k, plain_1k <= 1.3 ? "PASS" : "FAIL", floor_1k);
  printf("  %-28s >= 0.80  : %.2f %s (2T/1T %.2fx; raw malloc's %.2fx)\n",
         "full stack (ini) scaling", full_rel, full_rel >= 0.8 ? "PASS" : "FAIL",
         sc[3].tp2 / sc[3].tp1, raw_scaling);
  printf("  %-28s >= 0.80  : %.2f %s (2T/1T %.2fx)\n", "full stack (sharded) scaling", sharded_rel,
         sharded_rel >= 0.8 ? "PASS" : "FAIL", sc[4].tp2 / sc[4].tp1);

  devmm_resource *all[] = {ini_sharded, ini_slim, ini_sst, ini_full, ini_lim, ini_st,
                           sharded,     full,     full_t,  full_l,   ts,      fc,
                           al,          logr,     track,   lim,      stats,   plain};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
    devmm_resource_release(all[i]);
  return 0;
}
