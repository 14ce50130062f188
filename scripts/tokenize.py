#!/usr/bin/env python3
"""Encode text corpora into llm.c token files for autohet train --data (docs/data.md, "Tokenizing").

usage: scripts/tokenize.py --tokenizer TOKENIZER_JSON --out PREFIX [--val-fraction F]
                           [--shard-tokens N] [--text-field NAME] [--eot TOKEN] [--no-special-tokens]
                           INPUT...

Each INPUT is plain text (the whole file is one document), .jsonl (one JSON object per line, the
document in --text-field, default "text") or .parquet (the --text-field column; needs pyarrow).
Every document is encoded with Hugging Face `tokenizers` and the given tokenizer.json, exactly as
Tokenizer.encode(text).ids gives the ids (special tokens of the tokenizer's post-processor
included unless --no-special-tokens); --eot TOKEN appends that token after every document.
The documents' ids are concatenated in input order; the first --val-fraction of them (default
0.01; 0: none) is the validation split, the rest train, each written as shards of at most
--shard-tokens ids (default 100,000,000): PREFIX_val_000000.bin, PREFIX_train_000000.bin, ...
in llm.c's format: version 1 (uint16) when the vocabulary fits 65,536 ids, else version 2
(uint32). A directory of those shards is --data of autohet train ("_val" shards are its
validation split). PREFIX's directory must exist, or only its last component be missing (it is then
created); that it can be written is checked before encoding. Progress goes to stderr, a one-line summary
to stdout.
Exit status: 0, 2 bad input (one line on stderr), 1 other failure.
"""
import argparse
import json
import os
import struct
import sys
import time
from array import array

LLMC_MAGIC = 20240520


def die(msg):
    print("tokenize: " + msg, file=sys.stderr)
    sys.exit(2)


def documents(path, field):
    """(document text, where) of one input, in order."""
    if path.endswith(".jsonl"):
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as e:
                    die(f"{path}:{n}: not a JSON object: {e.msg}")
                if not isinstance(obj, dict) or not isinstance(obj.get(field), str):
                    die(f'{path}:{n}: no string field "{field}"')
                yield obj[field]
    elif path.endswith(".parquet"):
        try:
            import pyarrow.parquet as pq
        except ImportError:
            die(f"{path}: parquet input needs pyarrow (pip install pyarrow)")
        try:
            table = pq.read_table(path, columns=[field])
        except Exception as e:  # pyarrow's errors: a missing column, not parquet
            die(f"{path}: {str(e).splitlines()[0]}")
        for text in table.column(field).to_pylist():
            if not isinstance(text, str):
                die(f'{path}: column "{field}" holds a {type(text).__name__}, not text')
            yield text
    else:
        try:
            with open(path, encoding="utf-8") as f:
                yield f.read()
        except UnicodeDecodeError as e:
            die(f"{path}: not UTF-8 text (byte {e.start})")


def write_shards(prefix, split, ids, shard_tokens, version):
    """llm.c files of at most shard_tokens ids: their paths."""
    paths = []
    code = "H" if version == 1 else "I"
    for k, start in enumerate(range(0, len(ids), shard_tokens)):
        part = array(code, ids[start : start + shard_tokens])
        if sys.byteorder != "little":
            part.byteswap()
        path = f"{prefix}_{split}_{k:06d}.bin"
        header = struct.pack("<256i", LLMC_MAGIC, version, len(part), *([0] * 253))
        tmp = path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(header)
            f.write(part.tobytes())
        os.replace(tmp, path)
        paths.append(path)
    return paths


class Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2, as every autohet command
        die(message + " (see --help)")


def parse_args():
    usage = ("autohet tokenize --tokenizer TOKENIZER_JSON --out PREFIX [--val-fraction F] [--shard-tokens N]\n"
             "                        [--text-field NAME] [--eot TOKEN] [--no-special-tokens] INPUT...")
    p = Parser(prog="autohet tokenize", usage=usage, description=__doc__.split("\n")[0])
    # nothing is required to argparse: an unknown flag is reported before a missing argument (argparse
    # reports the missing ones first, and then never names the flag that was mistyped)
    p.add_argument("--tokenizer", help="a tokenizer.json of Hugging Face tokenizers (required)")
    p.add_argument("--out", help="prefix of the shards written (required; its directory is created if its "
                   "parent exists)")
    p.add_argument("--val-fraction", type=float, default=0.01)
    p.add_argument("--shard-tokens", type=int, default=100_000_000)
    p.add_argument("--text-field", default="text")
    p.add_argument("--eot", default=None, help="a token appended after every document")
    p.add_argument("--no-special-tokens", action="store_true")
    p.add_argument("inputs", nargs="*", metavar="INPUT")
    a, extra = p.parse_known_args()
    if extra:
        p.error("unrecognized arguments: " + " ".join(extra))
    missing = [name for name, v in (("--tokenizer", a.tokenizer), ("--out", a.out), ("inputs", a.inputs or None))
               if v is None]
    if missing:
        p.error("the following arguments are required: " + ", ".join(missing))
    if not 0.0 <= a.val_fraction < 1.0:
        die(f"--val-fraction {a.val_fraction}: outside [0, 1)")
    if a.shard_tokens < 1:
        die(f"--shard-tokens {a.shard_tokens}: must be positive")
    return a


