/* The one-publish-per-round-trip ceiling of a thread-per-core io_uring server on this machine:
 * the same trivial NSQ TCP (V2) server as tests/perf/pub_sink.c (every IDENTIFY, PUB, MPUB and
 * DPUB answered with OK, nothing else), built the way the broker's shards are: one thread per
 * CPU, pinned, each with its own ring serving every connection it is given, sleeping in
 * io_uring_enter when nothing is ready. It has none of a runtime's layers (no task queues,
 * no preemption timer, no second ring, no cross-thread wake-up machinery), so
 * `bench_writer --batch-size 1` against it measures what io_uring itself allows a broker here.
 *
 *   apt-get install liburing-dev
 *   gcc -O2 -pthread tests/perf/uring_sink.c -o /tmp/uring_sink -luring
 *   /tmp/uring_sink PORT [plain|defer] [THREADS]
 *   bench_writer --nsqd-tcp-address=127.0.0.1:PORT --batch-size=1 --runfor=5s
 *
 * The main thread accepts and hands connections to the threads in turn (as the broker's
 * steering spreads them); THREADS (default: one per CPU) threads are pinned to CPUs 0, 1, ...
 * `plain` (the default) sets the ring up with no flags, as glommio 0.9 does for its main and
 * latency rings; `defer` with IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN
 * (completions run when the thread enters the kernel to wait, not by interrupting it).
 * Runs until killed.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <liburing.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "listen.h"
#include "pin.h"
#include "v2.h"

#define BUF (1 << 20)
#define MAX_OKS 1024

static unsigned char oks[MAX_OKS * sizeof OK];
static int defer;

struct conn {
    int fd;
    int magic_left; /* bytes of "  V2" still to skip */
    size_t have;
    size_t send_left; /* bytes of OKs not yet sent */
    int sending;
    int pending; /* operations in the ring that point at it */
    int dead;
    unsigned char *buf;
};

struct worker {
    int cpu;
    int pipe_rd; /* fds of new connections, an int each */
    int new_fd;  /* the read target of the pipe */
};

enum { TAG_PIPE = 1, TAG_RECV = 2, TAG_SEND = 3 };

static void *tagged(void *p, int tag) { return (void *)((uintptr_t)p | (uintptr_t)tag); }

static struct io_uring_sqe *sqe_of(struct io_uring *ring) {
    struct io_uring_sqe *sqe = io_uring_get_sqe(ring);
    if (!sqe) {
        io_uring_submit(ring);
        sqe = io_uring_get_sqe(ring);
    }
    return sqe;
}

static void queue_recv(struct io_uring *ring, struct conn *c) {
    struct io_uring_sqe *sqe = sqe_of(ring);
    io_uring_prep_recv(sqe, c->fd, c->buf + c->have, BUF - c->have, 0);
    io_uring_sqe_set_data(sqe, tagged(c, TAG_RECV));
    c->pending++;
}

static void queue_send(struct io_uring *ring, struct conn *c) {
    size_t n = c->send_left < sizeof oks ? c->send_left : sizeof oks;
    struct io_uring_sqe *sqe = sqe_of(ring);
    io_uring_prep_send(sqe, c->fd, oks, n, MSG_NOSIGNAL);
    io_uring_sqe_set_data(sqe, tagged(c, TAG_SEND));
    c->sending = 1;
    c->pending++;
}

/* Consumes every whole command in the buffer; returns the OKs it owes, -1 on a bad frame. */
static long parse(struct conn *c) {
    long owed = 0;
    size_t at = 0;
    if (c->magic_left) {
        size_t skip = c->have < (size_t)c->magic_left ? c->have : (size_t)c->magic_left;
        at = skip;
        c->magic_left -= (int)skip;
    }
    for (;;) {
        unsigned char *nl = memchr(c->buf + at, '\n', c->have - at);
        if (!nl) break;
        size_t line = (size_t)(nl - (c->buf + at)) + 1;
        unsigned char *p = c->buf + at;
        int with_body = takes_body(p, line);
        size_t total = line;
        if (with_body) {
            if (c->have - at < line + 4) break;
            uint32_t size;
            memcpy(&size, p + line, 4);
            total = line + 4 + ntohl(size);
            if (total > BUF) return -1;
            if (c->have - at < total) break;
            owed++;
        }
        at += total;
    }
    memmove(c->buf, c->buf + at, c->have - at);
    c->have -= at;
    if (c->have == BUF) return -1;
    return owed;
}

