/* Large buffers for the compiled kernels: aligned to a cache line, and from 4 MB up aligned to
 * 2 MB with the advice to back them with huge pages (Linux, where transparent huge pages are
 * enabled "always" or "madvise"; elsewhere the advice is absent or ignored). A buffer of per-job
 * state is touched page after page during a run, and a 4 KB page costs a page fault of its own:
 * a few faults instead of hundreds per megabyte. Released with free(). The contents start
 * undefined, as malloc's.
 */
#ifndef MARKETSCHED_KERNEL_ALLOC_H
#define MARKETSCHED_KERNEL_ALLOC_H

#include <stdlib.h>
#ifdef __linux__
#include <sys/mman.h>
#endif

#define KA_HUGE ((size_t)4 << 20) /* buffers of this many bytes or more ask for huge pages */

static void *big_alloc(size_t bytes)
{
    void *buf = NULL;
    if (bytes == 0) bytes = 1;
    size_t align = bytes >= KA_HUGE ? KA_HUGE / 2 : 64;
    if (posix_memalign(&buf, align, bytes)) return NULL;
#ifdef MADV_HUGEPAGE
    if (bytes >= KA_HUGE) madvise(buf, bytes, MADV_HUGEPAGE); /* advice only */
#endif
    return buf;
}

#endif
