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
        int rc = devmm_set_error(
            DEVMM_EINVAL, "--resource %s: '%s' is not KEY=VALUE (at most 16 options)", spec, kv);
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

int replay_build_stack(const stack_spec *s, devmm_device dev, devmm_resource **out) {
  if (s->is_config) {
    int rc = devmm_init(s->spec);
    return rc ? rc : devmm_get_current_resource(dev, out);
  }
  if (!s->spec) {
    int rc = devmm_init(NULL);
    return rc ? rc : devmm_get_current_resource(dev, out);
  }
  return parse_kind(s->spec, dev.device_id, out);
}
