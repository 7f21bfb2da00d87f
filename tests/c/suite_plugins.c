/* Suite plugins: the fault plugins (tests/plugins), the trust walk over the plugin path, the
 * plugin helper header, the cpu plugin's kinds. Environment (set by Meson): DEVMM_TEST_PLUGINS
 * (the fault plugins' build directory), DEVMM_PLUGIN_PATH (the real plugins' build directory). */
#include <check.h>
#include <dirent.h>
#include <dlfcn.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "plugin_env.h"
#include "testres.h"

/* ABI 1.0's devmm_resource_kind up to its factory: what oldkinds is compiled with */
#define DEVMM__TEST_KIND_MIN_SIZE (offsetof(devmm_resource_kind, create) + sizeof(void (*)(void)))

static const devmm_device CPU = {DEVMM_DEVICE_CPU, 0};

/* A config loading cpu plus `others` from the fault-plugin directory. */
static const char *config_with(const char *others, const char *extra) {
  static char text[2048];
  snprintf(text, sizeof text, "[devmm]\nplugins = cpu, %s\nplugin_path = %s\n%s", others,
           env_dir("DEVMM_TEST_PLUGINS"), extra ? extra : "");
  return write_temp(text);
}

/* A plugin given by an absolute path that does not exist: its name and the reason. */
START_TEST(plugin_missing_absolute_path) {
  isolate();
  const char *cfg = write_temp("[devmm]\nplugins = cpu, /nonexistent-devmm-dir/devmm-x.so\n");
  ck_assert_int_eq(devmm_init(cfg), DEVMM_OK);
  devmm_plugin_status st;
  ck_assert_int_eq(devmm_plugin_get(1, &st), DEVMM_OK);
  ck_assert_int_eq(st.loaded, 0);
  ck_assert_str_eq(st.error, "plugin file '/nonexistent-devmm-dir/devmm-x.so' does not exist");
  unlink(cfg);
}
END_TEST

static const struct {
  const char *plugin, *error;
} faults[] = {
    {"badabi", "it was built for plugin ABI 99.0; this devmm speaks 1.x"},
    {"newminor", "it needs plugin ABI 1.99; this devmm provides only 1.1"},
    {"noentry", "has no entry symbol devmm_plugin_entry()"},
    {"initfail", "its initialisation failed: simulated init failure"},
    {"dupkinds", "it declares the resource kind 'dupkinds.heap' twice"},
    {"notso", "cannot load '"},
    {"nosuch", "plugin 'nosuch' not found: no devmm-nosuch.so in the plugin path"},
    {"../evil", "plugin name '../evil' is not a plain name"},
    {"incomplete", "its descriptor is incomplete (struct_size "},
    {"badkindname", "its resource kind 'aaa.heap' is not named 'badkindname.<kind>'"},
    {"nofactory", "its resource kind #0 has no name or factory"},
    {"nullkind", "its resource kind #1 is NULL"},
    {"tinykind", "its resource kind #0 has struct_size 8: expected "},
};

START_TEST(plugin_load_faults) {
  isolate();
  const char *cfgpath = config_with(faults[_i].plugin, NULL);
  ck_assert_msg(devmm_init(cfgpath) == DEVMM_OK, "%s", devmm_last_error());
  devmm_plugin_status st = plugin_named(faults[_i].plugin);
  ck_assert_int_eq(st.loaded, 0);
  ck_assert_msg(strstr(st.error, faults[_i].error) != NULL, "%s: error '%s' lacks '%s'",
                faults[_i].plugin, st.error, faults[_i].error);
  ck_assert_int_eq(plugin_named("cpu").loaded, 1);
  cpu_still_works();
  char *json;
  ck_assert_int_eq(devmm_info_json(&json), DEVMM_OK);
  ck_assert_ptr_nonnull(strstr(json, "\"status\": \"failed\""));
  devmm_string_free(json);
  unlink(cfgpath);
}
END_TEST

/* devmm_info_json writes what it did not make (a plugin's name from devmm.ini, its error) as JSON
 * strings: quotes, backslashes and control characters escaped, so the document still parses. */
START_TEST(info_json_escapes_what_the_file_said) {
  isolate();
  const char *cfgpath = config_with("odd\001\"\\name", NULL);
  ck_assert_msg(devmm_init(cfgpath) == DEVMM_OK, "%s", devmm_last_error());
  char *json;
  ck_assert_int_eq(devmm_info_json(&json), DEVMM_OK);
  ck_assert_msg(strstr(json, "\"odd\\u0001\\\"\\\\name\"") != NULL, "%s", json);
  ck_assert_ptr_null(strchr(json, '\001'));
  devmm_string_free(json);
  unlink(cfgpath);
}
END_TEST

/* A plugin that needs exactly one minor version more than this host is refused (the 1.99 case
 * above cannot tell "minor > host minor" from "minor > host major"). */
START_TEST(plugin_next_minor_refused) {
  isolate();
  const char *cfgpath = config_with("nextminor", NULL);
  ck_assert_msg(devmm_init(cfgpath) == DEVMM_OK, "%s", devmm_last_error());
  devmm_plugin_status st = plugin_named("nextminor");
  ck_assert_int_eq(st.loaded, 0);
  char want[128];
  snprintf(want, sizeof want, "it needs plugin ABI %d.%d; this devmm provides only %d.%d",
           DEVMM_PLUGIN_ABI_MAJOR, DEVMM_PLUGIN_ABI_MINOR + 1, DEVMM_PLUGIN_ABI_MAJOR,
           DEVMM_PLUGIN_ABI_MINOR);
  ck_assert_msg(strstr(st.error, want) != NULL, "error '%s' lacks '%s'", st.error, want);
  ck_assert_int_eq(plugin_named("cpu").loaded, 1);
  unlink(cfgpath);
}
END_TEST

