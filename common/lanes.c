/* lanes.c - the lanes UCX chose for a data endpoint, described for the
 * log, and whether puts run on a real RMA lane.
 */
#include "lanes.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Reads the lanes UCX chose from ucp_ep_print_info: 1.13 has no query for
 * them. Lines look like
 *   "#   lane[2]:  4:cma/memory.0 md[3]  -> md[3]/cma/sysdev[255] rma_bw#0"
 * and become "cma/memory[rma_bw]" (roles without their '#n' index).
 * ucp_put_nbx runs on a lane with the "rma" role; when no transport can
 * do put short/bcopy (cma and knem only do zero-copy, TCP does none), UCX
 * 1.13 emulates puts over active messages and shows no "rma" lane at all:
 * rma_bw lanes serve rendezvous only. Measured: "put" over sm,tcp ran in
 * uct_mm_ep_am_bcopy + ucp_put_handler (two copies), AM rendezvous over
 * the same lanes used cma (NOTES.md). So only an "rma" role counts. */
/* Whether the comma-separated 'roles' holds exactly 'role'. */
static int has_role(const char *roles, const char *role)
{
    size_t n = strlen(role);

    for (const char *p = roles; (p = strstr(p, role)) != NULL; p += n)
        if ((p == roles || p[-1] == ',') && (p[n] == ',' || p[n] == '\0'))
            return 1;
    return 0;
}

void wst_lanes_describe(ucp_ep_h ep, char *out, size_t outlen, int *rma_real_p)
{
    char *text = NULL;
    size_t textlen = 0;
    FILE *f = open_memstream(&text, &textlen);
    size_t used = 0;

    *rma_real_p = 0;
    if (outlen > 0)
        out[0] = '\0';
    if (f == NULL)
        return;
    ucp_ep_print_info(ep, f);
    fclose(f);
    for (char *line = strtok(text, "\n"); line != NULL;
         line = strtok(NULL, "\n")) {
        char *lane = strstr(line, "lane[");
        char *arrow = lane != NULL ? strstr(lane, "->") : NULL;
        char tl[64] = "", roles[128] = "";
        if (arrow == NULL ||
            sscanf(strchr(lane, ':') + 1, " %*d:%63s", tl) != 1)
            continue;
        char *dot = strrchr(tl, '.');
        if (dot != NULL)
            *dot = '\0';
        /* Roles follow the remote md/tl/sysdev token. */
        char *tok = strchr(arrow + 3, ' ');
        size_t rused = 0;
        while (tok != NULL && rused < sizeof(roles)) {
            while (*tok == ' ')
                tok++;
            size_t n = strcspn(tok, " #");
            if (n > 0)
                rused +=
                    (size_t)snprintf(roles + rused, sizeof(roles) - rused,
                                     "%s%.*s", rused ? "," : "", (int)n, tok);
            tok = strchr(tok, ' ');
        }
        if (has_role(roles, "rma") && strncmp(tl, "tcp", 3) != 0)
            *rma_real_p = 1;
        if (used < outlen)
            used += (size_t)snprintf(out + used, outlen - used, "%s%s[%s]",
                                     used ? " " : "", tl, roles);
    }
    free(text);
}
