/* devmm-info: what devmm sees — the configuration used, what the build carries (each optional
 * plugin built or left out, and why), each plugin, each device and the resource stack built for
 * it. --check does an allocate/write/read/free round trip on every device; --json prints the
 * same for machines.
 *
 * Exit status (usage() says the same): 0 fine; 1 the configuration or the command line is
 * invalid (devmm_init refused the file, at file:line: nothing was built; or a device's stack,
 * built once its plugin counted its devices, was refused at file:line); 2 the configuration
 * is valid but something it names does not work: a device failed --check, or --check or
 * --strict found no device, or (--strict) a plugin failed to load, a device has no resource or
 * the configuration has a warning (devmm_config_warning: a section nothing uses). */
#include <devmm/devmm.h>

#include "build_parts.h" /* tools/meson.build: what this build carries (pip hides the summary) */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f) {
  fputs("usage: devmm-info [--config FILE] [--check] [--json] [--strict] [--version]\n"
        "  --config FILE  read FILE instead of the usual lookup (also --config=FILE)\n"
        "  --check        allocate, write, read back and free 1 MiB on every device\n"
        "  --json         print JSON instead of text (an invalid configuration: {\"error\":\n"
        "                 {\"status\", \"message\"}} on stdout, the message on stderr too)\n"
        "  --strict       exit 2 if a plugin failed to load, a device has no resource,\n"
        "                 there is no device, or the configuration has a warning\n"
        "  --version      print devmm's version and plugin ABI, and exit\n"
        "exit status: 0 fine; 1 the configuration (or the command line) is invalid, with\n"
        "file:line (a device's refused option included); 2 it is valid but does not fully work: a "
        "--check failed, --check or\n"
        "--strict found no device, or (--strict) a plugin or a device's resource failed or\n"
        "the configuration has a warning (a section no device uses)\n",
        f);
}

/* Each optional part meson setup decided on: its kind, its name, "" if built or why not. */
static const struct { const char *kind, *name, *reason; } build_parts[] = {DEVMM_BUILD_PARTS};
#define NPARTS (sizeof build_parts / sizeof *build_parts)

static void json_string(const char *s) {
  putchar('"');
  for (const unsigned char *c = (const unsigned char *)s; *c; c++)
    if (*c == '"' || *c == '\\')
      printf("\\%c", *c);
    else if (*c < 0x20)
      printf("\\u%04x", *c);
    else
      putchar(*c);
  putchar('"');
}

/* A plugin as devmm.ini names it, short: "/opt/x/devmm-foo.so" is "foo" (its path is shown
 * beside it). */
static const char *short_name(const char *name, char *buf, size_t cap) {
  const char *base = strrchr(name, '/');
  if (!base)
    return name;
  base++;
  if (strncmp(base, "devmm-", 6) == 0)
    base += 6;
  size_t n = strlen(base);
  if (n > 3 && strcmp(base + n - 3, ".so") == 0)
    n -= 3;
  snprintf(buf, cap, "%.*s", (int)n, base);
  return buf;
}

/* Round trip through the device's current resource: allocate, fill with a pattern through the
 * resource's memset, copy back into host memory, compare, free. */
static int check_device(devmm_device dev, char *msg, size_t cap) {
  const size_t n = 1 << 20;
  devmm_resource *r;
  if (devmm_get_current_resource(dev, &r) != DEVMM_OK) {
    snprintf(msg, cap, "%s", devmm_last_error());
    return 1;
  }
  void *p = NULL;
  unsigned char *host = malloc(n);
  int rc = host ? devmm_allocate(r, n, 0, NULL, &p) : DEVMM_ENOMEM;
  if (!rc)
    rc = devmm_memset(r, p, 0x5a, n, NULL);
  if (!rc)
    rc = devmm_copy(r, host, p, n, NULL);
  if (!rc)
    rc = devmm_synchronize(r, NULL);
  if (rc) {
    snprintf(msg, cap, "%s", devmm_last_error());
  } else {
    for (size_t i = 0; i < n; i++)
      if (host[i] != 0x5a) {
        snprintf(msg, cap, "read back 0x%02x at byte %zu, wrote 0x5a", host[i], i);
        rc = 1;
        break;
      }
    if (!rc)
      snprintf(msg, cap, "allocate/write/read/free 1 MiB through %s: ok", devmm_resource_name(r));
  }
  if (p && devmm_deallocate(r, p, n, 0, NULL) != DEVMM_OK && !rc) {
    snprintf(msg, cap, "free failed: %s", devmm_last_error());
    rc = 1;
  }
  free(host);
  devmm_resource_release(r);
  return rc != 0;
}