START_TEST(plugin_factory_faults) {
  isolate();
  /* the working test plugin's kind serves cpu:0 through a section */
  const char *ok = config_with("faulty", "[device cpu]\nresource = faulty.heap\n");
  ck_assert_int_eq(devmm_init(ok), DEVMM_OK);
  devmm_device_status d;
  devmm_device_get(0, &d);
  ck_assert_str_eq(d.stack, "faulty.heap");
  /* both plugins enumerate cpu:0: it is one device, the first plugin's */
  ck_assert_uint_eq(devmm_device_count(), 1);
  ck_assert_str_eq(d.plugin, "cpu");
  /* kinds are numbered across the plugins, in their order */
  ck_assert_str_eq(devmm_kind_name(2), "cpu.mmap");
  ck_assert_str_eq(devmm_kind_name(3), "cpu.shm");
  ck_assert_str_eq(devmm_kind_name(4), "faulty.heap");
  ck_assert_ptr_null(devmm_kind_name(5));
  cpu_still_works();
  unlink(ok);
  /* the host's services as a plugin sees them: parse_bool gives exactly 1 or 0 */
  static const char *const yes[] = {"yes", "TRUE", "on", "1"}, *const no[] = {"no", "off", "0"};
  devmm_resource *fr;
  for (size_t i = 0; i < 7; i++) {
    devmm_option flag = {"flag", i < 4 ? yes[i] : no[i - 4], 0};
    ck_assert_int_eq(devmm_resource_create_kind("faulty.heap", 0, &flag, 1, &fr), DEVMM_OK);
    ck_assert_str_eq(devmm_resource_name(fr),
                     i < 4 ? "faulty.heap(flag=1)" : "faulty.heap(flag=0)");
    devmm_resource_release(fr);
  }
  devmm_option maybe = {"flag", "maybe", 0};
  ck_assert_int_eq(devmm_resource_create_kind("faulty.heap", 0, &maybe, 1, &fr), DEVMM_EINVAL);
  ck_assert_error_contains("bad boolean 'maybe': expected true/false, yes/no, on/off or 1/0");
  /* a factory that fails: the device has no resource, with the reason */
  const char *bad = config_with("factoryfail", "[device cpu]\nresource = factoryfail.heap\n");
  ck_assert_int_eq(devmm_init(bad), DEVMM_OK);
  devmm_device_get(0, &d);
  ck_assert_str_eq(d.error, "factoryfail.heap: simulated factory failure");
  devmm_resource *r;
  ck_assert_int_eq(devmm_get_current_resource(CPU, &r), DEVMM_ENOENT);
  ck_assert_error_contains("factoryfail.heap: simulated factory failure");
  unlink(bad);
  /* a factory that says OK without a resource */
  const char *null = config_with("factorynull", "[device cpu]\nresource = factorynull.heap\n");
  ck_assert_int_eq(devmm_init(null), DEVMM_OK);
  devmm_device_get(0, &d);
  ck_assert_str_eq(d.error,
                   "factorynull.heap: the factory reported success but returned no resource");
  ck_assert_int_eq(devmm_resource_create_kind("factorynull.heap", 0, NULL, 0, &r), DEVMM_EPLUGIN);
  ck_assert_error_contains("reported success but returned no resource");
  ck_assert_int_eq(devmm_resource_create_kind("cpu.malloc", 0, NULL, 0, &r), DEVMM_OK);
  devmm_resource_release(r);
  unlink(null);
  /* a plugin whose devices cannot be counted: loaded, 0 devices, with the reason */
  const char *nodev = config_with("nodevices", NULL);
  ck_assert_int_eq(devmm_init(nodev), DEVMM_OK);
  devmm_plugin_status st = plugin_named("nodevices");
  ck_assert_int_eq(st.loaded, 1);
  ck_assert_uint_eq(st.ndevices, 0);
  ck_assert_str_eq(st.error, "0 devices: simulated: no device present");
  unlink(nodev);
}
END_TEST

/* ABI 25: kinds are pointers, each read to its own struct_size. oldkinds is compiled with a
 * shorter devmm_resource_kind (no option_help) and a devmm_plugin ending at shutdown. */
START_TEST(plugin_older_smaller_structs_load) {
  isolate();
  const char *cfgpath = config_with("oldkinds", "[device cpu]\nresource = oldkinds.second\n");
  ck_assert_msg(devmm_init(cfgpath) == DEVMM_OK, "%s", devmm_last_error());
  devmm_plugin_status st = plugin_named("oldkinds");
  ck_assert_msg(st.loaded, "%s", st.error);
  ck_assert_uint_eq(st.nkinds, 2);
  ck_assert_str_eq(devmm_kind_name(4), "oldkinds.heap");
  ck_assert_str_eq(devmm_kind_name(5), "oldkinds.second");
  ck_assert_ptr_null(devmm_kind_name(6));
  devmm_kind_status k;
  ck_assert_int_eq(devmm_kind_get(5, &k), DEVMM_OK);
  ck_assert_str_eq(k.description, "the second kind");
  ck_assert_str_eq(k.plugin, "oldkinds");
  ck_assert_ptr_null(k.help); /* past its struct_size: absent */
  ck_assert_int_eq(devmm_kind_get(4, &k), DEVMM_OK);
  ck_assert_str_eq(k.options[0], "flag");
  ck_assert_ptr_null(k.help);
  devmm_device_status d;
  ck_assert_int_eq(devmm_device_get(0, &d), DEVMM_OK);
  ck_assert_str_eq(d.stack, "oldkinds.heap"); /* built by the second kind's factory */
  ck_assert_str_eq(d.error, "");
  cpu_still_works();
  /* what the old layout (an array of devmm_resource_kind) would have read: the plugin's array
   * by the host's stride lands inside its element 0/1, not on element 1 */
  char so[1024];
  snprintf(so, sizeof so, "%s/devmm-oldkinds.so", env_dir("DEVMM_TEST_PLUGINS"));
  void *h = dlopen(so, RTLD_NOW | RTLD_LOCAL);
  ck_assert_msg(h != NULL, "%s", dlerror());
  const char *arr = dlsym(h, "devmm_test_old_kinds");
  ck_assert_ptr_nonnull(arr);
  size_t old_size = *(const size_t *)arr;
  ck_assert_uint_lt(old_size, sizeof(devmm_resource_kind));
  ck_assert_uint_eq(old_size, DEVMM__TEST_KIND_MIN_SIZE);
  const char *wrong_name = *(const char *const *)(arr + sizeof(devmm_resource_kind) +
                                                  offsetof(devmm_resource_kind, name));
  ck_assert_str_ne(wrong_name, "oldkinds.second");
  ck_assert_str_eq(wrong_name, "the second kind"); /* element 1's description: garbage */
  dlclose(h);
  unlink(cfgpath);
}
END_TEST

/* A plugin without device_count/device_info only adds kinds for another plugin's device. */
START_TEST(plugin_kinds_only) {
  isolate();
  const char *cfgpath = config_with("kindsonly", "[device cpu]\nresource = kindsonly.heap\n");
  ck_assert_msg(devmm_init(cfgpath) == DEVMM_OK, "%s", devmm_last_error());
  devmm_plugin_status st = plugin_named("kindsonly");
  ck_assert_msg(st.loaded, "%s", st.error);
  ck_assert_uint_eq(st.ndevices, 0);
  ck_assert_str_eq(st.error, "");
  devmm_device_status d;
  ck_assert_int_eq(devmm_device_get(0, &d), DEVMM_OK);
  ck_assert_str_eq(d.stack, "kindsonly.heap");
  ck_assert_str_eq(d.plugin, "cpu");
  unlink(cfgpath);
}
END_TEST

