/* What the kernel charges for one socket call made through the file system's read(2)/write(2)
 * against the socket calls recv(2)/send(2) (recvfrom/sendto with no address), on a loopback
 * TCP connection, in one thread: no wake-ups, no scheduler, only the system calls.
 *
 * Each iteration is one echo's four calls: write 1 KiB on a, read it on b, write it back on b,
 * read it on a (buffers of 256 KiB, as an event loop reads). The sender's write also runs the
 * receiver's TCP input (loopback delivers in the sender's softirq), as it does in an echo
 * server. Besides the two pairs: a read and a recv that find nothing (EAGAIN, the second read of
 * a loop that reads until the socket is empty), writev and sendmsg of two pieces, and getppid,
 * the cost of entering the kernel at all.
 *
 * Variants take turns in blocks (round r runs them in a rotated order), so a change in the
 * machine's load falls on every variant alike; the CPU time of each block is this thread's
 * (CLOCK_THREAD_CPUTIME_ID: user and system). Printed as JSON: per variant the median and least
 * ns per iteration over the blocks, and per pair the median of the rounds' ratios.
 *
 *     cc -O2 -o sockcall_cost sockcall_cost.c && ./sockcall_cost [rounds] [iterations per block]
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define MSG 1024
#define RBUF (256 * 1024)

static int a, b;
static char *rbuf;
static char msg[MSG];

static void die(const char *what) {
    perror(what);
    exit(1);
}

static void nonblock_nodelay(int fd) {
    int one = 1;
    if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) < 0) die("TCP_NODELAY");
    if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) < 0) die("O_NONBLOCK");
}

static void pair(void) {
    int l = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof sa;
    if (l < 0 || bind(l, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(l, 1) < 0 ||
        getsockname(l, (struct sockaddr *)&sa, &sl) < 0)
        die("listen");
    a = socket(AF_INET, SOCK_STREAM, 0);
    if (a < 0 || connect(a, (struct sockaddr *)&sa, sizeof sa) < 0) die("connect");
    b = accept(l, NULL, NULL);
    if (b < 0) die("accept");
    close(l);
    nonblock_nodelay(a);
    nonblock_nodelay(b);
}

static void check(ssize_t n, ssize_t want, const char *what) {
    if (n != want) {
        fprintf(stderr, "%s: %zd (want %zd): %s\n", what, n, want, n < 0 ? strerror(errno) : "short");
        exit(1);
    }
}

/* one echo, through the file calls */
static void it_rw(void) {
    check(write(a, msg, MSG), MSG, "write a");
    check(read(b, rbuf, RBUF), MSG, "read b");
    check(write(b, rbuf, MSG), MSG, "write b");
    check(read(a, rbuf, RBUF), MSG, "read a");
}

/* the same echo through the socket calls */
static void it_rs(void) {
    check(send(a, msg, MSG, 0), MSG, "send a");
    check(recv(b, rbuf, RBUF, 0), MSG, "recv b");
    check(send(b, rbuf, MSG, 0), MSG, "send b");
    check(recv(a, rbuf, RBUF, 0), MSG, "recv a");
}

/* read(2) and recv(2) on an empty socket (EAGAIN), twice per iteration like the pairs' reads */
static void it_read_empty(void) {
    check(read(b, rbuf, RBUF), -1, "read empty");
    check(read(a, rbuf, RBUF), -1, "read empty");
}

static void it_recv_empty(void) {
    check(recv(b, rbuf, RBUF, 0), -1, "recv empty");
    check(recv(a, rbuf, RBUF, 0), -1, "recv empty");
}

/* the echo with its writes in two pieces: writev against sendmsg (reads by read) */
static void it_writev(void) {
    struct iovec iov[2] = {{msg, MSG / 2}, {msg + MSG / 2, MSG / 2}};
    check(writev(a, iov, 2), MSG, "writev a");
    check(read(b, rbuf, RBUF), MSG, "read b");
    check(writev(b, iov, 2), MSG, "writev b");
    check(read(a, rbuf, RBUF), MSG, "read a");
}

