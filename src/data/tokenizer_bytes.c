// tokenizer_bytes.c — the "bytes" kind: id = byte value, vocabulary 256.
#include "tokenizer_kinds.h"
#include <stdio.h>

void bytes_encode(const char *text, size_t len, tok_ids *out) {
    tok_ids_reserve(out, len);
    for (size_t i = 0; i < len; i++) out->ids[out->n++] = (unsigned char)text[i];
}

bool bytes_decode(const uint32_t *ids, size_t n, tok_bytes *out, char *err, size_t errlen) {
    for (size_t i = 0; i < n; i++) {
        if (ids[i] >= 256) {
            snprintf(err, errlen, "token id %u at position %zu is outside the bytes vocabulary "
                     "(256)", ids[i], i);
            return false;
        }
        char c = (char)ids[i];
        tok_bytes_append(out, &c, 1);
    }
    return true;
}