/* A device two plugins enumerate stays the first's, and the second says so. */
START_TEST(plugin_duplicate_device_is_reported) {
  isolate();
  const char *cfgpath = config_with("faulty", NULL);
  ck_assert_int_eq(devmm_init(cfgpath), DEVMM_OK);
  devmm_plugin_status st = plugin_named("faulty");
  ck_assert_int_eq(st.loaded, 1);
  ck_assert_str_eq(st.error, "device cpu is also enumerated by plugin 'cpu', which keeps it (the "
                             "first in plugins = ...)");
  ck_assert_str_eq(plugin_named("cpu").error, "");
  char *json;
  ck_assert_int_eq(devmm_info_json(&json), DEVMM_OK);
  ck_assert_ptr_nonnull(strstr(json, "also enumerated by plugin 'cpu'"));
  devmm_string_free(json);
  unlink(cfgpath);
}
END_TEST

/* The host prefixes "<kind>: " to a factory's message unless it already starts with it. */
START_TEST(plugin_factory_message_prefixed_once) {
  isolate();
  const char *cfgpath = config_with("factorynamed", "[device cpu]\nresource = factorynamed.heap\n");
  ck_assert_int_eq(devmm_init(cfgpath), DEVMM_OK);
  devmm_device_status d;
  ck_assert_int_eq(devmm_device_get(0, &d), DEVMM_OK);
  ck_assert_str_eq(d.error, "factorynamed.heap: simulated factory failure");
  unlink(cfgpath);
}
END_TEST

/* shutdown runs once, at exit: not at devmm_shutdown, not once per devmm_init. */
START_TEST(plugin_shutdown_called_once_at_exit) {
  isolate();
  char rec[TESTRES_PATH_MAX];
  close(testres_mkstemp(rec, sizeof rec, "shutdown"));
  char extra[TESTRES_PATH_MAX + 64];
  snprintf(extra, sizeof extra, "[plugin shutdownrec]\nrecord = %s\n", rec);
  char cfgpath[TESTRES_PATH_MAX];
  snprintf(cfgpath, sizeof cfgpath, "%s", config_with("shutdownrec", extra));
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    int bad = devmm_init(cfgpath) != DEVMM_OK || !plugin_named("shutdownrec").loaded;
    bad |= devmm_init(cfgpath) != DEVMM_OK; /* re-init: the same descriptor again */
    devmm_shutdown();
    struct stat sb;
    bad |= stat(rec, &sb) != 0 || sb.st_size != 0; /* nothing yet */
    exit(bad ? 3 : 0);                             /* atexit handlers run here */
  }
  int status;
  ck_assert_int_eq(waitpid(pid, &status, 0), pid);
  ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %d", status);
  ck_assert_str_eq(slurp_all(rec), "shutdown\n");
  unlink(rec);
  unlink(cfgpath);
}
END_TEST

/* A plugin written with plugin_helpers.h only: its entry, context, option and name helpers. */
START_TEST(plugin_helpers_header) {
  isolate();
  const char *cfgpath = config_with("helpers", NULL);
  ck_assert_msg(devmm_init(cfgpath) == DEVMM_OK, "%s", devmm_last_error());
  ck_assert_msg(plugin_named("helpers").loaded, "%s", plugin_named("helpers").error);
  devmm_resource *r;
  ck_assert_int_eq(devmm_resource_create_kind("helpers.heap", 0, NULL, 0, &r), DEVMM_OK);
  ck_assert_str_eq(devmm_resource_name(r), "helpers.heap(flag=0,size=4096,label=-)");
  void *p;
  ck_assert_int_eq(devmm_allocate(r, 4097, 0, NULL, &p), DEVMM_ENOMEM); /* context reached */
  ck_assert_error_contains("4097 bytes is over the size 4096");
  ck_assert_int_eq(devmm_allocate(r, 64, 256, NULL, &p), DEVMM_OK);
  ck_assert_uint_eq((uintptr_t)p % 256, 0);
  devmm_deallocate(r, p, 64, 256, NULL);
  devmm_resource_release(r);
  devmm_option o[] = {
      {"flag", "yes", 0}, {"size", "1KiB", 0}, {"label", "a", 0}, {"label", "b", 0}};
  ck_assert_int_eq(devmm_resource_create_kind("helpers.heap", 0, o, 4, &r), DEVMM_OK);
  /* the last label wins */
  ck_assert_str_eq(devmm_resource_name(r), "helpers.heap(flag=1,size=1024,label=b)");
  devmm_resource_release(r);
  devmm_option bad_bool[] = {{"flag", "maybe", 0}};
  ck_assert_int_eq(devmm_resource_create_kind("helpers.heap", 0, bad_bool, 1, &r), DEVMM_EINVAL);
  ck_assert_error_contains("helpers.heap: flag: bad boolean 'maybe'");
  devmm_option bad_size[] = {{"size", "64 MeB", 0}};
  ck_assert_int_eq(devmm_resource_create_kind("helpers.heap", 0, bad_size, 1, &r), DEVMM_EINVAL);
  ck_assert_error_contains("helpers.heap: size: bad size '64 MeB'"); /* the value once */
  ck_assert_ptr_null(strstr(devmm_last_error(), "size = 64 MeB"));
  /* devmm_name_format truncates to the plugin's 48-byte buffer */
  devmm_option long_label[] = {{"label", "abcdefghijklmnopqrstuvwxyz", 0}};
  ck_assert_int_eq(devmm_resource_create_kind("helpers.heap", 0, long_label, 1, &r), DEVMM_OK);
  ck_assert_str_eq(devmm_resource_name(r), "helpers.heap(flag=0,size=4096,label=abcdefghijk");
  devmm_resource_release(r);
  unlink(cfgpath);
}
END_TEST

/* The helper header in a plugin of two source files (one host table for both: the ops file's
 * devmm_plugin_context used to dereference its own, NULL copy) and in a C++ plugin (the entry
 * exported unmangled). */
START_TEST(plugin_helpers_two_files_and_cpp) {
  isolate();
  const char *cfgpath = config_with("twofile", NULL);
  ck_assert_msg(devmm_init(cfgpath) == DEVMM_OK, "%s", devmm_last_error());
  ck_assert_msg(plugin_named("twofile").loaded, "%s", plugin_named("twofile").error);
  devmm_resource *r;
  ck_assert_int_eq(devmm_resource_create_kind("twofile.heap", 0, NULL, 0, &r), DEVMM_OK);
  void *p;
  ck_assert_int_eq(devmm_allocate(r, 4097, 0, NULL, &p), DEVMM_ENOMEM); /* ops.c's context */
  ck_assert_error_contains("4097 bytes is over 4096");
  ck_assert_int_eq(devmm_allocate(r, 64, 0, NULL, &p), DEVMM_OK);
  devmm_deallocate(r, p, 64, 0, NULL);
  devmm_resource_release(r);
  unlink(cfgpath);
  char so[1024];
  snprintf(so, sizeof so, "%s/devmm-helperscpp.so", env_dir("DEVMM_TEST_PLUGINS"));
  if (access(so, F_OK) != 0) {
    testres_skip("plugin_helpers_two_files_and_cpp: no C++ compiler, so no %s", so);
    return;
  }
  cfgpath = config_with("helperscpp", NULL);
  ck_assert_msg(devmm_init(cfgpath) == DEVMM_OK, "%s", devmm_last_error());
  ck_assert_msg(plugin_named("helperscpp").loaded, "%s", plugin_named("helperscpp").error);
  ck_assert_int_eq(devmm_resource_create_kind("helperscpp.heap", 0, NULL, 0, &r), DEVMM_OK);
  ck_assert_int_eq(devmm_allocate(r, 4097, 0, NULL, &p), DEVMM_ENOMEM);
  ck_assert_error_contains("4097 bytes is over the size 4096");
  devmm_resource_release(r);
  unlink(cfgpath);
}
END_TEST

