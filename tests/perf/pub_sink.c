/* The one-publish-per-round-trip ceiling of this machine: a trivial NSQ TCP (V2) server that
 * answers every IDENTIFY, PUB, MPUB and DPUB with OK and does nothing else (no topic, no
 * storage, no other command). `bench_writer --batch-size 1` against it measures what the host's loopback
 * TCP and wake-ups allow a broker before any broker work.
 *
 *   gcc -O2 -pthread tests/perf/pub_sink.c -o /tmp/pub_sink
 *   /tmp/pub_sink PORT [spin]
 *   bench_writer --nsqd-tcp-address=127.0.0.1:PORT --batch-size=1 --runfor=5s
 *
 * A thread per connection, blocking reads, as nsqd's goroutine per connection; `spin`: each
 * thread polls its socket without sleeping (the best a server can do for latency, at a whole
 * CPU per connection). Runs until killed.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
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
#include "v2.h"

#define BUF (1 << 20)

static int spin;


/* Fills buf[have..] with at least `need` bytes in all; returns the bytes held, 0 at EOF. */
static size_t fill(int fd, unsigned char *buf, size_t have, size_t need) {
    while (have < need) {
        ssize_t n = recv(fd, buf + have, BUF - have, spin ? MSG_DONTWAIT : 0);
        if (n == 0) return 0;
        if (n < 0) {
            if (errno == EAGAIN || errno == EINTR) continue;
            return 0;
        }
        have += (size_t)n;
    }
    return have;
}

static void *serve(void *arg) {
    int fd = (int)(intptr_t)arg;
    unsigned char *buf = malloc(BUF);
    size_t have = 0;
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (!(have = fill(fd, buf, 0, 4))) goto out; /* "  V2" */
    memmove(buf, buf + 4, have - 4);
    have -= 4;
    for (;;) {
        unsigned char *nl;
        while (!(nl = memchr(buf, '\n', have))) {
            if (have == BUF || !(have = fill(fd, buf, have, have + 1))) goto out;
        }
        size_t line = (size_t)(nl - buf) + 1;
        int with_body = takes_body(buf, line);
        size_t total = line;
        if (with_body) {
            if (!(have = fill(fd, buf, have, line + 4))) goto out;
            uint32_t size;
            memcpy(&size, buf + line, 4);
            total = line + 4 + ntohl(size);
            if (total > BUF) goto out;
            if (!(have = fill(fd, buf, have, total))) goto out;
            if (send(fd, OK, sizeof OK, MSG_NOSIGNAL) != sizeof OK) goto out;
        }
        memmove(buf, buf + total, have - total);
        have -= total;
    }
out:
    close(fd);
    free(buf);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s PORT [spin]\n", argv[0]);
        return 2;
    }
    spin = argc > 2 && !strcmp(argv[2], "spin");
    int l = listen_loopback(atoi(argv[1]), 128);
    for (;;) {
        int fd = accept(l, NULL, NULL);
        if (fd < 0) continue;
        pthread_t t;
        pthread_create(&t, NULL, serve, (void *)(intptr_t)fd);
        pthread_detach(t);
    }
}
