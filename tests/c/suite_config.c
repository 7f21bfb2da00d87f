/* Suite config: each golden file of tests/config fails with exactly its message, the lookup
 * order, relative paths, stacks and percentages, what goes to the log, lazy initialisation,
 * sizes. Environment (set by Meson): DEVMM_TEST_CONFIGS (tests/config), DEVMM_TEST_PLUGINS (the
 * fault plugins' build directory), DEVMM_PLUGIN_PATH (the real plugins' build directory). */
#include <check.h>
#include <dirent.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "plugin_env.h"
#include "testres.h"

static const devmm_device CPU = {DEVMM_DEVICE_CPU, 0};

/* The first line of a file. */
static char *slurp(const char *path) {
  char *buf = slurp_all(path);
  buf[strcspn(buf, "\n")] = '\0';
  return buf;
}

/* Each tests/config/X.ini fails devmm_init with exactly the message in X.err (@DIR@ = dir). */
START_TEST(config_golden_errors) {
  isolate();
  const char *dir = env_dir("DEVMM_TEST_CONFIGS");
  DIR *d = opendir(dir);
  ck_assert_ptr_nonnull(d);
  struct dirent *e;
  int n = 0;
  while ((e = readdir(d)) != NULL) {
    size_t len = strlen(e->d_name);
    if (len < 5 || strcmp(e->d_name + len - 4, ".ini") != 0)
      continue;
    char ini[1024], err[1024], expected[2048];
    snprintf(ini, sizeof ini, "%s/%s", dir, e->d_name);
    snprintf(err, sizeof err, "%s/%.*s.err", dir, (int)(len - 4), e->d_name);
    const char *tmpl = slurp(err);
    const char *at = strstr(tmpl, "@DIR@");
    if (at)
      snprintf(expected, sizeof expected, "%.*s%s%s", (int)(at - tmpl), tmpl, dir, at + 5);
    else
      snprintf(expected, sizeof expected, "%s", tmpl);
    devmm_registry_clear();
    ck_assert_msg(devmm_init(ini) == DEVMM_ECONFIG, "%s: expected DEVMM_ECONFIG, got '%s'",
                  e->d_name, devmm_last_error());
    ck_assert_msg(strcmp(devmm_last_error(), expected) == 0,
                  "%s:\n  got      '%s'\n  expected '%s'", e->d_name, devmm_last_error(), expected);
    /* nothing was built: the registry is as it was (empty) */
    ck_assert_int_eq(devmm_is_initialized(), 0);
    n++;
  }
  closedir(d);
  ck_assert_int_ge(n, 20);
}
END_TEST

START_TEST(config_failed_reinit_keeps_previous_state) {
  isolate();
  char *good = write_temp("[device cpu]\nresource = cpu.malloc\nadaptors = statistics\n");
  char goodpath[TESTRES_PATH_MAX];
  strcpy(goodpath, good);
  ck_assert_int_eq(devmm_init(goodpath), DEVMM_OK);
  devmm_resource *before, *after;
  ck_assert_int_eq(devmm_get_current_resource(CPU, &before), DEVMM_OK);
  char *bad = write_temp("[device cpu]\nresource = cpu.nope\n");
  ck_assert_int_eq(devmm_init(bad), DEVMM_ECONFIG);
  ck_assert_int_eq(devmm_get_current_resource(CPU, &after), DEVMM_OK);
  ck_assert_ptr_eq(before, after); /* unchanged */
  ck_assert_str_eq(devmm_config_source(), goodpath);
  devmm_resource_release(before);
  devmm_resource_release(after);
  unlink(goodpath);
  unlink(bad);
}
END_TEST

START_TEST(config_missing_and_unreadable_files) {
  isolate();
  ck_assert_int_eq(devmm_init("/nonexistent/devmm.ini"), DEVMM_ECONFIG);
  ck_assert_str_eq(devmm_last_error(), "cannot read configuration file '/nonexistent/devmm.ini': "
                                       "No such file or directory");
  char *p = write_temp("[devmm]\n");
  char path[TESTRES_PATH_MAX];
  strcpy(path, p);
  chmod(path, 0);
  if (geteuid() == 0)
    ck_assert_int_eq(setuid(65534), 0); /* root reads anything: become nobody (forked test) */
  ck_assert_int_eq(devmm_init(path), DEVMM_ECONFIG);
  ck_assert_error_contains("cannot read configuration file");
  ck_assert_error_contains("Permission denied");
}
END_TEST

