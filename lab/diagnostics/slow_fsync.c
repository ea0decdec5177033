/* A disk whose fsync is slow, for a process started with it preloaded: every fsync and fdatasync (Python's os.fsync,
 * SQLite's commits and checkpoints) first sleeps SLOW_FSYNC_MS milliseconds (default 16, an ext4 disk whose fsync
 * was measured at about 16 ms), then syncs. Measures the annotation page's reply times on such a disk where this
 * machine's own fsync is nearly free:
 *
 *     gcc -O2 -shared -fPIC -o /tmp/slow_fsync.so lab/diagnostics/slow_fsync.c -ldl
 *     LD_PRELOAD=/tmp/slow_fsync.so SLOW_FSYNC_MS=16 python scripts/load_serve.py --people 20 --seconds 15
 *
 * (scripts/load_serve.py prints the fsync time it measured in the database's folder, the shim's included.)
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <time.h>

static void slow(void) {
    static long ns = -1;
    if (ns < 0) {
        const char *ms = getenv("SLOW_FSYNC_MS");
        ns = (long)((ms ? atof(ms) : 16.0) * 1e6);
    }
    struct timespec t = {ns / 1000000000L, ns % 1000000000L};
    nanosleep(&t, NULL);
}

int fsync(int fd) {
    static int (*real)(int) = NULL;
    if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
    slow();
    return real(fd);
}

int fdatasync(int fd) {
    static int (*real)(int) = NULL;
    if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
    slow();
    return real(fd);
}
