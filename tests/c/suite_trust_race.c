/* Suite trust_race: the file that is loaded is the file that was checked. While another process
 * swaps the plugin's directory with one whose copy is writable by others (an atomic renameat2
 * exchange, as fast as it can), each of a bounded number of tries loads the plugin in a fresh
 * process; a try in which the unchecked copy got loaded is a win for the swapper, and the test
 * passes only if no try wins (ADR 39). Environment (set by Meson): DEVMM_TEST_PLUGINS. */
#include <check.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "plugin_env.h"
#include "testres.h"

#define TRIES 300

enum { LOADED_CHECKED = 10, REFUSED, LOADED_UNCHECKED, OTHER };

/* One try, in a process of its own (a loaded plugin stays loaded): loads cfg and says what came
 * of it. bad_fd is the unchecked copy, open: whether that file is loaded is asked of the dynamic
 * loader by its inode (RTLD_NOLOAD), whatever name it was loaded under. */
static int one_try(const char *cfg, int bad_fd, char *msg, size_t n) {
  int pipefd[2];
  ck_assert_int_eq(pipe(pipefd), 0);
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    close(pipefd[0]);
    char text[1024] = "";
    int code = OTHER;
    if (devmm_init(cfg) != DEVMM_OK) {
      snprintf(text, sizeof text, "devmm_init: %s", devmm_last_error());
    } else {
      devmm_plugin_status st = {0};
      for (size_t i = 0; i < devmm_plugin_count(); i++)
        if (devmm_plugin_get(i, &st) == DEVMM_OK && strcmp(st.name, "faulty") == 0)
          break;
      char self[64];
      snprintf(self, sizeof self, "/proc/self/fd/%d", bad_fd);
      void *bad = dlopen(self, RTLD_LAZY | RTLD_NOLOAD);
      if (bad)
        code = LOADED_UNCHECKED;
      else if (st.loaded)
        code = LOADED_CHECKED;
      else if (st.error && strstr(st.error, "writable by others"))
        code = REFUSED;
      snprintf(text, sizeof text, "%s", st.loaded ? "" : st.error ? st.error : "(no error)");
    }
    ssize_t w = write(pipefd[1], text, strlen(text));
    (void)w;
    _exit(code);
  }
  close(pipefd[1]);
  ssize_t got = read(pipefd[0], msg, n - 1);
  msg[got > 0 ? got : 0] = '\0';
  close(pipefd[0]);
  int st;
  ck_assert_int_eq(waitpid(pid, &st, 0), pid);
  return WIFEXITED(st) ? WEXITSTATUS(st) : OTHER;
}

START_TEST(swap_between_check_and_load_never_wins) {
  isolate();
  chain c;
  chain_make(&c, NULL); /* never loaded here: each try's process would inherit it */
  char evil[TESTRES_PATH_MAX + 16], bad[TESTRES_PATH_MAX + 48], src[1024];
  snprintf(evil, sizeof evil, "%s/evil", c.mid);
  ck_assert_int_eq(mkdir(evil, 0755), 0);
  ck_assert_int_eq(chmod(evil, 0755), 0);
  snprintf(bad, sizeof bad, "%s/devmm-faulty.so", evil);
  snprintf(src, sizeof src, "%s/devmm-faulty.so", env_dir("DEVMM_TEST_PLUGINS"));
  testres_copy_file(src, bad, 0757); /* writable by others: the check refuses it */
  int bad_fd = open(bad, O_RDONLY | O_CLOEXEC);
  ck_assert_int_ge(bad_fd, 0);
  int flags = fcntl(bad_fd, F_GETFD);
  ck_assert_int_eq(fcntl(bad_fd, F_SETFD, flags & ~FD_CLOEXEC), 0);
  char msg[1024];
  ck_assert_msg(one_try(c.cfg, bad_fd, msg, sizeof msg) == LOADED_CHECKED, "%s", msg);
  pid_t swapper = fork();
  ck_assert_int_ge(swapper, 0);
  if (swapper == 0) {
    for (;;)
      if (renameat2(AT_FDCWD, c.leaf, AT_FDCWD, evil, RENAME_EXCHANGE) != 0)
        _exit(1);
  }
  int counts[OTHER + 1] = {0};
  char first_win[1024] = "", first_other[1024] = "";
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (int i = 0; i < TRIES; i++) {
    int code = one_try(c.cfg, bad_fd, msg, sizeof msg);
    if (code < LOADED_CHECKED || code > OTHER)
      code = OTHER;
    counts[code]++;
    if (code == LOADED_UNCHECKED && !*first_win)
      snprintf(first_win, sizeof first_win, "try %d", i + 1);
    if (code == OTHER && !*first_other)
      snprintf(first_other, sizeof first_other, "%s", msg);
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  kill(swapper, SIGKILL);
  int st;
  ck_assert_int_eq(waitpid(swapper, &st, 0), swapper);
  ck_assert_msg(WIFSIGNALED(st), "the swapper stopped by itself: renameat2 failed");
  printf("trust_race: %d tries in %.2f s: %d loaded the checked copy, %d refused the unchecked "
         "one, %d loaded the unchecked one, %d other\n",
         TRIES, (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9,
         counts[LOADED_CHECKED], counts[REFUSED], counts[LOADED_UNCHECKED], counts[OTHER]);
  ck_assert_msg(counts[LOADED_UNCHECKED] == 0,
                "the swap won %d of %d tries (first: %s): a file that was never checked was loaded",
                counts[LOADED_UNCHECKED], TRIES, first_win);
  ck_assert_msg(counts[OTHER] == 0, "%d tries ended otherwise, first: %s", counts[OTHER],
                first_other);
  /* the race was real: both copies were seen */
  ck_assert_msg(counts[LOADED_CHECKED] > 0 && counts[REFUSED] > 0,
                "the swapper never raced the loader (%d loaded, %d refused)",
                counts[LOADED_CHECKED], counts[REFUSED]);
  close(bad_fd);
  /* the directories may be either way round now: the chain's removal takes both */
  chain_free(&c);
}
END_TEST

Suite *trust_race_suite(void) {
  Suite *s = suite_create("trust_race");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, swap_between_check_and_load_never_wins);
  suite_add_tcase(s, tc);
  return s;
}