/* DEVMM_CONFIG and devmm_init(path) (devmm-info --config) read regular files only: a FIFO is
 * refused at once (opening one waits for a writer; reading it, for its end), a directory is
 * named as one. */
START_TEST(config_not_a_regular_file) {
  isolate();
  char dir[TESTRES_PATH_MAX], fifo[TESTRES_PATH_MAX + 16], want[2 * TESTRES_PATH_MAX];
  testres_mkdtemp(dir, sizeof dir, "cfgfifo");
  snprintf(fifo, sizeof fifo, "%s/devmm.ini", dir);
  ck_assert_int_eq(mkfifo(fifo, 0600), 0);
  setenv("DEVMM_CONFIG", fifo, 1);
  alarm(10); /* a blocking open would hang: fail instead */
  ck_assert_int_eq(devmm_init(NULL), DEVMM_ECONFIG);
  alarm(0);
  snprintf(want, sizeof want,
           "cannot read configuration file '%s': it is a FIFO: expected a regular file", fifo);
  ck_assert_str_eq(devmm_last_error(), want);
  unsetenv("DEVMM_CONFIG");
  ck_assert_int_eq(devmm_init(dir), DEVMM_ECONFIG);
  snprintf(want, sizeof want,
           "cannot read configuration file '%s': it is a directory: expected a regular file", dir);
  ck_assert_str_eq(devmm_last_error(), want);
  ck_assert_int_eq(devmm_init("/dev/null"), DEVMM_ECONFIG);
  ck_assert_str_eq(devmm_last_error(), "cannot read configuration file '/dev/null': it is a "
                                       "character device: expected a regular file");
  ck_assert_int_eq(devmm_is_initialized(), 0);
  unlink(fifo);
  rmdir(dir);
}
END_TEST

/* Lines may have 199 characters, as the header of conf/devmm.ini.in says, not counting the
 * newline (nor a carriage return before it); 200 are refused. */
START_TEST(config_line_length_limit) {
  isolate();
  char text[512];
  for (int len = 199; len <= 200; len++) {
    for (int crlf = 0; crlf <= 1; crlf++) {
      int n = snprintf(text, sizeof text, "[devmm]\nplugins = cpu\n;");
      memset(text + n, 'x', (size_t)len - 1);
      snprintf(text + n + len - 1, sizeof text - (size_t)(n + len - 1), "%s[device cpu]\n",
               crlf ? "\r\n" : "\n");
      char *cfg = write_temp(text);
      int rc = devmm_init(cfg);
      if (len == 199) {
        ck_assert_msg(rc == DEVMM_OK, "a line of 199 characters%s: %s", crlf ? " (CRLF)" : "",
                      devmm_last_error());
      } else {
        ck_assert_int_eq(rc, DEVMM_ECONFIG);
        char want[TESTRES_PATH_MAX + 64];
        snprintf(want, sizeof want, "%s:3: line longer than 199 characters", cfg);
        ck_assert_str_eq(devmm_last_error(), want);
      }
      unlink(cfg);
    }
  }
}
END_TEST

