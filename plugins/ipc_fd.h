/* Opening another process's memfd for IPC (ADR 30): shared by cpu.shm (plugins/cpu/cpu.c) and
 * the simulator's device memory (plugins/sim/simrt.c). The exporter keeps its memfd open; the
 * handle names the exporter's pid, the descriptor number and the file's inode; the importer
 * looks up /proc/<pid>/fd/<n> with O_PATH (same user and ptrace read access, as /proc enforces;
 * O_PATH opens nothing: no tty becomes a controlling terminal, no device or FUSE open runs),
 * checks that it is a regular file, the inode exported (a pid or a descriptor number may be
 * reused) and a devmm memfd sealed against shrinking, and only then reopens it read-write
 * through /proc/self/fd/<opath> (outside review, finding 9). Header-only, static inline. */
#ifndef DEVMM_PLUGINS_IPC_FD_H
#define DEVMM_PLUGINS_IPC_FD_H

#include <devmm/error.h>

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* What a handle's payload says about the file (the rest of the payload is the user's). */
typedef struct ipcfd_ref {
  uint64_t ino, dev; /* the exporter's fstat of the memfd */
  uint64_t offset;   /* where the shared range starts in the file */
  int32_t fd;        /* the exporter's descriptor number */
  int32_t reserved;
} ipcfd_ref;

/* The memfd names devmm gives its shared files ("/memfd:<name> (deleted)" in /proc). */
#define IPCFD_NAME_CPU "devmm-cpu.shm"
#define IPCFD_NAME_SIM "devmm-sim"

/* Seals a new memfd against shrinking, so that no process mapping it can be sent SIGBUS by a
 * peer's ftruncate (the memfd was created with MFD_ALLOW_SEALING); 0, or an errno. */
static inline int ipcfd_seal(int fd) {
  return fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_SEAL) == 0 ? 0 : errno;
}

/* Fills ref for descriptor fd at offset; 0, or an errno. */
static inline int ipcfd_describe(int fd, uint64_t offset, ipcfd_ref *ref) {
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

/* Reopens the exporter's file; returns the new descriptor, or -1 with a devmm status in *status
 * and the reason in why. need: bytes the file must hold from ref->offset. */
static inline int ipcfd_open(const ipcfd_ref *ref, int32_t pid, uint64_t need, int *status,
                             char *why, size_t cap) {
  char path[64];
  if (pid <= 0 || ref->fd < 0) {
    *status = DEVMM_EINVAL;
    snprintf(why, cap, "the IPC handle names no process or descriptor (pid %d, descriptor %d)",
             (int)pid, (int)ref->fd);
    return -1;
  }
  snprintf(path, sizeof path, "/proc/%d/fd/%d", (int)pid, (int)ref->fd);
  int opath = open(path, O_PATH | O_CLOEXEC);
  if (opath < 0) {
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
  char self[64], target[128] = "";
  snprintf(self, sizeof self, "/proc/self/fd/%d", opath);
  ssize_t tn = readlink(self, target, sizeof target - 1);
  if (tn > 0)
    target[tn] = '\0';
  if (strncmp(target, "/memfd:" IPCFD_NAME_CPU, sizeof "/memfd:" IPCFD_NAME_CPU - 1) != 0 &&
      strncmp(target, "/memfd:" IPCFD_NAME_SIM, sizeof "/memfd:" IPCFD_NAME_SIM - 1) != 0) {
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
  if ((uint64_t)st.st_size < ref->offset || (uint64_t)st.st_size - ref->offset < need) {
    close(fd);
    *status = DEVMM_EINVAL;
    snprintf(why, cap, "IPC handle names bytes %llu..%llu of a %llu-byte file",
             (unsigned long long)ref->offset, (unsigned long long)(ref->offset + need),
             (unsigned long long)st.st_size);
    return -1;
  }
  return fd;
}

/* A descriptor received from the exporter (SCM_RIGHTS, multiprocessing's DupFd) checked as a
 * reopened one is: the inode exported, a regular file, a devmm memfd, sealed, big enough.
 * Returns a duplicate (close-on-exec) the caller owns, or -1 as ipcfd_open does. */
static inline int ipcfd_adopt(const ipcfd_ref *ref, int given, uint64_t need, int *status,
                              char *why, size_t cap) {
  struct stat st;
  char self[64], target[128] = "";
  *status = DEVMM_EINVAL;
  if (fstat(given, &st) != 0 || (uint64_t)st.st_ino != ref->ino ||
      (uint64_t)st.st_dev != ref->dev || !S_ISREG(st.st_mode)) {
    snprintf(why, cap, "descriptor %d is not the memfd the handle names", given);
    return -1;
  }
  snprintf(self, sizeof self, "/proc/self/fd/%d", given);
  ssize_t tn = readlink(self, target, sizeof target - 1);
  if (tn > 0)
    target[tn] = '\0';
  int seals = fcntl(given, F_GET_SEALS);
  if ((strncmp(target, "/memfd:" IPCFD_NAME_CPU, sizeof "/memfd:" IPCFD_NAME_CPU - 1) != 0 &&
       strncmp(target, "/memfd:" IPCFD_NAME_SIM, sizeof "/memfd:" IPCFD_NAME_SIM - 1) != 0) ||
      seals < 0 || !(seals & F_SEAL_SHRINK)) {
    snprintf(why, cap, "descriptor %d is not a sealed devmm memfd (it is %.60s)", given, target);
    return -1;
  }
  if ((uint64_t)st.st_size < ref->offset || (uint64_t)st.st_size - ref->offset < need) {
    snprintf(why, cap, "IPC handle names bytes %llu..%llu of a %llu-byte file",
             (unsigned long long)ref->offset, (unsigned long long)(ref->offset + need),
             (unsigned long long)st.st_size);
    return -1;
  }
  int fd = fcntl(given, F_DUPFD_CLOEXEC, 0);
  if (fd < 0) {
    *status = errno == EMFILE || errno == ENFILE ? DEVMM_ENOMEM : DEVMM_EIO;
    snprintf(why, cap, "cannot duplicate descriptor %d: %s", given, strerror(errno));
  }
  return fd;
}

#endif
