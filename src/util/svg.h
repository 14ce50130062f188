/* SVG documents, one element per call, written to a stdio stream (open it
 * with ah_out_open() from util/atomic_file.h for an atomic file).
 *
 * Coordinates are written with at most two decimals and '.' as the decimal
 * point whatever LC_NUMERIC says ("12.5", "300"). Text and titles are
 * XML-escaped (& < > " ' and control characters), so any name may go in.
 * `attrs` arguments are raw attribute text written as given
 * (e.g. "class=\"k1\"" or "text-anchor=\"end\" fill=\"#444444\""); NULL or
 * "" for none. Never put untrusted text into attrs; pass it as text/title.
 *
 * A document:
 *   ah_svg_open(f, 800, 600, "font-size=\"11\"");
 *   ah_svg_title(f, "My chart");                       // tooltip of the whole image
 *   ah_svg_rect(f, 10, 10, 100, 20, "fill=\"#4e79a7\"", "tooltip");
 *   ah_svg_text(f, 10, 50, NULL, "label & more");
 *   ah_svg_close(f);
 * Each element ends its line, so documents diff well. */
#ifndef AH_UTIL_SVG_H
#define AH_UTIL_SVG_H

#include <stdio.h>

/* <svg xmlns=... width height viewBox="0 0 W H" attrs> */
void ah_svg_open(FILE *f, double width, double height, const char *attrs);
/* </svg> */
void ah_svg_close(FILE *f);

/* The document's <title> (escaped). */
void ah_svg_title(FILE *f, const char *text);
/* <rect x y width height attrs>, with a <title> child (a tooltip) unless
 * title is NULL. */
void ah_svg_rect(FILE *f, double x, double y, double w, double h, const char *attrs, const char *title);
/* <line x1 y1 x2 y2 attrs>, with a <title> child unless title is NULL. */
void ah_svg_line(FILE *f, double x1, double y1, double x2, double y2, const char *attrs, const char *title);
/* <text x y attrs>text</text>, text escaped. */
void ah_svg_text(FILE *f, double x, double y, const char *attrs, const char *text);
/* <polyline points="x0,y0 x1,y1 ..." fill="none" attrs> over n points. */
void ah_svg_polyline(FILE *f, const double *xs, const double *ys, int n, const char *attrs);

/* Writes s XML-escaped: & < > " ' as entities, control characters other
 * than tab and newline (not allowed in XML 1.0) as '?'. */
void ah_xml_escape(FILE *f, const char *s);

#endif
