/* A listening TCP socket on 127.0.0.1, for the servers in tests/perf. */
#ifndef PERF_LISTEN_H
#define PERF_LISTEN_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>

/* Listens on 127.0.0.1:`port` (SO_REUSEADDR, so a rerun binds over TIME_WAIT); exits if it
 * cannot. */
static int listen_loopback(int port, int backlog) {
    int l = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((unsigned short)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof a) || listen(l, backlog)) {
        perror("listen");
        exit(1);
    }
    return l;
}

#endif
