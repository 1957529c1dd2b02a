/* Loopback ping-pong between two threads of one process: the most round trips a second any
 * request/response client can make on this machine, with no broker in the way.
 *
 *   gcc -O2 -pthread tests/perf/pingpong.c -o /tmp/pingpong
 *   /tmp/pingpong [client-cpu server-cpu [spin]]
 *
 * The client writes 220 bytes (a PUB of a 200-byte body), the server answers 10 (an OK
 * frame); 5 seconds, then it prints round trips a second. With "spin" both sides poll with
 * recv(MSG_DONTWAIT) instead of sleeping in read(). CPUs default to 0 and 1.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "pin.h"

static int spin;
static int server_cpu = 1;
static int listen_fd;

/* Receives at least one byte: blocking, or polling when spinning. */
static ssize_t receive(int fd, char *buf, size_t len) {
    if (!spin)
        return read(fd, buf, len);
    for (;;) {
        ssize_t n = recv(fd, buf, len, MSG_DONTWAIT);
        if (n >= 0)
            return n;
    }
}

static void *server(void *arg) {
    (void)arg;
    pin(server_cpu);
    int fd = accept(listen_fd, NULL, NULL);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    char buf[512];
    for (;;) {
        if (receive(fd, buf, sizeof buf) <= 0)
            return NULL;
        if (write(fd, buf, 10) != 10)
            return NULL;
    }
}

int main(int argc, char **argv) {
    int client_cpu = argc > 2 ? atoi(argv[1]) : 0;
    server_cpu = argc > 2 ? atoi(argv[2]) : 1;
    spin = argc > 3 && strcmp(argv[3], "spin") == 0;

    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    listen_fd = socket(AF_INET, SOCK_STREAM, 0);
    socklen_t len = sizeof addr;
    if (bind(listen_fd, (struct sockaddr *)&addr, sizeof addr) != 0 || listen(listen_fd, 1) != 0 ||
        getsockname(listen_fd, (struct sockaddr *)&addr, &len) != 0) {
        perror("listen");
        return 1;
    }
    pthread_t t;
    pthread_create(&t, NULL, server, NULL);

    pin(client_cpu);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0) {
        perror("connect");
        return 1;
    }
    char buf[512] = {0};
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    long trips = 0;
    double elapsed = 0;
    while (elapsed < 5.0) {
        if (write(fd, buf, 220) != 220 || receive(fd, buf, sizeof buf) <= 0) {
            fprintf(stderr, "pingpong: connection failed\n");
            return 1;
        }
        trips++;
        clock_gettime(CLOCK_MONOTONIC, &now);
        elapsed = (now.tv_sec - start.tv_sec) + (now.tv_nsec - start.tv_nsec) / 1e9;
    }
    printf("client cpu %d, server cpu %d%s: %.0f round trips/s\n", client_cpu, server_cpu,
           spin ? ", both polling" : "", trips / elapsed);
    return 0;
}
