/* Opening another process's memfd for IPC (ADR 30; ipc_fd.h). The importer looks up
 * /proc/<pid>/fd/<n> with O_PATH (same user and ptrace read access, as /proc enforces; O_PATH
 * opens nothing: no tty becomes a controlling terminal, no device or FUSE open runs), checks
 * that it is a regular file, the inode exported (a pid or a descriptor number may be reused) and
 * a devmm memfd sealed against shrinking, and only then reopens it read-write through
 * /proc/self/fd/<opath> (ADR 33 decision 5; the ipc suite's
 * forged_handles_open_only_devmm_memfds). */
#include "ipc_fd.h"

#include <devmm/error.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

int ipcfd_seal(int fd) {
  return fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_SEAL) == 0 ? 0 : errno;
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
  return 0;
}

/* What /proc/self/fd/<n> (self) links to, in target ("" if unreadable). */
static void link_target(const char *self, char *target, size_t cap) {
  target[0] = '\0';
  ssize_t tn = readlink(self, target, cap - 1);
  if (tn > 0)
    target[tn] = '\0';
}

/* Whether a link target names one of devmm's memfds. */
static int is_devmm_memfd(const char *target) {
  return strncmp(target, "/memfd:" IPCFD_NAME_CPU, sizeof "/memfd:" IPCFD_NAME_CPU - 1) == 0 ||
         strncmp(target, "/memfd:" IPCFD_NAME_SIM, sizeof "/memfd:" IPCFD_NAME_SIM - 1) == 0;
}

/* Whether the file (st) holds need bytes from ref->offset; if not, why says so. */
static int holds(const struct stat *st, const ipcfd_ref *ref, uint64_t need, char *why,
                 size_t cap) {
  if ((uint64_t)st->st_size >= ref->offset && (uint64_t)st->st_size - ref->offset >= need)
    return 1;
  snprintf(why, cap, "IPC handle names bytes %llu..%llu of a %llu-byte file",
           (unsigned long long)ref->offset, (unsigned long long)(ref->offset + need),
           (unsigned long long)st->st_size);
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
  snprintf(path, path_cap, "/proc/%d/fd/%d", (int)pid, (int)ref->fd);
  int opath = open(path, O_PATH | O_CLOEXEC);
  if (opath >= 0)
    return opath;
  int e = errno;
  *status = e == ENOENT || e == ESRCH ? DEVMM_ENOENT : DEVMM_EIO;
  if (*status == DEVMM_ENOENT)
    snprintf(why, cap,
             "the exporting process %d has exited or freed the memory (%s: no such descriptor)",
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

int ipcfd_open(const ipcfd_ref *ref, int32_t pid, uint64_t need, int *status, char *why,
               size_t cap) {
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
  if (!is_devmm_memfd(target)) {
    close(opath);
    *status = DEVMM_EINVAL;
    snprintf(why, cap, "%s is not a devmm memfd (it is %.60s): the handle is forged", path, target);
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
  if (!holds(&st, ref, need, why, cap)) {
    close(fd);
    *status = DEVMM_EINVAL;
    return -1;
  }
  return fd;
}

int ipcfd_adopt(const ipcfd_ref *ref, int given, uint64_t need, int *status, char *why,
                size_t cap) {
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
  int seals = fcntl(given, F_GET_SEALS);
  if (!is_devmm_memfd(target) || seals < 0 || !(seals & F_SEAL_SHRINK)) {
    snprintf(why, cap, "descriptor %d is not a sealed devmm memfd (it is %.60s)", given, target);
    return -1;
  }
  if (!holds(&st, ref, need, why, cap))
    return -1;
  int fd = fcntl(given, F_DUPFD_CLOEXEC, 0);
  if (fd < 0) {
    *status = errno == EMFILE || errno == ENFILE ? DEVMM_ENOMEM : DEVMM_EIO;
    snprintf(why, cap, "cannot duplicate descriptor %d: %s", given, strerror(errno));
  }
  return fd;
}
