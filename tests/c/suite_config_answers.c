/* Suite config_answers: devmm.ini and environment cases whose answer is not a refusal, so no
 * golden .ini -> .err pair of tests/config can state it: a key both the kind and an adaptor
 * read, inline comments, a section for a device no plugin has (a warning, and
 * devmm_config_warning; for a lazy device type once its devices are counted), a DEVMM_PLUGIN_PATH
 * entry that does not exist (warned once), tracking history from devmm.ini. Environment (set by
 * Meson) as suite config. */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "plugin_env.h"
#include "testres.h"

static const devmm_device CPU = {DEVMM_DEVICE_CPU, 0};

/* stderr of devmm_init(path), or of devmm_init_text when text (and its status in *rc), in a
 * static buffer. */
static const char *init_stderr_of(const char *path, int text, int *rc) {
  char log[TESTRES_PATH_MAX];
  int fd = testres_mkstemp(log, sizeof log, "stderr");
  fflush(stderr);
  int saved = dup(2);
  ck_assert_int_eq(dup2(fd, 2), 2);
  *rc = text ? devmm_init_text(path, strlen(path), "my text") : devmm_init(path);
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  close(fd);
  const char *got = slurp_all(log);
  unlink(log);
  return got;
}

/* devmm_init(path), and its stderr. */
static const char *init_stderr(const char *path, int *rc) { return init_stderr_of(path, 0, rc); }
/* devmm_init_text(text, strlen(text), "my text"), and its stderr. */
static const char *init_text_stderr(const char *text, int *rc) {
  return init_stderr_of(text, 1, rc);
}

static const char *cpu_stack(void) {
  static char stack[256];
  devmm_device_status d;
  ck_assert_int_eq(devmm_device_get(0, &d), DEVMM_OK);
  snprintf(stack, sizeof stack, "%s", d.stack);
  return stack;
}

/* Every one of 64 allocations of cpu:0's current resource is aligned to `align`. */
static void allocations_aligned(size_t align) {
  devmm_resource *r;
  ck_assert_int_eq(devmm_get_current_resource(CPU, &r), DEVMM_OK);
  void *p[64];
  for (int i = 0; i < 64; i++) {
    ck_assert_int_eq(devmm_allocate(r, 300, 0, NULL, &p[i]), DEVMM_OK);
    ck_assert_msg((uintptr_t)p[i] % align == 0, "%p is not %zu-aligned", p[i], align);
  }
  for (int i = 0; i < 64; i++)
    ck_assert_int_eq(devmm_deallocate(r, p[i], 300, 0, NULL), DEVMM_OK);
  devmm_resource_release(r);
}

/* cpu.aligned's own `alignment` reaches the kind when the aligned adaptor is not listed; with the
 * adaptor listed, aligned.alignment is the adaptor's and a bare alignment the kind's. */
START_TEST(config_kind_option_shared_with_an_adaptor) {
  isolate();
  const char *p = write_temp("[device cpu]\nresource = cpu.aligned\nalignment = 256\n");
  ck_assert_msg(devmm_init(p) == DEVMM_OK, "%s", devmm_last_error());
  ck_assert_str_eq(cpu_stack(), "cpu.aligned(256)");
  allocations_aligned(256);
  unlink(p);
  p = write_temp("[device cpu]\nresource = cpu.aligned\nadaptors = aligned\n"
                 "aligned.alignment = 4096\naligned.alignment_threshold = 1\nalignment = 512\n");
  ck_assert_msg(devmm_init(p) == DEVMM_OK, "%s", devmm_last_error());
  ck_assert_str_eq(cpu_stack(), "aligned(cpu.aligned(512))");
  allocations_aligned(4096);
  unlink(p);
  /* a kind that does not read the key still needs the adaptor */
  p = write_temp("[device cpu]\nresource = cpu.malloc\nalignment = 256\n");
  ck_assert_int_eq(devmm_init(p), DEVMM_ECONFIG);
  ck_assert_msg(strstr(devmm_last_error(), ":3: 'alignment' is set but 'aligned' is not in "
                                           "adaptors = ..."),
                "%s", devmm_last_error());
  unlink(p);
}
END_TEST

