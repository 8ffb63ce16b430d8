#!/usr/bin/python3
"""GPT-2's reference BPE (the algorithm of OpenAI's gpt-2/src/encoder.py, rewritten here),
used to make the golden ids in data/tokenizer/gpt2_tokenizer_test.cc. Not run by the tests.

Needs Debian's python3-regex (Python's `re` lacks \\p{L}):
  apt-get install python3-regex
  data/tokenizer/testdata/gpt2_reference.py [DIR] [TEXT_FILE...]
DIR holds encoder.json and vocab.bpe (default /usr/local/share/strata/tokenizers/gpt2).
Prints the ids of each golden string, then for each TEXT_FILE its token count and the
FNV-1a 64 hash of its ids (each id as 4 little-endian bytes), what the test compares.

  data/tokenizer/testdata/gpt2_reference.py --make-mixed data/tokenizer/testdata/mixed.txt
writes the mixed-script fixture (seeded, so the same file every time).
"""
import json
import sys

import regex

PATTERN = regex.compile(
    r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""")

GOLDEN = [
    "hello world",
    " Hello, world!",
    "Hello world",
    "It's 2024: they'll pay $1,234.56 -- or won't.",
    "  two  spaces,\ttab\nnewline\n\n  indented",
    "naïve café, Ωmega, 東京, emoji 🙂!",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "<|endoftext|>",
    "x\u00a0y\u2003z\u3000w \u0085v",
    "",
]


def bytes_to_unicode():
    bs = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) +
          list(range(ord("®"), ord("ÿ") + 1)))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


class Encoder:
    def __init__(self, directory):
        with open(f"{directory}/encoder.json", encoding="utf-8") as f:
            self.encoder = json.load(f)
        with open(f"{directory}/vocab.bpe", encoding="utf-8") as f:
            lines = f.read().split("\n")[1:-1]
        self.ranks = {tuple(line.split()): i for i, line in enumerate(lines)}
        self.byte_encoder = bytes_to_unicode()
        self.cache = {}

    def bpe(self, token):
        if token in self.cache:
            return self.cache[token]
        word = tuple(token)
        while len(word) > 1:
            pairs = set(zip(word, word[1:]))
            bigram = min(pairs, key=lambda pair: self.ranks.get(pair, float("inf")))
            if bigram not in self.ranks:
                break
            first, second = bigram
            merged = []
            i = 0
            while i < len(word):
                if i < len(word) - 1 and word[i] == first and word[i + 1] == second:
                    merged.append(first + second)
                    i += 2
                else:
                    merged.append(word[i])
                    i += 1
            word = tuple(merged)
        self.cache[token] = word
        return word

    def encode(self, text):
        ids = []
        for token in PATTERN.findall(text):
            token = "".join(self.byte_encoder[b] for b in token.encode("utf-8"))
            ids.extend(self.encoder[piece] for piece in self.bpe(token))
        return ids


def fnv1a64(ids):
    h = 0xCBF29CE484222325
    for i in ids:
        for byte in i.to_bytes(4, "little"):
            h = ((h ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


FRAGMENTS = [
    "the", "The", " quick", "brown", "fox's", "they'll", "we've", "I'm", "you'd", "can't",
    "'S", "'LL", "2024", "3.14159", "1,000,000", "x86_64", "--", "...", "!!!", "?!", "$", "%",
    "(", ")", "[]", "{}", "<|endoftext|>", "naïve", "café", "Ωmega", "Straße", "東京", "日本語",
    "한국어", "Привет", "мир", "مرحبا", "שלום", "हिन्दी", "ไทย", "🙂", "👍🏽", "🇫🇷", "e\u0301",
    "\u00a0", "\u2003", "\u3000", "\u0085", "\u2028", "\u200b", "\ufeff", "\u180e", "\x1c",
    "\x1f", "\t", "\n", "\r\n", "\n\n", "   ", " ", " ", " ", "  ", "\t\t", " \n ",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "abababababababababab", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "½", "²",
    "٣", "Ⅻ", "_", "__init__", "#include", "<div>", "http://example.com/a?b=c&d=e",
]


def make_mixed(path):
    import random
    rng = random.Random(20261201)
    pieces = [rng.choice(FRAGMENTS) for _ in range(4000)]
    with open(path, "w", encoding="utf-8", newline="") as f:
        f.write("".join(pieces))


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--make-mixed":
        make_mixed(sys.argv[2])
        return
    directory = sys.argv[1] if len(sys.argv) > 1 else "/usr/local/share/strata/tokenizers/gpt2"
    encoder = Encoder(directory)
    for text in GOLDEN:
        print(json.dumps(text), encoder.encode(text))
    for path in sys.argv[2:]:
        with open(path, encoding="utf-8", newline="") as f:
            ids = encoder.encode(f.read())
        print(f"{path}: {len(ids)} tokens, fnv1a64 0x{fnv1a64(ids):016x}")


if __name__ == "__main__":
    main()
