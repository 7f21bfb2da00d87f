/* libFuzzer target: buffer IPC handles (include/devmm/ipc.h) read by devmm_ipc_handle_info and
 * opened by devmm_ipc_open and devmm_ipc_open_fd over the cpu plugin (the built-in devmm.ini).
 * The input is the handle's 256 bytes, then one byte of switches: bit 0 gives it a correct magic,
 * version, header size and checksum, bit 1 this boot's id, bit 2 this process's pid, bit 3 the
 * payload of a live cpu.shm allocation of this process (inode, device, descriptor, pid namespace,
 * the token of its export, ADR 40; the offset stays the input's), bit 4 opens it from that
 * allocation's descriptor instead of /proc. Every input is refused with a message, or opens a
 * mapping of exactly the bytes the handle says, within the memfd; what a handle says in a refusal
 * is escaped (no control character) and a kind described is a plain kind name (ADR 40). */
#include <devmm/devmm.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static devmm_ipc_handle good; /* of a live 64 KiB cpu.shm allocation (kept to the end) */
static int good_fd = -1;
static uint8_t boot[16];

static devmm_resource *shm; /* the allocation's resource and memory, alive for the whole run */
static void *mem;

static void setup(void) {
  if (devmm_resource_create_kind("cpu.shm", 0, NULL, 0, &shm) != DEVMM_OK ||
      devmm_allocate(shm, 65536, 0, NULL, &mem) != DEVMM_OK ||
      devmm_ipc_get_handle(shm, mem, 65536, &good) != DEVMM_OK ||
      devmm_ipc_handle_fd(&good, &good_fd) != DEVMM_OK) {
    fprintf(stderr, "fuzz_ipc_handle: no cpu.shm allocation to fuzz against: %s\n",
            devmm_last_error());
    abort();
  }
  memcpy(boot, good.bytes + 32, 16);
}

static uint32_t fnv(const devmm_ipc_handle *h) {
  uint32_t x = 2166136261u;
  for (size_t i = 0; i < sizeof h->bytes; i++)
    x = (x ^ (i >= 8 && i < 12 ? 0 : h->bytes[i])) * 16777619u;
  return x;
}

static int plain_kind(const char *k) {
  size_t n = strnlen(k, DEVMM_IPC_KIND_MAX);
  if (n == 0 || n == DEVMM_IPC_KIND_MAX || !strchr(k, '.') || k[0] == '.' || k[n - 1] == '.' ||
      strstr(k, ".."))
    return 0;
  for (size_t i = 0; i < n; i++)
    if (!((k[i] >= 'a' && k[i] <= 'z') || (k[i] >= 'A' && k[i] <= 'Z') ||
          (k[i] >= '0' && k[i] <= '9') || strchr("_-.", k[i])))
      return 0;
  return 1;
}

static void refused_cleanly(int rc) {
  const char *m = devmm_last_error();
  if (rc >= 0 || !*m)
    abort(); /* a refusal is a negative status with a message */
  for (; *m; m++)
    if ((unsigned char)*m < 0x20 || (unsigned char)*m == 0x7f)
      abort(); /* the handle's bytes reached the message raw */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static int ready;
  if (!ready) {
    setup();
    ready = 1;
  }
  devmm_ipc_handle h;
  memset(&h, 0, sizeof h);
  memcpy(h.bytes, data, size < sizeof h.bytes ? size : sizeof h.bytes);
  unsigned sw = size > sizeof h.bytes ? data[sizeof h.bytes] : 0;
  if (sw & 8) /* the live allocation's ino, dev (96..111), descriptor, pidns (120..127), token */
    memcpy(h.bytes + 96, good.bytes + 96, 16), memcpy(h.bytes + 120, good.bytes + 120, 24);
  if (sw & 2)
    memcpy(h.bytes + 32, boot, 16);
  if (sw & 4) {
    int32_t pid = (int32_t)getpid();
    memcpy(h.bytes + 20, &pid, 4);
  }
  if (sw & 1) {
    memcpy(h.bytes, good.bytes, 8); /* magic, version, header size */
    uint32_t x = fnv(&h);
    memcpy(h.bytes + 8, &x, 4);
  }
  devmm_clear_error();
  devmm_ipc_info info = {.struct_size = sizeof info};
  int rc = devmm_ipc_handle_info(&h, &info);
  if (rc != DEVMM_OK)
    refused_cleanly(rc);
  else if (!plain_kind(info.kind) || !info.bytes)
    abort();
  devmm_buffer *b = NULL;
  devmm_clear_error();
  rc = (sw & 16) ? devmm_ipc_open_fd(NULL, &h, good_fd, &b) : devmm_ipc_open(NULL, &h, &b);
  if (rc != DEVMM_OK) {
    refused_cleanly(rc);
    if (b)
      abort();
    return 0;
  }
  uint64_t bytes, off;
  memcpy(&bytes, h.bytes + 24, 8);
  memcpy(&off, h.bytes + 112, 8);
  struct stat st;
  if (!b || devmm_buffer_nbytes(b) != bytes || fstat(good_fd, &st) != 0 ||
      off + bytes > (uint64_t)st.st_size || off + bytes < off)
    abort(); /* opened more than the handle says, or more than the file holds */
  const volatile unsigned char *p = devmm_buffer_ptr(b);
  unsigned char ends = p[0] ^ p[bytes - 1]; /* both ends are mapped: a read past them faults */
  (void)ends;
  devmm_ipc_close(b);
  return 0;
}
