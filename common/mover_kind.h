/* mover_kind.h - which mover carries a sender's data, as the protocol
 * names it: put and am in a plan (what the receiver offers), any of them in
 * a sender's BEGIN (what it uses). The movers themselves are in
 * common/movers/ (mover.h).
 */
#ifndef WST_MOVER_KIND_H
#define WST_MOVER_KIND_H

/* Values travel on the wire: append only. */
enum wst_mover_kind {
    WST_MOVER_PUT = 1,
    WST_MOVER_AM = 2,
    WST_MOVER_NCCL = 3,
};

/* "put", "am", "nccl"; "invalid" for other values. Static strings. */
const char *wst_mover_kind_name(enum wst_mover_kind kind);

/* Parses "put" or "am" (what an application may ask for); 0 if neither. */
enum wst_mover_kind wst_mover_kind_parse(const char *name);

#endif