/* DEVMM_PLUGIN_DEFINE's entry, given a host table smaller than ABI 1.0's, says so (it used to
 * return NULL without a message, "(no reason given)"). */
START_TEST(plugin_helpers_small_host_table) {
  isolate();
  char so[1024];
  snprintf(so, sizeof so, "%s/devmm-helpers.so", env_dir("DEVMM_TEST_PLUGINS"));
  void *h = dlopen(so, RTLD_NOW | RTLD_LOCAL);
  ck_assert_msg(h != NULL, "%s", dlerror());
  devmm_plugin_entry_fn entry;
  *(void **)&entry = dlsym(h, DEVMM_PLUGIN_ENTRY_SYMBOL);
  ck_assert_ptr_nonnull(entry);
  devmm_host_services small = {.struct_size = offsetof(devmm_host_services, last_error),
                               .abi_major = 1,
                               .set_error = devmm_set_error};
  devmm_clear_error();
  ck_assert_ptr_null(entry(DEVMM_PLUGIN_ABI_MAJOR, 0, &small));
  ck_assert_error_contains("helpers: the host's services table has");
  ck_assert_error_contains("this plugin needs ABI 1.0's");
  dlclose(h);
}
END_TEST

/* A factory that fails without a message: the status it returned is said, and that it set no
 * message (it used to say "the factory returned no resource", the same as OK without a
 * resource, and an empty message from devmm_resource_create_kind). */
START_TEST(plugin_factory_fails_silently) {
  isolate();
  const char *cfg = config_with("factorysilent", "[device cpu]\nresource = factorysilent.heap\n");
  ck_assert_int_eq(devmm_init(cfg), DEVMM_OK);
  devmm_device_status d;
  devmm_device_get(0, &d);
  ck_assert_str_eq(d.error, "factorysilent.heap: the factory failed with DEVMM_EDEVICE (device "
                            "or driver error) and set no message");
  devmm_resource *r;
  ck_assert_int_eq(devmm_resource_create_kind("factorysilent.heap", 0, NULL, 0, &r), DEVMM_EDEVICE);
  ck_assert_str_eq(devmm_last_error(), "factorysilent.heap: the factory failed with "
                                       "DEVMM_EDEVICE (device or driver error) and set no message");
  unlink(cfg);
  /* a factory's own message gets the kind's name in front, as an unknown option's does */
  cfg = config_with("faulty", NULL);
  ck_assert_int_eq(devmm_init(cfg), DEVMM_OK);
  devmm_option maybe = {"flag", "maybe", 0};
  ck_assert_int_eq(devmm_resource_create_kind("faulty.heap", 0, &maybe, 1, &r), DEVMM_EINVAL);
  ck_assert_msg(strncmp(devmm_last_error(), "faulty.heap: ", 13) == 0, "%s", devmm_last_error());
  unlink(cfg);
}
END_TEST

/* A kind whose plugin could not be loaded on demand says why (it used to say only "unknown
 * resource kind", with the reason logged at info level), and the refusal is logged at warn
 * level; a plugin that is simply absent is said too, and logged at info only. */
START_TEST(plugin_on_demand_refusal_said) {
  isolate();
  /* the level from the file: with CK_FORK=no (valgrind) an earlier test has already read
   * DEVMM_LOG_LEVEL=error, so setting the variable here would change nothing */
  char dir[TESTRES_PATH_MAX], so[TESTRES_PATH_MAX + 20], src[1024], text[TESTRES_PATH_MAX + 96];
  testres_mkdtemp(dir, sizeof dir, "od");
  snprintf(so, sizeof so, "%s/devmm-faulty.so", dir);
  snprintf(src, sizeof src, "%s/devmm-faulty.so", env_dir("DEVMM_TEST_PLUGINS"));
  testres_copy_file(src, so, 0755);
  ck_assert_int_eq(chmod(dir, 0777), 0);
  snprintf(text, sizeof text, "[devmm]\nplugins = cpu\nplugin_path = %s\nlog_level = warn\n", dir);
  const char *cfg = write_temp(text);
  char logpath[TESTRES_PATH_MAX];
  int logfd = testres_mkstemp(logpath, sizeof logpath, "log");
  fflush(stderr);
  int saved = dup(2);
  dup2(logfd, 2);
  ck_assert_int_eq(devmm_init(cfg), DEVMM_OK);
  devmm_resource *r;
  int rc = devmm_resource_create_kind("faulty.heap", 0, NULL, 0, &r);
  char err[2048];
  snprintf(err, sizeof err, "%s", devmm_last_error());
  int rc2 = devmm_resource_create_kind("absent.heap", 0, NULL, 0, &r);
  char err2[2048];
  snprintf(err2, sizeof err2, "%s", devmm_last_error());
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  close(logfd);
  ck_assert_int_eq(rc, DEVMM_ENOENT);
  char want[2 * TESTRES_PATH_MAX];
  snprintf(want, sizeof want,
           "unknown resource kind 'faulty.heap': plugin 'faulty' could not be loaded: refusing "
           "plugin directory '%s': it is writable by others (mode 0777)",
           dir);
  ck_assert_msg(strncmp(err, want, strlen(want)) == 0, "'%s' does not start '%s'", err, want);
  ck_assert_ptr_nonnull(strstr(err, "; the loaded plugins offer cpu.malloc"));
  ck_assert_int_eq(rc2, DEVMM_ENOENT);
  ck_assert_msg(strstr(err2, "unknown resource kind 'absent.heap': plugin 'absent' could not be "
                             "loaded: plugin 'absent' not found: no devmm-absent.so in the "
                             "plugin path") != NULL,
                "%s", err2);
  const char *log = slurp_all(logpath);
  ck_assert_msg(strstr(log, "warning: plugin 'faulty' (for faulty.heap) not loaded: refusing"),
                "%s", log);
  ck_assert_msg(strstr(log, "absent") == NULL, "%s", log);
  unlink(logpath);
  chmod(dir, 0755);
  unlink(so);
  rmdir(dir);
  unlink(cfg);
}
END_TEST

/* A plugin that only adds kinds for another plugin's device takes percentage sizes: the host's
 * device_total service gives it the device's total (ADR 25; it used to fail: "a percentage needs
 * the device's total memory, which is unknown here"). */
