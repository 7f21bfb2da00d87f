/* Suite trust_acl: write access that a POSIX ACL grants to a user or a group other than root and
 * this user refuses the plugin file or directory it is on; so does a directory's default ACL
 * that would grant it to what is made there (ADR 39). It needs root (a child that becomes uid
 * 4242 shows that the ACL really lets it write) and setfacl on an ACL-capable $TMPDIR:
 * otherwise it skips, saying why. Environment (set by Meson): DEVMM_TEST_PLUGINS. */
#include <check.h>
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

/* Runs setfacl with args on path; returns its exit status. */
static int setfacl(const char *args, const char *path) {
  char cmd[2 * TESTRES_PATH_MAX];
  snprintf(cmd, sizeof cmd, "setfacl %s '%s' 2>&1", args, path);
  int st = system(cmd);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

/* Skips (and returns 0) unless this runs as root with setfacl working on $TMPDIR. */
static int acl_ready(void) {
  if (geteuid() != 0) {
    testres_skip("trust_acl: not root, so no child can become uid 4242 to show what an ACL "
                 "lets it do");
    return 0;
  }
  char probe[TESTRES_PATH_MAX];
  close(testres_mkstemp(probe, sizeof probe, "aclprobe"));
  int rc = setfacl("-m u:4242:r", probe);
  unlink(probe);
  if (rc != 0) {
    testres_skip("trust_acl: setfacl -m u:4242:r failed on %s (exit %d): no setfacl (tools/deps.sh "
                 "test installs Debian's acl) or no ACL support there",
                 testres_tmpdir(), rc);
    return 0;
  }
  return 1;
}

/* A named user's write, through the file's access ACL, refuses the file; the mask taking the
 * write away makes it fine again. */
START_TEST(acl_named_user_write_on_file_refused) {
  if (!acl_ready())
    return;
  isolate();
  chain c;
  chain_make(&c, NULL);
  ck_assert_str_eq(faulty_error(&c), "");
  ck_assert_int_eq(setfacl("-m u:4242:rwx", c.so), 0);
  ck_assert_msg(testres_writable_as(c.so, 4242, 4242), "the ACL does not let uid 4242 write %s",
                c.so);
  char want[2 * TESTRES_PATH_MAX];
  snprintf(want, sizeof want,
           "refusing plugin file '%s': its access ACL lets uid 4242 write it (entry user:4242:rwx, "
           "mask rwx); expected write for its owner, root and this user only; fix with "
           "setfacl -x u:4242",
           c.so);
  ck_assert_refused(&c, want);
  ck_assert_int_eq(setfacl("-n -m m::r-x", c.so), 0); /* the mask bounds every named entry */
  ck_assert_msg(!testres_writable_as(c.so, 4242, 4242), "uid 4242 can still write %s", c.so);
  ck_assert_str_eq(faulty_error(&c), "");
  chain_free(&c);
}
END_TEST

/* A named group's write refuses the file unless that group is root's or only trusted users are
 * in it: gid 4242 has no entry in the group database, so who is in it cannot be known. */
START_TEST(acl_named_group_write_on_file_refused) {
  if (!acl_ready())
    return;
  isolate();
  chain c;
  chain_make(&c, NULL);
  ck_assert_int_eq(setfacl("-m g:4242:rw", c.so), 0);
  ck_assert_msg(testres_writable_as(c.so, 4243, 4242), "the ACL does not let gid 4242 write %s",
                c.so);
  char want[2 * TESTRES_PATH_MAX];
  snprintf(
      want, sizeof want,
      "refusing plugin file '%s': its access ACL lets gid 4242 write it (entry group:4242:rw-, "
      "mask rwx), a group with no entry in the group database, so who is in it cannot be "
      "known; expected root's group, or a group no user but root and this one is in",
      c.so);
  ck_assert_refused(&c, want);
  ck_assert_int_eq(setfacl("-b", c.so), 0);
  ck_assert_int_eq(setfacl("-m g:0:rwx", c.so), 0); /* root's group: fine */
  ck_assert_str_eq(faulty_error(&c), "");
  chain_free(&c);
}
END_TEST

/* The access ACL of every directory on the way counts: here the plugin's own directory and a
 * parent (the mode bits show only the mask: 0775, group root's). */
START_TEST(acl_write_on_directory_refused) {
  if (!acl_ready())
    return;
  isolate();
  chain c;
  chain_make(&c, NULL);
  const char *dirs[] = {c.leaf, c.mid};
  for (int i = 0; i < 2; i++) {
    ck_assert_int_eq(setfacl("-m u:4242:rwx", dirs[i]), 0);
    char want[2 * TESTRES_PATH_MAX];
    snprintf(want, sizeof want,
             "refusing plugin directory '%s': its access ACL lets uid 4242 write it (entry "
             "user:4242:rwx, mask rwx)",
             dirs[i]);
    ck_assert_refused(&c, want);
    ck_assert_int_eq(setfacl("-b", dirs[i]), 0);
    ck_assert_str_eq(faulty_error(&c), "");
  }
  chain_free(&c);
}
END_TEST

/* A default ACL gives what is made in the directory later to another user: refused too, for a
 * named user, a named group, and for others. */
START_TEST(acl_default_on_directory_refused) {
  if (!acl_ready())
    return;
  isolate();
  chain c;
  chain_make(&c, NULL);
  static const struct {
    const char *args, *what;
  } cases[] = {
      {"-d -m u:4242:rwx", "lets uid 4242 write what is made in it (entry default:user:4242:rwx"},
      {"-d -m g:4242:rwx", "lets gid 4242 write what is made in it (entry default:group:4242:rwx"},
      {"-d -m o::rwx", "lets others write what is made in it (entry default:other::rwx)"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    ck_assert_int_eq(setfacl(cases[i].args, c.mid), 0);
    char want[2 * TESTRES_PATH_MAX];
    snprintf(want, sizeof want, "refusing plugin directory '%s': its default ACL %s", c.mid,
             cases[i].what);
    ck_assert_refused(&c, want);
    ck_assert_int_eq(setfacl("-k", c.mid), 0);
    ck_assert_str_eq(faulty_error(&c), "");
  }
  /* a default ACL that grants write to nobody but the owner is fine */
  ck_assert_int_eq(setfacl("-d -m u:4242:r-x", c.mid), 0);
  ck_assert_str_eq(faulty_error(&c), "");
  chain_free(&c);
}
END_TEST

/* Its own suite: it skips when not root or when setfacl cannot run. */
Suite *trust_acl_suite(void) {
  Suite *s = suite_create("trust_acl");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, acl_named_user_write_on_file_refused);
  tcase_add_test(tc, acl_named_group_write_on_file_refused);
  tcase_add_test(tc, acl_write_on_directory_refused);
  tcase_add_test(tc, acl_default_on_directory_refused);
  suite_add_tcase(s, tc);
  return s;
}
