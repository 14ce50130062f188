/* The registry of compute backends (see backend.h). The CPU backend is always
 * there; a CUDA backend built into the library defines ah_backend_cuda() in
 * its own file and is found through the weak reference below, so adding it
 * changes no file outside its own (and the build). */
#include "engine/backend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const ah_backend *ah_backend_cuda(void) __attribute__((weak));

const ah_backend *ah_backend_get(const char *name) {
    if (name == NULL)
        return NULL;
    if (!strcmp(name, "cpu"))
        return ah_backend_cpu();
    if (!strcmp(name, "cuda") && ah_backend_cuda)
        return ah_backend_cuda();
    return NULL;
}

const ah_backend *ah_backend_default(char *err, size_t errlen) {
    const char *name = getenv("AUTOHET_BACKEND");
    if (name == NULL || !*name)
        name = "cpu";
    const ah_backend *be = ah_backend_get(name);
    if (be == NULL)
        snprintf(err, errlen, "AUTOHET_BACKEND=%.64s: no such compute backend in this build (available: cpu%s)",
                 name, ah_backend_cuda ? ", cuda" : "");
    return be;
}