START_TEST(config_lookup_order) {
  isolate();
  /* nothing anywhere: the built-in default */
  ck_assert_int_eq(devmm_init(NULL), DEVMM_OK);
  ck_assert_str_eq(devmm_config_source(), "built-in default");
  devmm_device_status d;
  ck_assert_int_eq(devmm_device_get(0, &d), DEVMM_OK);
  ck_assert_str_eq(d.stack, "cpu.malloc");
  /* $XDG_CONFIG_HOME/devmm/devmm.ini */
  char xdg[TESTRES_PATH_MAX], sub[TESTRES_PATH_MAX + 8], file[TESTRES_PATH_MAX + 20];
  testres_mkdtemp(xdg, sizeof xdg, "xdg");
  snprintf(sub, sizeof sub, "%s/devmm", xdg);
  mkdir(sub, 0755);
  snprintf(file, sizeof file, "%s/devmm.ini", sub);
  FILE *f = fopen(file, "w");
  fputs("[device cpu]\nresource = cpu.aligned\n", f);
  fclose(f);
  setenv("XDG_CONFIG_HOME", xdg, 1);
  ck_assert_int_eq(devmm_init(NULL), DEVMM_OK);
  ck_assert_str_eq(devmm_config_source(), file);
  devmm_device_get(0, &d);
  ck_assert_str_eq(d.stack, "cpu.aligned(64)");
  /* $DEVMM_CONFIG beats XDG */
  char *env = write_temp("[device cpu]\nresource = cpu.mmap\n");
  setenv("DEVMM_CONFIG", env, 1);
  ck_assert_int_eq(devmm_init(NULL), DEVMM_OK);
  ck_assert_str_eq(devmm_config_source(), env);
  /* an explicit path beats both */
  char *expl = write_temp("[device cpu]\nresource = cpu.malloc\nadaptors = tracking\n");
  ck_assert_int_eq(devmm_init(expl), DEVMM_OK);
  devmm_device_get(0, &d);
  ck_assert_str_eq(d.stack, "tracking(cpu.malloc)");
  /* a file in the current directory is never read implicitly */
  unsetenv("DEVMM_CONFIG");
  setenv("XDG_CONFIG_HOME", "/nonexistent-devmm-test", 1);
  ck_assert_int_eq(chdir(sub), 0);
  ck_assert_int_eq(devmm_init(NULL), DEVMM_OK);
  ck_assert_str_eq(devmm_config_source(), "built-in default");
  unlink(file);
  rmdir(sub);
  rmdir(xdg);
  unlink(env);
  unlink(expl);
}
END_TEST

START_TEST(config_stack_and_limit_percent) {
  isolate();
  char *p = write_temp("[devmm]\nplugins = cpu\nlog_level = error\n"
                       "[device cpu]\nresource = cpu.malloc\n"
                       "adaptors = statistics, limiting, tracking\nlimit = 50%\n"
                       "statistics = sharded\nbacktraces = no\n");
  ck_assert_int_eq(devmm_init(p), DEVMM_OK);
  devmm_device_status d;
  devmm_device_get(0, &d);
  ck_assert_str_eq(d.stack, "tracking(limiting(statistics(cpu.malloc)))");
  devmm_resource *r, *lim;
  ck_assert_int_eq(devmm_get_current_resource(CPU, &r), DEVMM_OK);
  lim = devmm_resource_upstream(r);
  size_t limit;
  ck_assert_int_eq(devmm_limiting_get(lim, NULL, &limit), DEVMM_OK);
  ck_assert_uint_eq(limit, d.info.total_bytes / 2);
  ck_assert_uint_gt(limit, 0);
  devmm_statistics st;
  void *q;
  ck_assert_int_eq(devmm_allocate(r, 4096, 0, NULL, &q), DEVMM_OK);
  ck_assert_int_eq(devmm_statistics_get(devmm_resource_upstream(lim), &st), DEVMM_OK);
  ck_assert_int_eq(st.current_bytes, 4096);
  devmm_deallocate(r, q, 4096, 0, NULL);
  devmm_resource_release(r);
  unlink(p);
}
END_TEST

/* What devmm tells the log: a device left without a resource (warning) and a plugin that an
 * on-demand kind could not load (info), each with its names and reason. */
START_TEST(config_logs_what_went_wrong) {
  isolate();
  char log[TESTRES_PATH_MAX], text[1024];
  int fd = testres_mkstemp(log, sizeof log, "stderr");
  snprintf(text, sizeof text,
           "[devmm]\nplugins = cpu, factoryfail\nplugin_path = %s\nlog_level = info\n"
           "[device cpu]\nresource = factoryfail.heap\n",
           env_dir("DEVMM_TEST_PLUGINS"));
  const char *cfg = write_temp(text);
  fflush(stderr);
  int saved = dup(2);
  ck_assert_int_eq(dup2(fd, 2), 2);
  int rc = devmm_init(cfg);
  devmm_resource *r;
  int rc2 = devmm_resource_create_kind("nosuch.heap", 0, NULL, 0, &r);
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  close(fd);
  ck_assert_int_eq(rc, DEVMM_OK);
  ck_assert_int_eq(rc2, DEVMM_ENOENT);
  const char *got = slurp_all(log);
  ck_assert_msg(strstr(got, "devmm: warning: device cpu has no resource: factoryfail.heap: "
                            "simulated factory failure\n"),
                "%s", got);
  ck_assert_msg(strstr(got, "devmm: info: plugin 'nosuch' (for nosuch.heap) not loaded: plugin "
                            "'nosuch' not found"),
                "%s", got);
  unlink(log);
  unlink(cfg);
}
END_TEST

