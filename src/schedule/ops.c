/* The one vocabulary of a step's operations (autohet/ops.h). */
#include <string.h>

#include "autohet/ops.h"

static const struct {
    const char *name;
    ah_stream stream;
    int site;
} ops[AH_OP_KINDS] = {
#define AH_OP_ROW_(kind, name, stream, site) {name, AH_STREAM_##stream, site},
    AH_OP_MAP(AH_OP_ROW_)
#undef AH_OP_ROW_
};

const char *ah_op_kind_name(ah_op_kind k) {
    return (int)k >= 0 && k < AH_OP_KINDS ? ops[k].name : NULL;
}

int ah_op_kind_parse(const char *name) {
    for (int k = 0; name && k < AH_OP_KINDS; k++)
        if (!strcmp(name, ops[k].name))
            return k;
    return -1;
}

ah_stream ah_op_kind_stream(ah_op_kind k) {
    return (int)k >= 0 && k < AH_OP_KINDS ? ops[k].stream : AH_STREAM_DP;
}

int ah_op_kind_site(ah_op_kind k) {
    return (int)k >= 0 && k < AH_OP_KINDS ? ops[k].site : -1;
}

const char *ah_stream_name(ah_stream s) {
    static const char *const names[AH_STREAMS] = {"compute", "tp", "p2p", "dp"};
    return (int)s >= 0 && s < AH_STREAMS ? names[s] : "unknown";
}
