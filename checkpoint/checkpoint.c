/* checkpoint/checkpoint.c — parsing and naming of recompute policies (see checkpoint.h). */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "checkpoint/checkpoint.h"

int recompute_parse(const char* s, RecomputePolicy* p, char err[256]) {
    RecomputeCheck keep_check = p->check;
    int keep_fresh = p->fresh_seeds;
    memset(p, 0, sizeof(*p));
    p->check = keep_check;
    p->fresh_seeds = keep_fresh;
    const char* seg = s;
    if (!strcmp(s, "selective")) { p->selective = 1; return 0; }
    if (!strncmp(s, "selective+", 10)) { p->selective = 1; seg = s + 10; }
    if (!strcmp(seg, "none") && seg == s) { p->every = 0; return 0; }
    if (!strcmp(seg, "layer")) { p->every = 1; return 0; }
    if (!strncmp(seg, "every:", 6)) {
        char* end;
        long k = strtol(seg + 6, &end, 10);
        if (isdigit((unsigned char)seg[6]) && *end == '\0' && k >= 1 && k <= 1000000) {
            p->every = (int)k;
            return 0;
        }
    }
    snprintf(err, 256, "--recompute %s: expected none, layer, every:K with K >= 1, selective, "
             "selective+layer or selective+every:K", s);
    return -1;
}

int recompute_check_parse(const char* s, RecomputeCheck* c, char err[256]) {
    if (!strcmp(s, "off")) { *c = CHECK_OFF; return 0; }
    if (!strcmp(s, "warn")) { *c = CHECK_WARN; return 0; }
    if (!strcmp(s, "stop")) { *c = CHECK_STOP; return 0; }
    snprintf(err, 256, "--recompute-check %s: expected off, warn or stop", s);
    return -1;
}

const char* recompute_name(const RecomputePolicy* p, char buf[32]) {
    const char* sel = p->selective ? "selective+" : "";
    if (p->every == 0) snprintf(buf, 32, "%s", p->selective ? "selective" : "none");
    else if (p->every == 1) snprintf(buf, 32, "%slayer", sel);
    else snprintf(buf, 32, "%severy:%d", sel, p->every);
    return buf;
}
