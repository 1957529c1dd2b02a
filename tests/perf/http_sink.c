/* The HTTP ceiling of this machine: a trivial keep-alive HTTP/1.1 server that answers every
 * request with the broker's own /pub answer ("OK", same headers, 117 bytes) and does nothing
 * else. wrk against it measures what the host's loopback TCP and wake-ups allow before any
 * broker work, the way `shard-bench raw` does for the TCP protocol.
 *
 *   gcc -O2 -pthread tests/perf/http_sink.c -o /tmp/http_sink
 *   /tmp/http_sink PORT [THREADS]        (THREADS defaults to the number of CPUs)
 *   wrk -t2 -c16 -d10s --latency -s tests/perf/pub.lua http://127.0.0.1:PORT/
 *
 * One thread per CPU, each pinned, with its own SO_REUSEPORT listener and epoll loop, like a
 * shard-per-core server. Requests are framed by their head and Content-Length only (no
 * chunked bodies); pipelined requests are answered in one write. Runs until killed.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "pin.h"

#define BUF 65536
#define MAX_CONNS 4096

static const char ANSWER[] = "HTTP/1.1 200 OK\r\n"
                             "Content-Type: text/plain; charset=utf-8\r\n"
                             "X-NSQ-Content-Type: nsq; version=1.0\r\n"
                             "Content-Length: 2\r\n\r\nOK";

static int port;

struct conn {
    int fd;
    size_t len;
    char buf[BUF];
};

/* Bytes of the first complete request in b[0..n), or 0 if it is not all there yet. */
static size_t request_len(const char *b, size_t n) {
    const char *end = memmem(b, n, "\r\n\r\n", 4);
    if (!end)
        return 0;
    size_t head = (size_t)(end - b) + 4, body = 0;
    for (const char *p = b; p < end; p++) {
        if ((p == b || p[-1] == '\n') && strncasecmp(p, "content-length:", 15) == 0) {
            body = strtoul(p + 15, NULL, 10);
            break;
        }
    }
    return n >= head + body ? head + body : 0;
}

static int listener(void) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0), one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(fd, 1024) != 0) {
        perror("bind/listen");
        exit(1);
    }
    return fd;
}

static void serve(struct conn *c) {
    for (;;) {
        ssize_t r = recv(c->fd, c->buf + c->len, BUF - c->len, 0);
        if (r == 0 || (r < 0 && errno != EAGAIN)) {
            close(c->fd);
            free(c);
            return;
        }
        if (r < 0)
            return;
        c->len += (size_t)r;
        char out[sizeof ANSWER * 64];
        size_t answers = 0, used = 0, n;
        while ((n = request_len(c->buf + used, c->len - used)) > 0 && answers < 64) {
            memcpy(out + answers * (sizeof ANSWER - 1), ANSWER, sizeof ANSWER - 1);
            answers++;
            used += n;
        }
        memmove(c->buf, c->buf + used, c->len - used);
        c->len -= used;
        if (answers)
            send(c->fd, out, answers * (sizeof ANSWER - 1), MSG_NOSIGNAL);
        if (c->len == BUF) { /* a request larger than the buffer: not ours to serve */
            close(c->fd);
            free(c);
            return;
        }
    }
}

static void *worker(void *arg) {
    pin((int)(long)arg);
    int lfd = listener(), ep = epoll_create1(0);
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL}, evs[64];
    epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev);
    for (;;) {
        int n = epoll_wait(ep, evs, 64, -1);
        for (int i = 0; i < n; i++) {
            if (evs[i].data.ptr == NULL) {
                int fd;
                while ((fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK)) >= 0) {
                    int one = 1;
                    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                    struct conn *c = calloc(1, sizeof *c);
                    c->fd = fd;
                    struct epoll_event cev = {.events = EPOLLIN | EPOLLRDHUP, .data.ptr = c};
                    epoll_ctl(ep, EPOLL_CTL_ADD, fd, &cev);
                }
            } else {
                serve(evs[i].data.ptr);
            }
        }
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s PORT [THREADS]\n", argv[0]);
        return 2;
    }
    port = atoi(argv[1]);
    long threads = argc > 2 ? atol(argv[2]) : sysconf(_SC_NPROCESSORS_ONLN);
    pthread_t t[256];
    for (long i = 0; i < threads && i < 256; i++)
        pthread_create(&t[i], NULL, worker, (void *)(i % sysconf(_SC_NPROCESSORS_ONLN)));
    printf("http_sink: %ld threads on 127.0.0.1:%d\n", threads, port);
    fflush(stdout);
    pthread_join(t[0], NULL);
    return 0;
}
