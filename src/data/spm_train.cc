// spm_train.cc — spm_train.h: SentencePieceTrainer::Train over an in-memory text, sentences
// handed over by an iterator (no input file, no spm_train program). Every call into the library
// is inside a try: no C++ exception crosses into C.
#include "spm_train.h"

#include <sentencepiece_trainer.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <unordered_map>

namespace {

// The lines of text[0, len), empty ones skipped.
class line_iterator : public sentencepiece::SentenceIterator {
  public:
    line_iterator(const char *text, size_t len) : p_(text), end_(text + len) { Next(); }
    bool done() const override { return done_; }
    void Next() override {
        while (p_ < end_) {
            const char *nl = static_cast<const char *>(memchr(p_, '\n', (size_t)(end_ - p_)));
            const char *e = nl ? nl : end_;
            size_t n = (size_t)(e - p_);
            if (n && e[-1] == '\r') n--;
            const char *s = p_;
            p_ = nl ? nl + 1 : end_;
            if (n) {
                line_.assign(s, n);
                return;
            }
        }
        done_ = true;
    }
    const std::string &value() const override { return line_; }
    sentencepiece::util::Status status() const override { return sentencepiece::util::Status(); }

  private:
    const char *p_, *end_;
    std::string line_;
    bool done_ = false;
};

}  // namespace

extern "C" bool spm_train_model(const char *text, size_t len, int vocab_size, int threads,
                                const char *out_path, char *err, size_t errlen) {
    std::string model;
    try {
        std::unordered_map<std::string, std::string> args = {
            {"model_type", "bpe"},
            {"vocab_size", std::to_string(vocab_size)},
            {"character_coverage", "1.0"},
            {"normalization_rule_name", "identity"},
            {"remove_extra_whitespaces", "false"},
            {"num_threads", std::to_string(threads > 0 ? threads : 1)},
            {"minloglevel", "1"},  // warnings and errors only
        };
        line_iterator lines(text, len);
        if (lines.done()) {
            snprintf(err, errlen, "SentencePiece training: the text has no non-empty line");
            return false;
        }
        auto st = sentencepiece::SentencePieceTrainer::Train(args, &lines, &model);
        if (!st.ok()) {
            snprintf(err, errlen, "SentencePiece training (vocab %d) failed: %s", vocab_size,
                     st.ToString().c_str());
            return false;
        }
    } catch (const std::exception &e) {
        snprintf(err, errlen, "SentencePiece training (vocab %d) failed: %s", vocab_size, e.what());
        return false;
    }
    std::string tmp = std::string(out_path) + ".tmp";
    FILE *fp = fopen(tmp.c_str(), "wb");
    bool ok = fp && fwrite(model.data(), 1, model.size(), fp) == model.size();
    ok = fp && fflush(fp) == 0 && ok;
    int e = errno;
    if (fp && fclose(fp) != 0 && ok) {
        ok = false;
        e = errno;
    }
    if (ok && rename(tmp.c_str(), out_path) != 0) {
        ok = false;
        e = errno;
    }
    if (!ok) {
        snprintf(err, errlen, "cannot write %s: %s", out_path, strerror(e));
        remove(tmp.c_str());
    }
    return ok;
}
