/* Sharing allocations between processes (ipc.h, ADR 30): the handle's header, the walk down a
 * stack to the resource that shares memory, and the buffer an opened handle becomes. */
#include "ipc_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define IPC_MAGIC 0x49564d44u /* "DMVI" read as little-endian bytes */
#define IPC_VERSION                                                                                \
  2 /* 2: cpu.shm carries its allocation's token, sim.device a random tag (ADR 40) */

typedef struct {
  uint32_t magic;
  uint16_t version, header_size;
  uint32_t checksum; /* FNV-1a over the whole handle, this field read as 0 */
  int32_t device_type, device_id;
  int32_t pid;
  uint64_t bytes;
  uint8_t boot_id[16];
  char kind[DEVMM_IPC_KIND_MAX];
} ipc_header;
_Static_assert(sizeof(ipc_header) == DEVMM_IPC_HEADER_SIZE, "the handle's header is 96 bytes");

static uint32_t checksum(const devmm_ipc_handle *h) {
  uint32_t x = 2166136261u;
  for (size_t i = 0; i < sizeof h->bytes; i++) {
    unsigned char c =
        i >= offsetof(ipc_header, checksum) && i < offsetof(ipc_header, checksum) + sizeof(uint32_t)
            ? 0
            : h->bytes[i];
    x = (x ^ c) * 16777619u;
  }
  return x;
}

/* This boot's id (/proc/sys/kernel/random/boot_id), zeros when the kernel does not say. */
static void boot_id(uint8_t out[16]) {
  memset(out, 0, 16);
  FILE *f = fopen("/proc/sys/kernel/random/boot_id", "re");
  if (!f)
    return;
  char text[64] = "";
  if (fgets(text, sizeof text, f)) {
    size_t n = 0;
    for (const char *c = text; *c && n < 32; c++) {
      int v = *c >= '0' && *c <= '9' ? *c - '0' : *c >= 'a' && *c <= 'f' ? *c - 'a' + 10 : -1;
      if (v < 0)
        continue;
      out[n / 2] = (uint8_t)(out[n / 2] | (n % 2 ? v : v << 4));
      n++;
    }
  }
  fclose(f);
}

static const devmm_resource_ipc_ops *ipc_group(const devmm_resource *r) {
  const devmm_resource_ipc_ops *g = r->ops.ipc;
  if (!g || g->struct_size < offsetof(devmm_resource_ipc_ops, close) + sizeof g->close ||
      !g->kind || !g->get_handle || !g->open || !g->close)
    return NULL; /* an incomplete group is no group */
  return g;
}

/* The first resource of r's stack that shares memory (kind: of that kind only), or NULL. */
static devmm_resource *sharing(devmm_resource *r, const char *kind) {
  for (; r; r = r->upstream) {
    const devmm_resource_ipc_ops *g = ipc_group(r);
    if (g && (!kind || strcmp(g->kind, kind) == 0))
      return r;
  }
  return NULL;
}

/* "statistics(cpu.malloc)": the names of r's stack, for messages. */
static const char *stack_name(const devmm_resource *r) { return r->name; }

int devmm_ipc_supported(const devmm_resource *r) { return sharing((devmm_resource *)r, NULL) != 0; }

int devmm_ipc_get_handle(devmm_resource *r, void *ptr, size_t bytes, devmm_ipc_handle *out) {
  if (!out)
    return devmm_set_error(DEVMM_EINVAL, "devmm_ipc_get_handle: out is NULL");
  memset(out, 0, sizeof *out);
  if (!r || !ptr)
    return devmm_set_error(DEVMM_EINVAL, "devmm_ipc_get_handle: %s is NULL",
                           !r ? "resource" : "ptr");
  if (!bytes)
    return devmm_set_error(DEVMM_EINVAL,
                           "devmm_ipc_get_handle: 0 bytes: an empty allocation has no memory to "
                           "share (resource '%s')",
                           r->name);
  devmm_resource *leaf = sharing(r, NULL);
  if (!leaf)
    return devmm_set_error(DEVMM_ENOTSUP,
                           "resource '%s' cannot share memory with other processes: no resource "
                           "of its stack has IPC operations (use a kind that does: cpu.shm, "
                           "sim.device, cuda.device, cuda.async with ipc = true)",
                           stack_name(r));
  const devmm_resource_ipc_ops *g = ipc_group(leaf);
  if (strlen(g->kind) >= DEVMM_IPC_KIND_MAX)
    return devmm_set_error(DEVMM_EINVAL, "resource '%s': IPC kind name '%.64s...' is over %d bytes",
                           leaf->name, g->kind, DEVMM_IPC_KIND_MAX - 1);
  if (!devmm__kind_name_plain(g->kind)) { /* an importer would refuse it (read_header) */
    char shown[4 * DEVMM_IPC_KIND_MAX + 4];
    return devmm_set_error(DEVMM_EINVAL,
                           "resource '%s': IPC kind name '%s' is not a plain kind name (expected "
                           "<plugin>.<name> in letters, digits, '_' and '-')",
                           leaf->name, devmm__escape(g->kind, 64, shown, sizeof shown));
  }
  int rc = g->get_handle(leaf, ptr, bytes, out->bytes + DEVMM_IPC_HEADER_SIZE);
  if (rc) {
    memset(out, 0, sizeof *out);
    return rc;
  }
  ipc_header h;
  memset(&h, 0, sizeof h);
  h.magic = IPC_MAGIC;
  h.version = IPC_VERSION;
  h.header_size = DEVMM_IPC_HEADER_SIZE;
  h.device_type = leaf->device.device_type;
  h.device_id = leaf->device.device_id;
  h.pid = (int32_t)getpid();
  h.bytes = bytes;
  boot_id(h.boot_id);
  snprintf(h.kind, sizeof h.kind, "%s", g->kind);
  memcpy(out->bytes, &h, sizeof h);
  h.checksum = checksum(out);
  memcpy(out->bytes, &h, sizeof h);
  return DEVMM_OK;
}

