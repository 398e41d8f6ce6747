#!/usr/bin/env python3
"""Encode throughput: gdn.c's tokenizers (bench/tokenizer_bench.c) against the `tokenizers`
package (byte-level BPE) and Debian's spm_encode (SentencePiece), same machine, same text, same
thread count. Prints a markdown table for bench/tokenizer.md.

    cmake --build build-cpu --target tokenizer_bench
    pip install tokenizers                      # the reference side only
    python3 bench/tokenizer.py [--bin build-cpu/tokenizer_bench] [--copies 4] [--repeat 3]

Text: data/tinyshakespeare/input.txt repeated --copies times, cut into chunks of about 64 KiB at
newlines (the same chunks on both sides). The `tokenizers` side runs encode_batch and
encode_batch_fast (no offsets) on the chunks with RAYON_NUM_THREADS = the thread count;
spm_encode is one process over the whole file (it has no threads), timed wall clock with its
output to /dev/null. Every number is the best of --repeat runs.
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
FIX = os.path.join(ROOT, "tests", "fixtures", "tokenizers")

HF_SNIPPET = r"""
import sys, time
from tokenizers import Tokenizer
tok = Tokenizer.from_file(sys.argv[1])
b = open(sys.argv[2], "rb").read()
chunks, pos = [], 0
while pos < len(b):
    end = min(pos + 65536, len(b))
    while end < len(b) and b[end - 1] != 10:
        end += 1
    chunks.append(b[pos:end].decode("utf-8"))
    pos = end
for fn in ("encode_batch", "encode_batch_fast"):
    if not hasattr(tok, fn):
        continue
    best, n_ids = 1e30, 0
    for _ in range(int(sys.argv[3])):
        t0 = time.perf_counter()
        enc = getattr(tok, fn)(chunks, add_special_tokens=False)
        best = min(best, time.perf_counter() - t0)
        n_ids = sum(len(e.ids) for e in enc)
    print(fn, n_ids, len(b) / best / 1e6)
"""


def ours(binary, tok, text, threads, repeat):
    out = subprocess.run([binary, tok, text, "--threads", str(threads), "--repeat", str(repeat)],
                         capture_output=True, text=True, check=True).stdout
    f = dict(kv.split("=") for kv in out.split()[2:])
    return float(f["MB/s"]), int(f["ids"])


def hf(tok, text, threads, repeat):
    env = dict(os.environ, RAYON_NUM_THREADS=str(threads), TOKENIZERS_PARALLELISM="true")
    out = subprocess.run([sys.executable, "-c", HF_SNIPPET, tok, text, str(repeat)], env=env,
                         capture_output=True, text=True, check=True).stdout
    return {l.split()[0]: (float(l.split()[2]), int(l.split()[1])) for l in out.splitlines()}


def spm_encode(model, text, repeat):
    best = 1e30
    for _ in range(repeat):
        with open(text, "rb") as fin, open(os.devnull, "wb") as fout:
            t0 = time.perf_counter()
            subprocess.run(["spm_encode", f"--model={model}", "--output_format=id"], stdin=fin,
                           stdout=fout, check=True)
            best = min(best, time.perf_counter() - t0)
    return os.path.getsize(text) / best / 1e6


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(ROOT, "build-cpu", "tokenizer_bench"))
    ap.add_argument("--copies", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    with open(os.path.join(ROOT, "data", "tinyshakespeare", "input.txt"), "rb") as f:
        data = f.read() * a.copies
    fd, text = tempfile.mkstemp(suffix=".txt")
    os.write(fd, data)
    os.close(fd)
    print(f"text: tinyshakespeare x {a.copies} = {len(data) / 1e6:.2f} MB; best of {a.repeat}\n")
    print("| tokenizer | threads | gdn.c MB/s | reference | reference MB/s | gdn.c / ref |")
    print("|---|---|---|---|---|---|")
    try:
        for name in ("gpt2_bpe.json", "llama3_bpe.json", "nfc_bpe.json", "seq_bpe.json"):
            tok = os.path.join(FIX, name)
            for threads in (1, 2):
                mb, ids = ours(a.bin, tok, text, threads, a.repeat)
                for fn, (rmb, rids) in hf(tok, text, threads, a.repeat).items():
                    same = "" if rids == ids else f" (ids {rids} vs ours {ids}!)"
                    print(f"| {name} | {threads} | {mb:.2f} | tokenizers {fn}{same} | {rmb:.2f} "
                          f"| {mb / rmb:.1f}x |")
        for name in ("spm_bpe.model", "spm_nfkc.model"):
            model = os.path.join(FIX, name)
            ref = spm_encode(model, text, a.repeat)
            for threads in (1, 2):
                mb, _ = ours(a.bin, model, text, threads, a.repeat)
                print(f"| {name} | {threads} | {mb:.2f} | spm_encode (1 thread) | {ref:.2f} "
                      f"| {mb / ref:.1f}x |")
    finally:
        os.unlink(text)


if __name__ == "__main__":
    main()
