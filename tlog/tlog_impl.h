/* Shared by the files of tlog/ only (not part of the module's interface). */
#ifndef KG_TLOG_IMPL_H
#define KG_TLOG_IMPL_H
#include <stddef.h>

/* Whether buf[0..len) is exactly one valid record, as the reader would accept it. 0, or -1 with *why (a static
 * string). The writer checks every record with it, so that nothing it appends is skipped by a reader. */
int kg_tlog_check_encoded(const char *buf, size_t len, const char **why);
#endif
