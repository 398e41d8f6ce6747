// h5_read.h — HDF5 helpers the token files' code shares (dataset.c defines them; tokset.c and
// shards.c use them): quiet error stacks, HDF5's own reason for a failure, and checked root
// attributes. Each reader turns a failure a user can cause into one message naming the file and
// the field.
#pragma once
#include <hdf5.h>
#include <stdbool.h>
#include <stddef.h>

// HDF5's automatic error-stack printing off in this thread between begin and end.
typedef struct {
    H5E_auto2_t fn;
    void *data;
} h5_quiet;
void h5_quiet_begin(h5_quiet *q);
void h5_quiet_end(const h5_quiet *q);
// The innermost message of this thread's HDF5 error stack (the OS error text when there is one).
void h5_error_text(char *out, size_t outlen);
// "uint16", "int32", "float64", "string", ... for messages.
void h5_type_name(hid_t t, char *out, size_t outlen);
// An HDF5 call failed while reading `what` of `path`: "the file is damaged or truncated" with
// HDF5's reason into err. Call right after the failing call. Returns false.
bool h5_damaged(const char *path, const char *what, char *err, size_t errlen);
// One integer / one string attribute of object `obj` (the root group): false + message naming
// path and attribute when missing, of another type or unreadable.
bool h5_attr_int(hid_t obj, const char *path, const char *name, long long *v, char *err,
                 size_t errlen);
bool h5_attr_str(hid_t obj, const char *path, const char *name, char *out, size_t outlen,
                 char *err, size_t errlen);
