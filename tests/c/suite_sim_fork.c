/* Suite sim_fork: the process boundary of a device runtime (ADR 37 and 38, "Fork"), on the
 * simulator. The simulated runtime initialises on its first call, as CUDA's does; devmm_init, a
 * CPU allocation and loading the GPU plugin never make that call (a device's stack is built at its
 * first use); once it was made, a forked child gets a quick error naming fork and the `spawn` /
 * `forkserver` start methods, and the device memory stays the parent's. At exit, devmm's
 * deferred-free thread stops before the runtime's teardown.
 * Every scenario runs in a child process of its own, with a time limit: a hang is a failure.
 * Environment (set by Meson): DEVMM_PLUGIN_PATH (the plugins' build directory). */
#include <check.h>
#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "sim_env.h"

static const devmm_device SIM0 = {DEVMM_DEVICE_SIM, 0};

/* Waits up to `seconds` for pid; kills it after that. Returns its wait status, or -1 if it hung. */
static int wait_for(pid_t pid, int seconds) {
  for (int i = 0; i < seconds * 100; i++) {
    int status;
    pid_t got = waitpid(pid, &status, WNOHANG);
    if (got == pid)
      return status;
    struct timespec ts = {0, 10 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
  return -1;
}

/* Runs fn in a child and returns its exit status; fails the test if it hung or was killed. */
static int in_child(int (*fn)(void), int seconds) {
  fflush(NULL);
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0)
    _exit(fn());
  int status = wait_for(pid, seconds);
  ck_assert_msg(status != -1, "the child hung: killed after %d s", seconds);
  ck_assert_msg(WIFEXITED(status), "the child died of signal %d", WTERMSIG(status));
  return WEXITSTATUS(status);
}

/* devmm initialised over cpu and sim from a file of its own (sim_init would read every plugin's
 * status, which enumerates every device: devmm-info's view). */
static void init_cpu_and_sim(void) {
  unsetenv("DEVMM_CONFIG");
  setenv("XDG_CONFIG_HOME", "/nonexistent-devmm-test", 1);
  const char *text = "[devmm]\nplugins = cpu, sim\n[plugin sim]\ndevices = 2\nmemory = 16MiB\n"
                     "jitter_us = 0\n[device sim:*]\nresource = sim.async\n";
  char path[512];
  const char *tmp = getenv("TMPDIR");
  snprintf(path, sizeof path, "%s/devmm-sim-fork-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  int fd = mkstemp(path);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
  close(fd);
  int rc = devmm_init(path);
  unlink(path);
  ck_assert_msg(rc == DEVMM_OK, "devmm_init: %s", devmm_last_error());
}

/* The simulator's own report of its runtime, from the copy devmm loaded (found by its file, not
 * through devmm_plugin_get: that would enumerate its devices). */
static int runtime_state(void) {
  const char *dirs = getenv("DEVMM_PLUGIN_PATH");
  ck_assert_ptr_nonnull(dirs);
  char so[1024];
  snprintf(so, sizeof so, "%.*s/devmm-sim.so", (int)strcspn(dirs, ":"), dirs);
  void *h = dlopen(so, RTLD_NOW | RTLD_NOLOAD);
  if (!h)
    return -1; /* not loaded at all */
  int (*state)(void) = (int (*)(void))dlsym(h, "devmm_sim_runtime_state");
  ck_assert_msg(state != NULL, "devmm-sim has no devmm_sim_runtime_state");
  int s = state();
  dlclose(h);
  return s;
}

static void *cpu_allocation(void) {
  devmm_resource *r;
  void *p;
  ck_assert_int_eq(devmm_get_current_resource(CPU, &r), DEVMM_OK);
  ck_assert_int_eq(devmm_allocate(r, 64, 0, NULL, &p), DEVMM_OK);
  memset(p, 1, 64);
  ck_assert_int_eq(devmm_deallocate(r, p, 64, 0, NULL), DEVMM_OK);
  devmm_resource_release(r);
  return p;
}

/* ------------------------------------------------------------------ first use */

static int init_and_cpu_use_leave_the_runtime_alone(void) {
  init_cpu_and_sim();
  cpu_allocation();
  int before = runtime_state();
  if (before != DEVMM_SIM_RUNTIME_NONE) {
    fprintf(stderr, "devmm_init and a CPU allocation initialised the sim runtime (state %d)\n",
            before);
    return 1;
  }
  devmm_resource *r;
  void *p;
  if (devmm_get_current_resource(SIM0, &r) != DEVMM_OK ||
      devmm_allocate(r, 4096, 0, NULL, &p) != DEVMM_OK) {
    fprintf(stderr, "sim:0: %s\n", devmm_last_error());
    return 2;
  }
  int after = runtime_state();
  devmm_deallocate(r, p, 4096, 0, NULL);
  devmm_resource_release(r);
  if (after != DEVMM_SIM_RUNTIME_INITIALIZED) {
    fprintf(stderr, "a sim allocation left the runtime in state %d\n", after);
    return 3;
  }
  return 0;
}

/* devmm_init with sim devices configured, and a CPU allocation, do not initialise the sim
 * runtime; the first sim allocation does. */
START_TEST(first_use_initialises_the_runtime) {
  ck_assert_int_eq(in_child(init_and_cpu_use_leave_the_runtime_alone, 20), 0);
}
END_TEST

static int sim_allocation_in_child(void) {
  cpu_allocation();
  if (runtime_state() != DEVMM_SIM_RUNTIME_NONE)
    return 10;
  devmm_resource *r;
  void *p;
  if (devmm_get_current_resource(SIM0, &r) != DEVMM_OK ||
      devmm_allocate(r, 4096, 0, NULL, &p) != DEVMM_OK ||
      devmm_memset(r, p, 7, 4096, NULL) != DEVMM_OK || devmm_synchronize(r, NULL) != DEVMM_OK) {
    fprintf(stderr, "sim:0 in the child: %s\n", devmm_last_error());
    return 11;
  }
  devmm_deallocate(r, p, 4096, 0, NULL);
  devmm_resource_release(r);
  return 0;
}

static int cpu_only_parent(void) {
  init_cpu_and_sim();
  cpu_allocation();
  return in_child(sim_allocation_in_child, 20);
}

/* A parent that used only the CPU never initialised the device runtime: its forked child uses
 * the CPU and the sim devices normally, as a CUDA program forked before cuInit may. */
START_TEST(child_of_a_cpu_only_parent_may_use_the_device) {
  ck_assert_int_eq(in_child(cpu_only_parent, 30), 0);
}
END_TEST

static int init_replaces_what_the_user_set(void) {
  init_cpu_and_sim();
  devmm_resource *mine, *r;
  if (devmm_resource_create_kind("sim.device", 0, NULL, 0, &mine) != DEVMM_OK ||
      devmm_set_current_resource(SIM0, mine, NULL) != DEVMM_OK)
    return 30;
  init_cpu_and_sim(); /* explicit: the file's stack replaces it, as for a CPU device (ADR 6) */
  if (devmm_get_current_resource(SIM0, &r) != DEVMM_OK)
    return 31;
  int replaced = r != mine && strcmp(devmm_resource_name(r), "sim.async") == 0;
  if (!replaced)
    fprintf(stderr, "sim:0's resource after devmm_init: %s\n", devmm_resource_name(r));
  devmm_resource_release(r);
  devmm_resource_release(mine);
  return replaced ? 0 : 32;
}

/* A device counted on first use still gets the file's stack at an explicit devmm_init when the
 * user had set one of its type before (its runtime is in use: counting costs nothing new). */
START_TEST(explicit_init_replaces_a_resource_set_before) {
  ck_assert_int_eq(in_child(init_replaces_what_the_user_set, 20), 0);
}
END_TEST

static int bad_option_at_first_use(void) {
  unsetenv("DEVMM_CONFIG");
  const char *text = "[devmm]\nplugins = cpu, sim\n[device sim:0]\nresource = sim.async\n"
                     "pool = bogus\n";
  char path[512];
  const char *tmp = getenv("TMPDIR");
  snprintf(path, sizeof path, "%s/devmm-sim-fork-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  int fd = mkstemp(path);
  if (fd < 0 || write(fd, text, strlen(text)) != (ssize_t)strlen(text))
    return 40;
  close(fd);
  int rc = devmm_init(path);
  unlink(path);
  if (rc != DEVMM_OK) {
    fprintf(stderr, "devmm_init: %s\n", devmm_last_error());
    return 41;
  }
  cpu_allocation();
  devmm_resource *r;
  if (devmm_get_current_resource(SIM0, &r) != DEVMM_ENOENT ||
      !strstr(devmm_last_error(), "sim.async") || !strstr(devmm_last_error(), "bogus")) {
    fprintf(stderr, "sim:0 at first use: %s\n", devmm_last_error());
    return 42;
  }
  return 0;
}

/* A factory's refusal of a lazily built device's option is that device's error at its first use
 * (devmm_init would have to initialise the runtime to find it): the CPU works meanwhile. */
START_TEST(a_refused_option_is_the_devices_error_at_first_use) {
  ck_assert_int_eq(in_child(bad_option_at_first_use, 20), 0);
}
END_TEST

/* ------------------------------------------------------------------ fork after use */

static devmm_resource *parent_resource;
static void *parent_ptr;
static unsigned char *parent_view;

/* The parent's use of sim:0: an allocation, a memset on a stream, a synchronize. */
static void use_the_device(void) {
  sim_init(0, 1);
  ck_assert_int_eq(devmm_get_current_resource(SIM0, &parent_resource), DEVMM_OK);
  ck_assert_int_eq(devmm_allocate(parent_resource, 4096, 0, NULL, &parent_ptr), DEVMM_OK);
  ck_assert_int_eq(devmm_memset(parent_resource, parent_ptr, 0x5A, 4096, NULL), DEVMM_OK);
  ck_assert_int_eq(devmm_synchronize(parent_resource, NULL), DEVMM_OK);
  parent_view = sim.view(parent_ptr, 4096);
  ck_assert_ptr_nonnull(parent_view);
  ck_assert_int_eq(parent_view[0], 0x5A);
}

static int says_fork(const char *what) {
  const char *m = devmm_last_error();
  if (strstr(m, "fork") && strstr(m, "spawn") && strstr(m, "forkserver"))
    return 1;
  fprintf(stderr, "%s: the message does not name fork, spawn and forkserver: %s\n", what, m);
  return 0;
}

static int child_after_use(void) {
  /* devmm's: a quick error that says why and what to do instead (today: the memset is queued on
   * a stream whose worker thread the child does not have, and the synchronize waits forever) */
  if (devmm_memset(parent_resource, parent_ptr, 1, 4096, NULL) == DEVMM_OK &&
      devmm_synchronize(parent_resource, NULL) == DEVMM_OK) {
    fprintf(stderr, "a memset and a synchronize in the child succeeded\n");
    return 20;
  }
  if (!says_fork("memset"))
    return 21;
  if (devmm_synchronize(parent_resource, NULL) == DEVMM_OK || !says_fork("synchronize"))
    return 22;
  void *p = NULL;
  if (devmm_allocate(parent_resource, 4096, 0, NULL, &p) == DEVMM_OK || !says_fork("allocate"))
    return 23;
  devmm_resource *r;
  if (devmm_get_current_resource(SIM0, &r) != DEVMM_OK)
    return 24;
  int rc = devmm_allocate(r, 64, 0, NULL, &p);
  devmm_resource_release(r);
  if (rc == DEVMM_OK || !says_fork("sim:0's current resource"))
    return 25;
  /* the simulator's own rule: its calls fail with the initialisation error */
  void *s = NULL;
  if (sim.stream_create(0, 0, &s) == DEVMM_OK || !strstr(devmm_last_error(), "initialization")) {
    fprintf(stderr, "stream_create in the child: %s\n", devmm_last_error());
    return 26;
  }
  if (sim.fill(NULL, parent_ptr, 1, 4096) == DEVMM_OK || sim.device_synchronize(0) == DEVMM_OK) {
    fprintf(stderr, "a kernel and a synchronize in the child succeeded\n");
    return 27;
  }
  if (runtime_state() != DEVMM_SIM_RUNTIME_FORKED)
    return 28;
  void *ctx = NULL; /* the context calls too (the thread's binding is the parent's) */
  if (sim.ctx_current(&ctx) == DEVMM_OK) {
    fprintf(stderr, "ctx_current in the child succeeded (%p)\n", ctx);
    return 29;
  }
  cpu_allocation(); /* the CPU still works */
  return 0;
}

/* Today's hang: the child has none of the sim's worker threads, and a stream's work never ran. */
START_TEST(child_after_use_fails_fast_and_says_why) {
  use_the_device();
  ck_assert_int_eq(in_child(child_after_use, 10), 0);
  ck_assert_int_eq(devmm_deallocate(parent_resource, parent_ptr, 4096, 0, NULL), DEVMM_OK);
  devmm_resource_release(parent_resource);
}
END_TEST

/* A fault ends the child with 99, whoever handles SIGSEGV first (ASan installs a handler of its
 * own, and would turn the signal into its exit status 1). */
static void on_fault(int sig) {
  (void)sig;
  _exit(99);
}

static int touch_parent_memory(void) {
  struct sigaction sa = {0};
  sa.sa_handler = on_fault;
  sigaction(SIGSEGV, &sa, NULL);
  sigaction(SIGBUS, &sa, NULL);
  return parent_view[0] == 0x5A ? 0 : 1;
}

/* The device memory is not the child's: it faults on the runtime's own view of it. */
START_TEST(child_cannot_reach_the_parents_device_memory) {
  use_the_device();
  fflush(NULL);
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0)
    _exit(touch_parent_memory());
  int status = wait_for(pid, 10);
  ck_assert_msg(status != -1, "the child hung");
  ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 99,
                "the child read the parent's device memory (exit %d, signal %d)",
                WIFEXITED(status) ? WEXITSTATUS(status) : -1,
                WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  ck_assert_int_eq(devmm_deallocate(parent_resource, parent_ptr, 4096, 0, NULL), DEVMM_OK);
  devmm_resource_release(parent_resource);
}
END_TEST

/* ------------------------------------------------------------------ exit */

/* A buffer handed to a consumer's stream whose work takes a while, then freed: its free is
 * deferred to the background thread, which is still waiting for the device when main returns. */
static int exit_with_a_pending_deferred_free(void) {
  sim_init(0, 2);
  devmm_resource *r;
  devmm_buffer *b;
  ck_assert_int_eq(devmm_get_current_resource(SIM0, &r), DEVMM_OK);
  ck_assert_int_eq(devmm_buffer_allocate(r, 4096, 0, NULL, &b), DEVMM_OK);
  void *consumer = stream(0);
  sim.launch(consumer, sleep_kernel, (void *)(intptr_t)300);
  ck_assert_int_eq(devmm_buffer_stream_wait(b, consumer), DEVMM_OK);
  devmm_buffer_release(b); /* deferred: the consumer's kernel still runs */
  devmm_resource_release(r);
  struct timespec ts = {0, 50 * 1000 * 1000}; /* the thread is waiting for the device now */
  nanosleep(&ts, NULL);
  exit(0); /* atexit handlers: devmm's deferred-free thread, the runtime's teardown */
}

START_TEST(exit_with_pending_deferred_frees_is_clean) {
  ck_assert_int_eq(in_child(exit_with_a_pending_deferred_free, 10), 0);
}
END_TEST

Suite *sim_fork_suite(void) {
  const TTest *const tests[] = {first_use_initialises_the_runtime,
                                child_of_a_cpu_only_parent_may_use_the_device,
                                child_after_use_fails_fast_and_says_why,
                                child_cannot_reach_the_parents_device_memory,
                                exit_with_pending_deferred_frees_is_clean,
                                explicit_init_replaces_a_resource_set_before,
                                a_refused_option_is_the_devices_error_at_first_use,
                                NULL};
  return suite_of("sim_fork", tests);
}