/* Closes the connection once no operation in the ring points at it any more. */
static void end(struct conn *c) {
    c->dead = 1;
    if (c->pending) {
        shutdown(c->fd, SHUT_RDWR);
        return;
    }
    close(c->fd);
    free(c->buf);
    free(c);
}

static void *serve(void *arg) {
    struct worker *w = arg;
    pin(w->cpu);

    struct io_uring ring;
    struct io_uring_params params = {0};
    if (defer) params.flags = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN;
    int err = io_uring_queue_init_params(256, &ring, &params);
    if (err) {
        fprintf(stderr, "io_uring_queue_init: %s\n", strerror(-err));
        exit(1);
    }
    struct io_uring_sqe *sqe = sqe_of(&ring);
    io_uring_prep_read(sqe, w->pipe_rd, &w->new_fd, sizeof w->new_fd, 0);
    io_uring_sqe_set_data(sqe, tagged(w, TAG_PIPE));

    for (;;) {
        io_uring_submit_and_wait(&ring, 1);
        struct io_uring_cqe *cqe;
        unsigned head, seen = 0;
        io_uring_for_each_cqe(&ring, head, cqe) {
            seen++;
            uintptr_t data = (uintptr_t)io_uring_cqe_get_data(cqe);
            int tag = (int)(data & 3);
            int res = cqe->res;
            if (tag == TAG_PIPE) {
                int one = 1;
                struct conn *c = calloc(1, sizeof *c);
                c->fd = w->new_fd;
                c->magic_left = 4;
                c->buf = malloc(BUF);
                setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                queue_recv(&ring, c);
                sqe = sqe_of(&ring);
                io_uring_prep_read(sqe, w->pipe_rd, &w->new_fd, sizeof w->new_fd, 0);
                io_uring_sqe_set_data(sqe, tagged(w, TAG_PIPE));
                continue;
            }
            struct conn *c = (struct conn *)(data & ~(uintptr_t)3);
            c->pending--;
            if (c->dead) {
                end(c);
                continue;
            }
            if (tag == TAG_SEND) {
                c->sending = 0;
                if (res <= 0) {
                    end(c);
                    continue;
                }
                c->send_left -= (size_t)res;
                if (c->send_left) queue_send(&ring, c);
                continue;
            }
            /* TAG_RECV */
            long owed = -1;
            if (res > 0) {
                c->have += (size_t)res;
                owed = parse(c);
            }
            if (owed < 0) {
                end(c);
                continue;
            }
            if (owed) {
                c->send_left += (size_t)owed * sizeof OK;
                if (!c->sending) queue_send(&ring, c);
            }
            queue_recv(&ring, c);
        }
        io_uring_cq_advance(&ring, seen);
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s PORT [plain|defer] [THREADS]\n", argv[0]);
        return 2;
    }
    defer = argc > 2 && !strcmp(argv[2], "defer");
    for (size_t i = 0; i < MAX_OKS; i++) memcpy(oks + i * sizeof OK, OK, sizeof OK);

    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    long threads = argc > 3 ? atol(argv[3]) : cpus;
    if (threads < 1) {
        fprintf(stderr, "THREADS must be at least 1\n");
        return 2;
    }
    int *pipes = calloc((size_t)threads, sizeof *pipes);
    for (long i = 0; i < threads; i++) {
        int fds[2];
        if (pipe(fds)) {
            perror("pipe");
            return 1;
        }
        struct worker *w = calloc(1, sizeof *w);
        w->cpu = (int)(i % cpus);
        w->pipe_rd = fds[0];
        pipes[i] = fds[1];
        pthread_t t;
        pthread_create(&t, NULL, serve, w);
        pthread_detach(t);
    }

    int l = listen_loopback(atoi(argv[1]), 128);
    for (long next = 0;; next = (next + 1) % threads) {
        int fd = accept(l, NULL, NULL);
        if (fd < 0) continue;
        if (write(pipes[next], &fd, sizeof fd) != sizeof fd) close(fd);
    }
}
