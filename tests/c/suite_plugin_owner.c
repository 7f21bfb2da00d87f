/* Suite plugin_owner: a plugin directory, file or link owned by another user is refused, and so
 * is one its group may write when another user is in that group. It
 * needs root (chown): otherwise each test skips, saying why. Environment (set by Meson):
 * DEVMM_TEST_PLUGINS (the fault plugins' build directory). */
#include <check.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "plugin_env.h"
#include "testres.h"

/* A directory on the way owned by another user (not root) is refused, as is such a file. */
START_TEST(plugin_owned_by_another_user_refused) {
  if (geteuid() != 0) {
    testres_skip("plugin_owned_by_another_user_refused: not root, so no directory can be given "
                 "to another user (chown)");
    return;
  }
  isolate();
  chain c;
  chain_make(&c, NULL);
  ck_assert_int_eq(chown(c.mid, 65534, 65534), 0);
  char want[2 * TESTRES_PATH_MAX];
  snprintf(want, sizeof want,
           "refusing plugin directory '%s': it is owned by uid 65534, neither root nor this user",
           c.mid);
  ck_assert_refused(&c, want);
  ck_assert_int_eq(chown(c.mid, 0, 0), 0);
  ck_assert_str_eq(faulty_error(&c), "");
  ck_assert_int_eq(chown(c.so, 65534, 0), 0);
  snprintf(want, sizeof want, "refusing plugin file '%s': it is owned by uid 65534", c.so);
  ck_assert_refused(&c, want);
  chain_free(&c);
}
END_TEST

/* A symbolic link on the path as given counts as what it stands for: one owned by another user
 * than root or this one (in a sticky directory, where its owner may swap it) is refused before
 * anything is loaded, for a link to the file and for a link to a directory (ADR 27). */
START_TEST(plugin_link_owned_by_another_user_refused) {
  if (geteuid() != 0) {
    testres_skip("plugin_link_owned_by_another_user_refused: not root, so no link can be given "
                 "to another user (chown -h)");
    return;
  }
  isolate();
  chain c;
  char sticky[TESTRES_PATH_MAX + 16], link[TESTRES_PATH_MAX + 48], dirlink[TESTRES_PATH_MAX + 32];
  char want[2 * TESTRES_PATH_MAX], top[TESTRES_PATH_MAX];
  testres_mkdtemp(top, sizeof top, "lk");
  snprintf(sticky, sizeof sticky, "%s/sticky", top);
  chain_make(&c, sticky);
  ck_assert_int_eq(chmod(top, 0755), 0);
  ck_assert_int_eq(mkdir(sticky, 0755), 0);
  ck_assert_int_eq(chmod(sticky, 01777), 0);
  snprintf(link, sizeof link, "%s/devmm-faulty.so", sticky);
  ck_assert_int_eq(symlink(c.so, link), 0);
  ck_assert_str_eq(faulty_error(&c), ""); /* root's link: fine */
  ck_assert_int_eq(lchown(link, 65534, 65534), 0);
  snprintf(want, sizeof want,
           "refusing plugin link '%s': it is a symbolic link owned by uid 65534, neither root nor "
           "this user",
           link);
  ck_assert_refused(&c, want);
  /* a link to something that is no plugin at all: refused before it is opened */
  char other[TESTRES_PATH_MAX + 48], src[1024];
  snprintf(other, sizeof other, "%s/devmm-noentry.so", c.leaf);
  snprintf(src, sizeof src, "%s/devmm-noentry.so", env_dir("DEVMM_TEST_PLUGINS"));
  testres_copy_file(src, other, 0755);
  ck_assert_int_eq(unlink(link), 0);
  ck_assert_int_eq(symlink(other, link), 0);
  ck_assert_int_eq(lchown(link, 65534, 65534), 0);
  ck_assert_refused(&c, want);
  ck_assert_msg(dlopen(other, RTLD_LAZY | RTLD_NOLOAD) == NULL, "%s was loaded", other);
  ck_assert_int_eq(unlink(link), 0);
  /* a link to the plugin's directory, in the search path as given */
  snprintf(dirlink, sizeof dirlink, "%s/dirlink", sticky);
  ck_assert_int_eq(symlink(c.leaf, dirlink), 0);
  ck_assert_int_eq(lchown(dirlink, 65534, 65534), 0);
  char text[2 * TESTRES_PATH_MAX];
  snprintf(text, sizeof text, "[devmm]\nplugins = cpu, faulty\nplugin_path = %s\n", dirlink);
  unlink(c.cfg);
  snprintf(c.cfg, sizeof c.cfg, "%s", write_temp(text));
  snprintf(want, sizeof want,
           "refusing plugin link '%s': it is a symbolic link owned by uid 65534, neither root nor "
           "this user",
           dirlink);
  ck_assert_refused(&c, want);
  ck_assert_int_eq(lchown(dirlink, 0, 0), 0);
  ck_assert_str_eq(faulty_error(&c), "");
  chain_free(&c);
  snprintf(text, sizeof text, "rm -rf '%s'", top);
  ck_assert_int_eq(system(text), 0);
}
END_TEST

