// shard_fixture.h — a test-only writer of token shard sets as SPEC'd for gdn-prepare (DESIGN 5,
// dataset.h): DIR/train-000000.h5 ... DIR/val-000000.h5 ... and DIR/index.json, so the reader's
// tests need no gdn-prepare. A shard: root attributes format, version 2, split, vocab_size,
// eot_token, tokenizer_kind, shard; /tokens (uint16, uint32 when vocab_size > 65536), /doc_offsets
// (uint64, n_docs + 1), /tokenizer (uint8 blob). Failures die (CHECK_HDF5): fixtures must write.
#pragma once
#include "../src/core/common.h"
#include <hdf5.h>
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

typedef struct {
    int vocab_size, eot_token;
    const char *kind;          // "bytes" | "bpe" | "spm"
    const uint8_t *blob;       // tokenizer blob (may be NULL with blob_len 0)
    size_t blob_len;
} shard_meta;

static void fx_attr_int(hid_t f, const char *name, long long v) {
    hid_t sp = H5Screate(H5S_SCALAR);
    CHECK_HDF5(sp);
    hid_t a = H5Acreate2(f, name, H5T_STD_I64LE, sp, H5P_DEFAULT, H5P_DEFAULT);
    CHECK_HDF5(a);
    CHECK_HDF5(H5Awrite(a, H5T_NATIVE_LLONG, &v));
    CHECK_HDF5(H5Aclose(a));
    CHECK_HDF5(H5Sclose(sp));
}

static void fx_attr_str(hid_t f, const char *name, const char *v) {
    hid_t sp = H5Screate(H5S_SCALAR);
    CHECK_HDF5(sp);
    hid_t t = H5Tcopy(H5T_C_S1);
    CHECK_HDF5(t);
    CHECK_HDF5(H5Tset_size(t, strlen(v) + 1));
    hid_t a = H5Acreate2(f, name, t, sp, H5P_DEFAULT, H5P_DEFAULT);
    CHECK_HDF5(a);
    CHECK_HDF5(H5Awrite(a, t, v));
    CHECK_HDF5(H5Aclose(a));
    CHECK_HDF5(H5Tclose(t));
    CHECK_HDF5(H5Sclose(sp));
}

// A chunked 1-D dataset of file type ftype from n values of memory type mtype.
static void fx_dataset(hid_t f, const char *name, hid_t ftype, hid_t mtype, const void *v,
                       size_t n) {
    hsize_t dim = n, maxdim = H5S_UNLIMITED, chunk = n ? (n < 4096 ? n : 4096) : 1;
    hid_t sp = H5Screate_simple(1, &dim, &maxdim);
    CHECK_HDF5(sp);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    CHECK_HDF5(dcpl);
    CHECK_HDF5(H5Pset_chunk(dcpl, 1, &chunk));
    CHECK_HDF5(H5Pset_fletcher32(dcpl));
    hid_t d = H5Dcreate2(f, name, ftype, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    CHECK_HDF5(d);
    if (n) CHECK_HDF5(H5Dwrite(d, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, v));
    CHECK_HDF5(H5Dclose(d));
    CHECK_HDF5(H5Pclose(dcpl));
    CHECK_HDF5(H5Sclose(sp));
}

// One shard file: docs [0, n_docs) given by offs (n_docs + 1 entries into tokens).
static void fx_write_shard(const char *path, const shard_meta *m, const char *split, int shard,
                           const uint32_t *tokens, size_t n, const uint64_t *offs, size_t n_docs) {
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    CHECK_HDF5(fapl);
    CHECK_HDF5(H5Pset_libver_bounds(fapl, H5F_LIBVER_V110, H5F_LIBVER_V110));
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    CHECK_HDF5(f);
    CHECK_HDF5(H5Pclose(fapl));
    fx_attr_str(f, "format", "gdn-tokens");
    fx_attr_int(f, "version", 2);
    fx_attr_str(f, "split", split);
    fx_attr_int(f, "vocab_size", m->vocab_size);
    fx_attr_int(f, "eot_token", m->eot_token);
    fx_attr_str(f, "tokenizer_kind", m->kind);
    fx_attr_int(f, "shard", shard);
    fx_dataset(f, "tokens", m->vocab_size <= 65536 ? H5T_STD_U16LE : H5T_STD_U32LE,
               H5T_NATIVE_UINT32, tokens, n);
    fx_dataset(f, "doc_offsets", H5T_STD_U64LE, H5T_NATIVE_UINT64, offs, n_docs + 1);
    fx_dataset(f, "tokenizer", H5T_STD_U8LE, H5T_NATIVE_UINT8, m->blob, m->blob_len);
    CHECK_HDF5(H5Fclose(f));
}

// A whole set in dir: the documents (docs[i] = doc_len[i] tokens at tokens + doc_at[i]) of each
// split cut into shards of about shard_tokens tokens (whole documents), then index.json.
typedef struct {
    const uint32_t *tokens;    // all documents' tokens, back to back
    const uint64_t *offs;      // (n_docs + 1): document i = tokens[offs[i], offs[i+1])
    size_t n_docs;
} fx_split;

static void fx_write_set(const char *dir, const shard_meta *m, const fx_split sp[2],
                         uint64_t shard_tokens) {
    json_t *shards = json_array(), *totals = json_object();
    for (int k = 0; k < 2; k++) {
        const char *name = k == 0 ? "train" : "val";
        size_t d0 = 0;
        int shard = 0;
        while (d0 < sp[k].n_docs) {
            size_t d1 = d0 + 1;
            while (d1 < sp[k].n_docs && sp[k].offs[d1 + 1] - sp[k].offs[d0] <= shard_tokens) d1++;
            uint64_t base = sp[k].offs[d0], n = sp[k].offs[d1] - base;
            uint64_t *o = gdn_malloc(sizeof(uint64_t) * (d1 - d0 + 1));
            for (size_t i = d0; i <= d1; i++) o[i - d0] = sp[k].offs[i] - base;
            char file[64], path[1200];
            snprintf(file, sizeof file, "%s-%06d.h5", name, shard);
            snprintf(path, sizeof path, "%s/%s", dir, file);
            fx_write_shard(path, m, name, shard, sp[k].tokens + base, (size_t)n, o, d1 - d0);
            free(o);
            json_array_append_new(shards, json_pack("{s:s, s:s, s:I, s:I}", "path", file, "split",
                                                    name, "tokens", (json_int_t)n, "documents",
                                                    (json_int_t)(d1 - d0)));
            shard++;
            d0 = d1;
        }
        json_object_set_new(totals, name,
                            json_pack("{s:I, s:I}", "tokens",
                                      (json_int_t)(sp[k].n_docs ? sp[k].offs[sp[k].n_docs] : 0),
                                      "documents", (json_int_t)sp[k].n_docs));
    }
    json_t *root = json_pack("{s:s, s:i, s:i, s:i, s:s, s:s, s:o, s:o}", "format",
                             "gdn-token-index", "version", 1, "vocab_size", m->vocab_size,
                             "eot_token", m->eot_token, "tokenizer_kind", m->kind,
                             "tokenizer_file", "tokenizer.json", "shards", shards, "totals", totals);
    char path[1200];
    snprintf(path, sizeof path, "%s/index.json", dir);
    if (!root || json_dump_file(root, path, JSON_INDENT(2)) != 0)
        gdn_die("cannot write %s", path);
    json_decref(root);
}
