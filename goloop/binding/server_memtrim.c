/* server_memtrim.c: memory a spike left in C's allocator goes back to the system.
 *
 * Python's large objects (a request body's bytes, over pymalloc's 512 bytes) come from
 * glibc's malloc. After a burst (100 uploads of 10 MiB read whole) they are freed, but
 * glibc keeps the freed chunks in its arenas (its mmap threshold rises with the first
 * large frees, so later large blocks come from the arenas rather than mmap), and the
 * process' RSS stays at its peak. The engine's memory watcher (httpserver/memwatch.go)
 * calls gl_native_release every few seconds from a goroutine (no Python, no GIL): when
 * the arenas hold slack bytes free more than they did (the spike's), malloc_trim(0)
 * returns their free pages (all arenas, not only the top of the heap). glibc only (the
 * wheels' headers are older than mallinfo2's: mallinfo there). */
#include <stddef.h>
#include <stdint.h>
#ifdef __GLIBC__
#include <malloc.h>

/* free bytes in malloc's arenas: mallinfo2 where the headers have it (2.33), else
 * mallinfo (deprecated since, its int fields read as unsigned: exact up to 4 GiB) */
static int64_t gl_malloc_free(void) {
#if __GLIBC_PREREQ(2, 33)
    return (int64_t)mallinfo2().fordblks;
#else
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
    return (int64_t)(unsigned int)mallinfo().fordblks;
#pragma GCC diagnostic pop
#endif
}

/* the least free bytes seen since the last trim (the watcher's goroutine only) */
static int64_t gl_free_low = 0;
#endif

/* gl_native_release returns malloc's free pages to the system when its arenas hold slack
 * bytes free more than the least seen since the last trim (a trim leaves the chunks free,
 * their pages released: they are not trimmed again and again); the bytes found free (0:
 * not trimmed, or not glibc). */
int64_t gl_native_release(int64_t slack) {
#ifdef __GLIBC__
    int64_t free_bytes = gl_malloc_free();
    if (free_bytes < gl_free_low) gl_free_low = free_bytes;
    if (free_bytes <= gl_free_low + slack) return 0;
    malloc_trim(0);
    gl_free_low = gl_malloc_free();
    return free_bytes;
#else
    (void)slack;
    return 0;
#endif
}