/* An adaptor that cannot be built for a reason other than the file (here: its log file cannot
 * be opened) leaves that device without a resource, with the reason; the rest of the file
 * applies. Blank items in a list are ignored. */
START_TEST(config_adaptor_failure_is_the_devices) {
  isolate();
  const char *cfg = write_temp("[device cpu]\nresource = cpu.malloc\n"
                               "adaptors = statistics, \t , logging ,\n"
                               "log_file = /nonexistent-devmm-dir/x.csv\n");
  ck_assert_msg(devmm_init(cfg) == DEVMM_OK, "%s", devmm_last_error());
  devmm_device_status d;
  ck_assert_int_eq(devmm_device_get(0, &d), DEVMM_OK);
  ck_assert_msg(strstr(d.error, "cannot open log file '/nonexistent-devmm-dir/x.csv'"), "%s",
                d.error);
  unlink(cfg);
  cfg = write_temp("[device cpu]\nresource = cpu.malloc\nadaptors = statistics,  , tracking\n");
  ck_assert_msg(devmm_init(cfg) == DEVMM_OK, "%s", devmm_last_error());
  ck_assert_int_eq(devmm_device_get(0, &d), DEVMM_OK);
  ck_assert_str_eq(d.stack, "tracking(statistics(cpu.malloc))");
  unlink(cfg);
}
END_TEST

/* Relative plugin_path entries are relative to the configuration file's directory; a relative
 * XDG_CONFIG_HOME is ignored (the XDG rule); every adaptor can be configured, in order; sections
 * for different devices of the same id are not duplicates. */
START_TEST(config_paths_devices_and_every_adaptor) {
  isolate();
  char dir[TESTRES_PATH_MAX], sub[TESTRES_PATH_MAX + 16], so[TESTRES_PATH_MAX + 40];
  char ini[TESTRES_PATH_MAX + 16], src[1024];
  testres_mkdtemp(dir, sizeof dir, "rel");
  ck_assert_int_eq(chmod(dir, 0755), 0);
  snprintf(sub, sizeof sub, "%s/plug", dir);
  ck_assert_int_eq(mkdir(sub, 0755), 0);
  snprintf(so, sizeof so, "%s/devmm-faulty.so", sub);
  snprintf(src, sizeof src, "%s/devmm-faulty.so", env_dir("DEVMM_TEST_PLUGINS"));
  testres_copy_file(src, so, 0755);
  snprintf(ini, sizeof ini, "%s/devmm.ini", dir);
  FILE *f = fopen(ini, "w");
  fputs("[devmm]\nplugins = cpu, faulty\nplugin_path = plug\n"
        "[device cuda:0]\nadaptors = statistics\n"
        "[device cpu]\nresource = cpu.malloc\n"
        "adaptors = statistics, limiting, tracking, logging, aligned, thread_safe\n"
        "limit = 1GiB\nlog_file = /dev/null\nalignment = 128\n",
        f);
  fclose(f);
  ck_assert_msg(devmm_init(ini) == DEVMM_OK, "%s", devmm_last_error());
  ck_assert_int_eq(plugin_named("faulty").loaded, 1); /* found in <config dir>/plug */
  devmm_device_status d;
  ck_assert_int_eq(devmm_device_get(0, &d), DEVMM_OK);
  ck_assert_str_eq(d.stack,
                   "thread_safe(aligned(logging(tracking(limiting(statistics(cpu.malloc))))))");
  cpu_still_works();
  /* a relative XDG_CONFIG_HOME is not looked at, even when it names a real file */
  char xdgfile[TESTRES_PATH_MAX + 32];
  snprintf(xdgfile, sizeof xdgfile, "%s/devmm/devmm.ini", dir);
  snprintf(sub, sizeof sub, "%s/devmm", dir);
  ck_assert_int_eq(mkdir(sub, 0755), 0);
  testres_copy_file(ini, xdgfile, 0644);
  ck_assert_int_eq(chdir(dir), 0);
  setenv("XDG_CONFIG_HOME", ".", 1);
  setenv("HOME", "/nonexistent-devmm-home", 1);
  ck_assert_int_eq(devmm_init(NULL), DEVMM_OK);
  ck_assert_str_eq(devmm_config_source(), "built-in default");
  char cmd[TESTRES_PATH_MAX + 16];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  ck_assert_int_eq(system(cmd), 0);
}
END_TEST

