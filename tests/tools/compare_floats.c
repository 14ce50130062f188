/* compare_floats A B TOL: two raw float32 files; prints ||A-B|| / ||A|| and the
 * largest element difference; exit 0 if the relative norm is <= TOL. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static float *load(const char *path, long *n) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "compare_floats: cannot open %s\n", path);
        exit(2);
    }
    fseek(f, 0, SEEK_END);
    long bytes = ftell(f);
    fseek(f, 0, SEEK_SET);
    float *v = malloc((size_t)bytes + 4);
    if (!v || fread(v, 1, (size_t)bytes, f) != (size_t)bytes)
        exit(2);
    fclose(f);
    *n = bytes / 4;
    return v;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: compare_floats A B TOL\n");
        return 2;
    }
    long na, nb;
    float *a = load(argv[1], &na), *b = load(argv[2], &nb);
    if (na != nb || na == 0) {
        printf("sizes differ: %ld vs %ld floats\n", na, nb);
        return 1;
    }
    double d = 0, s = 0, mx = 0;
    for (long i = 0; i < na; i++) {
        double e = (double)a[i] - b[i];
        d += e * e;
        s += (double)a[i] * a[i];
        if (fabs(e) > mx)
            mx = fabs(e);
    }
    double rel = sqrt(d / s);
    printf("%ld parameters: relative difference %.3g, largest element difference %.3g\n", na, rel, mx);
    return rel <= atof(argv[3]) ? 0 : 1;
}
