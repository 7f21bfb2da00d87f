/* Start-up benchmark: devmm_init with the default configuration (cpu plugin), and devmm-info
 * end to end as a whole process, beside /bin/true spawned the same way in the same run.
 *   bench-init <devmm-info> <devmm.ini>
 * Targets: devmm_init <= 5 ms; devmm-info end to end <= 50 ms. */
#include <devmm/devmm.h>

#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>

extern char **environ;

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static double run(char *const argv[], int reps) {
  double best = 1e9;
  for (int i = 0; i < reps; i++) {
    pid_t pid;
    double t0 = now();
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", 1, 0);
    if (posix_spawn(&pid, argv[0], &fa, NULL, argv, environ) != 0) {
      perror(argv[0]);
      exit(1);
    }
    int st;
    waitpid(pid, &st, 0);
    posix_spawn_file_actions_destroy(&fa);
    double dt = now() - t0;
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
      fprintf(stderr, "%s failed\n", argv[0]);
      exit(1);
    }
    if (dt < best)
      best = dt;
  }
  return best * 1e3;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: bench-init <devmm-info> <devmm.ini>\n");
    return 2;
  }
  double t0 = now();
  if (devmm_init(NULL) != DEVMM_OK) {
    fprintf(stderr, "devmm_init: %s\n", devmm_last_error());
    return 1;
  }
  double first = (now() - t0) * 1e3;
  double again = 1e9;
  for (int i = 0; i < 50; i++) {
    t0 = now();
    devmm_init(NULL);
    double dt = (now() - t0) * 1e3;
    if (dt < again)
      again = dt;
  }
  char *info_argv[] = {argv[1], "--check", "--config", argv[2], NULL};
  char *true_argv[] = {"/bin/true", NULL};
  double t_true = run(true_argv, 30), t_info = run(info_argv, 30);
  printf("devmm start-up (best of 30/50)\n");
  printf("  devmm_init, first (loads the cpu plugin)  %7.3f ms   target <= 5 ms : %s\n", first,
         first <= 5 ? "MET" : "MISSED");
  printf("  devmm_init, again                          %7.3f ms\n", again);
  printf("  /bin/true as a process                     %7.3f ms\n", t_true);
  printf("  devmm-info --check as a process            %7.3f ms   (%.1fx /bin/true) target <= 50 "
         "ms : %s\n",
         t_info, t_info / t_true, t_info <= 50 ? "MET" : "MISSED");
  devmm_shutdown();
  return 0;
}