/* A relative configuration path (devmm_init("conf/devmm.ini"), "devmm.ini", $DEVMM_CONFIG)
 * keeps its relative plugin_path, resolved against the file's directory; a relative
 * $DEVMM_PLUGIN_PATH entry is resolved against the working directory when devmm_init runs; a
 * plugin that is not found names the absolute directories searched. */
START_TEST(config_relative_paths) {
  isolate();
  char dir[TESTRES_PATH_MAX], conf[TESTRES_PATH_MAX + 8], plug[TESTRES_PATH_MAX + 16];
  char so[TESTRES_PATH_MAX + 48], ini[TESTRES_PATH_MAX + 24], src[1024], home[4096];
  char env[TESTRES_PATH_MAX + 1100];
  ck_assert_ptr_nonnull(getcwd(home, sizeof home));
  testres_mkdtemp(dir, sizeof dir, "relpath");
  ck_assert_int_eq(chmod(dir, 0755), 0);
  snprintf(conf, sizeof conf, "%s/conf", dir);
  ck_assert_int_eq(mkdir(conf, 0755), 0);
  snprintf(plug, sizeof plug, "%s/plug", conf);
  ck_assert_int_eq(mkdir(plug, 0755), 0);
  snprintf(so, sizeof so, "%s/devmm-faulty.so", plug);
  snprintf(src, sizeof src, "%s/devmm-faulty.so", env_dir("DEVMM_TEST_PLUGINS"));
  testres_copy_file(src, so, 0755);
  snprintf(ini, sizeof ini, "%s/devmm.ini", conf);
  FILE *f = fopen(ini, "w");
  fputs("[devmm]\nplugins = cpu, faulty\nplugin_path = plug\n", f);
  fclose(f);
  char *real = realpath(so, NULL);
  ck_assert_ptr_nonnull(real);
  /* a relative path with a directory */
  ck_assert_int_eq(chdir(dir), 0);
  ck_assert_msg(devmm_init("conf/devmm.ini") == DEVMM_OK, "%s", devmm_last_error());
  devmm_plugin_status st = plugin_named("faulty");
  ck_assert_msg(st.loaded, "conf/devmm.ini: %s", st.error);
  ck_assert_str_eq(st.path, real);
  /* a bare file name, given and through $DEVMM_CONFIG */
  ck_assert_int_eq(chdir(conf), 0);
  ck_assert_msg(devmm_init("devmm.ini") == DEVMM_OK, "%s", devmm_last_error());
  st = plugin_named("faulty");
  ck_assert_msg(st.loaded, "devmm.ini: %s", st.error);
  setenv("DEVMM_CONFIG", "devmm.ini", 1);
  ck_assert_msg(devmm_init(NULL) == DEVMM_OK, "%s", devmm_last_error());
  st = plugin_named("faulty");
  ck_assert_msg(st.loaded, "DEVMM_CONFIG=devmm.ini: %s", st.error);
  unsetenv("DEVMM_CONFIG");
  /* a relative $DEVMM_PLUGIN_PATH entry, from the working directory at init */
  char *abs = write_temp("[devmm]\nplugins = cpu, faulty, nosuch\n");
  const char *saved = getenv("DEVMM_PLUGIN_PATH");
  char *savedcopy = strdup(saved ? saved : "");
  snprintf(env, sizeof env, "conf/plug:%s", savedcopy);
  setenv("DEVMM_PLUGIN_PATH", env, 1);
  ck_assert_int_eq(chdir(dir), 0);
  ck_assert_msg(devmm_init(abs) == DEVMM_OK, "%s", devmm_last_error());
  ck_assert_int_eq(chdir(home), 0); /* resolved already: moving away changes nothing */
  st = plugin_named("faulty");
  ck_assert_msg(st.loaded, "DEVMM_PLUGIN_PATH=conf/plug: %s", st.error);
  ck_assert_str_eq(st.path, real);
  st = plugin_named("nosuch"); /* the message names what was searched, as searched */
  char want[TESTRES_PATH_MAX + 64];
  snprintf(want, sizeof want, "in the plugin path (%s/conf/plug:", dir);
  ck_assert_msg(strstr(st.error, want), "'%s' lacks '%s'", st.error, want);
  /* a kind whose plugin the file does not name loads on demand from the same path, as
   * resolved at init (the working directory has changed since) */
  char *cpuonly = write_temp("[devmm]\nplugins = cpu\n");
  ck_assert_int_eq(chdir(dir), 0);
  ck_assert_msg(devmm_init(cpuonly) == DEVMM_OK, "%s", devmm_last_error());
  ck_assert_int_eq(chdir(home), 0);
  devmm_resource *r = NULL;
  ck_assert_msg(devmm_resource_create_kind("faulty.heap", 0, NULL, 0, &r) == DEVMM_OK, "%s",
                devmm_last_error());
  devmm_resource_release(r);
  unlink(cpuonly);
  setenv("DEVMM_PLUGIN_PATH", savedcopy, 1);
  free(savedcopy);
  free(real);
  unlink(abs);
  char cmd[TESTRES_PATH_MAX + 16];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  ck_assert_int_eq(system(cmd), 0);
}
END_TEST