/* 1 if the handle was made on this machine since its last boot (same boot id, and one known). */
static int same_boot(const ipc_header *h) {
  uint8_t here[16], zero[16] = {0};
  boot_id(here);
  return memcmp(here, zero, 16) != 0 && memcmp(here, h->boot_id, 16) == 0;
}

static int read_header(const devmm_ipc_handle *hd, ipc_header *h) {
  memcpy(h, hd->bytes, sizeof *h);
  if (h->magic != IPC_MAGIC)
    return devmm_set_error(DEVMM_EINVAL,
                           "not a devmm IPC handle: it starts with 0x%08x, expected the magic "
                           "0x%08x (a handle is the %d bytes devmm_ipc_get_handle wrote)",
                           (unsigned)h->magic, IPC_MAGIC, DEVMM_IPC_HANDLE_SIZE);
  if (h->version < IPC_VERSION && h->header_size == DEVMM_IPC_HEADER_SIZE)
    return devmm_set_error(DEVMM_EINVAL,
                           "IPC handle of version %u: made by an older devmm, whose handles "
                           "carry no export token; this devmm reads version %d: export the "
                           "memory again with this devmm",
                           h->version, IPC_VERSION);
  if (h->version != IPC_VERSION || h->header_size != DEVMM_IPC_HEADER_SIZE)
    return devmm_set_error(DEVMM_EINVAL,
                           "IPC handle of version %u (header %u bytes): this devmm reads version "
                           "%d (%d bytes)",
                           h->version, h->header_size, IPC_VERSION, DEVMM_IPC_HEADER_SIZE);
  if (h->checksum != checksum(hd))
    return devmm_set_error(DEVMM_EINVAL,
                           "IPC handle corrupted: its checksum is 0x%08x, its bytes sum to 0x%08x",
                           (unsigned)h->checksum, (unsigned)checksum(hd));
  if (!h->kind[0] || !h->bytes)
    return devmm_set_error(DEVMM_EINVAL, "IPC handle names no kind or no bytes");
  if (!memchr(h->kind, 0, sizeof h->kind) || !devmm__kind_name_plain(h->kind)) {
    /* never a path, never text for a log line (ipc_trust: what_a_handle_says_is_escaped) */
    char shown[4 * DEVMM_IPC_KIND_MAX + 4];
    devmm__escape(h->kind, sizeof h->kind, shown, sizeof shown);
    return devmm_set_error(DEVMM_EINVAL,
                           "IPC handle's kind '%s' is not a plain kind name (expected "
                           "<plugin>.<name> in letters, digits, '_' and '-', as cpu.shm): the "
                           "handle is forged or corrupted",
                           shown);
  }
  return DEVMM_OK;
}

int devmm_ipc_handle_info(const devmm_ipc_handle *hd, devmm_ipc_info *out) {
  if (!hd || !out)
    return devmm_set_error(DEVMM_EINVAL, "devmm_ipc_handle_info: %s is NULL",
                           !hd ? "handle" : "out");
  if (out->struct_size < sizeof(devmm_ipc_info))
    return devmm_set_error(DEVMM_EINVAL,
                           "devmm_ipc_handle_info: out->struct_size is %zu: set it to "
                           "sizeof(devmm_ipc_info) (%zu bytes in this devmm)",
                           out->struct_size, sizeof(devmm_ipc_info));
  ipc_header h;
  int rc = read_header(hd, &h);
  if (rc)
    return rc;
  size_t size = out->struct_size; /* a later caller's bigger struct: fill what this devmm has */
  devmm_ipc_info info;
  memset(&info, 0, sizeof info);
  info.struct_size = size;
  memcpy(info.kind, h.kind, sizeof info.kind);
  info.device.device_type = h.device_type;
  info.device.device_id = h.device_id;
  info.bytes = h.bytes;
  info.pid = h.pid;
  info.same_machine = same_boot(&h);
  memcpy(out, &info, sizeof info);
  return DEVMM_OK;
}