START_TEST(plugin_kinds_only_percent_size) {
  isolate();
  const char *cfgpath =
      config_with("helpers", "[device cpu]\nresource = helpers.heap\nsize = 50%\n");
  ck_assert_msg(devmm_init(cfgpath) == DEVMM_OK, "%s", devmm_last_error());
  devmm_device_status d;
  ck_assert_int_eq(devmm_device_get(0, &d), DEVMM_OK);
  char want[128];
  snprintf(want, sizeof want, "helpers.heap(flag=0,size=%zu", d.info.total_bytes / 2);
  ck_assert_msg(strncmp(d.stack, want, strlen(want)) == 0, "'%s' ('%s')", d.stack, d.error);
  devmm_option half[] = {{"size", "25%", 0}};
  devmm_resource *r;
  ck_assert_msg(devmm_resource_create_kind("helpers.heap", 0, half, 1, &r) == DEVMM_OK, "%s",
                devmm_last_error());
  snprintf(want, sizeof want, "helpers.heap(flag=0,size=%zu", d.info.total_bytes / 4);
  ck_assert_msg(strncmp(devmm_resource_name(r), want, strlen(want)) == 0, "%s",
                devmm_resource_name(r));
  devmm_resource_release(r);
  unlink(cfgpath);
}
END_TEST

/* The first directory that has the file decides: a refused copy there hides a valid copy later
 * in the path (fail closed, documented in plugins.md; ADR 27). */
START_TEST(plugin_refused_copy_shadows_a_later_one) {
  isolate();
  char top[TESTRES_PATH_MAX], d1[TESTRES_PATH_MAX + 8], d2[TESTRES_PATH_MAX + 8];
  char so[TESTRES_PATH_MAX + 32], src[1024], text[3 * TESTRES_PATH_MAX];
  testres_mkdtemp(top, sizeof top, "shadow");
  ck_assert_int_eq(chmod(top, 0755), 0);
  snprintf(d1, sizeof d1, "%s/d1", top);
  snprintf(d2, sizeof d2, "%s/d2", top);
  snprintf(src, sizeof src, "%s/devmm-faulty.so", env_dir("DEVMM_TEST_PLUGINS"));
  ck_assert_int_eq(mkdir(d1, 0755), 0);
  ck_assert_int_eq(mkdir(d2, 0755), 0);
  ck_assert_int_eq(chmod(d1, 0777), 0);
  ck_assert_int_eq(chmod(d2, 0755), 0);
  snprintf(so, sizeof so, "%s/devmm-faulty.so", d1);
  testres_copy_file(src, so, 0755);
  snprintf(so, sizeof so, "%s/devmm-faulty.so", d2);
  testres_copy_file(src, so, 0755);
  snprintf(text, sizeof text, "[devmm]\nplugins = cpu, faulty\nplugin_path = %s, %s\n", d1, d2);
  const char *cfg = write_temp(text);
  ck_assert_int_eq(devmm_init(cfg), DEVMM_OK);
  devmm_plugin_status st = plugin_named("faulty");
  ck_assert_int_eq(st.loaded, 0);
  char want[TESTRES_PATH_MAX + 64];
  snprintf(want, sizeof want, "refusing plugin directory '%s': it is writable by others", d1);
  ck_assert_msg(strstr(st.error, want) != NULL, "%s", st.error);
  ck_assert_int_eq(chmod(d1, 0755), 0);
  snprintf(text, sizeof text, "rm -rf '%s'", top);
  ck_assert_int_eq(system(text), 0);
  unlink(cfg);
}
END_TEST

static void copy_file(const char *from, const char *to) {
  FILE *a = fopen(from, "rb"), *b = fopen(to, "wb");
  ck_assert(a && b);
  char buf[65536];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, a)) > 0)
    fwrite(buf, 1, n, b);
  fclose(a);
  fclose(b);
}

START_TEST(plugin_writable_by_others_refused) {
  isolate();
  char dir[TESTRES_PATH_MAX], so[TESTRES_PATH_MAX + 20], src[1024], text[TESTRES_PATH_MAX + 64];
  testres_mkdtemp(dir, sizeof dir, "ww");
  chmod(dir, 0755);
  snprintf(so, sizeof so, "%s/devmm-faulty.so", dir);
  snprintf(src, sizeof src, "%s/devmm-faulty.so", env_dir("DEVMM_TEST_PLUGINS"));
  copy_file(src, so);
  chmod(so, 0757); /* writable by others */
  snprintf(text, sizeof text, "[devmm]\nplugins = cpu, faulty\nplugin_path = %s\n", dir);
  const char *cfg = write_temp(text);
  ck_assert_int_eq(devmm_init(cfg), DEVMM_OK);
  devmm_plugin_status st = plugin_named("faulty");
  ck_assert_int_eq(st.loaded, 0);
  ck_assert_msg(strstr(st.error, "refusing plugin file") && strstr(st.error, "writable by others"),
                "%s", st.error);
  cpu_still_works();
  /* the file is fine now, but its directory is writable by others */
  chmod(so, 0755);
  chmod(dir, 0777);
  ck_assert_int_eq(devmm_init(cfg), DEVMM_OK);
  st = plugin_named("faulty");
  ck_assert_int_eq(st.loaded, 0);
  ck_assert_msg(strstr(st.error, "refusing plugin directory"), "%s", st.error);
  /* and with both fixed it loads */
  chmod(dir, 0755);
  ck_assert_int_eq(devmm_init(cfg), DEVMM_OK);
  ck_assert_int_eq(plugin_named("faulty").loaded, 1);
  unlink(so);
  rmdir(dir);
  unlink(cfg);
}
END_TEST

START_TEST(plugin_absolute_path_allowed) {
  isolate();
  char text[1024];
  snprintf(text, sizeof text, "[devmm]\nplugins = cpu, %s/devmm-faulty.so\n",
           env_dir("DEVMM_TEST_PLUGINS"));
  const char *cfg = write_temp(text);
  ck_assert_int_eq(devmm_init(cfg), DEVMM_OK);
  devmm_plugin_status st;
  devmm_plugin_get(1, &st);
  ck_assert_int_eq(st.loaded, 1);
  ck_assert_str_eq(st.version, "0.0.1");
  unlink(cfg);
}
END_TEST

/* Every directory from / down to the plugin file is checked, as sudo and ssh check theirs: one
 * writable by others (without the sticky bit) or by a group other than root's or this user's
 * own is refused, by
 * name, with its full mode in octal; a sticky one like /tmp is fine. A symbolic link does not
 * hide the directories of the file it points to. */
