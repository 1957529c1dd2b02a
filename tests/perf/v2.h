/* What the OK-answering servers in tests/perf need of NSQ's TCP protocol (V2). */
#ifndef PERF_V2_H
#define PERF_V2_H

#include <stddef.h>
#include <string.h>

/* The frame an OK answer is: size 6, frame type 0 (response), "OK". */
static const unsigned char OK[] = {0, 0, 0, 6, 0, 0, 0, 0, 'O', 'K'};

/* Whether the command whose line (newline included) is the `line` bytes at `p` is followed by
 * a 4-byte size and a body, and answered OK: IDENTIFY, PUB, MPUB and DPUB. */
static int takes_body(const unsigned char *p, size_t line) {
    static const char *const with_body[] = {"PUB ", "MPUB ", "DPUB ", "IDENTIFY"};
    for (size_t i = 0; i < sizeof with_body / sizeof *with_body; i++) {
        size_t n = strlen(with_body[i]);
        if (line > n && !memcmp(p, with_body[i], n)) return 1;
    }
    return 0;
}

#endif
