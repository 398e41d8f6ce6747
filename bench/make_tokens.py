# make_tokens.py — a synthetic gdn-tokens file (DESIGN 5, src/data/dataset.h) of uniform random
# tokens, for throughput runs at a real vocabulary size (configs/fla-220m.ini: vocab 32000) where
# no tokenized corpus is at hand. Needs numpy and h5py (both on the GPU machine).
#
#   python3 bench/make_tokens.py OUT.h5 [--vocab 32000] [--train 8388608] [--val 262144] [--seed 0]
#
# Layout, as tokfile_open checks it: root attributes format = "gdn-tokens" (fixed-length
# string), version = 1, vocab_size, tokenizer, eot_token = -1 (int64 scalars); 1-D datasets
# /train and /val of uint16 (uint32 when vocab_size > 65536), chunked for random window reads.
# tokenizer = "synthetic:uniform": tokfile_open takes any non-empty name and gdn-train never
# decodes; gdn-sample would say "unknown tokenizer", which is right: these ids have no text.
# Loss on such data cannot go below ln(vocab) (10.37 nats at 32000): a speed test, not a
# quality test. Written to OUT.tmp, then renamed.
import argparse
import os

import h5py
import numpy as np


def main():
    ap = argparse.ArgumentParser(description="synthetic gdn-tokens file of uniform random tokens")
    ap.add_argument("out")
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--train", type=int, default=8 << 20, help="tokens in /train")
    ap.add_argument("--val", type=int, default=256 << 10, help="tokens in /val")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    if not 2 <= a.vocab <= 1 << 24:
        ap.error("--vocab must be in [2, 2^24]")
    if a.train < 1 or a.val < 1:
        ap.error("--train and --val must be >= 1")
    dt = np.uint16 if a.vocab <= 65536 else np.uint32
    rng = np.random.default_rng(a.seed)
    tmp = a.out + ".tmp"
    with h5py.File(tmp, "w") as f:
        f.attrs.create("format", np.bytes_("gdn-tokens"))
        f.attrs.create("version", np.int64(1))
        f.attrs.create("vocab_size", np.int64(a.vocab))
        f.attrs.create("tokenizer", np.bytes_("synthetic:uniform"))
        f.attrs.create("eot_token", np.int64(-1))
        for name, n in (("train", a.train), ("val", a.val)):
            x = rng.integers(0, a.vocab, size=n, dtype=dt)
            f.create_dataset(name, data=x, chunks=(min(n, 1 << 16),))
    os.replace(tmp, a.out)
    print(f"make_tokens: {a.out}: vocab {a.vocab}, train {a.train}, val {a.val} tokens ({np.dtype(dt).name})")


if __name__ == "__main__":
    main()
