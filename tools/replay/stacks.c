/* devmm-replay: building the stack to replay against, from a resource kind or from a
 * devmm.ini's device. */
#include "replay.h"

#include <malloc.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int parse_kind(const char *spec, int32_t device_id, devmm_resource **out) {
  char *copy = strdup(spec);
  devmm_option opts[16];
  size_t n = 0;
  if (!copy)
    return devmm_set_error(DEVMM_ENOMEM, "out of memory");
  char *colon = strchr(copy, ':');
  if (colon) {
    *colon = '\0';
    char *save = NULL;
    for (char *kv = strtok_r(colon + 1, ",", &save); kv; kv = strtok_r(NULL, ",", &save)) {
      char *eq = strchr(kv, '=');
      if (!eq || eq == kv || n == 16) {
        int rc = devmm_set_error(DEVMM_EINVAL, "'%s' is not KEY=VALUE (at most 16 options)", kv);
        free(copy);
        return rc;
      }
      *eq = '\0';
      opts[n].key = kv;
      opts[n].value = eq + 1;
      opts[n].line = 0;
      n++;
    }
  }
  int rc = devmm_resource_create_kind(copy, device_id, opts, n, out);
  free(copy);
  return rc;
}

/* Prefixes the thread's message with the argument at fault. */
static int blame(int rc, const char *arg, const char *value) {
  char why[512];
  snprintf(why, sizeof why, "%s", devmm_last_error());
  return devmm_set_error(rc, "%s %s: %s", arg, value, why);
}

/* --device's own fault: a device the configuration has not got, with the ones it has. */
static int check_device(devmm_device dev) {
  char want[32], list[256] = "";
  size_t len = 0, n = devmm_device_count();
  devmm_device_format(dev, want, sizeof want);
  for (size_t i = 0; i < n; i++) {
    devmm_device_status d;
    char name[32];
    if (devmm_device_get(i, &d) != DEVMM_OK)
      continue;
    if (d.info.device.device_type == dev.device_type && d.info.device.device_id == dev.device_id)
      return DEVMM_OK;
    devmm_device_format(d.info.device, name, sizeof name);
    if (len < sizeof list)
      len += (size_t)snprintf(list + len, sizeof list - len, "%s%s", len ? ", " : "", name);
  }
  return devmm_set_error(DEVMM_ENOENT, "--device %s: no such device in %s (it has: %s)", want,
                         devmm_config_source(), n ? list : "none");
}

/* A kind of another device type than --device's (cpu.malloc for sim:0) is refused: it would
 * replay on that type's device of the same number in silence. */
static int check_kind_type(const char *spec, devmm_device dev) {
  size_t klen = strcspn(spec, ":");
  for (size_t i = 0;; i++) {
    devmm_kind_status k;
    if (devmm_kind_get(i, &k) != DEVMM_OK)
      return DEVMM_OK; /* unknown kinds are devmm_resource_create_kind's to report */
    if (strlen(k.name) != klen || strncmp(k.name, spec, klen) != 0)
      continue;
    if (k.device_type == dev.device_type)
      return DEVMM_OK;
    char want[32], type[32];
    devmm_device_format(dev, want, sizeof want);
    devmm_device_format((devmm_device){k.device_type, 0}, type, sizeof type);
    type[strcspn(type, ":")] = '\0';
    return devmm_set_error(DEVMM_EINVAL,
                           "--resource %.*s: a kind of %s devices, not of --device %s", (int)klen,
                           spec, type, want);
  }
}

int replay_build_stack(const stack_spec *s, devmm_device dev, devmm_resource **out) {
  const char *arg = s->is_config ? "--config" : "--resource";
  if (s->is_config || !s->spec || !devmm_is_initialized()) {
    int rc = devmm_init(s->is_config ? s->spec : NULL);
    if (rc)
      return s->spec ? blame(rc, arg, s->spec) : rc;
  }
  int rc = check_device(dev);
  if (!rc && !s->is_config && s->spec)
    rc = check_kind_type(s->spec, dev);
  if (rc)
    return rc;
  if (s->is_config || !s->spec) {
    rc = devmm_get_current_resource(dev, out);
    return rc && s->spec ? blame(rc, arg, s->spec) : rc;
  }
  rc = parse_kind(s->spec, dev.device_id, out);
  return rc ? blame(rc, arg, s->spec) : rc;
}
