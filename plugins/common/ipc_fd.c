/* Opening another process's memfd for IPC (ADR 30; ipc_fd.h). The importer looks up
 * /proc/<pid>/fd/<n> with O_PATH (same user and ptrace read access, as /proc enforces; O_PATH
 * opens nothing: no tty becomes a controlling terminal, no device or FUSE open runs), checks
 * that it is a regular file, the inode exported (a pid or a descriptor number may be reused) and
 * a devmm memfd, reopens it read-write through /proc/self/fd/<opath> (ADR 33 decision 5; the ipc
 * suite's forged_handles_open_only_devmm_memfds), checks that it is sealed against shrinking and
 * only then reads its size: a sender that shrinks its file and then seals it is refused, never
 * mapped past the end (ADR 40; the ipc_trust suite's shrink_then_seal_is_refused_on_both_paths). */
#include "ipc_fd.h"

#include <devmm/error.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

int ipcfd_seal(int fd) {
  return fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_SEAL) == 0 ? 0 : errno;
}

/* This process's pid namespace (the inode of /proc/self/ns/pid, its low 32 bits), 0 if unknown. */
static uint32_t pid_namespace(void) {
  struct stat st;
  return stat("/proc/self/ns/pid", &st) == 0 ? (uint32_t)st.st_ino : 0;
}

int ipcfd_describe(int fd, uint64_t offset, ipcfd_ref *ref) {
  struct stat st;
  if (fstat(fd, &st) != 0)
    return errno;
  memset(ref, 0, sizeof *ref);
  ref->ino = (uint64_t)st.st_ino;
  ref->dev = (uint64_t)st.st_dev;
  ref->offset = offset;
  ref->fd = fd;
  ref->pidns = pid_namespace();
  return 0;
}

/* What /proc/self/fd/<n> (self) links to, in target ("" if unreadable). */
static void link_target(const char *self, char *target, size_t cap) {
  target[0] = '\0';
  ssize_t tn = readlink(self, target, cap - 1);
  if (tn > 0)
    target[tn] = '\0';
}

int ipcfd_new_token(uint8_t token[IPCFD_TOKEN_BYTES]) {
  for (size_t done = 0; done < IPCFD_TOKEN_BYTES;) {
    ssize_t n = getrandom(token + done, IPCFD_TOKEN_BYTES - done, 0);
    if (n < 0 && errno != EINTR)
      return errno;
    done += n > 0 ? (size_t)n : 0;
  }
  return 0;
}

void ipcfd_token_name(char *out, size_t cap, const char *name,
                      const uint8_t token[IPCFD_TOKEN_BYTES], uint64_t bytes) {
  char hex[2 * IPCFD_TOKEN_BYTES + 1];
  for (int i = 0; i < IPCFD_TOKEN_BYTES; i++)
    snprintf(hex + 2 * i, 3, "%02x", token[i]);
  snprintf(out, cap, "%s:%s:%llu", name, hex, (unsigned long long)bytes);
}

/* A link target for a message: control characters and non-ASCII bytes as \xNN, cut at 60 bytes
 * and at the first ':' of a memfd's name (what follows may be another allocation's token). The
 * plugin's own escaper: plugins cannot call core's. */
static const char *shown(const char *target, char *out, size_t cap) {
  size_t n = 0;
  const char *name = strncmp(target, "/memfd:", 7) == 0 ? target + 7 : NULL;
  for (const char *c = target; *c && c - target < 60 && n + 5 < cap; c++) {
    unsigned char u = (unsigned char)*c;
    if (name && c >= name && u == ':') {
      n += (size_t)snprintf(out + n, cap - n, ":...");
      break;
    }
    if (u < 0x20 || u >= 0x7f || u == '\\')
      n += (size_t)snprintf(out + n, cap - n, "\\x%02x", u);
    else
      out[n++] = (char)u;
  }
  out[n < cap ? n : cap - 1] = '\0';
  return out;
}

/* Whether a link target names a memfd x expects ("/memfd:<name>[:<token>:<bytes>] (deleted)");
 * *limit receives the bytes a token's name records (UINT64_MAX if none). NULL, or the complaint,
 * in why. The token is compared in constant time. */
