/* Suite log_file_owner: a log file that another user owns, or a link that another user planted,
 * is refused, and nothing of what it names is written. It needs root (chown, and a child that
 * becomes uid 4242, a uid with no account): otherwise each test skips, saying why. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testres.h"

#define OTHER 4242 /* a uid and gid that no account has */

static void write_text(const char *path, const char *text, mode_t mode) {
  testres_write_text(path, text);
  ck_assert_int_eq(chmod(path, mode), 0);
}

/* A file that another user made in advance (in a directory both can write) would receive this
 * user's allocation log, addresses included: refused, and left as it was. */
START_TEST(log_file_of_another_user_refused) {
  if (geteuid() != 0) {
    testres_skip("log_file_of_another_user_refused: not root, so no file can be given to "
                 "another user (chown)");
    return;
  }
  char dir[TESTRES_PATH_MAX], path[TESTRES_PATH_MAX + 16], want[2 * TESTRES_PATH_MAX];
  testres_mkdtemp(dir, sizeof dir, "logowner");
  ck_assert_int_eq(chmod(dir, 01777), 0);
  snprintf(path, sizeof path, "%s/run.csv", dir);
  write_text(path, "planted\n", 0666);
  ck_assert_int_eq(chown(path, OTHER, OTHER), 0);
  devmm_resource *up = testres_create(NULL), *lg = NULL;
  int rc = devmm_logging_adaptor_create(up, path, 1, &lg);
  void *p;
  if (rc == DEVMM_OK) {
    devmm_allocate(lg, 64, 0, NULL, &p);
    devmm_deallocate(lg, p, 64, 0, NULL);
    devmm_resource_release(lg);
  }
  char *text = testres_read_text(path);
  ck_assert_msg(strcmp(text, "planted\n") == 0, "uid %d's file received the log:\n%s", OTHER, text);
  free(text);
  ck_assert_int_eq(rc, DEVMM_EIO);
  snprintf(want, sizeof want,
           "logging adaptor: refusing log file '%s': it is owned by uid %d, not by this user "
           "(uid 0): expected a file of this user's, or a new name (created with mode 0600)",
           path, OTHER);
  ck_assert_str_eq(devmm_last_error(), want);
  unlink(path);
  rmdir(dir);
  devmm_resource_release(up);
}
END_TEST

/* Another user (a child that became uid 4242) plants a link, where this user's log will go, to
 * this user's own 0600 file: refused, and the file is not truncated. The link's directory is
 * uid 4242's and not sticky, so the kernel's protected_symlinks would not stop it either. */
START_TEST(log_file_link_of_another_user_refused) {
  if (geteuid() != 0) {
    testres_skip("log_file_link_of_another_user_refused: not root, so no child can become "
                 "another user (setuid)");
    return;
  }
  char top[TESTRES_PATH_MAX], theirs[TESTRES_PATH_MAX + 16], mine[TESTRES_PATH_MAX + 16];
  char path[TESTRES_PATH_MAX + 32], want[3 * TESTRES_PATH_MAX];
  testres_mkdtemp(top, sizeof top, "loglink");
  ck_assert_int_eq(chmod(top, 0755), 0);
  snprintf(theirs, sizeof theirs, "%s/theirs", top);
  snprintf(mine, sizeof mine, "%s/secret", top);
  snprintf(path, sizeof path, "%s/run.csv", theirs);
  ck_assert_int_eq(mkdir(theirs, 0755), 0);
  ck_assert_int_eq(chown(theirs, OTHER, OTHER), 0);
  write_text(mine, "secret\n", 0600);
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    if (setgid(OTHER) != 0 || setuid(OTHER) != 0 || geteuid() != OTHER)
      _exit(2);
    _exit(symlink(mine, path) == 0 ? 0 : 3);
  }
  int status;
  ck_assert_int_eq(waitpid(pid, &status, 0), pid);
  ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                "the child (uid %d) could not plant its link: status %d", OTHER, status);
  struct stat st;
  ck_assert_int_eq(lstat(path, &st), 0);
  ck_assert_int_eq(st.st_uid, OTHER);
  devmm_resource *up = testres_create(NULL), *lg = NULL;
  int rc = devmm_logging_adaptor_create(up, path, 1, &lg);
  if (rc == DEVMM_OK)
    devmm_resource_release(lg);
  char *text = testres_read_text(mine);
  ck_assert_msg(strcmp(text, "secret\n") == 0, "uid %d's link truncated this user's file:\n%s",
                OTHER, text);
  free(text);
  ck_assert_int_eq(rc, DEVMM_EIO);
  snprintf(want, sizeof want,
           "logging adaptor: refusing log file '%s': it is a symbolic link, which devmm does "
           "not follow: name the file itself",
           path);
  ck_assert_str_eq(devmm_last_error(), want);
  unlink(path);
  rmdir(theirs);
  unlink(mine);
  rmdir(top);
  devmm_resource_release(up);
}
END_TEST