START_TEST(plugin_trust_checks_the_whole_chain) {
  isolate();
  chain c;
  chain_make(&c, NULL);
  ck_assert_str_eq(faulty_error(&c), "");
  char want[2 * TESTRES_PATH_MAX];
  ck_assert_int_eq(chmod(c.mid, 0777), 0); /* a parent, not the plugin's own directory */
  snprintf(want, sizeof want,
           "refusing plugin directory '%s': it is writable by others (mode 0777); fix with "
           "chmod o-w",
           c.mid);
  ck_assert_refused(&c, want);
  cpu_still_works();
  ck_assert_int_eq(chmod(c.mid, 01777), 0); /* sticky, as /tmp is */
  ck_assert_str_eq(faulty_error(&c), "");
  ck_assert_int_eq(chmod(c.mid, 0775), 0); /* its group is this user's own (or root's): fine */
  ck_assert_str_eq(faulty_error(&c), "");
  if (geteuid() == 0) { /* another group: refused */
    ck_assert_int_eq(chown(c.mid, 0, 65534), 0);
    snprintf(want, sizeof want,
             "refusing plugin directory '%s': it is writable by its group, gid 65534 (mode 0775), "
             "a group that user ",
             c.mid);
    ck_assert_refused(&c, want);
    /* this process's own group is not enough: other users have it as primary group (suite
     * plugin_owner) */
    ck_assert_int_eq(setegid(65534), 0);
    ck_assert_refused(&c, want);
    ck_assert_int_eq(setegid(0), 0);
    /* sticky: writable by any group (and by others) is fine, as documented (ADR 27) */
    ck_assert_int_eq(chmod(c.mid, 01775), 0);
    ck_assert_str_eq(faulty_error(&c), "");
    ck_assert_int_eq(chmod(c.mid, 01772), 0);
    ck_assert_str_eq(faulty_error(&c), "");
    ck_assert_int_eq(chmod(c.mid, 0775), 0);
    ck_assert_int_eq(chown(c.mid, 0, 0), 0);
  }
  ck_assert_int_eq(chmod(c.mid, 0755), 0);
  /* a file keeps its sticky bit in the message (it protects nothing on a file) */
  ck_assert_int_eq(chmod(c.so, 01757), 0);
  snprintf(want, sizeof want, "refusing plugin file '%s': it is writable by others (mode 1757)",
           c.so);
  ck_assert_refused(&c, want);
  ck_assert_int_eq(chmod(c.so, 0755), 0);
  chain_free(&c);
  /* found through a link in a safe directory: the directories the link leads to count */
  chain_make(&c, NULL);
  char safe[TESTRES_PATH_MAX + 8], link[TESTRES_PATH_MAX + 32], text[2 * TESTRES_PATH_MAX];
  snprintf(safe, sizeof safe, "%s/safe", c.top);
  ck_assert_int_eq(mkdir(safe, 0755), 0);
  ck_assert_int_eq(chmod(safe, 0755), 0);
  snprintf(link, sizeof link, "%s/devmm-faulty.so", safe);
  ck_assert_int_eq(symlink(c.so, link), 0);
  snprintf(text, sizeof text, "[devmm]\nplugins = cpu, faulty\nplugin_path = %s\n", safe);
  unlink(c.cfg);
  snprintf(c.cfg, sizeof c.cfg, "%s", write_temp(text));
  ck_assert_str_eq(faulty_error(&c), "");
  ck_assert_int_eq(chmod(c.mid, 0777), 0);
  snprintf(want, sizeof want, "refusing plugin directory '%s': it is writable by others", c.mid);
  ck_assert_refused(&c, want);
  chain_free(&c);
}
END_TEST

/* A libtool archive (.la) names another file to load, which the trust walk never saw: it is
 * refused, given by name or reached through a link, and the library it names is not loaded
 * (here one in a directory writable by others; ADR 39). */
START_TEST(plugin_libtool_archive_refused) {
  isolate();
  char top[TESTRES_PATH_MAX], open_dir[TESTRES_PATH_MAX + 8], safe[TESTRES_PATH_MAX + 8];
  char lib[TESTRES_PATH_MAX + 32], la[TESTRES_PATH_MAX + 32], link[TESTRES_PATH_MAX + 32];
  char src[1024], text[4 * TESTRES_PATH_MAX], want[2 * TESTRES_PATH_MAX];
  testres_mkdtemp(top, sizeof top, "la");
  ck_assert_int_eq(chmod(top, 0755), 0);
  snprintf(open_dir, sizeof open_dir, "%s/open", top);
  snprintf(safe, sizeof safe, "%s/safe", top);
  ck_assert_int_eq(mkdir(open_dir, 0755), 0);
  ck_assert_int_eq(chmod(open_dir, 0777), 0);
  ck_assert_int_eq(mkdir(safe, 0755), 0);
  ck_assert_int_eq(chmod(safe, 0755), 0);
  snprintf(lib, sizeof lib, "%s/devmm-faulty.so", open_dir);
  snprintf(src, sizeof src, "%s/devmm-faulty.so", env_dir("DEVMM_TEST_PLUGINS"));
  testres_copy_file(src, lib, 0777);
  snprintf(la, sizeof la, "%s/devmm-evil.la", safe);
  snprintf(text, sizeof text,
           "# devmm-evil.la - a libtool library file\ndlname='devmm-faulty.so'\n"
           "library_names='devmm-faulty.so'\nold_library=''\ninherited_linker_flags=''\n"
           "dependency_libs=''\ninstalled=yes\nlibdir='%s'\n",
           open_dir);
  FILE *f = fopen(la, "w");
  ck_assert_ptr_nonnull(f);
  fputs(text, f);
  fclose(f);
  ck_assert_int_eq(chmod(la, 0644), 0);
  snprintf(want, sizeof want,
           "refusing plugin file '%s': it is a libtool archive (.la), which names another file to "
           "load; expected a shared object (.so): name the .so itself",
           la);
  /* by name */
  snprintf(text, sizeof text, "[devmm]\nplugins = cpu, %s\n", la);
  const char *cfg = write_temp(text);
  ck_assert_int_eq(devmm_init(cfg), DEVMM_OK);
  devmm_plugin_status st = plugin_named(la);
  ck_assert_msg(!st.loaded && strstr(st.error, want), "error '%s' lacks '%s'",
                st.loaded ? "(loaded)" : st.error, want);
  ck_assert_msg(dlopen(lib, RTLD_LAZY | RTLD_NOLOAD) == NULL, "%s was loaded", lib);
  unlink(cfg);
  /* through a link that the short name finds */
  snprintf(link, sizeof link, "%s/devmm-faulty.so", safe);
  ck_assert_int_eq(symlink(la, link), 0);
  snprintf(text, sizeof text, "[devmm]\nplugins = cpu, faulty\nplugin_path = %s\n", safe);
  cfg = write_temp(text);
  ck_assert_int_eq(devmm_init(cfg), DEVMM_OK);
  st = plugin_named("faulty");
  ck_assert_msg(!st.loaded && strstr(st.error, want), "error '%s' lacks '%s'",
                st.loaded ? "(loaded)" : st.error, want);
  ck_assert_msg(dlopen(lib, RTLD_LAZY | RTLD_NOLOAD) == NULL, "%s was loaded", lib);
  /* and the same text under a .so name is no shared object: libltdl is never told to read it */
  ck_assert_int_eq(unlink(link), 0);
  testres_copy_file(la, link, 0644);
  ck_assert_int_eq(devmm_init(cfg), DEVMM_OK);
  st = plugin_named("faulty");
  snprintf(want, sizeof want, "cannot load '%s': ", link);
  ck_assert_msg(!st.loaded && strstr(st.error, want), "error '%s' lacks '%s'",
                st.loaded ? "(loaded)" : st.error, want);
  ck_assert_msg(dlopen(lib, RTLD_LAZY | RTLD_NOLOAD) == NULL, "%s was loaded", lib);
  unlink(cfg);
  snprintf(text, sizeof text, "rm -rf '%s'", top);
  ck_assert_int_eq(system(text), 0);
}
END_TEST