int main(int argc, char **argv) {
  const char *config = NULL;
  int check = 0, json = 0, strict = 0;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--check") == 0)
      check = 1;
    else if (strcmp(argv[i], "--json") == 0)
      json = 1;
    else if (strcmp(argv[i], "--strict") == 0)
      strict = 1;
    else if (strcmp(argv[i], "--config") == 0 && i + 1 < argc)
      config = argv[++i];
    else if (strcmp(argv[i], "--config") == 0) {
      fprintf(stderr, "devmm-info: --config needs a FILE\n");
      usage(stderr);
      return 1;
    } else if (strncmp(argv[i], "--config=", 9) == 0 && argv[i][9])
      config = argv[i] + 9;
    else if (strcmp(argv[i], "--config=") == 0) {
      fprintf(stderr, "devmm-info: --config= needs a FILE after the '='\n");
      usage(stderr);
      return 1;
    } else if (strcmp(argv[i], "--version") == 0) {
      printf("devmm-info %s (plugin ABI %d.%d)\n", devmm_version(), DEVMM_PLUGIN_ABI_MAJOR,
             DEVMM_PLUGIN_ABI_MINOR);
      return 0;
    } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      usage(stdout);
      return 0;
    } else {
      fprintf(stderr, "devmm-info: unknown argument '%s'\n", argv[i]);
      usage(stderr);
      return 1;
    }
  }
  int irc = devmm_init(config);
  if (irc != DEVMM_OK) {
    fprintf(stderr, "devmm-info: invalid configuration: %s\n", devmm_last_error());
    if (json) { /* a machine reading stdout gets JSON either way */
      printf("{\"error\": {\"status\": \"%s\", \"message\": ", devmm_status_name(irc));
      json_string(devmm_last_error());
      puts("}}");
    }
    return 1;
  }
  int failed_plugins = 0, failed_checks = 0, failed_devices = 0;
  size_t np = devmm_plugin_count(), nd = devmm_device_count();
  char **results = calloc(nd ? nd : 1, sizeof *results);
  int *ok = calloc(nd ? nd : 1, sizeof *ok);
  for (size_t i = 0; check && i < nd; i++) {
    devmm_device_status d;
    devmm_device_get(i, &d);
    results[i] = malloc(1024);
    ok[i] = !check_device(d.info.device, results[i], 1024);
    failed_checks += !ok[i];
  }
  for (size_t i = 0; i < np; i++) {
    devmm_plugin_status p;
    devmm_plugin_get(i, &p);
    failed_plugins += !p.loaded;
  }
  /* a device's error that is the file's (a refused option value of a device built once its
   * plugin counted its devices, ADR 38) makes the configuration invalid: exit 1 */
  char file_error[1024] = "";
  for (size_t i = 0; i < nd; i++) {
    devmm_device_status d;
    devmm_device_get(i, &d);
    failed_devices += *d.error != '\0';
    const char *fe = devmm_device_config_error(i);
    if (!*file_error && fe)
      snprintf(file_error, sizeof file_error, "%s", fe);
  }
  size_t nw = 0; /* the configuration's warnings (said on stderr when it was read) */
  while (devmm_config_warning(nw))
    nw++;
  if (json) {
    char *doc;
    devmm_info_json(&doc);
    size_t len = strlen(doc);
    doc[len - 1] = '\0'; /* drop the closing brace to append the checks */
    fputs(doc, stdout);
    devmm_string_free(doc);
    fputs(", \"build\": [", stdout);
    for (size_t i = 0; i < NPARTS; i++) {
      printf("%s{\"kind\": \"%s\", \"name\": \"%s\", \"built\": %s, \"reason\": ", i ? ", " : "",
             build_parts[i].kind, build_parts[i].name, *build_parts[i].reason ? "false" : "true");
      json_string(build_parts[i].reason);
      putchar('}');
    }
    putchar(']');
    if (check) {
      fputs(", \"check\": [", stdout);
      for (size_t i = 0; i < nd; i++) {
        devmm_device_status d;
        char name[32];
        devmm_device_get(i, &d);
        devmm_device_format(d.info.device, name, sizeof name);
        printf("%s{\"device\": \"%s\", \"ok\": %s, \"message\": \"", i ? ", " : "", name,
               ok[i] ? "true" : "false");
        for (const char *c = results[i]; *c; c++)
          printf(*c == '"' || *c == '\\' ? "\\%c" : "%c", *c);
        fputs("\"}", stdout);
      }
      fputs("]", stdout);
    }
    puts("}");
  } else {
    printf("devmm %s (plugin ABI %d.%d)\nconfig: %s\n\n"
           "build (what meson setup built or left out, and why):\n",
           devmm_version(), DEVMM_PLUGIN_ABI_MAJOR, DEVMM_PLUGIN_ABI_MINOR, devmm_config_source());
    for (size_t i = 0; i < NPARTS; i++) {
      char label[64];
      snprintf(label, sizeof label, "%s%s", strcmp(build_parts[i].kind, "plugin") ? "" : "plugin ",
               build_parts[i].name);
      printf("  %-15s %s%s\n", label, *build_parts[i].reason ? "left out: " : "built",
             build_parts[i].reason);
    }
    printf("\nplugins:\n");
    for (size_t i = 0; i < np; i++) {
      devmm_plugin_status p;
      devmm_plugin_get(i, &p);
      char sname[64];
      const char *name = short_name(p.name, sname, sizeof sname);
      size_t owned = 0; /* the devices it owns: a device two plugins enumerate is the first's */
      for (size_t j = 0; j < nd; j++) {
        devmm_device_status d;
        devmm_device_get(j, &d);
        owned += strcmp(d.plugin, p.name) == 0;
      }
      if (p.loaded)
        printf(
            "  %-8s %-8s ABI %u.%u  %s\n           loaded: %zu device%s, %zu resource kind%s%s%s\n",
            name, p.version, p.abi_major, p.abi_minor, p.path, owned, owned == 1 ? "" : "s",
            p.nkinds, p.nkinds == 1 ? "" : "s", *p.error ? "; " : "", p.error);
      else
        printf("  %-8s FAILED: %s\n", name, p.error);
    }
    printf("\nresource kinds:\n");
    devmm_kind_status ks;
    for (size_t k = 0; devmm_kind_get(k, &ks) == DEVMM_OK; k++) {
      char dev[32];
      devmm_device_format((devmm_device){ks.device_type, 0}, dev, sizeof dev);
      dev[strcspn(dev, ":")] = '\0';
      printf("  %-16s %-9s %s\n", ks.name, dev, ks.description);
      int help = ks.help != NULL;
      for (size_t o = 0; ks.options && ks.options[o]; o++) {
        help = help && ks.help[o];
        printf("  %-16s %-9s   %s%s%s\n", "", "", ks.options[o], help ? ": " : "",
               help ? ks.help[o] : "");
      }
    }
    printf("\ndevices:\n");
    if (!nd)
      printf("  (none)\n");
    for (size_t i = 0; i < nd; i++) {
      devmm_device_status d;
      char name[32], total[32], freeb[32], sname[64];
      devmm_device_get(i, &d);
      devmm_device_format(d.info.device, name, sizeof name);
      devmm_format_size((double)d.info.total_bytes, 1, total,
                        sizeof total); /* 0: unknown (plugin.h) */
      devmm_format_size((double)d.info.free_bytes, 1, freeb, sizeof freeb);
      printf("  %-8s %s\n           memory: %s%s, %s%s; plugin %s\n", name, d.info.name,
             d.info.total_bytes ? total : "total ", d.info.total_bytes ? " total" : "unknown",
             d.info.free_bytes ? freeb : "free ", d.info.free_bytes ? " free" : "unknown",
             short_name(d.plugin, sname, sizeof sname));
      if (*d.error)
        printf("           stack: NONE: %s\n", d.error);
      else
        printf("           stack: %s\n", d.stack);
      if (check)
        printf("           check: %s%s\n", ok[i] ? "" : "FAILED: ", results[i]);
    }
    if (nw)
      printf("\nwarnings:\n");
    for (size_t i = 0; i < nw; i++)
      printf("  %s\n", devmm_config_warning(i));
    if (check && nd)
      printf("\ncheck: %zu passed, %d failed\n", nd - (size_t)failed_checks, failed_checks);
    else if (check)
      printf("\ncheck: no device to check: FAILED (no loaded plugin enumerates a device)\n");
    if (strict && !nd)
      printf("strict: no device: FAILED\n");
    for (size_t i = 0; strict && i < nd; i++) {
      devmm_device_status d;
      char name[32];
      devmm_device_get(i, &d);
      devmm_device_format(d.info.device, name, sizeof name);
      if (*d.error)
        printf("strict: device %s has no resource: FAILED\n", name);
    }
    if (strict && nw)
      printf("strict: the configuration has %zu warning%s: FAILED\n", nw, nw == 1 ? "" : "s");
  }
  for (size_t i = 0; i < nd; i++)
    free(results[i]);
  free(results);
  free(ok);
  devmm_shutdown();
  if (*file_error) { /* said last, where a reader of the report looks (the report is above) */
    fprintf(stderr, "devmm-info: invalid configuration: %s\n", file_error);
    return 1;
  }
  if (failed_checks || ((check || strict) && !nd) ||
      (strict && (failed_plugins || failed_devices || nw)))
    return 2;
  return 0;
}
