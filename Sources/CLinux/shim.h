#ifndef CLINUX_SHIM_H
#define CLINUX_SHIM_H
// Linux-only system headers that Swift's Glibc module does not export.
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <malloc.h>
#include <spawn.h>

// Swift's Glibc module is built without _GNU_SOURCE, which hides accept4's prototype (defining
// it here would clash with the types that module already declares). This is glibc's prototype
// as declared without _GNU_SOURCE; the symbol has been in glibc since 2.10.
#ifndef __USE_GNU
extern int accept4(int __fd, struct sockaddr *__restrict __addr, socklen_t *__restrict __addr_len, int __flags);
// The same for what a scenario's `run` step spawns with: pipes made close-on-exec at once
// (glibc 2.9), posix_spawn's change of directory (glibc 2.29) and its closing of every
// descriptor from one on (glibc 2.34).
extern int pipe2(int __pipedes[2], int __flags);
extern int posix_spawn_file_actions_addchdir_np(posix_spawn_file_actions_t *__restrict __actions, const char *__restrict __path);
extern int posix_spawn_file_actions_addclosefrom_np(posix_spawn_file_actions_t *__actions, int __from);
#endif
#endif