static int open_descriptors(void) {
  int n = 0;
  DIR *d = opendir("/proc/self/fd");
  ck_assert_ptr_nonnull(d);
  while (readdir(d))
    n++;
  closedir(d);
  return n;
}

/* A plugin is loaded through the descriptor the trust walk checked, which stays open while the
 * plugin is loaded (for good): one per plugin file, however often devmm_init loads it again, and
 * two plugins loaded one after the other are two plugins (ADR 39). */
START_TEST(plugin_descriptors_one_per_file) {
  isolate();
  const char *cfg = config_with("faulty", NULL);
  ck_assert_int_eq(devmm_init(cfg), DEVMM_OK);
  ck_assert_int_eq(plugin_named("faulty").loaded, 1);
  int after_first = open_descriptors();
  for (int i = 0; i < 20; i++)
    ck_assert_int_eq(devmm_init(cfg), DEVMM_OK);
  ck_assert_int_eq(open_descriptors(), after_first);
  unlink(cfg);
  /* a program that closes devmm's descriptor: the number, free again, must not bring the old
   * plugin back for the next file */
  char so[1024], self[64], target[1024];
  snprintf(so, sizeof so, "%s/devmm-faulty.so", env_dir("DEVMM_TEST_PLUGINS"));
  char *real = realpath(so, NULL);
  int closed = -1;
  for (int fd = 3; fd < 1024 && closed < 0; fd++) {
    snprintf(self, sizeof self, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(self, target, sizeof target - 1);
    if (n > 0 && (target[n] = '\0', strcmp(target, real) == 0) && close(fd) == 0)
      closed = fd;
  }
  free(real);
  ck_assert_msg(closed >= 0, "no descriptor of %s is open", so);
  cfg = config_with("kindsonly", NULL);
  ck_assert_int_eq(devmm_init(cfg), DEVMM_OK);
  devmm_plugin_status st = plugin_named("kindsonly");
  ck_assert_msg(st.loaded, "%s", st.error);
  devmm_resource *r;
  ck_assert_msg(devmm_resource_create_kind("kindsonly.heap", 0, NULL, 0, &r) == DEVMM_OK, "%s",
                devmm_last_error());
  devmm_resource_release(r);
  unlink(cfg);
}
END_TEST

/* A factory that refuses an option value fails devmm_init at that option's line, whatever
 * error status it chose (EINVAL or ECONFIG), with its own message. */
START_TEST(plugin_factory_option_errors_fail_init) {
  isolate();
  const char *bad = config_with("faulty", "[device cpu]\nresource = faulty.heap\n"
                                          "adaptors = statistics\nsize = 64 MeB\n");
  ck_assert_int_eq(devmm_init(bad), DEVMM_ECONFIG);
  char want[TESTRES_PATH_MAX + 128];
  snprintf(want, sizeof want, "%s:7: [device cpu] faulty.heap: size: bad size '64 MeB'", bad);
  ck_assert_msg(strncmp(devmm_last_error(), want, strlen(want)) == 0, "'%s' does not start '%s'",
                devmm_last_error(), want);
  ck_assert_int_eq(devmm_is_initialized(), 0);
  unlink(bad);
  bad = config_with("faulty", "[device cpu]\nresource = faulty.heap\nsize = 1MiB\nflag = maybe\n");
  ck_assert_int_eq(devmm_init(bad), DEVMM_ECONFIG);
  snprintf(want, sizeof want, "%s:7: [device cpu] bad boolean 'maybe'", bad);
  ck_assert_msg(strncmp(devmm_last_error(), want, strlen(want)) == 0, "'%s' does not start '%s'",
                devmm_last_error(), want);
  unlink(bad);
}
END_TEST

/* ---------------------------------------------------------------- the cpu plugin */

static void roundtrip(devmm_resource *r, size_t n, size_t align) {
  unsigned char *p;
  ck_assert_msg(devmm_allocate(r, n, align, NULL, (void **)&p) == 0, "%s", devmm_last_error());
  if (align)
    ck_assert_uint_eq((uintptr_t)p % align, 0);
  ck_assert_int_eq(devmm_memset(r, p, 0xab, n, NULL), DEVMM_OK);
  unsigned char *back = malloc(n);
  ck_assert_int_eq(devmm_copy(r, back, p, n, NULL), DEVMM_OK);
  ck_assert_int_eq(back[0], 0xab);
  ck_assert_int_eq(back[n - 1], 0xab);
  free(back);
  ck_assert_int_eq(devmm_deallocate(r, p, n, align, NULL), DEVMM_OK);
}

START_TEST(cpu_kinds) {
  isolate();
  ck_assert_int_eq(devmm_init(NULL), DEVMM_OK);
  devmm_resource *r;
  const char *kinds[] = {"cpu.malloc", "cpu.aligned", "cpu.mmap"};
  for (int k = 0; k < 3; k++) {
    ck_assert_int_eq(devmm_resource_create_kind(kinds[k], 0, NULL, 0, &r), DEVMM_OK);
    roundtrip(r, 1, 0);
    roundtrip(r, 100000, 0);
    roundtrip(r, 3000, 64);
    roundtrip(r, 5000, 1 << 16);
    size_t f, t;
    ck_assert_int_eq(devmm_mem_info(r, &f, &t), DEVMM_OK);
    ck_assert_uint_gt(t, 0);
    ck_assert_uint_le(f, t);
    void *p;
    ck_assert_int_eq(devmm_allocate(r, 10, 0, (devmm_stream)0x10, &p), DEVMM_EINVAL);
    ck_assert_error_contains("CPU memory has no streams");
    devmm_resource_release(r);
  }
  devmm_option opts[] = {{"alignment", "4096", 0}};
  ck_assert_int_eq(devmm_resource_create_kind("cpu.aligned", 0, opts, 1, &r), DEVMM_OK);
  ck_assert_str_eq(devmm_resource_name(r), "cpu.aligned(4096)");
  void *p;
  devmm_allocate(r, 8, 0, NULL, &p);
  ck_assert_uint_eq((uintptr_t)p % 4096, 0);
  devmm_deallocate(r, p, 8, 0, NULL);
  devmm_resource_release(r);
  devmm_option huge[] = {{"huge_pages", "transparent", 0}, {"populate", "true", 0}};
  ck_assert_int_eq(devmm_resource_create_kind("cpu.mmap", 0, huge, 2, &r), DEVMM_OK);
  roundtrip(r, 4 << 20, 0);
  devmm_resource_release(r);
  devmm_option expl[] = {{"huge_pages", "explicit", 0}};
  ck_assert_int_eq(devmm_resource_create_kind("cpu.mmap", 0, expl, 1, &r), DEVMM_OK);
  int rc = devmm_allocate(r, 1 << 20, 0, NULL, &p);
  if (rc == DEVMM_OK) /* this machine has huge pages reserved */
    devmm_deallocate(r, p, 1 << 20, 0, NULL);
  else
    ck_assert_error_contains("nr_hugepages");
  devmm_resource_release(r);
  /* bad options and devices */
  devmm_option bad[] = {{"populate", "perhaps", 0}};
  ck_assert_int_eq(devmm_resource_create_kind("cpu.mmap", 0, bad, 1, &r), DEVMM_EINVAL);
  ck_assert_error_contains("bad boolean 'perhaps'");
  devmm_option unknown[] = {{"colour", "red", 0}};
  ck_assert_int_eq(devmm_resource_create_kind("cpu.mmap", 0, unknown, 1, &r), DEVMM_EINVAL);
  ck_assert_error_contains("unknown option 'colour': valid options are huge_pages, populate");
  ck_assert_int_eq(devmm_resource_create_kind("cpu.malloc", 1, NULL, 0, &r), DEVMM_EINVAL);
  ck_assert_error_contains("there is one CPU device, cpu:0");
  ck_assert_int_eq(devmm_resource_create_kind("cpu.quick", 0, NULL, 0, &r), DEVMM_ENOENT);
  ck_assert_error_contains("the loaded plugins offer cpu.malloc, cpu.aligned, cpu.mmap");
  ck_assert_ptr_null(r);
  devmm_option a3[] = {{"alignment", "48", 0}};
  ck_assert_int_eq(devmm_resource_create_kind("cpu.aligned", 0, a3, 1, &r), DEVMM_EINVAL);
  ck_assert_error_contains("alignment 48 is not a power of two");
}
END_TEST

START_TEST(cpu_device_info) {
  isolate();
  ck_assert_int_eq(devmm_init(NULL), DEVMM_OK);
  ck_assert_uint_eq(devmm_device_count(), 1);
  devmm_device_status d;
  ck_assert_int_eq(devmm_device_get(0, &d), DEVMM_OK);
  ck_assert_int_eq(d.info.device.device_type, DEVMM_DEVICE_CPU);
  ck_assert_uint_gt(d.info.total_bytes, 0);
  ck_assert_str_eq(d.plugin, "cpu");
  ck_assert_str_eq(devmm_kind_name(0), "cpu.malloc"); /* every kind of every loaded plugin */
  ck_assert_str_eq(devmm_kind_name(1), "cpu.aligned");
  ck_assert_str_eq(devmm_kind_name(2), "cpu.mmap");
  ck_assert_str_eq(devmm_kind_name(3), "cpu.shm");
  ck_assert_ptr_null(devmm_kind_name(4));
  ck_assert_int_eq(devmm_device_get(5, &d), DEVMM_EINVAL);
  ck_assert_int_eq(devmm_plugin_get(5, NULL), DEVMM_EINVAL);
  /* each kind's description and options, with their help */
  devmm_kind_status k;
  ck_assert_int_eq(devmm_kind_get(1, &k), DEVMM_OK);
  ck_assert_str_eq(k.name, "cpu.aligned");
  ck_assert_str_eq(k.description, "posix_memalign with a minimum alignment");
  ck_assert_str_eq(k.plugin, "cpu");
  ck_assert_int_eq(k.device_type, DEVMM_DEVICE_CPU);
  ck_assert_str_eq(k.options[0], "alignment");
  ck_assert_ptr_null(k.options[1]);
  ck_assert_ptr_nonnull(strstr(k.help[0], "power of two"));
  ck_assert_int_eq(devmm_kind_get(0, &k), DEVMM_OK);
  ck_assert_ptr_null(k.options);
  ck_assert_int_eq(devmm_kind_get(4, &k), DEVMM_EINVAL); /* cpu's four kinds, then none */
  ck_assert_error_contains("devmm_kind_get: no kind #4");
  ck_assert_int_eq(devmm_kind_get(0, NULL), DEVMM_EINVAL);
  char *json;
  ck_assert_int_eq(devmm_info_json(&json), DEVMM_OK);
  ck_assert_msg(strstr(json,
                       "\"kind_info\": [{\"name\": \"cpu.malloc\", \"description\": "
                       "\"libc malloc/free\", \"device_type\": \"cpu\", \"options\": []}") != NULL,
                "%s", json);
  ck_assert_ptr_nonnull(strstr(json, "{\"key\": \"populate\", \"help\": "));
  devmm_string_free(json);
}
END_TEST

Suite *plugins_suite(void) {
  Suite *s = suite_create("plugins");
  TCase *tc = tcase_create("core");
  tcase_add_loop_test(tc, plugin_load_faults, 0, (int)(sizeof faults / sizeof faults[0]));
  tcase_add_test(tc, plugin_next_minor_refused);
  tcase_add_test(tc, info_json_escapes_what_the_file_said);
  tcase_add_test(tc, plugin_factory_faults);
  tcase_add_test(tc, plugin_writable_by_others_refused);
  tcase_add_test(tc, plugin_absolute_path_allowed);
  tcase_add_test(tc, plugin_trust_checks_the_whole_chain);
  tcase_add_test(tc, plugin_libtool_archive_refused);
  tcase_add_test(tc, plugin_descriptors_one_per_file);
  tcase_add_test(tc, plugin_factory_option_errors_fail_init);
  tcase_add_test(tc, plugin_missing_absolute_path);
  tcase_add_test(tc, cpu_kinds);
  tcase_add_test(tc, cpu_device_info);
  tcase_add_test(tc, plugin_older_smaller_structs_load);
  tcase_add_test(tc, plugin_kinds_only);
  tcase_add_test(tc, plugin_duplicate_device_is_reported);
  tcase_add_test(tc, plugin_factory_message_prefixed_once);
  tcase_add_test(tc, plugin_shutdown_called_once_at_exit);
  tcase_add_test(tc, plugin_helpers_header);
  tcase_add_test(tc, plugin_helpers_two_files_and_cpp);
  tcase_add_test(tc, plugin_helpers_small_host_table);
  tcase_add_test(tc, plugin_factory_fails_silently);
  tcase_add_test(tc, plugin_kinds_only_percent_size);
  tcase_add_test(tc, plugin_refused_copy_shadows_a_later_one);
  tcase_add_test(tc, plugin_on_demand_refusal_said);
  suite_add_tcase(s, tc);
  return s;
}
