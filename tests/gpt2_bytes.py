"""tests/gpt2_bytes.py: GPT-2's byte-level alphabet for the Python checks of the test scripts.

Written from the published rule: the printable bytes 33..126, 161..172 and 174..255 are spelled
by the character of the same code point; each of the other 68 bytes, in increasing order, takes
the next code point from 256 up. A token's spelling in encoder.json is its bytes in that alphabet.
"""
import json


def byte_chars():
    """{byte: the one-character string that spells it}"""
    printable = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    chars = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in chars:
            chars[b] = chr(256 + extra)
            extra += 1
    return chars


def token_bytes(encoder_path):
    """(the bytes of every token id but <|endoftext|>'s, the id of <|endoftext|>) of an encoder.json"""
    enc = json.load(open(encoder_path, encoding="utf-8"))
    byte_of = {c: b for b, c in byte_chars().items()}
    text_of = {i: bytes(byte_of[c] for c in t) for t, i in enc.items() if t != "<|endoftext|>"}
    return text_of, enc["<|endoftext|>"]
