/* Pinning the calling thread to one CPU, for the measurement programs in tests/perf. */
#ifndef PERF_PIN_H
#define PERF_PIN_H

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>

/* Runs the calling thread on `cpu` only; exits if that is not allowed. */
static void pin(int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (sched_setaffinity(0, sizeof set, &set) != 0) {
        perror("sched_setaffinity");
        exit(1);
    }
}

#endif
