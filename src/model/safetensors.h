// safetensors.h — the safetensors file format (Hugging Face): a small writer and a checking
// reader, for the export and import of docs/export.md.
//
// Layout: an 8-byte little-endian unsigned header length N; N bytes of JSON (UTF-8), padded
// with spaces so that the data starts at a multiple of 8 bytes; then the byte buffer, each
// tensor a contiguous little-endian row-major array at [begin, end) of it. The header is one
// object: "__metadata__" (string -> string, optional) and, per tensor name,
// {"dtype": "F32" | "BF16", "shape": [...], "data_offsets": [begin, end]}. The tensors cover
// the buffer without holes or overlaps.
//
// The reader checks all of that (header length against the file, the JSON, each entry's keys
// and types, dtype, shape, end - begin = elements x dtype size, the offsets inside the file, the
// coverage) and every message names the file and, where there is one, the tensor.
// Only F32 and BF16 are read and written (what the export writes); others are refused by name.
#pragma once
#ifdef __cplusplus
extern "C" {
#endif
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef enum { ST_F32, ST_BF16 } st_dtype;
enum { ST_MAX_DIMS = 8 };

// float64 -> bf16 bits: to float32 by the C conversion (round to nearest even), then to bf16 by
// round to nearest even of the float32 (NaN stays a quiet NaN).
uint16_t st_bf16_from_double(double x);
double st_bf16_to_double(uint16_t h);
const char *st_dtype_name(st_dtype t);          // "F32", "BF16"
size_t st_dtype_size(st_dtype t);               // 4, 2

// One tensor to write: float64 values converted to dtype on the way out.
typedef struct {
    const char *name;
    st_dtype dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    const double *data;                          // prod(shape) values, row-major
} st_out;

// Writes the tensors in the order given (metadata: "format": "pt") to path through a temporary
// name (path.tmp), renamed at the end. False + err naming the file on any failure.
bool st_write(const char *path, const st_out *t, int n, char *err, size_t errlen);

typedef struct {
    char *name;
    st_dtype dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    size_t numel;
    uint64_t begin, end;                         // offsets in the byte buffer
} st_tensor;

typedef struct {
    char *path;
    FILE *f;
    uint64_t data_start;                         // file offset of the byte buffer: 8 + N
    st_tensor *t;                                // in file order (by begin)
    int n;
} st_file;

// Opens and checks path (above). False + err naming the file (and tensor) on failure; *f is
// then closed.
bool st_open(st_file *f, const char *path, char *err, size_t errlen);
void st_close(st_file *f);
// The tensor called name, or NULL.
const st_tensor *st_find(const st_file *f, const char *name);
// Reads tensor t as float64 (numel values). False + err naming the file and the tensor.
bool st_read(const st_file *f, const st_tensor *t, double *dst, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
