/* The link model from a parsed comm profile (autohet/link_model.h), for
 * readers that hold the document already (comm_profile.c). */
#ifndef AUTOHET_COMM_LINK_MODEL_JSON_H
#define AUTOHET_COMM_LINK_MODEL_JSON_H
#include <cjson/cJSON.h>

#include "autohet/link_model.h"

/* The latency fit of link_class in fits[] (NULL: the intra-node one, else
 * the first) into m: 0; 1 when there is none (m->n = 0); -1 when malformed. */
int ah_link_model_from_fits(const cJSON *fits, const char *link_class, ah_link_model *m);

#endif