static void it_sendmsg(void) {
    struct iovec iov[2] = {{msg, MSG / 2}, {msg + MSG / 2, MSG / 2}};
    struct msghdr mh = {.msg_iov = iov, .msg_iovlen = 2};
    check(sendmsg(a, &mh, 0), MSG, "sendmsg a");
    check(read(b, rbuf, RBUF), MSG, "read b");
    check(sendmsg(b, &mh, 0), MSG, "sendmsg b");
    check(read(a, rbuf, RBUF), MSG, "read a");
}

/* four kernel entries that do nothing: what an echo's four calls pay to get in and out */
static void it_null(void) {
    for (int i = 0; i < 4; i++) syscall(SYS_getppid);
}

struct variant {
    const char *name;
    void (*fn)(void);
    double *ns; /* per block */
};

static struct variant vs[] = {
    {"read/write", it_rw},       {"recv/send", it_rs},         {"read EAGAIN x2", it_read_empty},
    {"recv EAGAIN x2", it_recv_empty}, {"writev/read", it_writev}, {"sendmsg/read", it_sendmsg},
    {"getppid x4", it_null},
};
#define NV (int)(sizeof vs / sizeof vs[0])

static double cpu_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static int cmp(const void *x, const void *y) {
    double p = *(const double *)x, q = *(const double *)y;
    return p < q ? -1 : p > q;
}

static double median(double *v, int n) {
    double *c = malloc(n * sizeof *c);
    memcpy(c, v, n * sizeof *c);
    qsort(c, n, sizeof *c, cmp);
    double m = n % 2 ? c[n / 2] : (c[n / 2 - 1] + c[n / 2]) / 2;
    free(c);
    return m;
}

static double least(double *v, int n) {
    double m = v[0];
    for (int i = 1; i < n; i++) m = v[i] < m ? v[i] : m;
    return m;
}

/* median over the rounds of variant x's time over variant y's */
static double ratio(int x, int y, int rounds) {
    double *r = malloc(rounds * sizeof *r);
    for (int i = 0; i < rounds; i++) r[i] = vs[x].ns[i] / vs[y].ns[i];
    double m = median(r, rounds);
    free(r);
    return m;
}

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 200, iters = argc > 2 ? atoi(argv[2]) : 2000;
    if (rounds < 1 || iters < 1) {
        fprintf(stderr, "usage: %s [rounds] [iterations per block]\n", argv[0]);
        return 2;
    }
    rbuf = malloc(RBUF);
    memset(rbuf, 1, RBUF);
    memset(msg, 'x', MSG);
    pair();
    for (int v = 0; v < NV; v++) vs[v].ns = calloc(rounds, sizeof(double));
    for (int v = 0; v < NV; v++) /* warm-up */
        for (int i = 0; i < iters; i++) vs[v].fn();
    for (int r = 0; r < rounds; r++) {
        for (int k = 0; k < NV; k++) {
            int v = (k + r) % NV;
            double t0 = cpu_ns();
            for (int i = 0; i < iters; i++) vs[v].fn();
            vs[v].ns[r] = (cpu_ns() - t0) / iters;
        }
    }
    printf("{\"rounds\": %d, \"iterations\": %d, \"variants\": {", rounds, iters);
    for (int v = 0; v < NV; v++)
        printf("%s\"%s\": {\"median_ns\": %.1f, \"least_ns\": %.1f}", v ? ", " : "", vs[v].name,
               median(vs[v].ns, rounds), least(vs[v].ns, rounds));
    printf("}, \"ratios\": {\"recv/send : read/write\": %.4f, \"recv EAGAIN : read EAGAIN\": %.4f, "
           "\"sendmsg : writev\": %.4f}}\n",
           ratio(1, 0, rounds), ratio(3, 2, rounds), ratio(5, 4, rounds));
    return 0;
}
