#ifndef CLINUX_SHIM_H
#define CLINUX_SHIM_H
// Linux-only system headers that Swift's Glibc module does not export.
#include <sys/epoll.h>
#include <sys/eventfd.h>
#endif
