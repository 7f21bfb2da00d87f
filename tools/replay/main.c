/* devmm-replay: replays the allocations and frees of a memory log (the logging adaptor's CSV, or
 * RMM's) against other resource stacks, and reports wall time, the peak of requested bytes,
 * failures and the memory footprint, so that stacks can be compared on a recorded workload.
 *
 * Like RMM's replay benchmark, each logged thread is replayed by a thread of its own, in that
 * thread's order. A free recorded in one thread for memory allocated in another waits until that
 * allocation has been replayed (an allocation always precedes its free in the log, so this cannot
 * deadlock). Frees are paired with allocations by devmm_log_read (first in, first out per
 * address), so reused addresses and out-of-order lines of several threads replay correctly.
 *
 * Exit status: 0 fine; 1 bad arguments or log; 2 a stack could not be built. */
#include "replay.h"

#include <inttypes.h>
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_STACKS 16

static void usage(FILE *f) {
  fputs(
      "usage: devmm-replay LOG.csv [--resource KIND[:KEY=VALUE,...]]... [--config FILE]...\n"
      "                    [--device DEV] [--serial] [--repeat N] [--footprint rss|mem_info|none]\n"
      "                    [--json]\n"
      "  --resource KIND  replay against a new resource of this kind (cpu.mmap, cuda.async:"
      "release_threshold=1GiB)\n"
      "  --config FILE    replay against the stack FILE builds for the device\n"
      "                   (neither: the stack of the usual devmm.ini lookup)\n"
      "  --device DEV     the device to replay on (default cpu)\n"
      "  --serial         one thread, the log's global order (default: one thread per logged\n"
      "                   thread, each in its own order)\n"
      "  --repeat N       timed replays per stack, the best is reported (default 3)\n"
      "  --footprint M    how the footprint is measured: rss (the process's peak resident\n"
      "                   memory, every page touched; host memory), mem_info (the device's\n"
      "                   used memory at each new peak of requested bytes) or none\n"
      "                   (default: rss for host memory, else mem_info)\n"
      "  --json           print JSON\n",
      f);
}

static void json_str(const char *s) {
  putchar('"');
  for (; *s; s++) {
    if (*s == '"' || *s == '\\')
      printf("\\%c", *s);
    else if ((unsigned char)*s < 0x20)
      printf("\\u%04x", *s);
    else
      putchar(*s);
  }
  putchar('"');
}

typedef struct {
  char name[256];
  const char *source;
  double best_ms;
  long long peak;
  size_t failures, failed_frees;
  int method;     /* FP_RSS, FP_MEM_INFO, FP_NONE */
  long long foot; /* bytes; -1 unknown */
  char why[160];  /* why the footprint is unknown */
} result;

static int measure(replay *rp, const stack_spec *spec, devmm_device dev, int fp, int repeat,
                   size_t nthreads, result *res) {
  devmm_resource *r;
  memset(res, 0, sizeof *res);
  res->source = spec->spec ? spec->spec : "devmm.ini lookup";
  if (replay_build_stack(spec, dev, &r)) {
    fprintf(stderr, "devmm-replay: %s\n", devmm_last_error());
    return 2;
  }
  snprintf(res->name, sizeof res->name, "%s", devmm_resource_name(r));
  rp->r = r;
  /* the measured pass first, before the timed ones leave freed memory resident in the heap:
   * peak and failures always, the footprint as chosen */
  int host = (devmm_resource_flags(r) & DEVMM_RESOURCE_HOST_ACCESSIBLE) != 0;
  res->method = fp == FP_AUTO ? (host ? FP_RSS : FP_MEM_INFO) : fp;
  res->foot = -1;
  long base_kib = -1;
  size_t f0 = 0, t0 = 0;
  if (res->method == FP_RSS && !host) {
    snprintf(res->why, sizeof res->why, "rss: the stack's memory is not host memory");
  } else if (res->method == FP_RSS) {
    malloc_trim(0); /* hand back what earlier stacks left free in malloc's heap */
    if (replay_reset_peak_rss() || (base_kib = replay_status_kib("VmRSS")) < 0)
      snprintf(res->why, sizeof res->why, "rss: /proc/self/clear_refs or status unavailable");
    else
      rp->touch = 1;
  } else if (res->method == FP_MEM_INFO) {
    if (devmm_mem_info(r, &f0, &t0) != DEVMM_OK)
      snprintf(res->why, sizeof res->why, "mem_info: %s", devmm_last_error());
    else
      rp->mem_info = 1;
    atomic_store(&rp->min_free, f0);
  }
  if (replay_once(rp, nthreads) < 0) {
    devmm_resource_release(r);
    return 2;
  }
  if (rp->touch) {
    long hwm = replay_status_kib("VmHWM");
    res->foot = hwm >= base_kib ? (long long)(hwm - base_kib) * 1024 : 0;
  } else if (rp->mem_info) {
    res->foot = (long long)(f0 - atomic_load(&rp->min_free));
  }
  res->peak = atomic_load(&rp->peak);
  res->failures = atomic_load(&rp->failures);
  res->failed_frees = atomic_load(&rp->failed_frees);
  rp->touch = rp->mem_info = 0;
  res->best_ms = -1;
  for (int k = 0; k < repeat; k++) {
    double ms = replay_once(rp, nthreads);
    if (ms < 0) {
      devmm_resource_release(r);
      return 2;
    }
    if (res->best_ms < 0 || ms < res->best_ms)
      res->best_ms = ms;
  }
  devmm_resource_release(r);
  return 0;
}