/* Makes path (a directory or a link) uid 4242's: a link is made by a child that became uid
 * 4242 (its owner is who made it), in a directory uid 4242 owns. */
static void plant_link(const char *target, const char *link) {
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    if (setgid(OTHER) != 0 || setuid(OTHER) != 0 || geteuid() != OTHER)
      _exit(2);
    _exit(symlink(target, link) == 0 ? 0 : 3);
  }
  int status;
  ck_assert_int_eq(waitpid(pid, &status, 0), pid);
  ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                "the child (uid %d) could not plant its link: status %d", OTHER, status);
}

/* Opens path as a log, logs one allocation if it was accepted; the status. */
static int try_log(const char *path) {
  devmm_resource *up = testres_create(NULL), *lg = NULL;
  int rc = devmm_logging_adaptor_create(up, path, 1, &lg);
  if (rc == DEVMM_OK) {
    void *p;
    devmm_allocate(lg, 64, 0, NULL, &p);
    devmm_deallocate(lg, p, 64, 0, NULL);
    devmm_resource_release(lg);
  }
  devmm_resource_release(up);
  return rc;
}

/* uid 4242 owns a directory on the path and plants, in it, a link to a directory of this
 * user's: the log would truncate this user's 0600 file of that name. Only the last component
 * was checked (O_NOFOLLOW); every link on the way is, now (ADR 42). */
START_TEST(log_file_link_in_the_middle_refused) {
  if (geteuid() != 0) {
    testres_skip("log_file_link_in_the_middle_refused: not root, so no child can become "
                 "another user (setuid)");
    return;
  }
  char top[TESTRES_PATH_MAX], victim[TESTRES_PATH_MAX + 16], alice[TESTRES_PATH_MAX + 16];
  char link[TESTRES_PATH_MAX + 32], secret[TESTRES_PATH_MAX + 32], path[TESTRES_PATH_MAX + 48];
  char want[4 * TESTRES_PATH_MAX];
  testres_mkdtemp(top, sizeof top, "logmid");
  ck_assert_int_eq(chmod(top, 0755), 0);
  snprintf(victim, sizeof victim, "%s/victim", top);
  snprintf(alice, sizeof alice, "%s/alice", top);
  snprintf(link, sizeof link, "%s/d", alice);
  snprintf(secret, sizeof secret, "%s/log.csv", victim);
  snprintf(path, sizeof path, "%s/log.csv", link);
  ck_assert_int_eq(mkdir(victim, 0700), 0);
  ck_assert_int_eq(mkdir(alice, 0755), 0);
  ck_assert_int_eq(chown(alice, OTHER, OTHER), 0);
  write_text(secret, "secret\n", 0600);
  plant_link(victim, link);
  int rc = try_log(path);
  char *text = testres_read_text(secret);
  ck_assert_msg(strcmp(text, "secret\n") == 0,
                "uid %d's link in the middle of the path truncated this user's file:\n%s", OTHER,
                text);
  free(text);
  ck_assert_int_eq(rc, DEVMM_EIO);
  snprintf(want, sizeof want,
           "logging adaptor: refusing log file '%s': '%s' is a symbolic link owned by uid %d, "
           "not by root or this user (uid 0): expected a path whose links are root's or this "
           "user's, to directories of theirs",
           path, link, OTHER);
  ck_assert_str_eq(devmm_last_error(), want);
  unlink(link);
  unlink(secret);
  rmdir(victim);
  rmdir(alice);
  rmdir(top);
}
END_TEST

/* A link of root's or this user's in the middle of the path (/var/run -> /run) is followed when
 * it leads to a directory of theirs; one that leads to another user's directory is refused (that
 * user could put a link there), and so is a '..' after a link (it would climb out of the link's
 * target, not back to where the path seems to go). */
