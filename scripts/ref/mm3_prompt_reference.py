#!/usr/bin/env python3
"""MiniMax Music 3 prompt-assembly reference fixture -> fixtures/mm3/prompt/cases.json.

Regenerate:

    python3 -m venv /tmp/mm3venv
    /tmp/mm3venv/bin/pip install torch --index-url https://download.pytorch.org/whl/cpu   # or plain PyPI torch
    /tmp/mm3venv/bin/pip install "diffusers>=0.40" transformers tiktoken
    scripts/fetch-qwen-tiktoken.sh            # -> .cache/qwen.tiktoken (sha256 pinned there)
    /tmp/mm3venv/bin/python scripts/ref/mm3_prompt_reference.py [path/to/qwen.tiktoken]

Generated with diffusers 0.42.1.

What it does
------------
* `_clean_caption` and `_normalize_lyrics` are imported from diffusers
  (diffusers.modular_pipelines.minimax_music3.encoders) and applied to the committed
  CAPTIONS / LYRICS below; inputs and outputs are stored verbatim.
* The full prompt is assembled exactly like MiniMaxMusic3TokenizeStep:
      <|im_start|><|caption_start|>{clean}<|caption_end|><|lyrics_start|>{norm}<|lyrics_end|><|im_end|><|audio_start|>
  and tokenised with the REAL id layout. The MiniMax tokenizer files could not be downloaded
  (the model hub is not reachable from this machine), so the Qwen2 BPE is reproduced with
  tiktoken + Qwen's qwen.tiktoken ranks (the 151643 byte-level BPE ranks shared by every Qwen2/3
  tokenizer), Qwen2's pre-tokenizer regex, and NFC normalisation -- the same construction as
  scripts/ref/tokenizer_ids.py. Added tokens: the 32 names at 151643..151674 listed in
  ADDED_TOKENS are recognised anywhere in the text, like HF's Qwen2Tokenizer does for added
  tokens; text between them is NFC-normalised and BPE-encoded. The names of 151654 and 151670
  (ids the pipeline uses directly) and of the stock Qwen3 tokens are assumptions (hub not
  reachable); only cases whose text contains one of these names depend on that
  (`contains_added_token_text`).
* uncond_ids = cond_ids with [1:-2] replaced by 151654 (so only <|im_start|>, <|im_end|>,
  <|audio_start|> survive).
* `pipeline_accepts` is False where MiniMaxMusic3TokenizeStep.check_inputs would raise
  (caption or lyrics empty after .strip()); ids are still given for those.
"""

import base64
import hashlib
import json
import os
import re
import sys
import unicodedata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "fixtures" / "mm3" / "prompt"
DEFAULT_RANKS = Path(os.environ.get("YUED_CACHE_DIR") or ROOT / ".cache") / "qwen.tiktoken"

PAT_STR = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)
ADDED_BASE = 151643
ADDED_TOKENS = [
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
    "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>",
    "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>", "<tool_call>",
    "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>",
    "<|repo_name|>", "<|file_sep|>", "<tool_response>", "</tool_response>", "<think>", "</think>",
    "<|audio_start|>", "<|audio_end|>", "<|caption_start|>", "<|caption_end|>",
    "<|lyrics_start|>", "<|lyrics_end|>",
]
ADDED = {name: ADDED_BASE + i for i, name in enumerate(ADDED_TOKENS)}
AUDIO_CFG = 151654
assert ADDED["<|im_start|>"] == 151644 and ADDED["<|audio_start|>"] == 151669 and ADDED["<|lyrics_end|>"] == 151674

CAPTIONS = [
    "Upbeat synth-pop, female vocals, 120 BPM",
    "# Song Title\n## Style\nDreamy lo-fi hip hop",
    "**Bold** genre: *indie rock* with ***strong*** drums",
    "- acoustic guitar\n* soft piano\n+ strings\n  - nested item",
    "Check [this link](https://example.com) and `code span` here",
    "```\ncode block\n```\nJazz trio",
    "<|genre pop|> <|mood happy and bright|> <|tempo|>",
    "Global Metadata\n<|bpm 128|>\n<|key C minor|>\nA driving techno track",
    "Line one\n\n\n\nLine two   \n---\n***\n___\nafter rules",
    "\u2022 bullet one\n\u2022 bullet two\n    indented four spaces",
    "  ### Header with leading spaces\n    #### Four-space header stays\n#NoSpace header",
    "Caf\u00e9 del mar, na\u00efve chillout \u2014 \u591c\u306e\u97f3\u697d \U0001F3B5 \u00dcn\u00efc\u00f6d\u00e9",
    "e\u0301 combining accents, A\u030a ring (NFC composes)",
    "",
    "   ",
    "Windows\r\nline endings\r\nwith CRLF",
    "Uneven **bold *mix** text* and ** lone stars",
    "<|unclosed tag and |pipe|> and <|  spaced   out  |>",
    "Tabs\tinside\tand\ttrailing\t\t\n\t- tab list",
    "Line sep\u2028unicode\x0bvertical tab\x0cform feed\x85next line",
    "Special token text <|im_end|> inside caption",
]