/* measure() in a child process of its own for host memory, so that a stack's time and footprint
 * do not depend on the stacks replayed before it: a stack after another found that one's pages
 * resident and reported a footprint of 0 B (test_replay_measures_each_stack_alone). Device
 * memory is measured here: a GPU runtime does not survive a fork (ADR 37). */
static int measure_alone(replay *rp, const stack_spec *spec, devmm_device dev, int fp, int repeat,
                         size_t nthreads, result *res) {
  int fds[2];
  if (dev.device_type != DEVMM_DEVICE_CPU || pipe(fds) != 0)
    return measure(rp, spec, dev, fp, repeat, nthreads, res);
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return measure(rp, spec, dev, fp, repeat, nthreads, res);
  }
  if (pid == 0) {
    close(fds[0]);
    int rc = measure(rp, spec, dev, fp, repeat, nthreads, res);
    ssize_t w = rc ? 0 : write(fds[1], res, sizeof *res);
    fflush(NULL);
    _exit(rc ? rc : w == (ssize_t)sizeof *res ? 0 : 2);
  }
  close(fds[1]);
  size_t got = 0;
  while (got < sizeof *res) {
    ssize_t n = read(fds[0], (char *)res + got, sizeof *res - got);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      break;
    got += (size_t)n;
  }
  close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
    ;
  if (WIFEXITED(status) && WEXITSTATUS(status) != 0)
    return WEXITSTATUS(status);
  if (!WIFEXITED(status) || got != sizeof *res) {
    fprintf(stderr, "devmm-replay: replaying against %s: the measuring process %s %d\n",
            spec->spec ? spec->spec : "the devmm.ini lookup",
            WIFSIGNALED(status) ? "died of signal" : "exited with",
            WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
    return 2;
  }
  res->source = spec->spec ? spec->spec : "devmm.ini lookup"; /* a pointer: not the child's */
  return 0;
}

/* The log's double frees and frees of another size than their allocation's, as the timeline says
 * them (python/devmm/timeline.py _odd_frees; test_a_double_free_in_a_log_is_said_as_one_...). */
static void say_odd_frees(const devmm_log *log) {
  if (log->double_frees == 1)
    printf("  1 free of 0x%" PRIx64 " that was freed already (line %zu; skipped)\n",
           log->events[log->first_double_free].ptr, log->double_free_line);
  else if (log->double_frees)
    printf("  %zu frees of memory that was freed already (the first: 0x%" PRIx64
           ", line %zu; skipped)\n",
           log->double_frees, log->events[log->first_double_free].ptr, log->double_free_line);
  if (log->resized_frees) {
    const devmm_log_event *e = &log->events[log->first_resized_free];
    char what[128];
    snprintf(what, sizeof what, "line %zu: %" PRIu64 " bytes, allocated as %" PRIu64,
             log->resized_free_line, e->bytes, log->events[e->peer].bytes);
    if (log->resized_frees == 1)
      printf("  1 free with another size than its allocation (%s)\n", what);
    else
      printf("  %zu frees with another size than their allocations (the first: %s)\n",
             log->resized_frees, what);
  }
}

