/* server_memtrim.c: memory a spike left in C's allocator goes back to the system.
 *
 * Python's large objects (a request body's bytes, over pymalloc's 512 bytes) come from
 * glibc's malloc. After a burst (100 uploads of 10 MiB read whole) they are freed, but
 * glibc keeps the freed chunks in its arenas (its mmap threshold rises with the first
 * large frees, so later large blocks come from the arenas rather than mmap), and the
 * process' RSS stays at its peak. The engine's memory watcher (httpserver/memwatch.go)
 * calls gl_native_release every few seconds from a goroutine (no Python, no GIL): when
 * the arenas hold slack bytes free more than they did (the spike's), malloc_trim(0)
 * returns their free pages (all arenas, not only the top of the heap). glibc only: mallinfo2 (2.33) or mallinfo,
 * looked up at run time (the wheels target older glibc; mallinfo is deprecated). */
#define _GNU_SOURCE
#include <stddef.h>
#include <stdint.h>
#ifdef __GLIBC__
#include <dlfcn.h>
#include <malloc.h>

struct gl_mallinfo2 { size_t arena, ordblks, smblks, hblks, hblkhd, usmblks, fsmblks, uordblks, fordblks, keepcost; };
struct gl_mallinfo { int arena, ordblks, smblks, hblks, hblkhd, usmblks, fsmblks, uordblks, fordblks, keepcost; };

/* free bytes in malloc's arenas, or -1 when unknown */
static int64_t gl_malloc_free(void) {
    static int looked;
    static struct gl_mallinfo2 (*mi2)(void);
    static struct gl_mallinfo (*mi)(void);
    if (!looked) {
        *(void **)&mi2 = dlsym(RTLD_DEFAULT, "mallinfo2");
        if (mi2 == NULL) *(void **)&mi = dlsym(RTLD_DEFAULT, "mallinfo");
        looked = 1;  /* (one goroutine calls this: the watcher) */
    }
    if (mi2 != NULL) return (int64_t)mi2().fordblks;
    if (mi != NULL) return (int64_t)(unsigned int)mi().fordblks;
    return -1;
}
#endif

/* the least free bytes seen since the last trim (the watcher's goroutine only) */
static int64_t gl_free_low = 0;

/* gl_native_release returns malloc's free pages to the system when its arenas hold slack
 * bytes free more than the least seen since the last trim (a trim leaves the chunks free,
 * their pages released: they are not trimmed again and again); the bytes found free (0:
 * not trimmed, or not glibc). */
int64_t gl_native_release(int64_t slack) {
#ifdef __GLIBC__
    int64_t free_bytes = gl_malloc_free();
    if (free_bytes < 0) return 0;
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