def check_input(path):
    """an input or the tokenizer: a regular file (a FIFO or /dev/zero would never end)"""
    if not os.path.exists(path):
        die(f"{path}: no such file")
    if not os.path.isfile(path):
        die(f"{path}: not a regular file")


def check_out(prefix):
    """--out PREFIX, before any work: its directory exists, or only its last component is missing (created
    after encoding, as train --ckpt-dir creates its directory), and a file can be created there (access()
    says yes to root everywhere, so a file is made and removed)."""
    out_dir = os.path.dirname(prefix) or "."
    where = out_dir
    if not os.path.isdir(out_dir):
        if os.path.lexists(out_dir):
            die(f"--out {prefix}: {out_dir} is not a directory")
        where = os.path.dirname(out_dir.rstrip("/")) or "."
        if not os.path.isdir(where):
            die(f"--out {prefix}: {where} is not a directory (only the last component of {out_dir} is created)")
    probe = os.path.join(where, f".autohet-tokenize.{os.getpid()}.tmp")
    try:
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
        os.unlink(probe)
    except OSError as e:
        die(f"--out {prefix}: cannot create a file in {where} ({e.strerror})")


def load_tokenizer(path):
    try:
        from tokenizers import Tokenizer
    except ImportError:
        die("the Python package tokenizers is not installed (pip install tokenizers; scripts/deps.sh)")
    check_input(path)
    try:
        return Tokenizer.from_file(path)
    except Exception as e:  # tokenizers raises its own Exception type
        die(f"{path}: not a tokenizer.json: {str(e).splitlines()[0]}")


def main():
    a = parse_args()
    tok = load_tokenizer(a.tokenizer)
    vocab = tok.get_vocab_size(with_added_tokens=True)
    version = 1 if vocab <= 65536 else 2
    eot = None
    if a.eot is not None:
        eot = tok.token_to_id(a.eot)
        if eot is None:
            die(f"--eot {a.eot!r}: not a token of {a.tokenizer}")
    for path in a.inputs:
        check_input(path)
    check_out(a.out)
    total_bytes = sum(os.path.getsize(p) for p in a.inputs)
    ids = array("I")
    n_docs = done_bytes = 0
    t0 = last = time.monotonic()
    batch, batch_bytes = [], 0

    def flush():
        nonlocal n_docs
        for enc in tok.encode_batch(batch, add_special_tokens=not a.no_special_tokens):
            ids.extend(enc.ids)
            if eot is not None:
                ids.append(eot)
        n_docs += len(batch)
        batch.clear()

    for path in a.inputs:
        for text in documents(path, a.text_field):
            batch.append(text)
            batch_bytes += len(text.encode("utf-8"))
            if len(batch) >= 1024 or batch_bytes >= 8 << 20:
                flush()
                done_bytes += batch_bytes
                batch_bytes = 0
                if time.monotonic() - last >= 1.0:
                    last = time.monotonic()
                    print(f"tokenize: {done_bytes / 2**20:.1f}/{total_bytes / 2**20:.1f} MiB, {n_docs} documents, "
                          f"{len(ids)} tokens, {done_bytes / 2**20 / (last - t0):.1f} MiB/s", file=sys.stderr)
    flush()
    done_bytes += batch_bytes
    if len(ids) == 0:
        die("the inputs hold no tokens")
    if max(ids) >= vocab:
        die(f"{a.tokenizer}: an id {max(ids)} at or above its vocabulary {vocab}")
    n_val = int(round(len(ids) * a.val_fraction))
    if a.val_fraction > 0 and n_val == 0:
        n_val = 1
    if n_val >= len(ids):
        die(f"{len(ids)} tokens: none left for training after the validation split")
    out_dir = os.path.dirname(a.out)
    if out_dir and not os.path.isdir(out_dir):
        os.mkdir(out_dir)  # its parent was checked before encoding
    val = write_shards(a.out, "val", ids[:n_val], a.shard_tokens, version) if n_val else []
    train = write_shards(a.out, "train", ids[n_val:], a.shard_tokens, version)
    dt = time.monotonic() - t0
    print(f"tokenize: {n_docs} documents, {done_bytes} bytes -> {len(ids)} tokens "
          f"({len(ids) - n_val} train in {len(train)} shard{'s' * (len(train) != 1)}, {n_val} validation in "
          f"{len(val)}); vocabulary {vocab}: llm.c version {version} ({'uint16' if version == 1 else 'uint32'}); "
          f"{dt:.2f} s, {done_bytes / 2**20 / dt if dt > 0 else 0:.2f} MiB/s; {a.out}_*.bin")


if __name__ == "__main__":
    try:
        main()
    except OSError as e:
        die(f"{e.filename or ''}: {e.strerror}")
