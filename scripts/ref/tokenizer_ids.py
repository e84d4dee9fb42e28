#!/usr/bin/env python3
"""Reference token ids for the Qwen BPE tokenizer parity test.

Usage: scripts/ref/tokenizer_ids.py [path/to/qwen.tiktoken] [--check]

Reads fixtures/tokenizer/corpus.txt (one case per line; split on "\\n" only,
so U+0085 / U+2028 / U+2029 inside a line stay part of that line; empty lines
are ignored), appends the multi-line cases defined in EXTRA_CASES below, and
writes fixtures/tokenizer/expected.jsonl with one object per line:

    {"text": <original text, NOT normalised>, "ids": [...]}

ids = enc.encode(unicodedata.normalize("NFC", text),
                 allowed_special=set(), disallowed_special=())

i.e. text is NFC-normalised first (as the Rust tokenizer does) and special
tokens are never recognised inside text. The qwen.tiktoken path defaults to
${YUED_CACHE_DIR:-<repo>/.cache}/qwen.tiktoken (see scripts/fetch-qwen-tiktoken.sh).
Also writes fixtures/tokenizer/prompts.json: the prompt id streams of the three cot modes
(the published instruction texts, assembled here from yue2.cpp's layout).
With --check the fixtures are compared against the existing files instead of written.
"""
import base64
import json
import os
import subprocess
import sys
import unicodedata

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CORPUS = os.path.join(REPO, "fixtures", "tokenizer", "corpus.txt")
EXPECTED = os.path.join(REPO, "fixtures", "tokenizer", "expected.jsonl")
DEFAULT_RANKS = os.path.join(os.environ.get("YUED_CACHE_DIR") or os.path.join(REPO, ".cache"), "qwen.tiktoken")

PAT_STR = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)
ENDOFTEXT = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
SPECIAL_START_ID = 151643
N_EXTRA = 205  # <|extra_0|> .. <|extra_204|>

# Multi-line cases that cannot live in the line-oriented corpus.
EXTRA_CASES = [
    "line one\nline two",
    "windows\r\nline endings\r\n",
    "verse one\n\n\nchorus after three newlines",
    "trailing newline\n",
    "\n",
    "\r\n",
    "\n\n\n",
    "lone\rcarriage return",
    "spaces before newline   \n   and indent after",
    "tab\t\n\tnewline mix \r\n\r\n end",
    "!!!\n\n???\r\n",
    "caf\u0065\u0301\nna\u0131ve\r\n\u00c5\u212b\n",
    "\u6708\u5149\n\u591c\u7a7a\u306b\n\uc0ac\ub791\ud574\uc694\n",
    "X:1\nT:Test\nM:4/4\nL:1/8\nK:D\n|:\"D\"DEFG A2 d2|\"A\"c2 e2 A4:|\n",
    (
        "[verse]\n"
        "Walking down the road tonight\n"
        "Stars are shining, burning bright\n"
        "\n"
        "[chorus]\n"
        "Oh-oh, we're singing loud\r\n"
        "Dancing with the crowd\n"
        "<|endoftext|> isn't special here\n"
        "\n"
        "[verse]\n"
        "\u6708\u5149\u6d12\u5728\u7a97\u524d\n"
        "[outro]\n"
    ),
    "",
]


# The published prompt layout (seed "Prompt"; the reference implementation's src/prompt.h):
# the instruction texts are data the model was trained on.
PROMPTS = os.path.join(REPO, "fixtures", "tokenizer", "prompts.json")
EOD, ABC_START, ABC_END, MUSIC_START = 151643, 151847, 151848, 151851
INSTRUCTIONS = {
    "full": "Generate a chord-annotated ABC transcription, then generate music with codec tokens from the given conditions.",
    "melody": "Generate a melody-only ABC transcription without chord symbols, then generate music with codec tokens from the given conditions.",
    "off": "Generate music with codec tokens from the given conditions.",
}
PROMPT_STYLE = "warm piano pop, female vocal"
PROMPT_LYRICS = "[verse]\nCity lights are calling me home\n\n[chorus]\nOh, the night is young"
PROMPT_ABC = "X:1\nM:4/4\nL:1/8\nK:C\n|\"C\"CDEF GABc|\n"