int main(int argc, char **argv) {
  const char *path = NULL, *device = "cpu";
  stack_spec specs[MAX_STACKS];
  size_t nspecs = 0;
  int serial = 0, repeat = 3, json = 0, fp = FP_AUTO;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    int has_value = i + 1 < argc;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      usage(stdout);
      return 0;
    } else if ((!strcmp(a, "--resource") || !strcmp(a, "--config")) && has_value) {
      if (nspecs == MAX_STACKS) {
        fprintf(stderr, "devmm-replay: at most %d stacks\n", MAX_STACKS);
        return 1;
      }
      specs[nspecs].is_config = !strcmp(a, "--config");
      specs[nspecs++].spec = argv[++i];
    } else if (!strcmp(a, "--device") && has_value) {
      device = argv[++i];
    } else if (!strcmp(a, "--repeat") && has_value) {
      char *end;
      long v = strtol(argv[++i], &end, 10);
      if (*end || v < 1 || v > 1000) {
        fprintf(stderr, "devmm-replay: --repeat '%s': expected an integer 1..1000\n", argv[i]);
        return 1;
      }
      repeat = (int)v;
    } else if (!strcmp(a, "--footprint") && has_value) {
      const char *m = argv[++i];
      fp = !strcmp(m, "rss")        ? FP_RSS
           : !strcmp(m, "mem_info") ? FP_MEM_INFO
           : !strcmp(m, "none")     ? FP_NONE
                                    : -1;
      if (fp < 0) {
        fprintf(stderr, "devmm-replay: --footprint '%s': expected rss, mem_info or none\n", m);
        return 1;
      }
    } else if (!strcmp(a, "--serial")) {
      serial = 1;
    } else if (!strcmp(a, "--json")) {
      json = 1;
    } else if (a[0] == '-' || path) {
      fprintf(stderr, "devmm-replay: %s '%s'\n",
              a[0] == '-' ? (has_value ? "unknown option" : "unknown option or missing value")
                          : "a second log",
              a);
      usage(stderr);
      return 1;
    } else {
      path = a;
    }
  }
  if (!path) {
    fputs("devmm-replay: no LOG given: the memory log (CSV) to replay, the first argument\n",
          stderr);
    usage(stderr);
    return 1;
  }
  devmm_device dev;
  if (devmm_device_parse(device, &dev)) {
    fprintf(stderr, "devmm-replay: --device: %s\n", devmm_last_error());
    return 1;
  }
  if (!nspecs)
    specs[nspecs++] = (stack_spec){NULL, 0};

  devmm_log *log;
  if (devmm_log_read(path, &log)) {
    fprintf(stderr, "devmm-replay: %s\n", devmm_last_error());
    return 1;
  }
  size_t nallocs = 0, nfrees = 0, nfailed = 0;
  for (size_t i = 0; i < log->nevents; i++) {
    uint32_t act = log->events[i].action;
    nallocs += act == DEVMM_LOG_ALLOCATE;
    nfrees += act == DEVMM_LOG_FREE;
    nfailed += act == DEVMM_LOG_ALLOCATE_FAILURE;
  }
  size_t nthreads = serial || log->nthreads < 2 ? 1 : log->nthreads;

  replay rp = {0};
  rp.log = log;
  rp.page = sysconf(_SC_PAGESIZE);
  rp.slot = calloc(log->nevents ? log->nevents : 1, sizeof *rp.slot);
  rp.per_thread = calloc(log->nthreads + 1, sizeof *rp.per_thread);
  rp.nper = calloc(log->nthreads + 1, sizeof *rp.nper);
  int rc = !rp.slot || !rp.per_thread || !rp.nper;
  for (size_t i = 0; i < log->nevents && !rc; i++)
    rp.nper[log->events[i].thread]++;
  for (size_t t = 0; t < log->nthreads && !rc; t++) {
    rp.per_thread[t] = malloc((rp.nper[t] ? rp.nper[t] : 1) * sizeof **rp.per_thread);
    rc = !rp.per_thread[t];
    rp.nper[t] = 0;
  }
  for (size_t i = 0; i < log->nevents && !rc; i++) {
    uint32_t t = log->events[i].thread;
    rp.per_thread[t][rp.nper[t]++] = (uint32_t)i;
  }
  if (rc || log->nevents > UINT32_MAX) {
    fprintf(stderr, "devmm-replay: %s: out of memory (or more than 2^32 events)\n", path);
    rc = 1;
    nspecs = 0; /* replay nothing; clean up below */
  }

  result res[MAX_STACKS];
  for (size_t s = 0; s < nspecs; s++)
    if ((rc = measure_alone(&rp, &specs[s], dev, fp, repeat, nthreads, &res[s])) != 0)
      break;

  if (!rc && json) {
    printf("{\"log\": ");
    json_str(path);
    printf(", \"events\": %zu, \"allocations\": %zu, \"frees\": %zu, \"threads\": %zu, "
           "\"replay_threads\": %zu, \"unmatched_frees\": %zu, \"never_freed\": %zu, "
           "\"double_frees\": %zu, \"resized_frees\": %zu, "
           "\"log_failures\": %zu, \"repeat\": %d, \"stacks\": [",
           log->nevents, nallocs, nfrees, log->nthreads, nthreads, log->unmatched_frees,
           log->never_freed, log->double_frees, log->resized_frees, nfailed, repeat);
    for (size_t s = 0; s < nspecs; s++) {
      const result *x = &res[s];
      static const char *methods[] = {"auto", "rss", "mem_info", "none"};
      printf("%s{\"name\": ", s ? ", " : "");
      json_str(x->name);
      printf(", \"source\": ");
      json_str(x->source);
      printf(", \"wall_ms\": %.3f, \"peak_bytes\": %lld, \"failures\": %zu, \"failed_frees\": "
             "%zu, \"footprint_method\": \"%s\", \"footprint_peak_bytes\": ",
             x->best_ms, x->peak, x->failures, x->failed_frees, methods[x->method]);
      if (x->foot < 0)
        printf("null, \"footprint_unknown\": ");
      if (x->foot < 0)
        json_str(x->why[0] ? x->why : "not measured");
      else
        printf("%lld", x->foot);
      printf("}");
    }
    printf("]}\n");
  } else if (!rc) {
    printf("%s: %zu event%s (%zu allocation%s, %zu free%s, %zu failed allocation%s) from %zu "
           "thread%s\n",
           path, log->nevents, log->nevents == 1 ? "" : "s", nallocs, nallocs == 1 ? "" : "s",
           nfrees, nfrees == 1 ? "" : "s", nfailed, nfailed == 1 ? "" : "s", log->nthreads,
           log->nthreads == 1 ? "" : "s");
    if (log->unmatched_frees || log->never_freed)
      printf("  %zu free%s of memory allocated before the log began (skipped), %zu allocation%s "
             "never freed (freed after the replay)\n",
             log->unmatched_frees, log->unmatched_frees == 1 ? "" : "s", log->never_freed,
             log->never_freed == 1 ? "" : "s");
    say_odd_frees(log);
    printf("replayed %d time%s per stack (best shown), %s\n\n", repeat, repeat == 1 ? "" : "s",
           nthreads == 1 ? "in the log's order"
                         : "one thread per logged thread, each in its own order");
    int width =
        32; /* the stack column fits the longest name (test_replay_columns_fit_long_names) */
    for (size_t s = 0; s < nspecs; s++)
      if ((int)strlen(res[s].name) > width)
        width = (int)strlen(res[s].name);
    printf("%-*s %12s %15s %15s %9s %9s\n", width, "stack", "wall", "peak requested", "footprint",
           "overhead", "failures");
    size_t fastest = 0, smallest = SIZE_MAX;
    for (size_t s = 0; s < nspecs; s++) {
      const result *x = &res[s];
      char peak[32], foot[32] = "n/a", over[32] = "n/a";
      devmm_format_size((double)x->peak, 1, peak, sizeof peak);
      if (x->foot >= 0) {
        devmm_format_size((double)x->foot, 1, foot, sizeof foot);
        if (x->peak > 0)
          snprintf(over, sizeof over, "%+.0f%%", 100.0 * ((double)x->foot / x->peak - 1));
        if (smallest == SIZE_MAX || x->foot < res[smallest].foot)
          smallest = s;
      }
      if (x->best_ms < res[fastest].best_ms)
        fastest = s;
      printf("%-*s %9.2f ms %15s %15s %9s %9zu\n", width, x->name, x->best_ms, peak, foot, over,
             x->failures);
    }
    for (size_t s = 0; s < nspecs; s++)
      if (res[s].foot < 0 && res[s].method != FP_NONE)
        printf("  %s: footprint unknown (%s)\n", res[s].name, res[s].why);
    printf("\nfootprint: %s\n",
           fp == FP_NONE ? "not measured"
                         : "peak resident memory of the replay with every page touched (host), or "
                           "the device's used memory at the peak (mem_info)");
    if (nspecs > 1) {
      printf("fastest: %s", res[fastest].name);
      if (smallest != SIZE_MAX)
        printf("; smallest footprint: %s", res[smallest].name);
      printf("\n");
    }
  }
  for (size_t t = 0; rp.per_thread && t < log->nthreads; t++)
    free(rp.per_thread[t]);
  free(rp.per_thread);
  free(rp.nper);
  free((void *)rp.slot);
  devmm_log_free(log);
  return rc;
}