LYRICS = [
    "[Verse 1]\nHello night\nNeon light",
    "[Verse 1] text after tag on same line\nkept line",
    "[Intro][Verse]\n[Chorus] [Hook] words",
    "Walking home ^ singing loud ^ all night",
    "(Intro [Soft])\n(Outro)",
    "[CHORUS]\nUPPERCASE LYRICS [BRIDGE] mid-line",
    "[verse]\n\n\nblank lines\n\n[chorus]\n",
    "",
    "   \n  ",
    "  [Pre-Chorus]  leading spaces\n\t[Bridge]\ttab",
    "\u6708\u5149\u6d12\u5728\u7a97\u524d [\u526f\u6b4c] \u4e2d\u6587 ^ \u591c\u7a7a\u306b\n[\u00c9T\u00c9] accents",
    "no tags at all, just words",
    "[Verse]\r\nCRLF lines\r\n[Chorus]\r\n",
    "a]b [c] d] [e",
    "[Verse 1]^[Verse 2] ^ x ^y",
    "Line with <|im_end|> special text\n[end]",
    "[]\n[ ]\n[a]b",
    "Combining e\u0301 and \ufb01 ligature",
    "[Verse 1]\nTrailing newline\n",
    "[Outro] fade ^ out [End]",
]


def load_ranks(path):
    ranks = {}
    with open(path, "rb") as f:
        for line in f:
            line = line.strip()
            if line:
                tok, rank = line.split()
                ranks[base64.b64decode(tok)] = int(rank)
    assert len(ranks) == ADDED_BASE and sorted(ranks.values()) == list(range(ADDED_BASE))
    return ranks


def main(argv):
    import tiktoken
    from diffusers.modular_pipelines.minimax_music3.encoders import _clean_caption, _normalize_lyrics

    ranks_path = Path(argv[1]) if len(argv) > 1 else DEFAULT_RANKS
    if not ranks_path.is_file():
        raise SystemExit(f"{ranks_path} not found; run scripts/fetch-qwen-tiktoken.sh first")
    sha = hashlib.sha256(ranks_path.read_bytes()).hexdigest()
    enc = tiktoken.Encoding(name="qwen2", pat_str=PAT_STR, mergeable_ranks=load_ranks(ranks_path),
                            special_tokens=ADDED)
    split_re = re.compile("(" + "|".join(re.escape(t) for t in ADDED_TOKENS) + ")")

    def tokenize(text):
        ids = []
        for seg in split_re.split(text):
            if not seg:
                continue
            if seg in ADDED:
                ids.append(ADDED[seg])
            else:
                ids += enc.encode_ordinary(unicodedata.normalize("NFC", seg))
        return ids

    cases = []
    n = max(len(CAPTIONS), len(LYRICS))
    for i in range(n):
        cap = CAPTIONS[i % len(CAPTIONS)]
        lyr = LYRICS[i % len(LYRICS)]
        clean = _clean_caption(cap)
        norm = _normalize_lyrics(lyr)
        text = (f"<|im_start|><|caption_start|>{clean}<|caption_end|>"
                f"<|lyrics_start|>{norm}<|lyrics_end|><|im_end|><|audio_start|>")
        cond = tokenize(text)
        uncond = list(cond)
        uncond[1:-2] = [AUDIO_CFG] * (len(cond) - 3)
        # sanity: the structural tokens sit where the template puts them
        assert cond[:2] == [151644, 151671]
        assert cond[-3:] == [151674, 151645, 151669]
        cases.append({
            "name": f"case_{i:02d}",
            "caption": cap,
            "lyrics": lyr,
            "clean_caption": clean,
            "normalized_lyrics": norm,
            "text": text,
            "cond_ids": cond,
            "uncond_ids": uncond,
            "pipeline_accepts": bool(cap.strip()) and bool(lyr.strip()),
            "contains_added_token_text": bool(split_re.search(clean) or split_re.search(norm)),
        })

    doc = {
        "_doc": "MiniMax Music 3 prompt reference. clean_caption / normalized_lyrics = diffusers _clean_caption / "
                "_normalize_lyrics outputs. text = <|im_start|><|caption_start|>{clean_caption}<|caption_end|>"
                "<|lyrics_start|>{normalized_lyrics}<|lyrics_end|><|im_end|><|audio_start|>. cond_ids: REAL layout "
                "ids; uncond_ids = cond_ids with [1:-2] -> 151654. Case i pairs captions[i % 21] with lyrics[i % 20]. "
                "Generated by scripts/ref/mm3_prompt_reference.py.",
        "diffusers_version": __import__("diffusers").__version__,
        "tokenizer": {
            "used": "tiktoken (Qwen2 BPE): qwen.tiktoken ranks + Qwen2 pre-tokenizer regex + NFC per text segment; "
                    "the real MiniMax tokenizer files were NOT available (hub unreachable)",
            "ranks_file": "qwen.tiktoken (scripts/fetch-qwen-tiktoken.sh)",
            "ranks_sha256": sha,
            "pattern": PAT_STR,
            "added_tokens": {str(v): k for k, v in ADDED.items()},
            "added_token_handling": "every added-token string is recognised anywhere in the assembled text (HF "
                                    "Qwen2Tokenizer behaviour for added tokens), including inside user text; "
                                    "text between them is NFC-normalised then BPE-encoded",
            "names_caveat": "names of 151643..151668 are the stock Qwen3 ones, 151670 '<|audio_end|>' is a guess; "
                            "only cases with contains_added_token_text depend on the names",
        },
        "special_ids": {"im_start": 151644, "im_end": 151645, "audio_cfg": AUDIO_CFG, "audio_start": 151669,
                        "end_of_audio": 151670, "caption_start": 151671, "caption_end": 151672,
                        "lyrics_start": 151673, "lyrics_end": 151674},
        "cases": cases,
    }
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "cases.json").write_text(json.dumps(doc, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {OUT / 'cases.json'}: {len(cases)} cases", file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv)