/* '#' starts a comment after a value as ';' does, as conf/devmm.ini.in says; an indented key is
 * a key (inih alone would append it to the previous value). */
START_TEST(config_inline_comments) {
  isolate();
  const char *p = write_temp("[device cpu] # the host\nresource = cpu.malloc ; libc\n"
                             "adaptors = statistics # counted\n\tstatistics = exact\t# indented\n");
  ck_assert_msg(devmm_init(p) == DEVMM_OK, "%s", devmm_last_error());
  ck_assert_str_eq(cpu_stack(), "statistics(cpu.malloc)");
  unlink(p);
  /* a '#' inside a word is the value's */
  p = write_temp("[device cpu]\nadaptors = statistics#counted\n");
  ck_assert_int_eq(devmm_init(p), DEVMM_ECONFIG);
  ck_assert_msg(strstr(devmm_last_error(), "unknown adaptor 'statistics#counted'"), "%s",
                devmm_last_error());
  unlink(p);
}
END_TEST

/* [device cpu:1]: no plugin has that device, so the section does nothing: said with file:line,
 * kept for devmm_config_warning (devmm-info --strict fails on it). */
START_TEST(config_section_for_a_device_nobody_has) {
  isolate();
  const char *p = write_temp("[devmm]\nlog_level = warn\n[device cpu]\nadaptors = statistics\n"
                             "[device cpu:1]\nadaptors = statistics\n");
  char path[TESTRES_PATH_MAX], want[TESTRES_PATH_MAX + 256];
  snprintf(path, sizeof path, "%s", p);
  int rc;
  const char *got = init_stderr(path, &rc);
  ck_assert_msg(rc == DEVMM_OK, "%s", devmm_last_error());
  snprintf(want, sizeof want,
           "%s:5: [device cpu:1]: no loaded plugin has device cpu:1, so this section is not "
           "used (plugin 'cpu' has cpu only)",
           path);
  ck_assert_msg(strstr(got, want), "stderr '%s' lacks '%s'", got, want);
  ck_assert_ptr_nonnull(devmm_config_warning(0));
  ck_assert_str_eq(devmm_config_warning(0), want);
  ck_assert_ptr_null(devmm_config_warning(1));
  char *json;
  ck_assert_int_eq(devmm_info_json(&json), DEVMM_OK);
  ck_assert_msg(strstr(json, "\"warnings\": [\""), "%s", json);
  devmm_string_free(json);
  unlink(path);
  /* a file without such a section has no warning */
  p = write_temp("[device cpu]\nadaptors = statistics\n");
  ck_assert_int_eq(devmm_init(p), DEVMM_OK);
  ck_assert_ptr_null(devmm_config_warning(0));
  unlink(p);
}
END_TEST

/* A device type whose plugin counts its devices on first use (sim, ADR 38): its sections are
 * checked once they are counted, not at devmm_init (which counts nothing of it). */
START_TEST(config_section_for_a_lazy_device_nobody_has) {
  isolate();
  const char *p = write_temp("[devmm]\nplugins = cpu, sim\n[plugin sim]\ndevices = 2\n"
                             "[device sim:1]\nadaptors = statistics\n"
                             "[device sim:5]\nadaptors = statistics\n");
  char path[TESTRES_PATH_MAX], want[TESTRES_PATH_MAX + 256];
  snprintf(path, sizeof path, "%s", p);
  ck_assert_msg(devmm_init(path) == DEVMM_OK, "%s", devmm_last_error());
  char *json;
  ck_assert_int_eq(devmm_info_json_now(&json), DEVMM_OK); /* counts no device */
  ck_assert_msg(strstr(json, "\"warnings\": []"), "%s", json);
  devmm_string_free(json);
  snprintf(want, sizeof want,
           "%s:7: [device sim:5]: no loaded plugin has device sim:5, so this section is not "
           "used (plugin 'sim' has sim:0, sim:1 only)",
           path);
  ck_assert_ptr_nonnull(devmm_config_warning(0)); /* counts sim's devices */
  ck_assert_str_eq(devmm_config_warning(0), want);
  ck_assert_ptr_null(devmm_config_warning(1)); /* [device sim:1] is used */
  unlink(path);
}
END_TEST