/* A relative log_file (even one starting with a character that sorts before '-') is a file, not
 * stderr; lazy initialisation that fails says why on first use. */
START_TEST(config_log_file_and_lazy_failure) {
  isolate();
  char dir[TESTRES_PATH_MAX], log[TESTRES_PATH_MAX + 32];
  testres_mkdtemp(dir, sizeof dir, "logdir");
  ck_assert_int_eq(chdir(dir), 0);
  const char *cfg = write_temp("[device cpu]\nresource = cpu.malloc\nadaptors = logging\n"
                               "log_file = +log.csv\nlog_flush = yes\n");
  ck_assert_msg(devmm_init(cfg) == DEVMM_OK, "%s", devmm_last_error());
  cpu_still_works();
  snprintf(log, sizeof log, "%s/+log.csv", dir);
  ck_assert_msg(strncmp(slurp_all(log), "Thread,Time,Action,Pointer,Size,Stream\n", 39) == 0, "%s",
                slurp_all(log));
  unlink(log);
  unlink(cfg);
  rmdir(dir);
  /* nothing initialised yet, and the configuration is bad */
  isolate();
  const char *bad = write_temp("[device cpu]\nresource = cpu.malloc\nspeed = fast\n");
  setenv("DEVMM_CONFIG", bad, 1);
  devmm_resource *r;
  ck_assert_int_eq(devmm_get_current_resource(CPU, &r), DEVMM_ENOENT);
  ck_assert_error_contains("no current resource for device cpu: devmm could not initialise: ");
  ck_assert_error_contains(":3: unknown key 'speed'");
  /* tried once; every later use still says why */
  ck_assert_int_eq(devmm_get_current_resource(CPU, &r), DEVMM_ENOENT);
  ck_assert_error_contains("no current resource for device cpu: devmm could not initialise: ");
  ck_assert_error_contains(":3: unknown key 'speed'");
  unsetenv("DEVMM_CONFIG");
  unlink(bad);
}
END_TEST

START_TEST(config_lazy_init_on_first_use) {
  isolate();
  ck_assert_int_eq(devmm_is_initialized(), 0);
  devmm_resource *r;
  ck_assert_int_eq(devmm_get_current_resource(CPU, &r), DEVMM_OK); /* initialises itself */
  ck_assert_int_eq(devmm_is_initialized(), 1);
  ck_assert_str_eq(devmm_resource_name(r), "cpu.malloc");
  devmm_resource_release(r);
  devmm_device cuda = {DEVMM_DEVICE_CUDA, 0};
  ck_assert_int_eq(devmm_get_current_resource(cuda, &r), DEVMM_ENOENT);
  ck_assert_error_contains("no current resource for device cuda:0");
}
END_TEST

/* Threads that miss at once before any init: one initialises, the others wait for it and find
 * the resource (before, they answered "no current resource for device cpu" meanwhile). */
#define LAZY_THREADS 8
static pthread_barrier_t lazy_go;