static int named_as_expected(const char *target, const ipcfd_expect *x, uint64_t *limit, char *why,
                             size_t cap, const char *where) {
  char show[4 * 64 + 8];
  size_t nl = strlen(x->name);
  const char *rest = target + 7;
  *limit = UINT64_MAX;
  if (strncmp(target, "/memfd:", 7) != 0 || strncmp(rest, x->name, nl) != 0 ||
      (rest[nl] != (x->token ? ':' : '\0') && (x->token || strcmp(rest + nl, " (deleted)") != 0))) {
    snprintf(why, cap,
             "%s is not a %s memfd (expected one named %s%s; it is %s): the handle is forged",
             where, x->what, x->name, x->token ? ":<token>:<bytes>" : "",
             shown(target, show, sizeof show));
    return 0;
  }
  if (!x->token)
    return 1;
  rest += nl + 1;
  uint8_t named[IPCFD_TOKEN_BYTES] = {0};
  int bad = 0;
  for (int i = 0; i < 2 * IPCFD_TOKEN_BYTES && !bad; i++) {
    char c = rest[i];
    int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    bad = v < 0;
    named[i / 2] = (uint8_t)(named[i / 2] | (bad ? 0 : i % 2 ? v : v << 4));
  }
  unsigned char diff = 0; /* constant time: a mismatch's place says nothing */
  for (int i = 0; i < IPCFD_TOKEN_BYTES; i++)
    diff |= (unsigned char)(named[i] ^ x->token[i]);
  const char *num = rest + 2 * IPCFD_TOKEN_BYTES;
  char *end = NULL;
  unsigned long long bytes = 0;
  if (!bad && *num == ':' && num[1] >= '0' && num[1] <= '9') {
    errno = 0;
    bytes = strtoull(num + 1, &end, 10);
    bad = errno != 0 || (*end && strcmp(end, " (deleted)") != 0);
  } else {
    bad = 1;
  }
  if (bad || diff) {
    snprintf(why, cap,
             "%s is a %s memfd whose token is not the handle's: only its export gives the token "
             "out (the handle is forged, or names memory its exporter never exported)",
             where, x->what);
    return 0;
  }
  *limit = bytes;
  return 1;
}

/* Whether the sealed file fd holds need bytes from ref->offset; if not, why says so. Its size is
 * read here, after the shrink seal was seen: from then on it can only grow. */
static int holds(int fd, const ipcfd_ref *ref, uint64_t need, uint64_t limit, char *why,
                 size_t cap) {
  if (limit != UINT64_MAX && (ref->offset > limit || need > limit - ref->offset)) {
    snprintf(why, cap,
             "IPC handle names bytes %llu..%llu of a %llu-byte allocation: it runs past it",
             (unsigned long long)ref->offset, (unsigned long long)ref->offset + need,
             (unsigned long long)limit);
    return 0;
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    snprintf(why, cap, "cannot read the size of the IPC handle's file: %s", strerror(errno));
    return 0;
  }
  if ((uint64_t)st.st_size >= ref->offset && (uint64_t)st.st_size - ref->offset >= need)
    return 1;
  snprintf(why, cap, "IPC handle names bytes %llu..%llu of a %llu-byte file",
           (unsigned long long)ref->offset, (unsigned long long)ref->offset + need,
           (unsigned long long)st.st_size);
  return 0;
}

/* Looks up the exporter's descriptor with O_PATH: the O_PATH descriptor, or -1 as ipcfd_open.
 * path receives "/proc/<pid>/fd/<n>". */
static int lookup(const ipcfd_ref *ref, int32_t pid, char *path, size_t path_cap, int *status,
                  char *why, size_t cap) {
  if (pid <= 0 || ref->fd < 0) {
    *status = DEVMM_EINVAL;
    snprintf(why, cap, "the IPC handle names no process or descriptor (pid %d, descriptor %d)",
             (int)pid, (int)ref->fd);
    return -1;
  }
  uint32_t here = pid_namespace();
  if (!ref->pidns) { /* every handle of this format names it (ADR 40) */
    *status = DEVMM_EINVAL;
    snprintf(why, cap,
             "the IPC handle names no pid namespace (0): devmm's handles always name their "
             "exporter's; the handle is forged or corrupted");
    return -1;
  }
  if (here && ref->pidns != here) { /* its pid names another process here */
    *status = DEVMM_EINVAL;
    snprintf(why, cap,
             "the IPC handle was made by process %d of another pid namespace (a container?), "
             "where its pid names another process: send the descriptor with it "
             "(devmm_ipc_open_fd; multiprocessing does)",
             (int)pid);
    return -1;
  }
  snprintf(path, path_cap, "/proc/%d/fd/%d", (int)pid, (int)ref->fd);
  int opath = open(path, O_PATH | O_CLOEXEC);
  if (opath >= 0)
    return opath;
  int e = errno;
  *status = e == ENOENT || e == ESRCH ? DEVMM_ENOENT : DEVMM_EIO;
  if (*status == DEVMM_ENOENT)
    snprintf(why, cap,
             "the exporting process %d has exited or freed the memory (%s: no such "
             "descriptor)",
             (int)pid, path);
  else if (e == EACCES || e == EPERM)
    snprintf(why, cap,
             "not allowed to open %s (process %d's memory: needs the same user and ptrace "
             "read access): %s",
             path, (int)pid, strerror(e));
  else
    snprintf(why, cap, "cannot open %s: %s", path, strerror(e));
  return -1;
}

