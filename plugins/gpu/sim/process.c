/* The simulated runtime and its process (ADR 37, "Fork"), as CUDA's runtime behaves:
 *  - initialisation: the first runtime call that needs the driver (every entry point but the
 *    version, the error names and simConfigure, which is the plugin's configuration) initialises
 *    the runtime in this process, as cudaGetDeviceCount or cudaMalloc runs cuInit; the test
 *    entry's devmm_sim_runtime_state reports it;
 *  - fork: once initialised, every runtime call in a forked child fails with
 *    simErrorInitializationError (CUDA's "initialization error" after cuInit and fork, pytorch
 *    issue 15782): the child has none of the parent's worker threads, and rt.lock may have been
 *    held by one of them at the fork. Device memory views are MADV_DONTFORK (memory.c), so a
 *    child touching them faults, as on CUDA;
 *  - exit: the runtime registers its teardown with atexit when it initialises, as the static
 *    CUDA runtime does; a runtime call made after it, or a host wait it interrupts, aborts the
 *    process with a message (CUDA crashes there, or fails with cudaErrorCudartUnloading). */
#include "simrt_internal.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

static int initialised; /* in this process (a forked child inherits it as `forked`) */
static int forked;      /* this process is a child forked after initialisation */
static int finalised;   /* the teardown at exit ran */
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void on_fork_child(void) {
  if (__atomic_load_n(&initialised, __ATOMIC_ACQUIRE))
    __atomic_store_n(&forked, 1, __ATOMIC_RELEASE);
}

static int host_waiters; /* threads in sim__host_wait (rt.lock) */

static void finalise(void) {
  if (__atomic_load_n(&forked, __ATOMIC_ACQUIRE))
    return; /* the parent's teardown: nothing of it is this process's */
  pthread_mutex_lock(&rt.lock);
  __atomic_store_n(&finalised, 1, __ATOMIC_RELEASE);
  /* threads still in a host wait (work that never ends) never return from it: the process
   * exits around them */
  pthread_mutex_unlock(&rt.lock);
}

void sim__host_wait(const char *what) {
  host_waiters++;
  pthread_cond_wait(&rt.progress, &rt.lock);
  host_waiters--;
  while (__atomic_load_n(&finalised, __ATOMIC_ACQUIRE)) /* torn down meanwhile: never returns */
    pthread_cond_wait(&rt.progress, &rt.lock);
  (void)what;
}

static void initialise(void) {
  pthread_atfork(NULL, NULL, on_fork_child);
  atexit(finalise);
  __atomic_store_n(&initialised, 1, __ATOMIC_RELEASE);
}

void sim__check_finalised(const char *what) {
  if (!__atomic_load_n(&finalised, __ATOMIC_ACQUIRE))
    return;
  fprintf(stderr,
          "devmm-sim: %s after the simulated runtime was torn down at exit (the static CUDA "
          "runtime's teardown): a thread still used the device while the process exited\n",
          what);
  abort();
}

simError_t sim__enter(void) {
  if (__atomic_load_n(&forked, __ATOMIC_ACQUIRE))
    return simErrorInitializationError;
  if (!__atomic_load_n(&initialised, __ATOMIC_ACQUIRE))
    pthread_once(&once, initialise);
  sim__check_finalised("a runtime call");
  return simSuccess;
}

int sim__forked(void) { return __atomic_load_n(&forked, __ATOMIC_ACQUIRE); }

int sim__runtime_state(void) {
  if (__atomic_load_n(&forked, __ATOMIC_ACQUIRE))
    return 2;
  return __atomic_load_n(&initialised, __ATOMIC_ACQUIRE) ? 1 : 0;
}