def prompt_cases(enc):
    """Conditional and unconditional id streams of each cot mode, assembled here."""
    bpe = lambda t: enc.encode(unicodedata.normalize("NFC", t), allowed_special=set(), disallowed_special=())  # noqa: E731
    abc = bpe(PROMPT_ABC)
    out = []
    for mode, ins in INSTRUCTIONS.items():
        text = ins + "\n[Tags]\n" + PROMPT_STYLE + "\n[Lyrics]\n" + PROMPT_LYRICS + "\n"
        cond = [EOD] + bpe(text) + [ABC_START]
        if mode == "off":
            cond += [ABC_END, MUSIC_START]
            uncond = [EOD] + bpe(ins) + [MUSIC_START]
        else:
            uncond = [EOD] + bpe(ins) + [ABC_START] + abc + [ABC_END, MUSIC_START]
        out.append({"cot": mode, "instruction": ins, "conditional": cond, "unconditional": uncond})
    return {"style": PROMPT_STYLE, "lyrics": PROMPT_LYRICS, "abc": PROMPT_ABC, "abc_ids": abc,
            "note": "conditional: open score slot (ends on abc_start) in full/melody, closed in off; "
                    "unconditional: the instruction alone, then the given score (none in off mode)",
            "modes": out}


def ensure_tiktoken():
    try:
        import tiktoken  # noqa: F401
    except ImportError:
        print("tiktoken missing; installing with pip", file=sys.stderr)
        subprocess.check_call([sys.executable, "-m", "pip", "install", "-q", "tiktoken"])
    import tiktoken

    return tiktoken


def load_ranks(path):
    ranks = {}
    with open(path, "rb") as f:
        for lineno, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            tok, rank = line.split()
            ranks[base64.b64decode(tok)] = int(rank)
    if len(ranks) != SPECIAL_START_ID or sorted(ranks.values()) != list(range(SPECIAL_START_ID)):
        raise SystemExit(f"{path}: expected ranks 0..{SPECIAL_START_ID - 1}, got {len(ranks)} entries")
    return ranks


def build_encoding(tiktoken, ranks):
    specials = [ENDOFTEXT, IM_START, IM_END] + [f"<|extra_{i}|>" for i in range(N_EXTRA)]
    special_tokens = {tok: SPECIAL_START_ID + i for i, tok in enumerate(specials)}
    return tiktoken.Encoding(
        name="qwen",
        pat_str=PAT_STR,
        mergeable_ranks=ranks,
        special_tokens=special_tokens,
    )


def read_corpus(path):
    with open(path, "r", encoding="utf-8", newline="") as f:
        data = f.read()
    cases = [line for line in data.split("\n") if line != ""]
    for c in cases:
        if "\r" in c:
            raise SystemExit(f"{path}: corpus lines must not contain \\r: {c!r}")
    return cases


def main(argv):
    args = [a for a in argv[1:] if not a.startswith("--")]
    check = "--check" in argv[1:]
    ranks_path = args[0] if args else DEFAULT_RANKS
    if not os.path.isfile(ranks_path):
        raise SystemExit(f"{ranks_path} not found; run scripts/fetch-qwen-tiktoken.sh first")

    tiktoken = ensure_tiktoken()
    enc = build_encoding(tiktoken, load_ranks(ranks_path))

    cases = read_corpus(CORPUS) + EXTRA_CASES
    out_lines = []
    total_ids = 0
    nfc_changed = []
    for text in cases:
        nfc = unicodedata.normalize("NFC", text)
        ids = enc.encode(nfc, allowed_special=set(), disallowed_special=())
        assert enc.decode_bytes(ids) == nfc.encode("utf-8"), repr(text)
        assert not any(i >= SPECIAL_START_ID for i in ids), repr(text)
        if nfc != text:
            raw_ids = enc.encode(text, allowed_special=set(), disallowed_special=())
            nfc_changed.append((text, raw_ids != ids))
        total_ids += len(ids)
        out_lines.append(json.dumps({"text": text, "ids": ids}, ensure_ascii=False))
    payload = "\n".join(out_lines) + "\n"

    prompts = json.dumps(prompt_cases(enc), ensure_ascii=False, indent=1) + "\n"
    for path, text in ((EXPECTED, payload), (PROMPTS, prompts)):
        if check:
            with open(path, "r", encoding="utf-8", newline="") as f:
                if f.read() != text:
                    raise SystemExit(f"{path} is stale; rerun without --check")
        else:
            with open(path, "w", encoding="utf-8", newline="") as f:
                f.write(text)

    print(f"{'checked' if check else 'wrote'} {os.path.relpath(EXPECTED, REPO)}: "
          f"{len(cases)} cases ({len(cases) - len(EXTRA_CASES)} corpus + {len(EXTRA_CASES)} multi-line), "
          f"{total_ids} ids, {len(payload.encode('utf-8'))} bytes")
    print(f"{len(nfc_changed)} cases change under NFC; "
          f"{sum(1 for _, d in nfc_changed if d)} of them change the ids:")
    for text, differs in nfc_changed:
        print(f"  {'ids differ' if differs else 'ids same  '}  {text!r}")


if __name__ == "__main__":
    main(sys.argv)
