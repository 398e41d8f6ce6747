// test_readme_options.c — README.md's options table against the config schema, so that the
// documented options cannot drift from the program.
//
// The table is the block of lines that starts with the header "| key | default | meaning |";
// each row is "| `section.key` | `default` | meaning |" (an empty default is written `""`).
// Checked for every row: the key exists in the schema (src/core/config.c), its default there is
// exactly the row's text (config_key_default: the INI text of the schema table, e.g. "1e-3"),
// the meaning is not empty, and no key appears twice; and the table has at least MIN_ROWS rows.
// The README is argv[1], else README.md beside this file's folder (the compile-time path of
// this source, which CMake passes as an absolute path).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../src/core/config.h"

#define MIN_ROWS 10
#define MAX_ROWS 128
#define LINE_MAX_LEN 1024

static const char header[] = "| key | default | meaning |";

// Trims blanks on both sides, then one pair of enclosing backticks; returns the start.
static char *cell_text(char *s) {
    while (*s == ' ') s++;
    size_t n = strlen(s);
    while (n > 0 && s[n - 1] == ' ') s[--n] = '\0';
    if (n >= 2 && s[0] == '`' && s[n - 1] == '`') {
        s[n - 1] = '\0';
        s++;
    }
    if (strcmp(s, "\"\"") == 0) s[0] = '\0';
    return s;
}

// The README beside tests/: this file's path with "tests/test_readme_options.c" replaced.
static void default_readme(char *buf, size_t n) {
    const char *me = __FILE__, *tail = "tests/test_readme_options.c";
    size_t lm = strlen(me), lt = strlen(tail);
    if (lm >= lt && strcmp(me + lm - lt, tail) == 0)
        snprintf(buf, n, "%.*sREADME.md", (int)(lm - lt), me);
    else
        snprintf(buf, n, "../README.md");
}

int main(int argc, char **argv) {
    char path[4096];
    if (argc > 1) snprintf(path, sizeof path, "%s", argv[1]);
    else default_readme(path, sizeof path);
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "test_readme_options: cannot open %s (pass the README as argv[1])\n", path);
        return 1;
    }
    printf("README: %s\n", path);

    char line[LINE_MAX_LEN], seen[MAX_ROWS][128];
    int lineno = 0, in_table = 0, rows = 0, fails = 0, header_line = 0;
    while (fgets(line, sizeof line, f)) {
        lineno++;
        line[strcspn(line, "\r\n")] = '\0';
        if (!in_table) {
            if (strcmp(line, header) == 0) {
                if (header_line) {
                    printf("  FAIL  README.md:%d: a second options table (the first at line %d)\n",
                           lineno, header_line);
                    fails++;
                }
                in_table = 1;
                header_line = lineno;
            }
            continue;
        }
        if (line[0] != '|') {  // the first line after the table ends it
            in_table = 0;
            continue;
        }
        if (strncmp(line, "|---", 4) == 0) continue;  // the separator row

        // split "| a | b | c |" into its three cells
        char *cells[4] = {0};
        int nc = 0;
        char *p = line + 1;
        while (nc < 4) {
            char *bar = strchr(p, '|');
            if (!bar) break;
            *bar = '\0';
            cells[nc++] = p;
            p = bar + 1;
        }
        if (nc != 3 || *p != '\0') {
            printf("  FAIL  README.md:%d: a row of the options table needs exactly 3 cells\n", lineno);
            fails++;
            continue;
        }
        char *name = cell_text(cells[0]), *def = cell_text(cells[1]), *meaning = cell_text(cells[2]);
        char *dot = strchr(name, '.');
        if (!dot || dot == name || dot[1] == '\0') {
            printf("  FAIL  README.md:%d: '%s' is not section.key\n", lineno, name);
            fails++;
            continue;
        }
        rows++;
        int dup = 0;
        for (int i = 0; i < rows - 1 && i < MAX_ROWS; i++) dup |= strcmp(seen[i], name) == 0;
        if (rows <= MAX_ROWS) snprintf(seen[rows - 1], sizeof seen[0], "%s", name);
        *dot = '\0';
        const char *section = name, *key = dot + 1;
        const char *schema = config_key_default(section, key);
        if (!schema) {
            printf("  FAIL  README.md:%d: %s.%s is not a key of the config schema\n", lineno, section, key);
            fails++;
        } else if (strcmp(schema, def) != 0) {
            printf("  FAIL  README.md:%d: %s.%s: the README says default '%s', the schema '%s'\n",
                   lineno, section, key, def, schema);
            fails++;
        } else if (meaning[0] == '\0') {
            printf("  FAIL  README.md:%d: %s.%s has no meaning\n", lineno, section, key);
            fails++;
        } else if (dup) {
            printf("  FAIL  README.md:%d: %s.%s is listed twice\n", lineno, section, key);
            fails++;
        } else {
            printf("  pass  %s.%s = %s\n", section, key, def);
        }
    }
    fclose(f);
    if (!header_line) {
        printf("  FAIL  no options table (a line \"%s\") in %s\n", header, path);
        fails++;
    } else if (rows < MIN_ROWS) {
        printf("  FAIL  the options table has %d rows, fewer than %d\n", rows, MIN_ROWS);
        fails++;
    }
    printf("test_readme_options: %d rows, %d failed\n", rows, fails);
    return fails == 0 ? 0 : 1;
}
