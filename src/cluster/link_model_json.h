/* The link model from a parsed comm profile (autohet/link_model.h), for
 * readers that hold the document already (comm_profile.c). */
#ifndef AUTOHET_CLUSTER_LINK_MODEL_JSON_H
#define AUTOHET_CLUSTER_LINK_MODEL_JSON_H
#include <cjson/cJSON.h>

#include "autohet/link_model.h"

/* Reads a comm profile (the --json output of autohet commbench) and checks
 * what makes it one: "format": "autohet-comm-profile" and a fits[] array;
 * the one place every --comm-profile reader parses the file. Returns the
 * document (cJSON_Delete() it), or NULL with one line "PATH: ..." in err. */
cJSON *ah_comm_profile_parse(const char *path, char *err, size_t errlen);

/* The latency fit of link_class in fits[] (NULL: the intra-node one, else
 * the first) into m: 0; 1 when there is none (m->n = 0); -1 when malformed. */
int ah_link_model_from_fits(const cJSON *fits, const char *link_class, ah_link_model *m);
/* The same for the fit of another op ("allreduce", ...): its regimes are read
 * and checked alike, and ah_link_us() gives its time for a size */
int ah_link_model_from_op_fit(const cJSON *fits, const char *op_name, const char *link_class, ah_link_model *m);

#endif