static void *lazy_first_use(void *arg) {
  devmm_resource *r = NULL;
  pthread_barrier_wait(&lazy_go);
  *(int *)arg = devmm_get_current_resource(CPU, &r);
  if (r)
    devmm_resource_release(r);
  return NULL;
}

START_TEST(config_lazy_init_from_threads_at_once) {
  isolate();
  ck_assert_int_eq(devmm_is_initialized(), 0);
  pthread_t t[LAZY_THREADS];
  int rc[LAZY_THREADS];
  pthread_barrier_init(&lazy_go, NULL, LAZY_THREADS);
  for (int i = 0; i < LAZY_THREADS; i++)
    ck_assert_int_eq(pthread_create(&t[i], NULL, lazy_first_use, &rc[i]), 0);
  for (int i = 0; i < LAZY_THREADS; i++)
    pthread_join(t[i], NULL);
  pthread_barrier_destroy(&lazy_go);
  for (int i = 0; i < LAZY_THREADS; i++)
    ck_assert_msg(rc[i] == DEVMM_OK, "thread %d: status %d", i, rc[i]);
  ck_assert_int_eq(devmm_is_initialized(), 1);
}
END_TEST

START_TEST(parse_sizes) {
  struct {
    const char *text;
    size_t total, want;
  } ok[] = {{"1000", 0, 1000},
            {"4GiB", 0, 4ull << 30},
            {"1.5 KiB", 0, 1536},
            {"2MB", 0, 2000000},
            {"512 mib", 0, 512ull << 20},
            {"90%", 1000, 900},
            {"0", 0, 0},
            {"7 B", 0, 7},
            {" 3 G ", 0, 3ull << 30}};
  for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
    size_t v;
    ck_assert_msg(devmm_parse_size(ok[i].text, ok[i].total, &v) == 0, "%s: %s", ok[i].text,
                  devmm_last_error());
    ck_assert_uint_eq(v, ok[i].want);
  }
  /* every unit's factor: binary (KiB..TiB and the short K, M, G) and decimal (KB..TB) */
  struct {
    const char *unit;
    size_t factor;
  } units[] = {{"", 1},
               {"B", 1},
               {"KiB", 1ull << 10},
               {"MiB", 1ull << 20},
               {"GiB", 1ull << 30},
               {"TiB", 1ull << 40},
               {"KB", 1000},
               {"MB", 1000000},
               {"GB", 1000000000},
               {"TB", 1000000000000ull},
               {"K", 1ull << 10},
               {"M", 1ull << 20},
               {"G", 1ull << 30},
               {"kib", 1ull << 10},
               {"tb", 1000000000000ull}};
  for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
    char text[32];
    size_t v;
    snprintf(text, sizeof text, "3 %s", units[i].unit);
    ck_assert_msg(devmm_parse_size(text, 0, &v) == 0, "%s: %s", text, devmm_last_error());
    ck_assert_msg(v == 3 * units[i].factor, "'%s' is %zu, expected %zu", text, v,
                  3 * units[i].factor);
  }
  size_t v;
  ck_assert_int_eq(devmm_parse_size("-5", 0, &v), DEVMM_EINVAL);
  ck_assert_int_eq(devmm_parse_size("5 parsecs", 0, &v), DEVMM_EINVAL);
  ck_assert_error_contains("bad size '5 parsecs'");
  ck_assert_int_eq(devmm_parse_size("50%", 0, &v), DEVMM_EINVAL);
  ck_assert_error_contains("needs the device's total memory");
  ck_assert_int_eq(devmm_parse_size("99999999999 TiB", 0, &v), DEVMM_EOVERFLOW);
  ck_assert_int_eq(devmm_parse_size("", 0, &v), DEVMM_EINVAL);
  ck_assert_int_eq(devmm_parse_size(NULL, 0, &v), DEVMM_EINVAL);
  /* decimal only: no hexadecimal (strtod's 0x10, 0x1p4) and no exponent (1e3) */
  const char *not_decimal[] = {"0x10", "0X10 KiB",  "0x1p4", "1e3",
                               "1E3",  "2.5e2 MiB", "1e+3",  "1.e3"};
  for (size_t i = 0; i < sizeof not_decimal / sizeof not_decimal[0]; i++) {
    ck_assert_msg(devmm_parse_size(not_decimal[i], 0, &v) == DEVMM_EINVAL,
                  "'%s' was accepted as %zu bytes", not_decimal[i], v);
    char want[256];
    snprintf(want, sizeof want,
             "bad size '%s': not a decimal number (hexadecimal and exponent forms are not "
             "sizes): expected digits with an optional fraction and unit",
             not_decimal[i]);
    ck_assert_error_contains(want);
  }
  ck_assert_int_eq(devmm_parse_size("1.", 0, &v), DEVMM_OK);
  ck_assert_uint_eq(v, 1);
  ck_assert_int_eq(devmm_parse_size(".5 KiB", 0, &v), DEVMM_OK);
  ck_assert_uint_eq(v, 512);
  ck_assert_int_eq(devmm_parse_size("8k", 0, &v), DEVMM_OK); /* RMM refuses it; devmm keeps it */
  ck_assert_uint_eq(v, 8192);
}
END_TEST