/* Group write is not trusted because the group is this process's own: another user who has it
 * as primary group (nogroup: user nobody's, among others) rewrites the file, and a gid with no
 * entry in the group database may be anyone's. Only root's group, or a group no user but root
 * and this one is in, may write (suite trust_groups has the members; ADR 39). */
START_TEST(plugin_group_shared_with_another_user_refused) {
  if (geteuid() != 0) {
    testres_skip("plugin_group_shared_with_another_user_refused: not root, so no file can be "
                 "given to another group (chown)");
    return;
  }
  isolate();
  chain c;
  chain_make(&c, NULL);
  ck_assert_int_eq(chmod(c.so, 0775), 0);
  static const unsigned gids[] = {65534, 4242};
  static const char *const why[] = {"has as primary group",
                                    "a group with no entry in the group database"};
  for (int i = 0; i < 2; i++) {
    ck_assert_int_eq(chown(c.so, 0, gids[i]), 0);
    ck_assert_msg(testres_writable_as(c.so, 4243, gids[i]), "gid %u cannot write %s", gids[i],
                  c.so);
    ck_assert_int_eq(setegid(gids[i]), 0); /* this process's own group now */
    char want[2 * TESTRES_PATH_MAX];
    snprintf(want, sizeof want,
             "refusing plugin file '%s': it is writable by its group, gid %u (mode 0775), ", c.so,
             gids[i]);
    const char *e = faulty_error(&c);
    ck_assert_msg(strstr(e, want) && strstr(e, why[i]), "error '%s' lacks '%s' or '%s'", e, want,
                  why[i]);
    ck_assert_int_eq(setegid(0), 0);
  }
  ck_assert_int_eq(chown(c.so, 0, 0), 0); /* root's group: fine */
  ck_assert_str_eq(faulty_error(&c), "");
  chain_free(&c);
}
END_TEST

/* A directory of the plugin path that this user cannot enter holds nothing for it: the search
 * goes on to the next one, as access(2) would have it, for a user other than root too. */
START_TEST(plugin_directory_this_user_cannot_enter_is_skipped) {
  if (geteuid() != 0) {
    testres_skip("plugin_directory_this_user_cannot_enter_is_skipped: not root, so no child can "
                 "become uid 4242");
    return;
  }
  isolate();
  chain c;
  chain_make(&c, NULL);
  char closed[TESTRES_PATH_MAX + 16], text[3 * TESTRES_PATH_MAX];
  snprintf(closed, sizeof closed, "%s/closed", c.top);
  ck_assert_int_eq(mkdir(closed, 0700), 0);
  snprintf(text, sizeof text, "[devmm]\nplugins = faulty\nplugin_path = %s, %s\n", closed, c.leaf);
  unlink(c.cfg);
  snprintf(c.cfg, sizeof c.cfg, "%s", write_temp(text));
  ck_assert_int_eq(chmod(c.cfg, 0644), 0);
  int pipefd[2];
  ck_assert_int_eq(pipe(pipefd), 0);
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    close(pipefd[0]);
    char msg[2048] = "";
    int rc = 1;
    if (setgroups(0, NULL) != 0 || setgid(4242) != 0 || setuid(4242) != 0)
      snprintf(msg, sizeof msg, "cannot become 4242:4242");
    else if (devmm_init(c.cfg) != DEVMM_OK)
      snprintf(msg, sizeof msg, "devmm_init: %s", devmm_last_error());
    else {
      devmm_plugin_status st = {0};
      for (size_t i = 0; i < devmm_plugin_count(); i++)
        if (devmm_plugin_get(i, &st) == DEVMM_OK && strcmp(st.name, "faulty") == 0)
          break;
      rc = !st.loaded;
      snprintf(msg, sizeof msg, "%s", st.loaded ? "" : st.error ? st.error : "no record");
    }
    ssize_t w = write(pipefd[1], msg, strlen(msg));
    (void)w;
    _exit(rc);
  }
  close(pipefd[1]);
  char msg[2048];
  ssize_t got = read(pipefd[0], msg, sizeof msg - 1);
  msg[got > 0 ? got : 0] = '\0';
  close(pipefd[0]);
  int st;
  ck_assert_int_eq(waitpid(pid, &st, 0), pid);
  ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "as uid 4242: %s", msg);
  chain_free(&c);
}
END_TEST

/* Its own suite: it skips when not run as root. */
Suite *plugin_owner_suite(void) {
  Suite *s = suite_create("plugin_owner");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, plugin_owned_by_another_user_refused);
  tcase_add_test(tc, plugin_link_owned_by_another_user_refused);
  tcase_add_test(tc, plugin_group_shared_with_another_user_refused);
  tcase_add_test(tc, plugin_directory_this_user_cannot_enter_is_skipped);
  suite_add_tcase(s, tc);
  return s;
}
