/* The words every layer of lib/ shares: visibility, branch hints, sizes,
 * alignment, errno kept.  Macros and one inline function: no layer's code, so every
 * layer may include it (the door's prim.h first). */
#ifndef HP_BASE_H
#define HP_BASE_H

#include <stddef.h>

#define HP_HIDDEN __attribute__((visibility("hidden")))

#define likely(x) __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)

#define HP_KiB ((size_t)1 << 10)
#define HP_MiB ((size_t)1 << 20)
#define HP_GiB ((size_t)1 << 30)
#define HP_SMALL_ALIGN 64
#define HP_THP_SIZE (2 * HP_MiB)
#define HP_BASE_PAGE ((size_t)4096)

#define HP_STRINGIFY_(x) #x
#define HP_STRINGIFY(x) HP_STRINGIFY_(x) /* a macro's value as a string literal */

static inline size_t hp_align_up(size_t n, size_t a) { return (n + a - 1) & ~(a - 1); }

/* Successful calls leave errno as they found it: public functions whose
 * work may set errno on the way (probes, fallbacks, lazy init) save it on
 * entry and put it back before a successful return (<errno.h> is the
 * user's to include). */
#define HP_ERRNO_SAVE const int hp_saved_errno_ = errno
#define HP_ERRNO_RESTORE (errno = hp_saved_errno_)

#endif