START_TEST(log_file_trusted_links_in_the_middle) {
  if (geteuid() != 0) {
    testres_skip("log_file_trusted_links_in_the_middle: not root, so no directory can be "
                 "given to another user (chown)");
    return;
  }
  char top[TESTRES_PATH_MAX], d[TESTRES_PATH_MAX + 32], l[TESTRES_PATH_MAX + 32];
  char path[TESTRES_PATH_MAX + 64], want[4 * TESTRES_PATH_MAX];
  testres_mkdtemp(top, sizeof top, "logtrust");
  ck_assert_int_eq(chmod(top, 0755), 0);
  snprintf(d, sizeof d, "%s/real", top);
  ck_assert_int_eq(mkdir(d, 0755), 0);
  snprintf(l, sizeof l, "%s/run", top);
  ck_assert_int_eq(symlink("real", l), 0); /* root's, to root's: followed */
  snprintf(path, sizeof path, "%s/run/ok.csv", top);
  ck_assert_msg(try_log(path) == DEVMM_OK, "%s", devmm_last_error());
  snprintf(path, sizeof path, "%s/real/ok.csv", top);
  struct stat st;
  ck_assert_int_eq(stat(path, &st), 0);
  ck_assert_int_eq(st.st_mode & 07777, 0600);
  unlink(path);

  snprintf(path, sizeof path, "%s/run/../up.csv", top); /* '..' after the link */
  ck_assert_int_eq(try_log(path), DEVMM_EIO);
  snprintf(want, sizeof want,
           "logging adaptor: refusing log file '%s': '..' after the symbolic link '%s': "
           "expected no '..' after a link (it climbs out of the link's target)",
           path, l);
  ck_assert_str_eq(devmm_last_error(), want);

  snprintf(d, sizeof d, "%s/theirs", top);
  ck_assert_int_eq(mkdir(d, 0755), 0);
  ck_assert_int_eq(chown(d, OTHER, OTHER), 0);
  snprintf(l, sizeof l, "%s/to-theirs", top);
  ck_assert_int_eq(symlink(d, l), 0); /* root's, to uid 4242's */
  snprintf(path, sizeof path, "%s/to-theirs/x.csv", top);
  ck_assert_int_eq(try_log(path), DEVMM_EIO);
  snprintf(want, sizeof want,
           "logging adaptor: refusing log file '%s': '%s' is a symbolic link to a directory "
           "owned by uid %d, not by root or this user (uid 0): expected a path whose links are "
           "root's or this user's, to directories of theirs",
           path, l, OTHER);
  ck_assert_str_eq(devmm_last_error(), want);
  snprintf(path, sizeof path, "%s/theirs/x.csv", top);
  ck_assert_int_eq(access(path, F_OK), -1);

  unlink(l);
  rmdir(d);
  snprintf(path, sizeof path, "%s/run", top);
  unlink(path);
  snprintf(path, sizeof path, "%s/real/up.csv", top);
  unlink(path);
  snprintf(path, sizeof path, "%s/up.csv", top);
  unlink(path);
  snprintf(path, sizeof path, "%s/real", top);
  rmdir(path);
  rmdir(top);
}
END_TEST

/* In a sticky directory such as /tmp, the kernel refuses (EACCES, not ELOOP) to open another
 * user's link with O_CREAT: still named as a link, not as "Permission denied". */
START_TEST(log_file_link_in_a_sticky_directory_named) {
  if (geteuid() != 0) {
    testres_skip("log_file_link_in_a_sticky_directory_named: not root, so no link can be "
                 "another user's (lchown)");
    return;
  }
  char top[TESTRES_PATH_MAX], path[TESTRES_PATH_MAX + 16], want[3 * TESTRES_PATH_MAX];
  testres_mkdtemp(top, sizeof top, "logsticky");
  ck_assert_int_eq(chmod(top, 01777), 0);
  snprintf(path, sizeof path, "%s/run.csv", top);
  ck_assert_int_eq(symlink("/nonexistent-devmm-target", path), 0);
  ck_assert_int_eq(lchown(path, OTHER, OTHER), 0);
  ck_assert_int_eq(try_log(path), DEVMM_EIO);
  snprintf(want, sizeof want,
           "logging adaptor: refusing log file '%s': it is a symbolic link, which devmm does "
           "not follow: name the file itself",
           path);
  ck_assert_str_eq(devmm_last_error(), want);
  unlink(path);
  rmdir(top);
}
END_TEST

Suite *log_file_owner_suite(void) {
  Suite *s = suite_create("log_file_owner");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, log_file_of_another_user_refused);
  tcase_add_test(tc, log_file_link_of_another_user_refused);
  tcase_add_test(tc, log_file_link_in_the_middle_refused);
  tcase_add_test(tc, log_file_trusted_links_in_the_middle);
  tcase_add_test(tc, log_file_link_in_a_sticky_directory_named);
  suite_add_tcase(s, tc);
  return s;
}
