/* log.h - the logger every component writes through.
 *
 * A logger is a small struct owned by its component (sender, receiver, agent);
 * there is no global logger. The host may supply a sink callback; without
 * one, lines go to stderr as "wstream[<name>] <level>: <message>".
 * WST_LOG checks the level before evaluating its arguments.
 */
#ifndef WST_LOG_H
#define WST_LOG_H

#include <stdarg.h>
#include <stdio.h>

enum wst_log_level {
    WST_LOG_ERROR = 0,
    WST_LOG_WARN = 1,
    WST_LOG_INFO = 2,
    WST_LOG_DEBUG = 3,
    WST_LOG_TRACE = 4,
};

/* Receives one formatted line (no trailing newline) and its level (an enum
 * wst_log_level value). Called from any wstream thread; must be
 * thread-safe. Same type as the public wst_log_fn. */
typedef void (*wst_log_sink_fn)(void *arg, int level, const char *line);

struct wst_logger {
    enum wst_log_level level;
    const char *name;     /* borrowed; e.g. "agent[0]"; may be NULL */
    wst_log_sink_fn sink; /* NULL: stderr */
    void *sink_arg;
};

void wst_logger_init(struct wst_logger *lg, const char *name,
                     enum wst_log_level level);

void wst_log_write(const struct wst_logger *lg, enum wst_log_level level,
                   const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* The one table of level names, "error" .. "trace", indexed by enum
 * wst_log_level and NULL-terminated, so that it serves as the choices of
 * a WST_CONFIG_ENUM "log-level" entry (config.h). */
extern const char *const wst_log_level_names[];

/* A level's name; "?" for a value out of range. */
const char *wst_log_level_name(enum wst_log_level level);

/* How a line is written out: text, "<s.ms> wstream[<name>] <level>:
 * <line>", or one JSON object per line for log collectors,
 * {"ts":<s.ms>,"level":"<level>","component":"<name>","msg":"<line>"},
 * with the message escaped (quotes, backslashes, control bytes). */
enum wst_log_format {
    WST_LOG_FORMAT_TEXT = 0,
    WST_LOG_FORMAT_JSON = 1,
};

/* Writes one line to 'out' in one stdio call, so threads do not
 * interleave. 'name' may be NULL. */
void wst_log_emit(FILE *out, enum wst_log_format format, const char *name,
                  int level, const char *line);

/* A sink (wst_log_sink_fn, and the public wst_log_fn) writing through
 * wst_log_emit; its arg is a struct wst_log_stream, borrowed for as long
 * as the sink is in use. */
struct wst_log_stream {
    FILE *out;
    enum wst_log_format format;
    const char *name;
};
void wst_log_stream_sink(void *arg, int level, const char *line);

/* Parses "error|warn|info|debug|trace"; returns -1 if unknown. */
int wst_log_level_parse(const char *s);

#define WST_LOG(lg, lvl, ...)                                                  \
    do {                                                                       \
        if ((lg) != NULL && (lvl) <= (lg)->level)                              \
            wst_log_write((lg), (lvl), __VA_ARGS__);                           \
    } while (0)

#define WST_ERROR(lg, ...) WST_LOG(lg, WST_LOG_ERROR, __VA_ARGS__)
#define WST_WARN(lg, ...) WST_LOG(lg, WST_LOG_WARN, __VA_ARGS__)
#define WST_INFO(lg, ...) WST_LOG(lg, WST_LOG_INFO, __VA_ARGS__)
#define WST_DEBUG(lg, ...) WST_LOG(lg, WST_LOG_DEBUG, __VA_ARGS__)
#define WST_TRACE(lg, ...) WST_LOG(lg, WST_LOG_TRACE, __VA_ARGS__)

#endif