/* Which device errors are the file's: a refused option value found when a lazily counted
 * device is first counted is (file:line, devmm-info exits 1 on it), a device's runtime refusal
 * is not, even when its text starts as a file error would (devmm_device_config_error). */
START_TEST(config_device_error_is_the_files_or_the_devices) {
  isolate();
  const char *p = write_temp("[devmm]\nplugins = cpu, sim\n[plugin sim]\ndevices = 2\n"
                             "pageable_access = false\n"
                             "[device sim:0]\nresource = sim.system\nheadroom = lots\n"
                             "[device sim:1]\nresource = sim.system\n");
  char path[TESTRES_PATH_MAX];
  snprintf(path, sizeof path, "%s", p);
  ck_assert_msg(devmm_init(path) == DEVMM_OK, "%s", devmm_last_error());
  ck_assert_ptr_null(devmm_device_config_error(99)); /* past the end: none */
  size_t nd = devmm_device_count(), seen = 0;
  for (size_t i = 0; i < nd; i++) {
    devmm_device_status d;
    ck_assert_int_eq(devmm_device_get(i, &d), DEVMM_OK);
    const char *fe = devmm_device_config_error(i);
    if (d.info.device.device_type == DEVMM_DEVICE_CPU) {
      ck_assert_ptr_null(fe);
      continue;
    }
    seen++;
    ck_assert_msg(*d.error, "sim:%d has no error", (int)d.info.device.device_id);
    if (d.info.device.device_id == 0) { /* the file's: headroom = lots, line 8 */
      ck_assert_ptr_nonnull(fe);
      ck_assert_str_eq(fe, d.error);
      char want[TESTRES_PATH_MAX + 8];
      snprintf(want, sizeof want, "%s:8: ", path);
      ck_assert_msg(strncmp(fe, want, strlen(want)) == 0, "%s", fe);
    } else { /* the device's: sim.system refused at run time */
      ck_assert_msg(strstr(d.error, "pageable"), "%s", d.error);
      ck_assert_ptr_null(fe);
    }
  }
  ck_assert_uint_eq(seen, 2);
  unlink(path);
}
END_TEST

/* An adaptor a GPU section names that its resource cannot take (prefetch over memory that does
 * not move) is the file's: at the first use of the device, its error names file:line and the
 * section, as devmm_init's would (docs/api.md, ADR 38), and devmm_device_config_error has it. */
START_TEST(config_deferred_adaptor_refusal_names_its_line) {
  isolate();
  const char *p = write_temp("[devmm]\nplugins = cpu, sim\n[plugin sim]\ndevices = 1\n"
                             "[device sim:0]\nresource = sim.device\nadaptors = prefetch\n");
  char path[TESTRES_PATH_MAX], want[TESTRES_PATH_MAX + 32];
  snprintf(path, sizeof path, "%s", p);
  ck_assert_msg(devmm_init(path) == DEVMM_OK, "%s", devmm_last_error());
  devmm_resource *r = (devmm_resource *)1;
  ck_assert_int_eq(devmm_get_current_resource((devmm_device){DEVMM_DEVICE_SIM, 0}, &r),
                   DEVMM_ENOENT);
  ck_assert_ptr_null(r);
  snprintf(want, sizeof want,
           "%s:7: [device sim:0] prefetch adaptor over sim.device: its memory "
           "does not move",
           path);
  ck_assert_msg(strstr(devmm_last_error(), want), "%s", devmm_last_error());
  size_t nd = devmm_device_count(), seen = 0;
  for (size_t i = 0; i < nd; i++) {
    devmm_device_status d;
    ck_assert_int_eq(devmm_device_get(i, &d), DEVMM_OK);
    if (d.info.device.device_type != DEVMM_DEVICE_SIM)
      continue;
    seen++;
    ck_assert_ptr_nonnull(devmm_device_config_error(i));
    ck_assert_msg(strncmp(d.error, want, strlen(want)) == 0, "%s", d.error);
  }
  ck_assert_uint_eq(seen, 1);
  unlink(path);
}
END_TEST

