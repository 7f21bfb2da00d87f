/* Small helpers every layer uses: a string duplicate, a monotonic clock, a small thread id, the
 * spinlock's slow path and a file type's name (base.h). */
#include "base.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

char *devmm__strdup(const char *s) {
  size_t n = strlen(s) + 1;
  char *d = malloc(n);
  if (d)
    memcpy(d, s, n);
  return d;
}

uint64_t devmm__now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t devmm__thread_id(void) {
  static atomic_ulong next = 1;
  /* initial-exec: a plain load instead of a __tls_get_addr call on the sharded hot path; 8
   * bytes fit the static TLS surplus glibc keeps for dlopen'ed libraries */
  static _Thread_local uint64_t id __attribute__((tls_model("initial-exec")));
  if (!id)
    id = atomic_fetch_add(&next, 1);
  return id;
}

void devmm__spin_wait(devmm__spinlock *l) {
  for (int spins = 0; atomic_exchange_explicit(&l->held, 1, memory_order_acquire);)
    while (atomic_load_explicit(&l->held, memory_order_relaxed))
      if (++spins > 64)
        sched_yield(); /* the holder was preempted (or runs a foreach callback): let it run */
}

const char *devmm__file_type(unsigned mode) {
  return S_ISREG(mode)    ? "a regular file"
         : S_ISDIR(mode)  ? "a directory"
         : S_ISFIFO(mode) ? "a FIFO"
         : S_ISSOCK(mode) ? "a socket"
         : S_ISCHR(mode)  ? "a character device"
         : S_ISBLK(mode)  ? "a block device"
         : S_ISLNK(mode)  ? "a symbolic link"
                          : "not a regular file";
}
