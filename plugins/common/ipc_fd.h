/* Opening another process's memfd for IPC (ADR 30): shared by cpu.shm (plugins/cpu/shm.c) and
 * the simulator's device memory (plugins/gpu/sim/), compiled into each plugin that uses it
 * (plugins/common/ipc_fd.c; hidden, like every plugin symbol). The exporter keeps its memfd
 * open; the handle names the exporter's pid, the descriptor number and the file's inode; the
 * importer looks the file up through /proc/<pid>/fd/<n> and checks it before it maps a byte. */
#ifndef DEVMM_PLUGINS_IPC_FD_H
#define DEVMM_PLUGINS_IPC_FD_H

#include <stddef.h>
#include <stdint.h>

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

/* Seals a new memfd (made with MFD_ALLOW_SEALING) against shrinking, so that no peer's ftruncate
 * can send a process mapping it SIGBUS; 0, or an errno. */
int ipcfd_seal(int fd);

/* Fills ref for descriptor fd at offset; 0, or an errno. */
int ipcfd_describe(int fd, uint64_t offset, ipcfd_ref *ref);

/* Reopens the exporter's file through /proc/<pid>/fd/<n>, checked (the inode exported, a regular
 * file, a devmm memfd sealed against shrinking, need bytes from ref->offset): the new descriptor,
 * or -1 with a devmm status in *status and the reason in why. */
int ipcfd_open(const ipcfd_ref *ref, int32_t pid, uint64_t need, int *status, char *why,
               size_t cap);

/* A descriptor received from the exporter (SCM_RIGHTS, multiprocessing's DupFd), checked as
 * ipcfd_open checks: a close-on-exec duplicate the caller owns, or -1 as ipcfd_open. */
int ipcfd_adopt(const ipcfd_ref *ref, int given, uint64_t need, int *status, char *why, size_t cap);

#endif