/* The one size formatter (size.h) that the OOM report, devmm-info and devmm-replay share. */
START_TEST(format_sizes) {
  struct {
    double bytes;
    int decimals;
    const char *want;
  } ok[] = {{0, 2, "0 B"},
            {1023, 2, "1023 B"},
            {1024, 2, "1.00 KiB"},
            {1536, 1, "1.5 KiB"},
            {3 << 20, 2, "3.00 MiB"},
            {5.0 * (1ull << 30), 0, "5 GiB"},
            {1ull << 40, 1, "1.0 TiB"},
            {2048.0 * (1ull << 40), 1, "2.0 PiB"}};
  for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
    char buf[32];
    ck_assert_int_eq(devmm_format_size(ok[i].bytes, ok[i].decimals, buf, sizeof buf), DEVMM_OK);
    ck_assert_msg(strcmp(buf, ok[i].want) == 0, "%.0f bytes: '%s', expected '%s'", ok[i].bytes, buf,
                  ok[i].want);
  }
  char small[4] = "xyz";
  ck_assert_int_eq(devmm_format_size(1536, 2, small, sizeof small), DEVMM_EINVAL);
  ck_assert_error_contains("cap 4 is too small for '1.50 KiB'");
  ck_assert_str_eq(small, ""); /* nothing half-written */
  ck_assert_int_eq(devmm_format_size(1, 2, NULL, 8), DEVMM_EINVAL);
  ck_assert_error_contains("buf is NULL");
  ck_assert_int_eq(devmm_format_size(1, 7, small, sizeof small), DEVMM_EINVAL);
  ck_assert_error_contains("decimals 7: expected 0..6");
  char buf[32] = "x";
  ck_assert_int_eq(devmm_format_size(-1, 2, buf, sizeof buf), DEVMM_EINVAL);
  ck_assert_error_contains("-1 bytes: expected a finite size >= 0");
  ck_assert_str_eq(buf, "");
  ck_assert_int_eq(devmm_format_size(NAN, 2, buf, sizeof buf), DEVMM_EINVAL);
  ck_assert_int_eq(devmm_format_size(INFINITY, 2, buf, sizeof buf), DEVMM_EINVAL);
}
END_TEST

Suite *config_suite(void) {
  Suite *s = suite_create("config");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, config_golden_errors);
  tcase_add_test(tc, config_failed_reinit_keeps_previous_state);
  tcase_add_test(tc, config_missing_and_unreadable_files);
  tcase_add_test(tc, config_not_a_regular_file);
  tcase_add_test(tc, config_line_length_limit);
  tcase_add_test(tc, config_lookup_order);
  tcase_add_test(tc, config_stack_and_limit_percent);
  tcase_add_test(tc, config_logs_what_went_wrong);
  tcase_add_test(tc, config_adaptor_failure_is_the_devices);
  tcase_add_test(tc, config_paths_devices_and_every_adaptor);
  tcase_add_test(tc, config_relative_paths);
  tcase_add_test(tc, config_log_file_and_lazy_failure);
  tcase_add_test(tc, config_lazy_init_on_first_use);
  tcase_add_loop_test(tc, config_lazy_init_from_threads_at_once, 0, 20);
  tcase_add_test(tc, parse_sizes);
  tcase_add_test(tc, format_sizes);
  suite_add_tcase(s, tc);
  return s;
}
