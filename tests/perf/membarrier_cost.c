/* What one membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) costs, the barrier glommio issues
 * before every park: it interrupts every CPU that runs another thread of the process.
 *
 *   gcc -O2 -pthread tests/perf/membarrier_cost.c -o /tmp/membarrier_cost
 *   /tmp/membarrier_cost          # the other thread mostly sleeps (an idle shard)
 *   /tmp/membarrier_cost busy     # the other thread runs on CPU 1 (a busy shard)
 *
 * The caller runs on CPU 0. Prints microseconds a call over 100,000 calls.
 */
#define _GNU_SOURCE
#include <linux/membarrier.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "pin.h"

static volatile int stop;
static int busy;

static void *other(void *arg) {
    (void)arg;
    pin(1);
    while (!stop)
        if (!busy)
            usleep(1000);
    return NULL;
}

int main(int argc, char **argv) {
    busy = argc > 1 && strcmp(argv[1], "busy") == 0;
    pin(0);
    if (syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0) != 0) {
        perror("membarrier register");
        return 1;
    }
    pthread_t t;
    pthread_create(&t, NULL, other, NULL);
    usleep(100000);
    const int calls = 100000;
    struct timespec a, z;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (int i = 0; i < calls; i++)
        syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0);
    clock_gettime(CLOCK_MONOTONIC, &z);
    double us = ((z.tv_sec - a.tv_sec) * 1e9 + (z.tv_nsec - a.tv_nsec)) / 1e3 / calls;
    printf("other thread %s: %.2f us a membarrier\n", busy ? "busy on cpu 1" : "mostly asleep", us);
    stop = 1;
    pthread_join(t, NULL);
    return 0;
}