/* devmm.ini text given in memory (devmm_init_text): its name stands for it in messages and as
 * the source, relative plugin_path entries start at the working directory, and nothing is
 * written to a file on the way (python devmm.init(text) uses it). */
START_TEST(config_init_text_is_named_and_resolved_from_the_working_directory) {
  isolate();
  const char *bad = "[device cpu]\nresource = cpu.malloc\nlimit = lots\n";
  ck_assert_int_eq(devmm_init_text(bad, strlen(bad), "<ini text>"), DEVMM_ECONFIG);
  ck_assert_msg(strncmp(devmm_last_error(), "<ini text>:3: ", 14) == 0, "%s", devmm_last_error());
  ck_assert_int_eq(devmm_init_text(NULL, 0, "x"), DEVMM_EINVAL);
  ck_assert_str_eq(devmm_last_error(), "devmm_init_text: text is NULL");
  char *big = malloc((1 << 20) + 2);
  ck_assert_ptr_nonnull(big);
  memset(big, '#', (1 << 20) + 1);
  ck_assert_int_eq(devmm_init_text(big, (1 << 20) + 1, NULL), DEVMM_ECONFIG);
  ck_assert_str_eq(devmm_last_error(), "<ini text>: larger than 1 MiB: not a devmm.ini");
  free(big);
  char cwd[TESTRES_PATH_MAX], want[TESTRES_PATH_MAX + 256];
  ck_assert_ptr_nonnull(getcwd(cwd, sizeof cwd));
  const char *text = "[devmm]\nlog_level = warn\nplugins = cpu\nplugin_path = no-such-plugins\n";
  int rc;
  const char *got = init_text_stderr(text, &rc); /* the text's length, not its NUL, counts */
  ck_assert_msg(rc == DEVMM_OK, "%s", devmm_last_error());
  ck_assert_str_eq(devmm_config_source(), "my text");
  snprintf(want, sizeof want,
           "devmm: warning: my text: plugin_path entry '%s/no-such-plugins' does not exist: "
           "expected a directory of devmm-<name>.so plugins\n",
           strcmp(cwd, "/") ? cwd : "");
  ck_assert_msg(strstr(got, want), "%s", got);
}
END_TEST

/* A DEVMM_PLUGIN_PATH entry that does not exist is named in a warning, once. */
START_TEST(config_plugin_path_entry_missing) {
  isolate();
  const char *real = getenv("DEVMM_PLUGIN_PATH");
  ck_assert_ptr_nonnull(real);
  char env[4096];
  snprintf(env, sizeof env, "/nonexistent-devmm-plugins:%s", real);
  setenv("DEVMM_PLUGIN_PATH", env, 1);
  const char *p = write_temp("[devmm]\nlog_level = warn\n[device cpu]\nadaptors = statistics\n");
  char path[TESTRES_PATH_MAX];
  snprintf(path, sizeof path, "%s", p);
  int rc;
  const char *got = init_stderr(path, &rc);
  ck_assert_msg(rc == DEVMM_OK, "%s", devmm_last_error());
  ck_assert_msg(strstr(got, "devmm: warning: DEVMM_PLUGIN_PATH: '/nonexistent-devmm-plugins' "
                            "does not exist: expected a directory of devmm-<name>.so plugins\n"),
                "%s", got);
  got = init_stderr(path, &rc); /* once */
  ck_assert_int_eq(rc, DEVMM_OK);
  ck_assert_msg(!strstr(got, "nonexistent-devmm-plugins"), "said twice: %s", got);
  ck_assert_str_eq(cpu_stack(), "statistics(cpu.malloc)");
  setenv("DEVMM_PLUGIN_PATH", real, 1);
  unlink(path);
}
END_TEST