/* ------------------------------------------------------------------ an opened mapping
 * A small resource per opened handle, over the resource that opened it: the buffer's memory
 * goes back to it, and its deallocate is the leaf's close. It allocates nothing. */

typedef struct {
  void *token;
} mapping;

static int map_allocate(devmm_resource *self, size_t bytes, size_t alignment, devmm_stream s,
                        void **out) {
  (void)bytes, (void)alignment, (void)s;
  *out = NULL;
  return devmm_set_error(
      DEVMM_ENOTSUP, "resource '%s' is one opened IPC mapping: it allocates nothing", self->name);
}

static int map_deallocate(devmm_resource *self, void *ptr, size_t bytes, size_t alignment,
                          devmm_stream s) {
  (void)alignment, (void)s;
  mapping *m = self->ctx;
  return ipc_group(self->upstream)->close(self->upstream, ptr, bytes, m->token);
}

static void map_destroy(devmm_resource *self) { free(self->ctx); }

static const devmm_resource_ops mapping_ops = {
    .struct_size = sizeof(devmm_resource_ops),
    .allocate = map_allocate,
    .deallocate = map_deallocate,
    .mem_info = devmm__forward_mem_info,
    .copy = devmm__forward_copy,
    .memset = devmm__forward_memset,
    .stream_wait = devmm__forward_stream_wait,
    .synchronize = devmm__forward_synchronize,
    .destroy = map_destroy,
};

/* The resource that opens a handle of kind on device d when the caller names none: the device's
 * stack, else a new resource of that kind from a plugin already loaded (a handle never loads a
 * plugin: ipc_trust, kind_names_are_plain_names_of_loaded_plugins). */
static int opener(const ipc_header *h, devmm_resource **out) {
  devmm_device d = {h->device_type, h->device_id};
  devmm_resource *cur = NULL;
  *out = NULL;
  if (devmm_get_current_resource(d, &cur) == DEVMM_OK) {
    devmm_resource *leaf = sharing(cur, h->kind);
    if (leaf)
      *out = devmm_resource_retain(leaf);
    devmm_resource_release(cur);
    if (*out)
      return DEVMM_OK;
  }
  int rc = devmm__create_loaded_kind(h->kind, h->device_id, out);
  if (rc) {
    char why[DEVMM__MSG_MAX];
    snprintf(why, sizeof why, "%s", devmm_last_error());
    /* a kind unknown here (its plugin is not loaded) cannot open the handle: not a stale one */
    return devmm_set_error(rc == DEVMM_ENOENT ? DEVMM_ENOTSUP : rc,
                           "cannot open an IPC handle of kind %s: %s", h->kind, why);
  }
  if (!sharing(*out, h->kind)) {
    devmm_resource_release(*out);
    *out = NULL;
    return devmm_set_error(DEVMM_ENOTSUP,
                           "cannot open an IPC handle of kind %s: that kind "
                           "has no IPC operations here",
                           h->kind);
  }
  return DEVMM_OK;
}

/* The group's descriptor ops, or NULL when it has none (an older group, or none set). */
static int has_fd_ops(const devmm_resource_ipc_ops *g) {
  return g->struct_size >= offsetof(devmm_resource_ipc_ops, open_fd) + sizeof g->open_fd &&
         g->handle_fd && g->open_fd;
}

int devmm_ipc_handle_fd(const devmm_ipc_handle *hd, int *fd) {
  if (!hd || !fd)
    return devmm_set_error(DEVMM_EINVAL, "devmm_ipc_handle_fd: %s is NULL", !hd ? "handle" : "fd");
  *fd = -1;
  ipc_header h;
  int rc = read_header(hd, &h);
  if (rc)
    return rc;
  if (h.pid != (int32_t)getpid())
    return devmm_set_error(DEVMM_EINVAL,
                           "devmm_ipc_handle_fd: the handle was made by process %d, not this one "
                           "(%d): only its exporter holds its descriptor",
                           (int)h.pid, (int)getpid());
  devmm_resource *leaf;
  if ((rc = opener(&h, &leaf)) != DEVMM_OK)
    return rc;
  const devmm_resource_ipc_ops *g = ipc_group(leaf);
  rc = has_fd_ops(g) ? g->handle_fd(leaf, hd->bytes + DEVMM_IPC_HEADER_SIZE, fd)
                     : devmm_set_error(DEVMM_ENOTSUP,
                                       "IPC handles of kind %s name no descriptor (device memory "
                                       "travels as the handle's bytes)",
                                       h.kind);
  devmm_resource_release(leaf);
  return rc;
}

