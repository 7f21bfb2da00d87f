/* Suite setuid: a set-uid program ignores the environment (DEVMM_CONFIG and the rest: secure
 * getenv). It needs a directory where a set-uid copy of the probe can run; otherwise it skips,
 * saying why. Environment (set by Meson): DEVMM_TEST_PROBE, DEVMM_TEST_LIBRARY,
 * DEVMM_TEST_SETUID_INI. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "testres.h"

/* Runs a shell command; its output (stdout and stderr) in out. Returns the exit status. */
static int run_capture(const char *cmd, char *out, size_t n) {
  char full[4096];
  snprintf(full, sizeof full, "%s 2>&1", cmd);
  FILE *p = popen(full, "r");
  ck_assert_ptr_nonnull(p);
  size_t len = fread(out, 1, n - 1, p);
  out[len] = '\0';
  int st = pclose(p);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

/* The probe, libdevmm and the test's devmm.ini, copied into dir: the probe loads only the
 * libdevmm next to it, so nothing of the checkout need be reachable for whoever runs it. */
static void stage_probe(const char *dir) {
  const char *from[3] = {getenv("DEVMM_TEST_PROBE"), getenv("DEVMM_TEST_LIBRARY"),
                         getenv("DEVMM_TEST_SETUID_INI")};
  const char *to[3] = {"probe", "libdevmm.so.0", "devmm.ini"};
  const unsigned mode[3] = {0755, 0644, 0644};
  for (int i = 0; i < 3; i++) {
    ck_assert_msg(from[i] != NULL,
                  "DEVMM_TEST_PROBE, DEVMM_TEST_LIBRARY and DEVMM_TEST_SETUID_INI must be set "
                  "(run through meson test)");
    char path[TESTRES_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/%s", dir, to[i]);
    testres_copy_file(from[i], path, mode[i]);
  }
}

static void remove_tree(const char *dir) {
  char cmd[TESTRES_PATH_MAX + 16];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  ck_assert_int_eq(system(cmd), 0);
}

#define AS_NOBODY "setpriv --reuid=65534 --regid=65534 --clear-groups"

/* A directory under which nobody can run a set-uid program: $TMPDIR if it qualifies, else the
 * first of the system's world-accessible temporary directories that does. NULL (and why) if
 * none does. */
static const char *setuid_base(char *why, size_t n) {
  const char *candidates[] = {testres_tmpdir(), "/tmp", "/var/tmp", "/dev/shm"};
  why[0] = '\0';
  for (size_t i = 0; i < sizeof candidates / sizeof candidates[0]; i++) {
    const char *c = candidates[i];
    struct statvfs v;
    char cmd[TESTRES_PATH_MAX + 128], out[256];
    size_t used = strlen(why);
    snprintf(cmd, sizeof cmd, "cd / && " AS_NOBODY " test -x '%s'", c);
    if (statvfs(c, &v) != 0)
      snprintf(why + used, n - used, "%s%s: %s", used ? "; " : "", c, strerror(errno));
    else if (v.f_flag & ST_NOSUID)
      snprintf(why + used, n - used, "%s%s: mounted nosuid", used ? "; " : "", c);
    else if (run_capture(cmd, out, sizeof out) != 0)
      snprintf(why + used, n - used, "%s%s: nobody cannot enter it %s", used ? "; " : "", c, out);
    else
      return c;
  }
  return NULL;
}

/* A set-uid process ignores DEVMM_CONFIG & co. (secure_getenv): a copy of a probe program made
 * set-uid root and run as nobody must not read the file DEVMM_CONFIG names. The copies live in a
 * directory of the test's own, so it works from a checkout that nobody can enter. Setting the
 * set-uid half up needs root (CI runs as root); without root, or where set-uid has no effect,
 * the test skips and says why. */
START_TEST(setuid_ignores_the_environment) {
  char dir[TESTRES_PATH_MAX], cmd[4 * TESTRES_PATH_MAX], out[4096], want[2 * TESTRES_PATH_MAX];
  /* not set-uid: the environment is honoured */
  testres_mkdtemp(dir, sizeof dir, "probe");
  stage_probe(dir);
  snprintf(cmd, sizeof cmd, "cd / && DEVMM_CONFIG='%s/devmm.ini' '%s/probe'", dir, dir);
  snprintf(want, sizeof want, "%s/devmm.ini\nsecure 0\n", dir);
  int rc = run_capture(cmd, out, sizeof out);
  remove_tree(dir);
  ck_assert_msg(rc == 0 && strcmp(out, want) == 0, "the probe as this user: exit %d, printed '%s'",
                rc, out);
  if (geteuid() != 0) {
    testres_skip("setuid_ignores_the_environment: not root, so no set-uid root copy of the probe "
                 "can be made (the environment was honoured without set-uid)");
    return;
  }
  char why[2048];
  const char *base = setuid_base(why, sizeof why);
  if (!base) {
    testres_skip("setuid_ignores_the_environment: no directory where nobody can run a set-uid "
                 "program (%s)",
                 why);
    return;
  }
  int n = snprintf(dir, sizeof dir, "%s/devmm-suid-XXXXXX", base);
  ck_assert_int_lt(n, (int)sizeof dir);
  ck_assert_ptr_nonnull(mkdtemp(dir));
  ck_assert_int_eq(chmod(dir, 0755), 0);
  stage_probe(dir);
  /* the control: the copy runs as nobody and honours the environment while not set-uid */
  snprintf(cmd, sizeof cmd, "cd / && DEVMM_CONFIG='%s/devmm.ini' " AS_NOBODY " '%s/probe'", dir,
           dir);
  snprintf(want, sizeof want, "%s/devmm.ini\nsecure 0\n", dir);
  int control = run_capture(cmd, out, sizeof out);
  char control_out[4096];
  snprintf(control_out, sizeof control_out, "%s", out);
  /* set-uid root */
  char probe[TESTRES_PATH_MAX + 16];
  snprintf(probe, sizeof probe, "%s/probe", dir);
  ck_assert_int_eq(chmod(probe, 04755), 0);
  rc = run_capture(cmd, out, sizeof out);
  remove_tree(dir);
  ck_assert_msg(control == 0 && strcmp(control_out, want) == 0,
                "the control: the probe as nobody, not set-uid, exited %d and printed '%s'",
                control, control_out);
  ck_assert_msg(rc == 0, "the set-uid probe exited %d: '%s'", rc, out);
  if (strstr(out, "\nsecure 0\n")) {
    testres_skip("setuid_ignores_the_environment: the set-uid bit has no effect here (no_new_privs "
                 "set for this process tree?): '%s'",
                 out);
    return;
  }
  char config[TESTRES_PATH_MAX + 32];
  snprintf(config, sizeof config, "%s/devmm.ini\n", dir);
  ck_assert_msg(strstr(out, "\nsecure 1\n") != NULL, "the set-uid probe printed '%s'", out);
  ck_assert_msg(strncmp(out, config, strlen(config)) != 0,
                "a set-uid program honoured DEVMM_CONFIG: '%s'", out);
}
END_TEST

Suite *setuid_suite(void) {
  Suite *s = suite_create("setuid");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, setuid_ignores_the_environment);
  tcase_set_timeout(tc, 60);
  suite_add_tcase(s, tc);
  return s;
}
