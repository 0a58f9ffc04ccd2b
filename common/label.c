/* label.c - the rule a version's label is checked by (label.h). */
#include "label.h"

#include "errbuf.h"

int wst_label_byte_ok(unsigned char c)
{
    return c > 0x20 && c < 0x7f;
}

wst_status_t wst_label_check(const char *label, size_t len, char *err,
                             size_t errlen)
{
    /* What the error shows of it: printable, '?' for the rest. */
    char shown[WST_LABEL_MAX];
    size_t i, n = len < sizeof(shown) - 1 ? len : sizeof(shown) - 1;

    for (i = 0; i < n; i++)
        shown[i] = wst_label_byte_ok((unsigned char)label[i]) ? label[i] : '?';
    shown[n] = '\0';
    if (len >= WST_LABEL_MAX) {
        wst_errf(err, errlen, "label \"%s...\": %zu bytes, at most %d", shown,
                 len, WST_LABEL_MAX - 1);
        return WST_ERR_INVALID;
    }
    for (i = 0; i < len; i++) {
        unsigned char c = (unsigned char)label[i];
        if (!wst_label_byte_ok(c)) {
            wst_errf(err, errlen,
                     "label \"%s\": byte %zu is 0x%02x; a label is printable "
                     "ASCII without spaces (0x21..0x7e)",
                     shown, i, c);
            return WST_ERR_INVALID;
        }
    }
    return WST_OK;
}