static int open_handle(devmm_resource *r, const devmm_ipc_handle *hd, int fd, devmm_buffer **out);

int devmm_ipc_open(devmm_resource *r, const devmm_ipc_handle *hd, devmm_buffer **out) {
  return open_handle(r, hd, -1, out);
}

int devmm_ipc_open_fd(devmm_resource *r, const devmm_ipc_handle *hd, int fd, devmm_buffer **out) {
  if (fd < 0) {
    if (out)
      *out = NULL;
    return devmm_set_error(DEVMM_EINVAL, "devmm_ipc_open_fd: descriptor %d is not one", fd);
  }
  return open_handle(r, hd, fd, out);
}

/* devmm_ipc_open (fd < 0) or devmm_ipc_open_fd. */
static int open_handle(devmm_resource *r, const devmm_ipc_handle *hd, int fd, devmm_buffer **out) {
  if (!out)
    return devmm_set_error(DEVMM_EINVAL, "devmm_ipc_open: out is NULL");
  *out = NULL;
  if (!hd)
    return devmm_set_error(DEVMM_EINVAL, "devmm_ipc_open: handle is NULL");
  ipc_header h;
  int rc = read_header(hd, &h);
  if (rc)
    return rc;
  if (!same_boot(&h)) /* another machine's pid and descriptor name nothing here (ipc:
                         forged_handles_open_only_devmm_memfds) */
    return devmm_set_error(DEVMM_EINVAL,
                           "IPC handle of process %d (kind %s) was made on another machine, or "
                           "before this machine's last boot (its boot id differs): it names "
                           "nothing here; send such tensors by value",
                           (int)h.pid, h.kind);
  devmm_resource *leaf;
  if (r) {
    leaf = sharing(r, h.kind);
    if (!leaf)
      return devmm_set_error(DEVMM_EINVAL,
                             "resource '%s' cannot open an IPC handle of kind %s: no resource of "
                             "its stack is of that kind",
                             r->name, h.kind);
    devmm_resource_retain(leaf);
  } else if ((rc = opener(&h, &leaf)) != DEVMM_OK) {
    return rc;
  }
  if (leaf->device.device_type != h.device_type) {
    char have[32], want[32];
    devmm_device_format(leaf->device, have, sizeof have);
    devmm_device_format((devmm_device){h.device_type, h.device_id}, want, sizeof want);
    devmm_set_error(DEVMM_EINVAL, "IPC handle of %s memory: resource '%s' is on %s", want,
                    leaf->name, have);
    devmm_resource_release(leaf);
    return DEVMM_EINVAL;
  }
  mapping *m = calloc(1, sizeof *m);
  devmm_resource *mr = NULL;
  if (!m || devmm__adaptor_create(&mapping_ops, m, leaf, "ipc", &mr) != DEVMM_OK) {
    free(m);
    devmm_resource_release(leaf);
    return devmm_set_error(DEVMM_ENOMEM, "devmm_ipc_open: out of host memory");
  }
  mr->adaptor = NULL;           /* no adaptor a front end knows: a plain resource to them */
  devmm_resource_release(leaf); /* mr holds it */
  void *ptr = NULL;
  const devmm_resource_ipc_ops *g = ipc_group(leaf);
  if (fd >= 0 && !has_fd_ops(g))
    rc = devmm_set_error(DEVMM_ENOTSUP, "resource '%s' cannot open an IPC handle from a descriptor",
                         leaf->name);
  else if (fd >= 0)
    rc = g->open_fd(leaf, hd->bytes + DEVMM_IPC_HEADER_SIZE, (size_t)h.bytes, fd, &ptr, &m->token);
  else
    rc = g->open(leaf, hd->bytes + DEVMM_IPC_HEADER_SIZE, (size_t)h.bytes, h.pid, &ptr, &m->token);
  if (rc) {
    devmm_resource_release(mr);
    return rc;
  }
  if ((rc = devmm__buffer_wrap(mr, ptr, (size_t)h.bytes, out)) != DEVMM_OK) {
    g->close(leaf, ptr, (size_t)h.bytes, m->token);
    devmm_resource_release(mr);
    return rc;
  }
  devmm_resource_release(mr); /* the buffer holds it */
  return DEVMM_OK;
}

void devmm_ipc_close(devmm_buffer *b) {
  if (!b)
    return;
  devmm_buffer_free(b);
  devmm_buffer_release(b);
}