int ipcfd_open(const ipcfd_ref *ref, int32_t pid, uint64_t need, const ipcfd_expect *x, int *status,
               char *why, size_t cap) {
  char path[64];
  int opath = lookup(ref, pid, path, sizeof path, status, why, cap);
  if (opath < 0)
    return -1;
  struct stat st;
  if (fstat(opath, &st) != 0 || (uint64_t)st.st_ino != ref->ino ||
      (uint64_t)st.st_dev != ref->dev) {
    close(opath);
    *status = DEVMM_ENOENT;
    snprintf(why, cap,
             "the exporting process %d freed the memory: %s is another file now (inode %llu, "
             "expected %llu)",
             (int)pid, path, (unsigned long long)st.st_ino, (unsigned long long)ref->ino);
    return -1;
  }
  if (!S_ISREG(st.st_mode)) {
    close(opath);
    *status = DEVMM_EINVAL;
    snprintf(why, cap, "%s is not a regular file (a devmm memfd): the handle is forged", path);
    return -1;
  }
  char self[64], target[128];
  snprintf(self, sizeof self, "/proc/self/fd/%d", opath);
  link_target(self, target, sizeof target);
  uint64_t limit;
  if (!named_as_expected(target, x, &limit, why, cap, path)) {
    close(opath);
    *status = DEVMM_EINVAL;
    return -1;
  }
  int fd = open(self, O_RDWR | O_CLOEXEC);
  int e = errno;
  close(opath);
  if (fd < 0) {
    *status = DEVMM_EIO;
    snprintf(why, cap, "cannot reopen %s: %s", path, strerror(e));
    return -1;
  }
  int seals = fcntl(fd, F_GET_SEALS);
  if (seals < 0 || !(seals & F_SEAL_SHRINK)) {
    close(fd);
    *status = DEVMM_EINVAL;
    snprintf(why, cap, "%s is not sealed against shrinking (F_SEAL_SHRINK): not a devmm memfd",
             path);
    return -1;
  }
  if (!holds(fd, ref, need, limit, why, cap)) {
    close(fd);
    *status = DEVMM_EINVAL;
    return -1;
  }
  return fd;
}

int ipcfd_adopt(const ipcfd_ref *ref, int given, uint64_t need, const ipcfd_expect *x, int *status,
                char *why, size_t cap) {
  struct stat st;
  char self[64], target[128];
  *status = DEVMM_EINVAL;
  if (fstat(given, &st) != 0 || (uint64_t)st.st_ino != ref->ino ||
      (uint64_t)st.st_dev != ref->dev || !S_ISREG(st.st_mode)) {
    snprintf(why, cap, "descriptor %d is not the memfd the handle names", given);
    return -1;
  }
  snprintf(self, sizeof self, "/proc/self/fd/%d", given);
  link_target(self, target, sizeof target);
  char where[32];
  snprintf(where, sizeof where, "descriptor %d", given);
  uint64_t limit;
  if (!named_as_expected(target, x, &limit, why, cap, where))
    return -1;
  int seals = fcntl(given, F_GET_SEALS);
  if (seals < 0 || !(seals & F_SEAL_SHRINK)) {
    snprintf(why, cap,
             "descriptor %d is not sealed against shrinking (F_SEAL_SHRINK): not a devmm "
             "memfd",
             given);
    return -1;
  }
  if (!holds(given, ref, need, limit, why, cap))
    return -1;
  int fd = fcntl(given, F_DUPFD_CLOEXEC, 0);
  if (fd < 0) {
    *status = errno == EMFILE || errno == ENFILE ? DEVMM_ENOMEM : DEVMM_EIO;
    snprintf(why, cap, "cannot duplicate descriptor %d: %s", given, strerror(errno));
  }
  return fd;
}
