/* SVG documents (util/svg.h). */
#include "util/svg.h"

#include <string.h>

#include "util/num_text.h"

/* A coordinate with at most two decimals, trailing zeros dropped. */
static void put_num(FILE *f, double v) {
    char buf[48];
    ah_num_format(buf, sizeof buf, "%.2f", v);
    char *dot = strchr(buf, '.');
    if (dot) {
        char *end = buf + strlen(buf);
        while (end > dot + 1 && end[-1] == '0')
            *--end = '\0';
        if (end == dot + 1)
            *dot = '\0';
    }
    if (strcmp(buf, "-0") == 0)
        strcpy(buf, "0");
    fputs(buf, f);
}

static void put_attr(FILE *f, const char *name, double v) {
    fprintf(f, " %s=\"", name);
    put_num(f, v);
    fputc('"', f);
}

static void put_attrs(FILE *f, const char *attrs) {
    if (attrs && *attrs) {
        fputc(' ', f);
        fputs(attrs, f);
    }
}

/* "/>" or "><title>...</title></TAG>", and the line's end. */
static void end_element(FILE *f, const char *tag, const char *title) {
    if (!title) {
        fputs("/>\n", f);
        return;
    }
    fputs("><title>", f);
    ah_xml_escape(f, title);
    fprintf(f, "</title></%s>\n", tag);
}

/* <TAG attrs N0="V0" N1="V1" N2="V2" N3="V3" and its end. */
static void element4(FILE *f, const char *tag, const char *attrs, const char *const names[4],
                     const double v[4], const char *title) {
    fprintf(f, "<%s", tag);
    if (attrs && *attrs)
        fprintf(f, " %s", attrs);
    for (int i = 0; i < 4; i++)
        put_attr(f, names[i], v[i]);
    end_element(f, tag, title);
}

void ah_xml_escape(FILE *f, const char *s) {
    for (const unsigned char *c = (const unsigned char *)(s ? s : ""); *c; c++) {
        switch (*c) {
        case '&': fputs("&amp;", f); break;
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '"': fputs("&quot;", f); break;
        case '\'': fputs("&apos;", f); break;
        default:
            if (*c < 0x20 && *c != '\t' && *c != '\n')
                fputc('?', f);
            else
                fputc(*c, f);
        }
    }
}

void ah_svg_open(FILE *f, double width, double height, const char *attrs) {
    fputs("<svg xmlns=\"http://www.w3.org/2000/svg\"", f);
    put_attr(f, "width", width);
    put_attr(f, "height", height);
    fputs(" viewBox=\"0 0 ", f);
    put_num(f, width);
    fputc(' ', f);
    put_num(f, height);
    fputc('"', f);
    put_attrs(f, attrs);
    fputs(">\n", f);
}

void ah_svg_close(FILE *f) {
    fputs("</svg>\n", f);
}

void ah_svg_title(FILE *f, const char *text) {
    fputs("<title>", f);
    ah_xml_escape(f, text);
    fputs("</title>\n", f);
}

void ah_svg_rect(FILE *f, double x, double y, double w, double h, const char *attrs, const char *title) {
    static const char *const names[4] = {"x", "y", "width", "height"};
    element4(f, "rect", attrs, names, (const double[4]){x, y, w, h}, title);
}

void ah_svg_line(FILE *f, double x1, double y1, double x2, double y2, const char *attrs, const char *title) {
    static const char *const names[4] = {"x1", "y1", "x2", "y2"};
    element4(f, "line", attrs, names, (const double[4]){x1, y1, x2, y2}, title);
}

void ah_svg_text(FILE *f, double x, double y, const char *attrs, const char *text) {
    fputs("<text", f);
    put_attr(f, "x", x);
    put_attr(f, "y", y);
    put_attrs(f, attrs);
    fputc('>', f);
    ah_xml_escape(f, text);
    fputs("</text>\n", f);
}

void ah_svg_polyline(FILE *f, const double *xs, const double *ys, int n, const char *attrs) {
    fputs("<polyline fill=\"none\"", f);
    put_attrs(f, attrs);
    fputs(" points=\"", f);
    for (int i = 0; i < n; i++) {
        if (i)
            fputc(' ', f);
        put_num(f, xs[i]);
        fputc(',', f);
        put_num(f, ys[i]);
    }
    fputs("\"/>\n", f);
}
