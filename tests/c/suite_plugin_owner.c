/* Suite plugin_owner: a plugin directory, file or link owned by another user is refused. It
 * needs root (chown): otherwise each test skips, saying why. Environment (set by Meson):
 * DEVMM_TEST_PLUGINS (the fault plugins' build directory). */
#include <check.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
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

/* Its own suite: it skips when not run as root. */
Suite *plugin_owner_suite(void) {
  Suite *s = suite_create("plugin_owner");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, plugin_owned_by_another_user_refused);
  tcase_add_test(tc, plugin_link_owned_by_another_user_refused);
  suite_add_tcase(s, tc);
  return s;
}