/* A plugin_path entry of devmm.ini that is no directory is said as a DEVMM_PLUGIN_PATH one is,
 * naming the file and the entry (resolved: the file's line numbers are not kept for it). */
START_TEST(config_plugin_path_config_entry_missing) {
  isolate();
  const char *p = write_temp("[devmm]\nplugin_path = nowhere, /also/not\nlog_level = warn\n"
                             "[device cpu]\nadaptors = statistics\n");
  char path[TESTRES_PATH_MAX], dir[TESTRES_PATH_MAX], want[3 * TESTRES_PATH_MAX];
  snprintf(path, sizeof path, "%s", p);
  snprintf(dir, sizeof dir, "%s", path);
  *strrchr(dir, '/') = '\0';
  int rc;
  const char *got = init_stderr(path, &rc);
  ck_assert_msg(rc == DEVMM_OK, "%s", devmm_last_error());
  snprintf(want, sizeof want,
           "devmm: warning: %s: plugin_path entry '%s/nowhere' does not exist: expected a "
           "directory of devmm-<name>.so plugins\n",
           path, dir);
  ck_assert_msg(strstr(got, want), "stderr '%s' lacks '%s'", got, want);
  snprintf(want, sizeof want,
           "devmm: warning: %s: plugin_path entry '/also/not' does not exist: expected a "
           "directory of devmm-<name>.so plugins\n",
           path);
  ck_assert_msg(strstr(got, want), "stderr '%s' lacks '%s'", got, want);
  ck_assert_str_eq(cpu_stack(), "statistics(cpu.malloc)");
  unlink(path);
}
END_TEST

/* history = N on a tracking adaptor keeps the last N events, as devmm.TrackingAdaptor(history=N)
 * does. */
START_TEST(config_tracking_history) {
  isolate();
  const char *p = write_temp("[device cpu]\nadaptors = tracking\nhistory = 3\n");
  ck_assert_msg(devmm_init(p) == DEVMM_OK, "%s", devmm_last_error());
  devmm_resource *r;
  ck_assert_int_eq(devmm_get_current_resource(CPU, &r), DEVMM_OK);
  void *a;
  for (int i = 0; i < 3; i++) {
    ck_assert_int_eq(devmm_allocate(r, 64, 0, NULL, &a), DEVMM_OK);
    ck_assert_int_eq(devmm_deallocate(r, a, 64, 0, NULL), DEVMM_OK);
  }
  devmm_tracking_event ev[8];
  size_t n = 0, stored = 0;
  uint64_t dropped = 0;
  ck_assert_msg(devmm_tracking_history(r, ev, 8, &n, &stored, &dropped, NULL) == DEVMM_OK, "%s",
                devmm_last_error());
  ck_assert_uint_eq(n, 3);
  ck_assert_uint_eq(dropped, 3);
  devmm_resource_release(r);
  unlink(p);
  p = write_temp("[device cpu]\nadaptors = tracking\nhistory = lots\n");
  ck_assert_int_eq(devmm_init(p), DEVMM_ECONFIG);
  ck_assert_msg(strstr(devmm_last_error(), ":3: history = lots: expected a count"), "%s",
                devmm_last_error());
  unlink(p);
}
END_TEST

Suite *config_answers_suite(void) {
  Suite *s = suite_create("config_answers");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, config_kind_option_shared_with_an_adaptor);
  tcase_add_test(tc, config_inline_comments);
  tcase_add_test(tc, config_section_for_a_device_nobody_has);
  tcase_add_test(tc, config_section_for_a_lazy_device_nobody_has);
  tcase_add_test(tc, config_device_error_is_the_files_or_the_devices);
  tcase_add_test(tc, config_deferred_adaptor_refusal_names_its_line);
  tcase_add_test(tc, config_init_text_is_named_and_resolved_from_the_working_directory);
  tcase_add_test(tc, config_plugin_path_entry_missing);
  tcase_add_test(tc, config_plugin_path_config_entry_missing);
  tcase_add_test(tc, config_tracking_history);
  suite_add_tcase(s, tc);
  return s;
}
