/* config.h - configuration tables: one per component.
 *
 * A table lists every setting with its name, type, default and help. From it
 * come the WST_<NAME> environment variables (name upper-cased, '-' -> '_'),
 * the --<name> command-line flags and --print-config. Precedence: default <
 * environment < command line. Values are stored into a caller struct at the
 * entry's offset. Errors name the key and the bad value.
 *
 * A library keeps its own table, the one place its defaults are written
 * (sender/sender_config.h, receiver/receiver_config.h): it starts from
 * wst_config_init, and a program that offers one of its settings as a flag
 * adds a WST_CONFIG_LIKE entry pointing at the library's entry, so the
 * flag's default, type and choices come from there.
 */
#ifndef WST_CONFIG_H
#define WST_CONFIG_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <wstream/status.h>

enum wst_config_type {
    WST_CONFIG_STRING, /* char *, strdup'ed; freed by wst_config_release */
    WST_CONFIG_UINT,   /* uint64_t; decimal, optional k/m/g suffix (x1024) */
    WST_CONFIG_DOUBLE, /* double */
    WST_CONFIG_BOOL,   /* int; y/n, yes/no, true/false, 1/0, on/off */
    WST_CONFIG_ENUM,   /* int; index into 'choices' (NULL-terminated) */
    WST_CONFIG_LIKE,   /* as 'like' (WST_CONFIG_LIKE_ENTRY) */
};

struct wst_config_entry {
    const char *name; /* "listen", "refits", lower case with '-' */
    enum wst_config_type type;
    const char *default_value; /* textual, parsed like user input */
    const char *help;
    size_t offset;              /* offsetof(settings struct, field) */
    const char *const *choices; /* WST_CONFIG_ENUM only */
    /* WST_CONFIG_LIKE only: the entry (of another table) whose type,
     * default, choices and -- when help is NULL -- help this one has;
     * name and offset stay this entry's own. */
    const struct wst_config_entry *like;
};

/* An entry for the setting LIKE defines, as flag --NAME stored at OFFSET;
 * HELP NULL: like's help. */
#define WST_CONFIG_LIKE_ENTRY(name_, help_, offset_, like_)                    \
    {                                                                          \
        .name = (name_), .type = WST_CONFIG_LIKE, .help = (help_),             \
        .offset = (offset_), .like = (like_)                                   \
    }

/* A numeric macro as the text of a default: WST_CONFIG_QUOTE(N) is "5"
 * where N is 5, so a number defined once can be a table's default. */
#define WST_CONFIG_QUOTE(x) WST_CONFIG_QUOTE_(x)
#define WST_CONFIG_QUOTE_(x) #x

/* Table terminator: name == NULL. */
#define WST_CONFIG_END                                                         \
    {                                                                          \
        NULL, WST_CONFIG_STRING, NULL, NULL, 0, NULL, NULL                     \
    }

/* Fills 'settings' with the table's defaults only: what a library starts
 * from before its caller's parameters (it reads no environment). */
wst_status_t wst_config_init(const struct wst_config_entry *table,
                             void *settings, char *err, size_t errlen);

/* Fills 'settings' with defaults, then WST_* environment variables. */
wst_status_t wst_config_defaults(const struct wst_config_entry *table,
                                 void *settings, char *err, size_t errlen);

/* Applies one textual value to the entry called 'name'. */
wst_status_t wst_config_set(const struct wst_config_entry *table,
                            void *settings, const char *name, const char *value,
                            char *err, size_t errlen);

/* Parses argv: "--name value", "--name=value", "--bool-flag" (sets y).
 * Stops at the first non-flag argument and stores its index in *next_p (argc
 * if none). "--help" and "--print-config" are not handled here: the caller
 * checks for them with wst_config_has_flag; they are skipped here, so
 * --print-config shows the values the other flags set. */
wst_status_t wst_config_parse_args(const struct wst_config_entry *table,
                                   void *settings, int argc, char **argv,
                                   int *next_p, char *err, size_t errlen);

int wst_config_has_flag(int argc, char **argv, const char *flag);

/* "name = value" per line, for --print-config. */
void wst_config_print(const struct wst_config_entry *table,
                      const void *settings, FILE *out);

/* Flags and help text, for --help. */
void wst_config_print_help(const struct wst_config_entry *table, FILE *out);

/* The command-line front every wstream program shares: --help prints
 * "usage: <usage>" and the table's help; --version prints "<prog>
 * <version>" (wstream/version.h) unless the table has a "version" setting
 * of its own; otherwise defaults, environment and flags are applied, an
 * unexpected operand is an error, and --print-config prints the result.
 * *exit_p is -1 when the program should go on, else the code to exit with
 * (0 after --help, --version or --print-config, 2 after an error, which is
 * printed as "<prog>: <error>"). */
void wst_config_cli(const struct wst_config_entry *table, void *settings,
                    int argc, char **argv, const char *prog, const char *usage,
                    int *exit_p);

/* Frees strings the table owns in 'settings'. */
void wst_config_release(const struct wst_config_entry *table, void *settings);

#endif
