/* Suite trust_groups: group write is trusted only for root's group, or for a group that no user
 * but root and this one has as primary group or as member (ADR 39). The user and group
 * databases are made up for the test: a child process in a mount namespace of its own
 * bind-mounts test files over /etc/passwd and /etc/group (no account is ever added to the
 * machine). It needs root and unshare(CLONE_NEWNS): otherwise it skips, saying why. Environment
 * (set by Meson): DEVMM_TEST_PLUGINS. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "plugin_env.h"
#include "testres.h"

static const char PASSWD[] = "root:x:0:0:root:/root:/bin/sh\n"
                             "bob:x:4243:4301:bob:/:/bin/sh\n";
static const char GROUP[] = "root:x:0:\n"
                            "solo:x:4300:\n"         /* nobody's: fine */
                            "bobs:x:4301:\n"         /* bob's primary group */
                            "club:x:4302:root,bob\n" /* bob is a member */
                            "rootclub:x:4303:root\n" /* only root: fine */
                            "ghosts:x:4304:ghost\n"; /* a member with no account */

static const struct {
  unsigned gid;
  const char *error; /* "" when the plugin loads */
} cases[] = {
    {4300, ""},
    {4303, ""},
    {0, ""},
    {4301, "a group that user bob (uid 4243) has as primary group"},
    {4302, "a group of which user bob (uid 4243) is a member"},
    {4304, "a group of which 'ghost', a member with no account, may be anyone"},
    {4305, "a group with no entry in the group database, so who is in it cannot be known"},
};

/* In the child: the made-up databases over the real ones, in this process's own mounts only. */
static const char *fake_databases(const char *dir) {
  static char why[3 * TESTRES_PATH_MAX];
  if (unshare(CLONE_NEWNS) != 0) {
    snprintf(why, sizeof why, "unshare(CLONE_NEWNS): %s", strerror(errno));
    return why;
  }
  /* first make every mount private, so that nothing below leaves this namespace */
  if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) {
    snprintf(why, sizeof why, "making / private: %s", strerror(errno));
    return why;
  }
  const char *names[2] = {"passwd", "group"}, *texts[2] = {PASSWD, GROUP};
  for (int i = 0; i < 2; i++) {
    char src[TESTRES_PATH_MAX + 16], dst[32];
    snprintf(src, sizeof src, "%s/%s", dir, names[i]);
    snprintf(dst, sizeof dst, "/etc/%s", names[i]);
    FILE *f = fopen(src, "w");
    if (!f || fputs(texts[i], f) < 0 || fclose(f) != 0) {
      snprintf(why, sizeof why, "writing %s", src);
      return why;
    }
    if (mount(src, dst, NULL, MS_BIND, NULL) != 0) {
      snprintf(why, sizeof why, "bind-mounting %s over %s: %s", src, dst, strerror(errno));
      return why;
    }
  }
  return NULL;
}

/* The child's work: each case's gid on the group-writable plugin file; the first mismatch is
 * written to out. Exit 0: all as expected; 1: a mismatch; 77: no namespace (out says why). */
static int child(const chain *c, int out) {
  char msg[4096] = "";
  int rc = 0;
  const char *why = fake_databases(c->top);
  if (why) {
    snprintf(msg, sizeof msg, "%s", why);
    rc = 77;
  }
  for (size_t i = 0; !rc && i < sizeof cases / sizeof cases[0]; i++) {
    if (chown(c->so, 0, cases[i].gid) != 0 || chmod(c->so, 0775) != 0) {
      snprintf(msg, sizeof msg, "chown/chmod %s: %s", c->so, strerror(errno));
      rc = 1;
      break;
    }
    devmm_shutdown();
    if (devmm_init(c->cfg) != DEVMM_OK) {
      snprintf(msg, sizeof msg, "devmm_init: %s", devmm_last_error());
      rc = 1;
      break;
    }
    devmm_plugin_status st = {0};
    for (size_t k = 0; k < devmm_plugin_count(); k++)
      if (devmm_plugin_get(k, &st) == DEVMM_OK && strcmp(st.name, "faulty") == 0)
        break;
    const char *got = st.loaded ? "" : st.error ? st.error : "(no error)";
    char prefix[TESTRES_PATH_MAX + 128];
    snprintf(prefix, sizeof prefix,
             "refusing plugin file '%s': it is writable by its group, gid %u (mode 0775), ", c->so,
             cases[i].gid);
    int ok = *cases[i].error
                 ? strncmp(got, prefix, strlen(prefix)) == 0 && strstr(got, cases[i].error) != NULL
                 : *got == '\0';
    if (!ok) {
      snprintf(msg, sizeof msg, "gid %u: got '%s', expected %s%s%s", cases[i].gid, got,
               *cases[i].error ? "'" : "it to load", *cases[i].error ? prefix : "", cases[i].error);
      rc = 1;
    }
  }
  ssize_t w = write(out, msg, strlen(msg));
  (void)w;
  return rc;
}

START_TEST(group_write_only_for_groups_of_trusted_users) {
  if (geteuid() != 0) {
    testres_skip("trust_groups: not root, so no made-up user database can be mounted");
    return;
  }
  isolate();
  chain c;
  chain_make(&c, NULL);
  int pipefd[2];
  ck_assert_int_eq(pipe(pipefd), 0);
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    close(pipefd[0]);
    _exit(child(&c, pipefd[1]));
  }
  close(pipefd[1]);
  char msg[4096];
  ssize_t got = read(pipefd[0], msg, sizeof msg - 1);
  msg[got > 0 ? got : 0] = '\0';
  close(pipefd[0]);
  int st;
  ck_assert_int_eq(waitpid(pid, &st, 0), pid);
  ck_assert_msg(WIFEXITED(st), "the child died (signal %d)", WTERMSIG(st));
  chain_free(&c);
  if (WEXITSTATUS(st) == 77) {
    testres_skip("trust_groups: no mount namespace of its own: %s", msg);
    return;
  }
  ck_assert_msg(WEXITSTATUS(st) == 0, "%s", msg);
}
END_TEST

/* Its own suite: it skips when not root or when no mount namespace can be made. */
Suite *trust_groups_suite(void) {
  Suite *s = suite_create("trust_groups");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, group_write_only_for_groups_of_trusted_users);
  suite_add_tcase(s, tc);
  return s;
}
