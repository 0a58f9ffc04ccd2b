/* log.c - formatting and sinks for struct wst_logger. */
#include "log.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

static const char *const level_names[] = {"error", "warn", "info", "debug",
                                          "trace"};

const char *wst_log_level_name(enum wst_log_level level)
{
    if ((unsigned)level > WST_LOG_TRACE)
        return "?";
    return level_names[level];
}

int wst_log_level_parse(const char *s)
{
    for (int i = 0; i <= WST_LOG_TRACE; i++)
        if (s != NULL && strcmp(s, level_names[i]) == 0)
            return i;
    return -1;
}

void wst_logger_init(struct wst_logger *lg, const char *name,
                     enum wst_log_level level)
{
    lg->level = level;
    lg->name = name;
    lg->sink = NULL;
    lg->sink_arg = NULL;
}

void wst_log_write(const struct wst_logger *lg, enum wst_log_level level,
                   const char *fmt, ...)
{
    char line[1024];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    if (lg->sink != NULL) {
        lg->sink(lg->sink_arg, (int)level, line);
        return;
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    /* One fprintf per line so concurrent threads do not interleave. */
    fprintf(stderr, "%ld.%03ld wstream[%s] %s: %s\n", (long)ts.tv_sec,
            ts.tv_nsec / 1000000, lg->name ? lg->name : "-",
            wst_log_level_name(level), line);
}
