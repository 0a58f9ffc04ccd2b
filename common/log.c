/* log.c - formatting and sinks for struct wst_logger. */
#include "log.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

const char *const wst_log_level_names[] = {"error", "warn",  "info",
                                           "debug", "trace", NULL};

const char *wst_log_level_name(enum wst_log_level level)
{
    if ((unsigned)level > WST_LOG_TRACE)
        return "?";
    return wst_log_level_names[level];
}

int wst_log_level_parse(const char *s)
{
    for (int i = 0; i <= WST_LOG_TRACE; i++)
        if (s != NULL && strcmp(s, wst_log_level_names[i]) == 0)
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
    wst_log_emit(stderr, WST_LOG_FORMAT_TEXT, lg->name, (int)level, line);
}

/* Bytes in the well-formed UTF-8 sequence at 's' (a lead byte >= 0x80),
 * or 0. */
static size_t utf8_len(const char *s)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t n = u[0] >= 0xC2 && u[0] <= 0xDF   ? 2
               : u[0] >= 0xE0 && u[0] <= 0xEF ? 3
               : u[0] >= 0xF0 && u[0] <= 0xF4 ? 4
                                              : 0;

    for (size_t i = 1; i < n; i++)
        if (u[i] < 0x80 || u[i] > 0xBF)
            return 0;
    return n;
}

/* 'in' as the body of a JSON string; truncated (never mid-escape) to fit. */
static void json_escape(const char *in, char *out, size_t len)
{
    static const char hex[] = "0123456789abcdef";
    size_t n = 0;

    for (; *in != '\0'; in++) {
        unsigned char c = (unsigned char)*in;
        char esc[7];
        size_t k = 0;
        if (c == '"' || c == '\\') {
            esc[k++] = '\\';
            esc[k++] = (char)c;
        } else if (c == '\n') {
            esc[k++] = '\\';
            esc[k++] = 'n';
        } else if (c == '\t') {
            esc[k++] = '\\';
            esc[k++] = 't';
        } else if (c < 0x20 || c == 0x7f) {
            memcpy(esc, "\\u00", 4);
            k = 4;
            esc[k++] = hex[c >> 4];
            esc[k++] = hex[c & 15];
        } else if (c < 0x80) {
            esc[k++] = (char)c;
        } else {
            /* Valid UTF-8 passes through; any other byte (names come off
             * the wire) is escaped as the code point of its value, so the
             * line stays valid JSON. */
            size_t seq = utf8_len(in);
            if (seq > 0) {
                memcpy(esc, in, seq);
                k = seq;
                in += seq - 1;
            } else {
                memcpy(esc, "\\u00", 4);
                k = 4;
                esc[k++] = hex[c >> 4];
                esc[k++] = hex[c & 15];
            }
        }
        if (n + k + 1 > len)
            break;
        memcpy(out + n, esc, k);
        n += k;
    }
    out[n] = '\0';
}

void wst_log_emit(FILE *out, enum wst_log_format format, const char *name,
                  int level, const char *line)
{
    struct timespec ts;
    const char *lvl = wst_log_level_name((enum wst_log_level)level);

    clock_gettime(CLOCK_REALTIME, &ts);
    if (format != WST_LOG_FORMAT_JSON) {
        /* One fprintf per line so concurrent threads do not interleave.
         * Microseconds: a refit's steps on the GPU are shorter than a
         * millisecond, and their order is what a log is read for. */
        fprintf(out, "%ld.%06ld wstream[%s] %s: %s\n", (long)ts.tv_sec,
                ts.tv_nsec / 1000, name ? name : "-", lvl, line);
        return;
    }
    char msg[6 * 1024 + 1], who[6 * 64 + 1];
    json_escape(line, msg, sizeof(msg));
    json_escape(name ? name : "-", who, sizeof(who));
    fprintf(out,
            "{\"ts\":%ld.%06ld,\"level\":\"%s\",\"component\":\"%s\","
            "\"msg\":\"%s\"}\n",
            (long)ts.tv_sec, ts.tv_nsec / 1000, lvl, who, msg);
}

void wst_log_stream_sink(void *arg, int level, const char *line)
{
    const struct wst_log_stream *s = arg;

    wst_log_emit(s->out, s->format, s->name, level, line);
}
