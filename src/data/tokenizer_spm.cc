// tokenizer_spm.cc — the "spm" kind of tokenizer.h: SentencePiece in-process, a C shim over
// libsentencepiece's C++ API (SentencePieceProcessor).
//
// Newlines: SentencePiece models are trained and used line by line (spm_encode reads lines and
// never sees "\n"), so the text is cut at "\n", each line is encoded exactly as spm_encode
// encodes it, and the newline itself is an id of its own: with V pieces in the model, id V is
// "\n" and the vocabulary is V + 1. Decode splits the ids at V, decodes each line and joins them
// with "\n"; a control piece (<s>, </s>) decodes to its text, so decode(encode(x, specials))
// gives x back for text the model covers (pieces outside it are <unk>).
// Every call into the library is inside a try: no C++ exception crosses into C.
#include "tokenizer_kinds.h"

#include <sentencepiece_processor.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

struct spm_model {
    sentencepiece::SentencePieceProcessor sp;
    int pieces = 0;
    std::vector<tok_special> specials;   // the control pieces with a text
    std::vector<std::string> special_text;
    std::vector<char> is_control;        // (pieces)
};

extern "C" spm_model *spm_load(const void *blob, size_t n, const char *what, char *err,
                               size_t errlen) {
    spm_model *m = nullptr;
    try {
        m = new spm_model;
        auto st = m->sp.LoadFromSerializedProto(
            std::string_view(static_cast<const char *>(blob), n));
        if (!st.ok()) {
            snprintf(err, errlen, "%s: not a tokenizer.json, vocab.json or SentencePiece model "
                     "(SentencePiece: %s)", what, st.ToString().c_str());
            delete m;
            return nullptr;
        }
        m->pieces = m->sp.GetPieceSize();
        if (m->pieces < 1 || m->pieces >= (1 << 30)) {
            snprintf(err, errlen, "%s: SentencePiece model with %d pieces", what, m->pieces);
            delete m;
            return nullptr;
        }
        m->is_control.assign(m->pieces, 0);
        for (int id = 0; id < m->pieces; id++) {
            if (!m->sp.IsControl(id)) continue;
            std::string piece = m->sp.IdToPiece(id);
            if (piece.empty()) continue;
            m->is_control[id] = 1;
            m->special_text.push_back(piece);
        }
        size_t k = 0;
        for (int id = 0; id < m->pieces; id++) {
            if (!m->is_control[id]) continue;
            std::string &s = m->special_text[k++];
            m->specials.push_back(
                tok_special{s.data(), s.size(), static_cast<uint32_t>(id), true, false});
        }
        return m;
    } catch (const std::exception &e) {
        snprintf(err, errlen, "%s: loading the SentencePiece model failed: %s", what, e.what());
        delete m;
        return nullptr;
    }
}

extern "C" void spm_free(spm_model *m) { delete m; }
extern "C" int spm_vocab_size(const spm_model *m) { return m->pieces + 1; }

extern "C" int spm_eos(const spm_model *m) {
    int id = m->sp.eos_id();
    return id >= 0 && id < m->pieces ? id : -1;
}

extern "C" void spm_specials(const spm_model *m, const tok_special **list, size_t *n) {
    *list = m->specials.data();
    *n = m->specials.size();
}

extern "C" bool spm_encode(const spm_model *m, const char *text, size_t len, tok_ids *out,
                           char *err, size_t errlen) {
    try {
        std::vector<int> ids;
        size_t start = 0;
        for (;;) {
            const void *nl = memchr(text + start, '\n', len - start);
            size_t end = nl ? static_cast<size_t>(static_cast<const char *>(nl) - text) : len;
            if (end > start) {
                auto st = m->sp.Encode(std::string_view(text + start, end - start), &ids);
                if (!st.ok()) {
                    snprintf(err, errlen, "SentencePiece encode failed at byte %zu: %s", start,
                             st.ToString().c_str());
                    return false;
                }
                tok_ids_reserve(out, ids.size());
                for (int id : ids) out->ids[out->n++] = static_cast<uint32_t>(id);
            }
            if (!nl) break;
            tok_ids_push(out, static_cast<uint32_t>(m->pieces));
            start = end + 1;
        }
        return true;
    } catch (const std::exception &e) {
        snprintf(err, errlen, "SentencePiece encode failed: %s", e.what());
        return false;
    }
}

extern "C" bool spm_decode(const spm_model *m, const uint32_t *ids, size_t n, tok_bytes *out,
                           char *err, size_t errlen) {
    for (size_t i = 0; i < n; i++)
        if (ids[i] > static_cast<uint32_t>(m->pieces)) {
            snprintf(err, errlen, "token id %u at position %zu is outside the SentencePiece "
                     "vocabulary (%d pieces + the newline id %d)", ids[i], i, m->pieces,
                     m->pieces);
            return false;
        }
    try {
        std::vector<int> run;
        std::string text;
        auto flush = [&]() -> bool {
            if (run.empty()) return true;
            auto st = m->sp.Decode(run, &text);
            if (!st.ok()) {
                snprintf(err, errlen, "SentencePiece decode failed: %s", st.ToString().c_str());
                return false;
            }
            tok_bytes_append(out, text.data(), text.size());
            run.clear();
            return true;
        };
        for (size_t i = 0; i < n; i++) {
            uint32_t id = ids[i];
            if (id == static_cast<uint32_t>(m->pieces)) {
                if (!flush()) return false;
                tok_bytes_append(out, "\n", 1);
            } else if (m->is_control[id]) {
                if (!flush()) return false;
                const std::string piece = m->sp.IdToPiece(static_cast<int>(id));
                tok_bytes_append(out, piece.data(), piece.size());
            } else {
                run.push_back(static_cast<int>(id));
            }
        }
        return flush();
    } catch (const std::exception &e) {
        snprintf(err, errlen, "SentencePiece decode failed: %s", e.what());
        return false;
    }
}
