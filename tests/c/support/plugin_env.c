/* The configuration and plugin suites' shared helpers (plugin_env.h). */
#include "plugin_env.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const devmm_device CPU = {DEVMM_DEVICE_CPU, 0};

const char *env_dir(const char *name) {
  const char *v = getenv(name);
  ck_assert_msg(v && *v, "%s is not set (run through meson test)", name);
  return v;
}

/* Every test starts from a clean environment: no config from the user's machine. */
void isolate(void) {
  unsetenv("DEVMM_CONFIG");
  setenv("XDG_CONFIG_HOME", "/nonexistent-devmm-test", 1);
  setenv("DEVMM_LOG_LEVEL", "error", 1);
  devmm_shutdown();
}

char *write_temp(const char *text) {
  static char path[TESTRES_PATH_MAX];
  int fd = testres_mkstemp(path, sizeof path, "test");
  ck_assert_int_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
  close(fd);
  return path;
}

/* A whole (small) file, in a static buffer. */
char *slurp_all(const char *path) {
  FILE *f = fopen(path, "r");
  ck_assert_msg(f != NULL, "cannot open %s", path);
  static char buf[8192];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  return buf;
}
devmm_plugin_status plugin_named(const char *name) {
  devmm_plugin_status st = {0};
  for (size_t i = 0; i < devmm_plugin_count(); i++) {
    ck_assert_int_eq(devmm_plugin_get(i, &st), DEVMM_OK);
    if (strcmp(st.name, name) == 0)
      return st;
  }
  ck_abort_msg("no plugin %s", name);
  return st;
}

void cpu_still_works(void) {
  devmm_resource *r;
  ck_assert_int_eq(devmm_get_current_resource(CPU, &r), DEVMM_OK);
  void *p;
  ck_assert_int_eq(devmm_allocate(r, 100, 0, NULL, &p), DEVMM_OK);
  memset(p, 1, 100);
  devmm_deallocate(r, p, 100, 0, NULL);
  devmm_resource_release(r);
}

void chain_make(chain *c, const char *pathdir) {
  char src[1024], text[2 * TESTRES_PATH_MAX];
  testres_mkdtemp(c->top, sizeof c->top, "chain");
  ck_assert_int_eq(chmod(c->top, 0755), 0);
  snprintf(c->mid, sizeof c->mid, "%s/mid", c->top);
  ck_assert_int_eq(mkdir(c->mid, 0755), 0);
  ck_assert_int_eq(chmod(c->mid, 0755), 0);
  snprintf(c->leaf, sizeof c->leaf, "%s/leaf", c->mid);
  ck_assert_int_eq(mkdir(c->leaf, 0755), 0);
  ck_assert_int_eq(chmod(c->leaf, 0755), 0);
  snprintf(c->so, sizeof c->so, "%s/devmm-faulty.so", c->leaf);
  snprintf(src, sizeof src, "%s/devmm-faulty.so", env_dir("DEVMM_TEST_PLUGINS"));
  testres_copy_file(src, c->so, 0755);
  snprintf(text, sizeof text, "[devmm]\nplugins = cpu, faulty\nplugin_path = %s\n",
           pathdir ? pathdir : c->leaf);
  snprintf(c->cfg, sizeof c->cfg, "%s", write_temp(text));
}

void chain_free(chain *c) {
  char cmd[TESTRES_PATH_MAX + 16];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", c->top);
  ck_assert_int_eq(system(cmd), 0);
  unlink(c->cfg);
}

/* Loads c->cfg; returns faulty's error ("" when it loaded). */
const char *faulty_error(const chain *c) {
  ck_assert_msg(devmm_init(c->cfg) == DEVMM_OK, "%s", devmm_last_error());
  static char err[2048];
  devmm_plugin_status st = plugin_named("faulty");
  snprintf(err, sizeof err, "%s", st.loaded ? "" : st.error);
  return err;
}
