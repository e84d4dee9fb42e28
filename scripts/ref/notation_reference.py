#!/usr/bin/env python3
"""Reference for the SheetSage2 notation (issue 35): timed score events -> ABC text.

It writes the fixtures a Rust port (`yued notation --events FILE`) is tested against,
identical strings required: the full score, the melody-only score, or the "no score" reason.
The behaviour followed is yue2.cpp's `src/notation.h` at `ba4f845` (what yued follows, see
docs/design/listening-part2.md sections 5-7); the score itself is computed by the Python
original, loaded at run time from a directory outside the repository (nothing of it is
copied here). See scripts/ref/notation_reference.md for the route and every divergence.

Run (from the repository root):

    python3 -m venv /tmp/ss2venv
    /tmp/ss2venv/bin/pip install numpy==2.4.6 pretty_midi==0.2.11.post0 mido==1.3.3 \
        mir_eval==0.8.2 scipy==1.17.1 decorator==5.3.1 six==1.17.0
    /tmp/ss2venv/bin/python scripts/ref/notation_reference.py \
        --original /tmp/sheetsage2-original --out fixtures/sheetsage2/notation

(Python 3.11.7 was used. No torch: `generation_sheetsage2`, imported by the exports module
only for `field_text`, is replaced by a stub that raises if called.)

--original DIR must hold these files, saved verbatim from public repositories (the sha256
of each is checked and recorded in manifest.json):

  wongfei2009/Wan2GP @ 49e3c606564209dd506b4696ad7d62d456148a1e, models/TTS/yue2/sheetsage2/
  (the m-a-p/SheetSage2 remote code at its release revision eab522a):
    DIR/notation_sheetsage2.py   events rows + melody MIDI -> validated ABC (used whole)
    DIR/exports_sheetsage2.py    rhythm_rows, interval_rows, notation_notes, _midi
    DIR/midi_sheetsage2.py       midi_bytes (imports mir_eval)
    DIR/io_sheetsage2.py         imported by the two above
  yzkee/ComfyUI @ 66b68a3 (index file id 68704539278), comfy/audio_encoders/sheetsage2_abc.py
  (numpy port with the head revision's chord spelling, 55bfe14):
    DIR/comfy/sheetsage2_abc.py  normalize_key_name, correct_chord_rows (the head spelling
                                 step); events_to_abc only as a comparison

Route per stream and per mode (full, melody-only), in notation.h's order of checks:
  notes (export_result's loop) -> exports.rhythm_rows -> >= 2 beats -> strictly increasing
  beats -> beat extension (export_result's code) -> exports.interval_rows -> head spelling
  (comfy.normalize_key_name on every key row, then comfy.correct_chord_rows) on the unclipped
  rows -> clip to the beat domain (export_result's code) -> "No key" -> exports.notation_notes
  -> exports._midi + midi_sheetsage2.midi_bytes + pretty_midi reload (the tick round trip) ->
  notation.generate_abc_from_data.
Adaptations to notation.h (each also listed in manifest.json["adaptations"]):
  A1 the strict-increase check of the beats runs right after the beat count (notation.h
     order); the original runs it later, after the period, extension and "No key" checks.
  A2 ticks: notation.h rounds round(t*1920)/1920 half away from zero and drops a note whose
     rounded end is not after its rounded start; the pretty_midi round trip rounds half to
     even (t/tick_scale), reads times back as k*tick_scale, and leaves a zero-tick note open
     (it can swallow a later note of the same pitch). The round trip is still run and
     compared; the notes handed to generate_abc_from_data are notation.h's (an in-memory
     PrettyMIDI), and every stream where the two differ is recorded.
  A3 "no score" texts are notation.h's messages (the original's exception text is kept in
     the manifest); mapping table NOSCORE_PATTERNS below.
  A4 validate_serialized_abc (the original's re-parse of its own text, absent from
     notation.h) is run; had it failed on a score notation.h writes, the stream would be
     regenerated without it and flagged (it never fails on these streams).
"""

import argparse
import hashlib
import importlib
import importlib.metadata
import importlib.util
import json
import math
import platform
import random
import re
import sys
import types
from io import BytesIO
from pathlib import Path

import numpy as np

ORIGINAL_FILES = {
    "notation_sheetsage2.py": ("wongfei2009/Wan2GP", "49e3c606564209dd506b4696ad7d62d456148a1e",
                               "models/TTS/yue2/sheetsage2/notation_sheetsage2.py"),
    "exports_sheetsage2.py": ("wongfei2009/Wan2GP", "49e3c606564209dd506b4696ad7d62d456148a1e",
                              "models/TTS/yue2/sheetsage2/exports_sheetsage2.py"),
    "midi_sheetsage2.py": ("wongfei2009/Wan2GP", "49e3c606564209dd506b4696ad7d62d456148a1e",
                           "models/TTS/yue2/sheetsage2/midi_sheetsage2.py"),
    "io_sheetsage2.py": ("wongfei2009/Wan2GP", "49e3c606564209dd506b4696ad7d62d456148a1e",
                         "models/TTS/yue2/sheetsage2/io_sheetsage2.py"),
    "comfy/sheetsage2_abc.py": ("yzkee/ComfyUI", "66b68a3 (index id 68704539278)",
                                "comfy/audio_encoders/sheetsage2_abc.py"),
}

# sha256 of the saved files the committed fixtures were made from (a mismatch is reported)
EXPECTED_SHA256 = {
    "notation_sheetsage2.py": "f75f0e8b268cd9e9c622d791d3fd77d2e68ad355a4e67018c7e15aeb2bc05af7",
    "exports_sheetsage2.py": "8c50cf9f71a4dc0dea13a9a4341345f7f9e02844fb32631888cb0f7b7bb6e815",
    "midi_sheetsage2.py": "32f80d13592c669e56683ebb4c415f13bf8278c8ad1fe43afa500347bed35099",
    "io_sheetsage2.py": "afb5b4d4a52b513b11cfdad40e7b9d2286dd4ff6585b89688dbb31b3d5376da6",
    "comfy/sheetsage2_abc.py": "2ee74060b536ac5675d7ff9e6ba4b3c3f74dd087cdc32040a937241b6ed636f9",
}
PACKAGES = ("numpy", "pretty_midi", "mido", "mir_eval", "scipy", "decorator", "six")

# ---------------------------------------------------------------------------------------------
# Loading the original

def load_original(directory):
    directory = Path(directory).resolve()
    package = types.ModuleType("ss2orig")
    package.__path__ = [str(directory)]
    sys.modules["ss2orig"] = package
    stub = types.ModuleType("ss2orig.generation_sheetsage2")

    def field_text(*_args, **_kwargs):
        raise RuntimeError("generation_sheetsage2 is stubbed (it imports torch)")

    stub.field_text = field_text
    sys.modules["ss2orig.generation_sheetsage2"] = stub
    notation = importlib.import_module("ss2orig.notation_sheetsage2")
    exports = importlib.import_module("ss2orig.exports_sheetsage2")
    midi = importlib.import_module("ss2orig.midi_sheetsage2")
    spec = importlib.util.spec_from_file_location("ss2comfy", directory / "comfy" / "sheetsage2_abc.py")
    comfy = importlib.util.module_from_spec(spec)
    sys.modules["ss2comfy"] = comfy
    spec.loader.exec_module(comfy)
    hashes = {name: hashlib.sha256((directory / name).read_bytes()).hexdigest() for name in ORIGINAL_FILES}
    for name, digest in hashes.items():
        if digest != EXPECTED_SHA256[name]:
            print(f"warning: {name} differs from the copy the fixtures were made from", file=sys.stderr)
    return notation, exports, midi, comfy, hashes


# ---------------------------------------------------------------------------------------------
# notation.h's messages for every "no score" case (docs/design/listening-part2.md 5.3), matched
# against the text the original raises

NOSCORE_PATTERNS = [
    (1, r"Eighth position \d+ is off the", lambda m: "Eighth position is off the beat grid"),
    (2, r"Eighth position \d+ is outside meter", lambda m: "Eighth position is outside the meter"),
    (3, r"At least two decoded beats are required for ABC",
     lambda m: "At least two decoded beats are required for ABC"),
    (4, r"beat times must be strictly increasing", lambda m: "beat times must be strictly increasing"),
    (5, r"Decoded beats must increase in time", lambda m: "Decoded beats must increase in time"),
    (8, r"No key was decoded; cannot construct a keyed ABC score",
     lambda m: "No key was decoded; cannot construct a keyed ABC score"),
    (9, r"at least one key interval is required", lambda m: "at least one key interval is required"),
    (12, r"No downbeat \(beat ID 1\) exists in the beat lab",
     lambda m: "No downbeat (beat ID 1) exists in the beat lab"),
    (13, r"No positive-length measure exists between downbeats",
     lambda m: "No positive-length measure exists between downbeats"),
    (14, r"^Measure (\d+) \(beat rows [^)]*\): non-consecutive beat IDs",
     lambda m: f"Measure {m.group(1)}: non-consecutive beat IDs"),
    (15, r"^Measure (\d+): full measure does not start at beat ID 1",
     lambda m: f"Measure {m.group(1)}: full measure does not start at beat ID 1"),
    (16, r"Downbeat spans do not cover every beat interval",
     lambda m: "Downbeat spans do not cover every beat interval"),
    (17, r"^(Vocal|Ins): MIDI note .* cannot be represented on the decoded subbeat grid",
     lambda m: f"{m.group(1)}: MIDI note cannot be represented on the decoded subbeat grid"),
    (18, r"^(Vocal|Ins): overlapping quantized melody notes",
     lambda m: f"{m.group(1)}: overlapping quantized melody notes"),
    (19, r"^Interval [-0-9.]+-[-0-9.]+ \((.*)\) is shorter than the ABC subbeat grid$",
     lambda m: f"Interval ({m.group(1)}) is shorter than the ABC subbeat grid"),
    (20, r"Required ABC unit length", lambda m: "Required ABC unit length is unreasonably small"),
    (21, r"Cannot estimate tempo from a zero-duration score",
     lambda m: "Cannot estimate tempo from a zero-duration score"),
    (22, r"notated meter is shorter than its decoded span",
     lambda m: "Measure: notated meter is shorter than its decoded span"),
    (23, r"Non-positive ABC duration", lambda m: "Non-positive ABC duration"),
]


class ValidatorFailure(Exception):
    """validate_serialized_abc rejected a score (notation.h has no such check)."""


class NoScore(Exception):
    def __init__(self, case, message, original):
        super().__init__(message)
        self.case, self.message, self.original = case, message, original


def no_score(original_text):
    for case, pattern, make in NOSCORE_PATTERNS:
        match = re.search(pattern, original_text)
        if match:
            return NoScore(case, make(match), original_text)
    raise RuntimeError(f"unmapped failure of the original: {original_text!r}")


# ---------------------------------------------------------------------------------------------
# notation.h's tick rounding (A2)

def c_round(x):
    """C `round`: half away from zero."""
    if x < 0:
        return -c_round(-x)
    r = math.floor(x)
    return r + 1 if x - r >= 0.5 else r


def not_midi_round(t):
    return c_round(t * 1920.0) / 1920.0


# ---------------------------------------------------------------------------------------------
# The reference route

def reference(mods, events, duration, melody_only, *, head_spelling=True, tick_route="notation.h",
              validate=True, early_beat_order=True, info=None):
    """ABC text, or raise NoScore. info (a dict) collects what the route had to adapt."""
    notation, exports, midi, comfy = mods
    import pretty_midi

    info = {} if info is None else info
    # notes: export_result's loop (paper=False)
    notes = []
    for event in events:
        start = float(event["time"])
        for note in event["values"].get("melody", ()):
            end = min(duration, float(note["end_time"]))
            if end > start:
                notes.append([start, end, int(note["pitch"]), int(note["track"])])
    notes.sort()
    try:
        beats = exports.rhythm_rows(events)
        if len(beats) < 2:
            raise ValueError("At least two decoded beats are required for ABC")
        # A1: notation.h checks the order of the beats here
        if early_beat_order:
            for previous, current in zip(beats, beats[1:]):
                if current[0] <= previous[0]:
                    raise ValueError("beats: beat times must be strictly increasing")
        abc_beats = [list(b) for b in beats]
        period = float(np.median(np.diff([b[0] for b in beats[-9:]])))
        if period <= 0:
            raise ValueError("Decoded beats must increase in time")
        end = max(duration, max((n[1] for n in notes), default=0))
        while abc_beats[-1][0] < end - 1e-6:
            prev = abc_beats[-1]
            abc_beats.append([prev[0] + period, prev[1] % prev[2] + 1, prev[2], prev[3]])
        raw = {field: exports.interval_rows(events, field, duration) for field in ("chord", "key", "structure")}
        if head_spelling:
            raw["key"] = [[a, b, comfy.normalize_key_name(k)] for a, b, k in raw["key"]]
            raw["chord"] = comfy.correct_chord_rows(raw["chord"], raw["key"])
        clipped = {}
        for field, rows in raw.items():
            clipped[field] = [[max(abc_beats[0][0], a), min(abc_beats[-1][0], b), v]
                              for a, b, v in rows if b > abc_beats[0][0] and a < abc_beats[-1][0]]
        if not exports.interval_rows(events, "key", duration):
            raise ValueError("No key was decoded; cannot construct a keyed ABC score")
        clean, _ = exports.notation_notes(notes)
        midi_bytes = midi.midi_bytes(exports._midi(clean))
        reloaded = pretty_midi.PrettyMIDI(BytesIO(midi_bytes))
        # A2: notation.h's rounding, compared with the round trip
        ours = pretty_midi.PrettyMIDI(resolution=960)
        wanted = {}
        for track, name in ((0, "Vocal"), (1, "Ins")):
            instrument = pretty_midi.Instrument(program=0, name=name)
            for start, stop, pitch, source in clean:
                if source == track:
                    a, b = not_midi_round(start), not_midi_round(stop)
                    if b > a:
                        instrument.notes.append(pretty_midi.Note(100, pitch, a, b))
            ours.instruments.append(instrument)
            wanted[name] = sorted((n.start, n.end, n.pitch) for n in instrument.notes)
        got = {"Vocal": [], "Ins": []}
        for instrument in reloaded.instruments:
            got[instrument.name] = sorted((n.start, n.end, n.pitch) for n in instrument.notes)
        info["tick_round_trip_differs"] = got != wanted
        if got != wanted:
            diffs = []
            for name in ("Vocal", "Ins"):
                a, b = got.get(name, []), wanted[name]
                if a != b:
                    diffs.append({"voice": name, "pretty_midi": [x for x in a if x not in b][:4],
                                  "notation_h": [x for x in b if x not in a][:4]})
            info["tick_differences"] = diffs
        melody_midi = ours if tick_route == "notation.h" else reloaded
        saved = notation.validate_serialized_abc

        def validator(text, score):
            if validate:
                try:
                    saved(text, score)
                except ValueError as exc:
                    raise ValidatorFailure(str(exc)) from exc

        notation.validate_serialized_abc = validator
        try:
            text, _score = notation.generate_abc_from_data(
                melody_midi, abc_beats, clipped["chord"], clipped["key"], clipped["structure"],
                melody_only=melody_only)
        finally:
            notation.validate_serialized_abc = saved
        return text
    except ValidatorFailure:
        raise
    except ValueError as exc:
        raise no_score(str(exc)) from exc


def run_stream(mods, stream):
    """Every output and comparison for one stream."""
    events, duration = stream["events"], stream["duration"]
    result = {}
    for mode, melody_only in (("full", False), ("melody", True)):
        info = {}
        entry = {}
        try:
            entry["abc"] = reference(mods, events, duration, melody_only, info=info)
        except ValidatorFailure as exc:
            # A4: notation.h has no validator; write what it would write, and flag it
            entry["validator_rejected"] = str(exc)
            entry["abc"] = reference(mods, events, duration, melody_only, validate=False)
        except NoScore as exc:
            entry["noscore"] = exc.message
            entry["case"] = exc.case
            entry["original_message"] = exc.original
        entry["tick_round_trip_differs"] = info.get("tick_round_trip_differs")
        if info.get("tick_differences"):
            entry["tick_differences"] = info["tick_differences"]
        # comparisons: the raw pretty_midi route, the release spelling, the Comfy port
        entry["pretty_midi_route"] = compare(entry, lambda: reference(mods, events, duration, melody_only,
                                                                      tick_route="pretty_midi"))
        entry["release_spelling"] = compare(entry, lambda: reference(mods, events, duration, melody_only,
                                                                     head_spelling=False))
        entry["original_check_order"] = compare(entry, lambda: reference(mods, events, duration, melody_only,
                                                                         early_beat_order=False))
        entry["comfy_events_to_abc"] = compare(entry, lambda: mods[3].events_to_abc(
            events, duration, melody_only=melody_only))
        result[mode] = entry
    return result


def compare(entry, make):
    try:
        other = make()
        if "abc" in entry:
            return "same" if other == entry["abc"] else "differs: other ABC"
        return "differs: writes a score where notation.h has none"
    except NoScore as exc:
        if "noscore" in entry:
            return "same" if exc.message == entry["noscore"] else f"differs: no score ({exc.message})"
        return f"differs: no score ({exc.message})"
    except Exception as exc:  # the Comfy port raises its own texts
        if "noscore" in entry:
            return f"no score too, its text: {exc}"
        return f"differs: no score ({type(exc).__name__}: {exc})"


# ---------------------------------------------------------------------------------------------
# Building event streams in the events.json shape (docs/design/listening-part2.md 6.1)

CHROMATIC_SHARPS = ("C", "C#", "D", "D#", "E", "F", "F#", "G", "G#", "A", "A#", "B")
PC = {"C": 0, "D": 2, "E": 4, "F": 5, "G": 7, "A": 9, "B": 11}
STRUCTURES = ['silence', 'intro', 'outro', 'verse', 'chorus', 'bridge', 'pre-chorus', 'post-chorus',
              'interlude', 'fade-out', 'loop', 'rap', 'preshot', 'irregular', 'instrumental',
              'intro and verse', 'pre-chorus and chorus', 'verse and pre-chorus', 'solo', 'theme',
              'development', 'variation', 'pre-outro']
QUALITIES = ["maj", "min", "dim", "aug", "maj7", "min7", "7", "hdim7", "dim7", "minmaj7", "sus2", "sus4",
             "sus4(b7)", "maj6", "min6"]
INVERSIONS = {"maj": ["2", "3", "5"], "min": ["2", "b3", "5"], "maj7": ["3", "5", "7"],
              "min7": ["b3", "5", "b7"], "7": ["3", "5", "b7"]}
FULL_CHORDS = ["N"] + [f"{root}:{q}{'/' + inv if inv else ''}"
                       for q in QUALITIES for root in CHROMATIC_SHARPS
                       for inv in INVERSIONS.get(q, []) + [None]]
KEYS = [f"{t}:major" for t in CHROMATIC_SHARPS] + [f"{t}:minor" for t in CHROMATIC_SHARPS]
DENS = (1, 2, 4, 8, 16, 32)
TEMPLATES = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536,
             2048, 3072, 4096)
TOKENS = dict(time=517, meter=30517, eighth=30709, structure=30965, key=30988, chord=31037, pitch=31398,
              duration=31654)
PROMPTS = ["timestamp", "downbeat_meter", "structure", "key", "chord_full", "melody_full"]

assert len(FULL_CHORDS) == 361


def pitch_class(name):
    return (PC[name[0]] + name[1:].count("#") - name[1:].count("b")) % 12


class Stream:
    """Events keyed by time; fields set at one time merge into one event unless `separate`."""

    def __init__(self, name, covers, duration, step=0.125, case="score"):
        self.name, self.covers, self.duration, self.step, self.case = name, covers, duration, step, case
        self.events = []  # [time, values] in insertion order

    def _at(self, t, separate=False):
        if not separate:
            for ev in self.events:
                if ev[0] == t:
                    return ev[1]
        values = {}
        self.events.append([t, values])
        return values

    def beat(self, t, eighth, meter=None, separate=False):
        values = self._at(t, separate)
        rhythm = values.setdefault("rhythm", {})
        if meter is not None:
            rhythm["meter"] = list(meter)
        rhythm["eighth_position"] = int(eighth)
        return values

    def key(self, t, label):
        self._at(t)["key"] = label

    def chord(self, t, label):
        self._at(t)["chord"] = label

    def structure(self, t, label):
        self._at(t)["structure"] = label

    def note(self, t, end, pitch, track=0):
        self._at(t).setdefault("melody", []).append({"pitch": int(pitch), "track": int(track), "end_time": end})

    def build(self):
        ordered = sorted(enumerate(self.events), key=lambda item: (item[1][0], item[0]))
        out, last_step = [], -1
        for _, (t, values) in ordered:
            step = max(int(round(t / self.step)), last_step + 1)
            last_step = step
            tokens, vals = {}, {}
            rhythm = values.get("rhythm")
            if rhythm is not None and rhythm.get("eighth_position") == 0:
                vals["timestamp"] = t
                tokens["timestamp"] = [TOKENS["time"] + max(0, min(29999, int(round(t * 100))))]
            if rhythm is not None:
                vals["rhythm"] = dict(rhythm)
                toks = []
                if "meter" in rhythm:
                    num, den = rhythm["meter"]
                    toks.append(TOKENS["meter"] + (num - 1) * 6 + DENS.index(den))
                toks.append(TOKENS["eighth"] + rhythm["eighth_position"])
                tokens["rhythm"] = toks
            if "structure" in values:
                vals["structure"] = values["structure"]
                tokens["structure"] = [TOKENS["structure"] + STRUCTURES.index(values["structure"])]
            if "key" in values:
                vals["key"] = values["key"]
                tonic, mode = values["key"].split(":")
                tokens["key"] = [TOKENS["key"] + pitch_class(tonic) + (12 if mode == "minor" else 0)]
            if "chord" in values:
                vals["chord"] = values["chord"]
                tokens["chord"] = [TOKENS["chord"] + FULL_CHORDS.index(values["chord"])]
            if "melody" in values:
                melody, toks = [], []
                for n in values["melody"]:
                    steps = max(1.0, (n["end_time"] - t) / self.step)
                    b = min(range(len(TEMPLATES)), key=lambda i: abs(TEMPLATES[i] - steps))
                    melody.append({"pitch": n["pitch"], "track": n["track"], "duration_bin": b,
                                   "duration_steps": TEMPLATES[b], "end_time": n["end_time"]})
                    toks += [TOKENS["pitch"] + n["pitch"] + 128 * n["track"], TOKENS["duration"] + b]
                vals["melody"] = melody
                tokens["melody"] = toks
            out.append({"subbeat": step, "tokens_by_field": tokens, "values": vals, "time": t,
                        "window_index": 0, "window_start": 0.0, "source_subbeat": step,
                        "global_subbeat": step})
        return {"schema_version": "v1", "prompts": PROMPTS, "events": out, "has_eos": True,
                "duration": self.duration}


def lay_beats(s, start, measures):
    """Beats for a list of (num, den, period) measures from `start`; returns per measure the
    list of beat times and the end time. The meter rides on every downbeat."""
    t, grid = start, []
    for num, den, period in measures:
        times = []
        for p in range(num):
            eighth = p * 8 // den
            assert eighth * den == p * 8, "beat not expressible in eighths"
            s.beat(t, eighth, (num, den) if p == 0 else None)
            times.append(t)
            t = t + period
        grid.append(times)
    return grid, t


def phrase(s, t0, step, pattern, track=0):
    """Notes from (pitch or None, length in steps) pairs; returns the end time."""
    t = t0
    for pitch, length in pattern:
        if pitch is not None:
            s.note(t, t + length * step, pitch, track)
        t += length * step
    return t


# --- the streams ------------------------------------------------------------------------------

def streams():
    out = []

    # 1. plain 4/4, groups of four, a section change, empty Ins (Z runs)
    s = Stream("basic_c_major_44", ["4/4", "groups of four measures", "Z rests in Ins", "sections",
                                    "chords every two beats"], 12.0)
    grid, _ = lay_beats(s, 0.0, [(4, 4, 0.5)] * 6)
    s.key(0.0, "C:major")
    s.structure(0.0, "verse")
    s.structure(8.0, "chorus")
    for i, c in enumerate(["C:maj", "A:min", "F:maj", "G:7", "C:maj", "E:min", "F:maj", "G:maj",
                           "A:min", "D:min7", "G:7", "C:maj"]):
        s.chord(i * 1.0, c)
    phrase(s, 0.0, 0.25, [(60, 2), (62, 2), (64, 2), (65, 2), (67, 4), (None, 4),
                          (69, 2), (67, 2), (65, 2), (64, 2), (62, 8),
                          (64, 1), (65, 1), (67, 2), (72, 4), (71, 2), (69, 2), (67, 4),
                          (65, 4), (64, 4), (62, 4), (60, 12)])
    out.append(s)

    # 2. anacrusis: the song starts on beat 3 of 4/4 (pickup padded with a leading rest)
    s = Stream("pickup_anacrusis", ["pickup (anacrusis)", "leading rest padding", "G major"], 9.0)
    s.beat(0.0, 4, (4, 4))
    s.beat(0.5, 6)
    lay_beats(s, 1.0, [(4, 4, 0.5)] * 4)
    s.key(0.0, "G:major")
    s.structure(0.0, "intro")
    s.note(0.0, 0.5, 62)
    s.note(0.5, 1.0, 66)
    for i, c in enumerate(["G:maj", "C:maj", "D:7", "G:maj"]):
        s.chord(1.0 + 2.0 * i, c)
    phrase(s, 1.0, 0.25, [(67, 4), (71, 2), (69, 2), (67, 4), (66, 4), (64, 8), (62, 4), (66, 4),
                          (67, 6), (None, 2), (67, 8)])
    out.append(s)

    # 3. meter changes 4/4 -> 3/4 -> 4/4
    s = Stream("meter_change_44_34_44", ["meter changes", "M: fields", "groups cut at a meter change"],
               9.0)
    lay_beats(s, 0.0, [(4, 4, 0.5)] * 2 + [(3, 4, 0.5)] * 3 + [(4, 4, 0.5)])
    s.key(0.0, "F:major")
    for t, c in [(0.0, "F:maj"), (2.0, "A#:maj"), (4.0, "F:maj/3"), (5.5, "C:7"), (7.0, "F:maj")]:
        s.chord(t, c)
    phrase(s, 0.0, 0.25, [(65, 4), (69, 4), (72, 8), (70, 4), (69, 2), (67, 2), (65, 4), (64, 6),
                          (65, 2), (67, 4), (69, 4), (65, 12), (None, 4)])
    out.append(s)

    # 4. compound 6/8 (eighth beats, L:1/32)
    s = Stream("compound_68", ["6/8", "eighth-note beats", "L:1/32", "D minor"], 6.0, step=0.0625)
    lay_beats(s, 0.0, [(6, 8, 0.25)] * 4)
    s.key(0.0, "D:minor")
    for t, c in [(0.0, "D:min"), (0.75, "A:7"), (1.5, "D:min"), (3.0, "A#:maj"), (4.5, "A:7/3")]:
        s.chord(t, c)
    phrase(s, 0.0, 0.0625, [(62, 6), (64, 2), (65, 4), (67, 4), (69, 8), (70, 12), (69, 4), (67, 4),
                            (65, 4), (64, 12), (None, 4), (61, 8), (62, 24)])
    out.append(s)

    # 5. cut time 2/2 (eighth positions 0 and 4)
    s = Stream("cut_time_22", ["2/2", "half-note beats", "A major"], 8.0, step=0.25)
    lay_beats(s, 0.0, [(2, 2, 1.0)] * 4)
    s.key(0.0, "A:major")
    for t, c in [(0.0, "A:maj"), (2.0, "E:maj"), (4.0, "F#:min"), (5.0, "D:maj"), (6.0, "E:7")]:
        s.chord(t, c)
    phrase(s, 0.0, 0.25, [(69, 4), (73, 4), (71, 2), (73, 2), (76, 4), (78, 8), (74, 4), (None, 4),
                          (76, 8)])
    out.append(s)

    # 6. key change at a bar, release (sharp) key label, chords re-spelled for Eb
    s = Stream("key_change_at_bar_to_eb", ["key change at a measure boundary", "K: field",
                                           "release label D#:major -> canonical Eb:major",
                                           "chords re-spelled for a flat key"], 10.0)
    lay_beats(s, 0.0, [(4, 4, 0.5)] * 5)
    s.key(0.0, "C:major")
    s.key(4.0, "D#:major")
    for t, c in [(0.0, "C:maj"), (2.0, "G:7"), (4.0, "D#:maj"), (5.0, "G#:maj"), (6.0, "A#:7"),
                 (7.0, "C:min"), (8.0, "A#:7/b7"), (9.0, "D#:maj")]:
        s.chord(t, c)
    phrase(s, 0.0, 0.25, [(67, 4), (64, 4), (62, 8), (63, 4), (67, 4), (70, 4), (68, 4),
                          (67, 4), (65, 4), (63, 8), (62, 4), (58, 4), (63, 8)])
    phrase(s, 4.0, 0.5, [(51, 4), (56, 2), (58, 2), (48, 4), (46, 4)], track=1)
    out.append(s)

    # 7. key change inside a measure (inline [K:]), accidental state reset
    s = Stream("key_change_inline", ["key change inside a measure", "inline [K:]",
                                     "bar accidentals reset at [K:]"], 8.0)
    lay_beats(s, 0.0, [(4, 4, 0.5)] * 4)
    s.key(0.0, "A:minor")
    s.key(3.0, "E:minor")
    for t, c in [(0.0, "A:min"), (2.0, "E:7"), (3.0, "E:min"), (4.0, "B:7"), (6.0, "E:min")]:
        s.chord(t, c)
    phrase(s, 0.0, 0.25, [(69, 2), (72, 2), (76, 2), (77, 2), (76, 2), (68, 2), (69, 2), (66, 2),
                          (66, 2), (67, 2), (78, 2), (77, 2), (75, 4), (71, 4), (64, 16)])
    out.append(s)

    # 8. flat minor keys: A#:minor -> Bb minor, then F minor, Cb written in Bbm
    s = Stream("flat_minor_keys", ["canonical keys A#:minor -> Bb:minor", "flat key change",
                                   "chords re-spelled (C#->Db, G#->Ab, A#->Bb)", "Cb octave edge"], 12.0)
    lay_beats(s, 0.0, [(4, 4, 0.5)] * 6)
    s.key(0.0, "A#:minor")
    s.key(6.0, "F:minor")
    for t, c in [(0.0, "A#:min"), (1.0, "D#:min"), (2.0, "F:7"), (3.0, "C#:maj"), (4.0, "G#:7"),
                 (5.0, "A#:min"), (6.0, "F:min"), (7.0, "C#:maj7"), (8.0, "A#:min7"), (9.0, "C:7"),
                 (10.0, "F:min")]:
        s.chord(t, c)
    phrase(s, 0.0, 0.25, [(70, 2), (71, 2), (73, 2), (71, 2), (70, 4), (59, 4), (58, 4), (65, 4),
                          (61, 4), (63, 4), (60, 4), (58, 4), (65, 4), (68, 4), (72, 4), (73, 4),
                          (71, 2), (70, 2), (68, 4), (67, 4), (65, 4), (64, 2), (65, 10)])
    out.append(s)

    # 9. sharp minor keys that stay sharp, double sharps in notes
    s = Stream("sharp_minor_double_sharps", ["D#:minor stays D#m (6 sharps)", "double sharps F##, C##",
                                             "G#:minor", "chords kept sharp"], 8.0)
    lay_beats(s, 0.0, [(4, 4, 0.5)] * 4)
    s.key(0.0, "D#:minor")
    s.key(4.0, "G#:minor")
    for t, c in [(0.0, "D#:min"), (1.0, "A#:7"), (2.0, "G#:min"), (3.0, "A#:7/3"), (4.0, "G#:min"),
                 (5.0, "D#:7"), (6.0, "G#:min/b3")]:
        s.chord(t, c)
    phrase(s, 0.0, 0.25, [(63, 2), (65, 2), (66, 2), (67, 2), (70, 4), (74, 2), (75, 2),
                          (68, 2), (67, 2), (68, 2), (62, 2), (63, 8),
                          (68, 2), (70, 2), (71, 2), (74, 2), (75, 4), (67, 4), (68, 16)])
    out.append(s)

    # 10. slash chords in C (bass by scale degree)
    s = Stream("slash_chords_c", ["slash chords: every inversion kind", "bass by scale degree"], 12.0)
    lay_beats(s, 0.0, [(4, 4, 0.5)] * 6)
    s.key(0.0, "C:major")
    chords = ["C:maj/3", "C:maj/5", "C:maj/2", "A:min/b3", "A:min/5", "A:min/2", "D:min7/b7", "D:min7/b3",
              "G:7/b7", "G:7/3", "G:7/5", "F:maj7/7", "F:maj7/3", "F:maj7/5", "E:min7/5", "E:min7/b3",
              "D:maj/3", "B:7/3", "E:maj/2", "A:7/b7", "D:min/2", "G:maj/3", "C:maj", "C:maj"]
    for i, c in enumerate(chords):
        s.chord(i * 0.5, c)
    phrase(s, 0.0, 0.25, [(64, 2), (67, 2), (62, 2), (60, 2), (64, 2), (62, 2), (65, 2), (62, 2),
                          (65, 2), (71, 2), (62, 2), (64, 2), (69, 2), (65, 2), (71, 2), (67, 2),
                          (66, 2), (63, 2), (68, 2), (67, 2), (62, 2), (71, 2), (60, 4)])
    out.append(s)

    # 11. slash chords in a flat key (re-spelled root, bass spelled from the new root)
    s = Stream("slash_chords_db", ["slash chords in Db", "C#:major -> Db:major",
                                   "bass from the re-spelled root (Dbm7/Fb)", "double flats"], 8.0)
    lay_beats(s, 0.0, [(4, 4, 0.5)] * 4)
    s.key(0.0, "C#:major")
    chords = ["C#:maj/3", "C#:min7/b3", "F#:maj/5", "G#:7/b7", "A#:min/b3", "D#:min7/5", "C#:maj7/7",
              "F:min/2", "B:maj/3", "E:maj/5", "A:7/3", "D:maj7/3", "G#:7/3", "C#:maj/5", "C#:maj",
              "C#:maj"]
    for i, c in enumerate(chords):
        s.chord(i * 0.5, c)
    phrase(s, 0.0, 0.25, [(65, 2), (64, 2), (66, 2), (66, 2), (61, 2), (70, 2), (72, 2), (67, 2),
                          (63, 2), (68, 2), (69, 2), (66, 2), (72, 2), (68, 2), (61, 4)])
    out.append(s)

    # 12. ties across bar lines and across chord changes
    s = Stream("ties_across_bars", ["ties across bar lines", "ties across chord changes",
                                    "note held over three measures", "melody-only writes whole segments"],
               10.0)
    lay_beats(s, 0.0, [(4, 4, 0.5)] * 5)
    s.key(0.0, "E:major")
    for t, c in [(0.0, "E:maj"), (1.0, "C#:min"), (2.0, "A:maj"), (3.0, "B:7"), (4.0, "E:maj"),
                 (6.0, "G#:min"), (7.0, "A:maj"), (8.0, "B:maj")]:
        s.chord(t, c)
    s.note(0.0, 1.5, 68)          # across a chord change inside the bar
    s.note(1.5, 2.75, 71)         # across the bar line
    s.note(2.75, 8.25, 76)        # three bar lines, five chords
    s.note(8.25, 10.0, 75)
    s.note(0.5, 4.5, 52, 1)       # Ins tie across a bar, no chord cut in Ins
    out.append(s)

    # 13. durations that must be split (5, 7, 9, 10, 11, 13, 14, 15 units)
    s = Stream("split_durations", ["durations split into 4+1, 6+1, 8+1, 8+2, 8+3, 12+1, 12+2, 12+3",
                                   "split rests"], 14.0)
    lay_beats(s, 0.0, [(4, 4, 0.5)] * 7)
    s.key(0.0, "D:major")
    s.chord(0.0, "D:maj")
    phrase(s, 0.0, 0.125, [(62, 5), (66, 7), (None, 4), (69, 9), (None, 7), (74, 10), (73, 6), (71, 11),
                           (None, 5), (69, 13), (67, 3), (66, 14), (None, 2), (64, 15), (62, 1),
                           (None, 5), (62, 11)])
    out.append(s)

    # 14. rest runs: Z and Z<n> in both voices
    s = Stream("rest_runs_z", ["Z for one whole-rest measure", "Z<n> runs", "runs cut by groups of four",
                               "no-chord N so Vocal rests compress"], 20.0)
    lay_beats(s, 0.0, [(4, 4, 0.5)] * 10)
    s.key(0.0, "B:minor")
    s.chord(0.0, "B:min")
    s.chord(2.0, "N")
    s.chord(14.0, "F#:7")
    s.chord(16.0, "B:min")
    phrase(s, 0.0, 0.25, [(71, 4), (74, 4)])
    phrase(s, 14.0, 0.25, [(73, 4), (69, 4), (66, 8), (71, 16)])
    phrase(s, 12.0, 0.5, [(47, 4), (54, 4), (47, 8)], track=1)
    out.append(s)

    # 15. both voices, polyphony reduced by the monophonic view
    s = Stream("two_voices_overlaps", ["Vocal (track 0) and Ins (track 1)", "overlapping notes clipped",
                                       "same-onset notes: lower pitch dropped"], 8.0)
    lay_beats(s, 0.0, [(4, 4, 0.5)] * 4)
    s.key(0.0, "A#:major")
    for t, c in [(0.0, "A#:maj"), (2.0, "D#:maj"), (4.0, "F:7"), (6.0, "A#:maj")]:
        s.chord(t, c)
    phrase(s, 0.0, 0.25, [(70, 2), (72, 2), (74, 4), (75, 4), (74, 2), (72, 2), (70, 8), (69, 4), (70, 4)])
    s.note(4.0, 6.5, 77)          # clipped at the next onset, 5.0
    s.note(5.0, 6.0, 79)
    s.note(6.0, 8.0, 74)
    s.note(6.0, 7.5, 82)          # same onset as 74: 74 sorts first, is cut to zero, dropped
    s.note(0.0, 3.0, 46, 1)
    s.note(0.0, 1.0, 58, 1)       # same onset, higher pitch kept: 46 dropped
    s.note(2.0, 4.5, 51, 1)
    s.note(4.0, 8.0, 53, 1)       # overlaps 51: 51 clipped to 4.0
    s.note(4.0, 4.5, 41, 1)       # same onset, lower: dropped
    out.append(s)

    # 16. structure sections, labels with spaces, two labels in one measure, repeated label
    s = Stream("sections_structure", ["% section lines", "label with spaces", "repeated label ignored",
                                      "two labels in one measure", "group cut inside four"], 16.0)
    lay_beats(s, 0.0, [(4, 4, 0.5)] * 8)
    s.key(0.0, "G:major")
    s.chord(0.0, "G:maj")
    for t, label in [(0.0, "intro"), (2.0, "intro and verse"), (7.0, "pre-chorus"), (8.0, "chorus"),
                     (10.0, "chorus"), (12.0, "bridge"), (13.0, "outro")]:
        s.structure(t, label)
    for m in range(8):
        phrase(s, 2.0 * m, 0.25, [(67 + (m % 3) * 2, 4), (71, 2), (69, 2)])
    out.append(s)

    # 17. the last decoded beat stops early: beats extended to the duration, final partial
    # measure padded to the declared meter
    s = Stream("final_partial_measure", ["beat extension at the last tempo", "final partial measure",
                                         "trailing rest padding", "3/4"], 8.25)
    lay_beats(s, 0.0, [(3, 4, 0.5)] * 3 + [(3, 4, 0.5)])
    s.key(0.0, "E:minor")
    for t, c in [(0.0, "E:min"), (1.5, "C:maj"), (3.0, "D:maj"), (4.5, "B:7"), (6.0, "E:min")]:
        s.chord(t, c)
    phrase(s, 0.0, 0.25, [(64, 4), (67, 2), (71, 6), (69, 2), (67, 2), (66, 4), (64, 2), (63, 4),
                          (64, 4), (66, 2), (67, 6), (None, 1), (64, 3)])
    out.append(s)

    # 18. the half-tick rounding of notation.h (half away from zero; pretty_midi: half to even)
    s = Stream("midi_tick_half_rounding", ["tick rounding half away from zero",
                                           "note on an exact half tick next to a subbeat boundary"],
               4.4492)
    lay_beats(s, 0.4492, [(4, 4, 0.5)] * 2)
    s.key(0.4492, "C:major")
    s.chord(0.4492, "C:maj")
    s.note(0.4492, 1.01171875, 60)      # ends on tick 1942.5: 1943 (notation.h) vs 1942
    s.note(1.01171875, 1.9492, 64)      # starts there: subbeat boundary 1.0117 lies between
    s.note(1.9492, 3.4492, 67)
    out.append(s)

    # 19. a note cut to under half a tick by the next onset: notation.h drops it
    s = Stream("sub_tick_note_dropped", ["note shorter than half a tick after clipping is dropped",
                                         "pretty_midi leaves such a note open"], 6.0)
    lay_beats(s, 0.0, [(4, 4, 0.5)] * 3)
    s.key(0.0, "C:major")
    s.chord(0.0, "C:maj")
    s.note(0.0, 1.0, 60)
    s.note(2.00002, 3.0, 64)            # clipped to 2.00012: both round to tick 3840
    s.note(2.00012, 3.0, 67)
    s.note(4.0, 5.0, 64)
    out.append(s)

    # 20. accidentals, octaves, B# in C# minor
    s = Stream("accidentals_octaves", ["bar-state accidentals across octaves", "naturals", "commas and "
                                       "apostrophes", "B# octave edge in C#m", "F# major"], 8.0)
    lay_beats(s, 0.0, [(4, 4, 0.5)] * 4)
    s.key(0.0, "C#:minor")
    s.key(4.0, "F#:major")
    s.chord(0.0, "C#:min")
    s.chord(4.0, "F#:maj")
    phrase(s, 0.0, 0.125, [(60, 2), (61, 2), (72, 2), (73, 2), (48, 2), (62, 2), (63, 2), (62, 2),
                           (36, 2), (96, 2), (84, 2), (59, 2), (67, 2), (55, 2), (79, 2), (68, 2),
                           (65, 2), (64, 2), (76, 2), (66, 2), (70, 2), (69, 2), (81, 2), (70, 2),
                           (77, 2), (76, 2), (77, 2), (64, 2), (71, 2), (72, 2), (41, 2), (90, 2)])
    out.append(s)

    # 21. no-chord sections
    s = Stream("no_chord_sections", ["N chords: no symbol", "chord after N"], 8.0)
    lay_beats(s, 0.0, [(4, 4, 0.5)] * 4)
    s.key(0.0, "D:major")
    for t, c in [(0.0, "N"), (2.0, "D:maj"), (3.0, "N"), (4.0, "G:maj/3"), (6.0, "N")]:
        s.chord(t, c)
    phrase(s, 0.0, 0.25, [(None, 4), (62, 4), (66, 8), (69, 8), (67, 4), (66, 4)])
    out.append(s)

    # 22. uneven beats (fixed seed): quantization on a rubato grid, tempo estimate
    rng = random.Random(35)
    s = Stream("rubato_jitter", ["uneven beat times", "notes off the grid quantized", "tempo estimate"],
               0.0)
    t, beat_times = 0.21, []
    for m in range(8):
        for p in range(4):
            s.beat(round(t, 6), 2 * p, (4, 4) if p == 0 else None)
            beat_times.append(round(t, 6))
            t += 0.5 * (1 + rng.uniform(-0.06, 0.06))
    s.duration = round(beat_times[-1] + 0.31, 6)
    s.key(beat_times[0], "G#:major")
    for i in range(0, 32, 2):
        s.chord(beat_times[i], rng.choice(["G#:maj", "C#:maj", "D#:7", "F:min", "A#:min7", "C:min"]))
    sub = subbeat_times(beat_times)
    place_random_melody(s, rng, sub, 0, (63, 80), 1, len(sub) - 5)
    out.append(s)

    # 23-24. long generated songs (fixed seeds): meter, key, chord and section changes anywhere
    out.append(random_song("generated_seed_1", 1, 20))
    out.append(random_song("generated_seed_2", 2, 16, flat_keys=True))

    # 25. 4/4 pickup of one beat, then 3/4: the pickup padded to 3/4
    s = Stream("pickup_before_34", ["one-beat pickup padded to the following 3/4", "3/4"], 6.5)
    s.beat(0.0, 4, (3, 4))
    lay_beats(s, 0.5, [(3, 4, 0.5)] * 4)
    s.key(0.0, "A#:major")
    s.chord(0.5, "A#:maj")
    s.chord(2.0, "F:7/3")
    s.chord(3.5, "D#:maj")
    s.chord(5.0, "A#:maj")
    phrase(s, 0.0, 0.25, [(65, 2), (70, 4), (74, 2), (72, 4), (70, 2), (69, 4), (72, 6), (75, 4), (74, 2),
                          (70, 6)])
    out.append(s)

    # --- no score: one stream per case of 5.3
    s = Stream("noscore_01_eighth_off_grid", ["no score 1"], 4.0, case="noscore-1")
    s.beat(0.0, 0, (3, 4))
    s.beat(0.5, 2)
    s.beat(1.0, 3)                      # 3 * 4 = 12, not a multiple of 8
    s.key(0.0, "C:major")
    s.note(0.0, 1.0, 60)
    out.append(s)

    s = Stream("noscore_02_eighth_outside_meter", ["no score 2"], 4.0, case="noscore-2")
    s.beat(0.0, 0, (3, 4))
    s.beat(0.5, 2)
    s.beat(1.0, 4)
    s.beat(1.5, 6)                      # 6 * 4 / 8 = 3 >= 3
    s.key(0.0, "C:major")
    out.append(s)

    s = Stream("noscore_03_single_beat", ["no score 3"], 4.0, case="noscore-3")
    s.beat(0.0, 0, (4, 4))
    s.key(0.0, "C:major")
    s.note(0.0, 2.0, 60)
    out.append(s)

    s = Stream("noscore_03_no_meter_before_eighths", ["no score 3", "eighths before any meter"], 4.0,
               case="noscore-3")
    s.beat(0.0, 0)
    s.beat(0.5, 2)
    s.beat(1.0, 4)
    s.beat(1.5, 6, (4, 4))              # the only beat with a meter in force
    s.key(0.0, "C:major")
    out.append(s)

    s = Stream("noscore_04_equal_beat_times", ["no score 4", "two beats clamped to time 0"], 4.0,
               case="noscore-4")
    s.beat(0.0, 0, (4, 4))
    s.beat(0.0, 2, separate=True)
    s.beat(0.5, 4)
    s.beat(1.0, 6)
    s.key(0.0, "C:major")
    out.append(s)

    s = Stream("noscore_04_equal_beat_times_no_key", ["no score 4 before no score 8 (notation.h order)"],
               4.0, case="noscore-4")
    s.beat(0.0, 0, (4, 4))
    s.beat(0.0, 2, separate=True)
    s.beat(0.5, 4)
    s.beat(1.0, 6)
    s.note(0.0, 1.0, 60)
    out.append(s)

    s = Stream("noscore_08_no_key", ["no score 8"], 4.0, case="noscore-8")
    lay_beats(s, 0.0, [(4, 4, 0.5)] * 2)
    s.chord(0.0, "C:maj")
    s.note(0.0, 1.0, 60)
    out.append(s)

    s = Stream("noscore_09_key_after_last_beat", ["no score 9", "key within 1e-6 s of the end "
                                                  "(outside what the window accept rule lets through)"],
               4.0000005, case="noscore-9")
    lay_beats(s, 0.0, [(4, 4, 0.5)] * 2)
    s.key(4.0000002, "C:major")         # the last (extended) beat is at 4.0
    s.note(0.0, 1.0, 60)
    out.append(s)

    s = Stream("noscore_12_no_downbeat", ["no score 12", "the extension adds beat 3, not 1"], 4.4,
               case="noscore-12")
    for i, t in enumerate([0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0]):
        s.beat(t, 2 if i % 2 == 0 else 4, (3, 4) if i == 0 else None)   # ids 2, 3, 2, 3, ...
    s.key(0.0, "C:major")
    out.append(s)

    s = Stream("noscore_14_skipped_beat", ["no score 14", "a skipped beat position"], 6.0,
               case="noscore-14")
    for t, e in [(0.0, 0), (0.5, 2), (1.0, 4), (1.5, 6), (2.0, 0), (2.5, 2), (3.5, 6), (4.0, 0),
                 (4.5, 2), (5.0, 4), (5.5, 6)]:
        s.beat(t, e, (4, 4) if e == 0 else None)
    s.key(0.0, "C:major")
    out.append(s)

    s = Stream("noscore_14_meter_7_16", ["no score 14", "x/16 meters reach only every other beat"], 6.0,
               case="noscore-14")
    t = 0.0
    for m in range(4):
        for e in range(4):
            s.beat(t, e, (7, 16) if e == 0 else None)
            t += 0.25
    s.key(0.0, "C:major")
    out.append(s)

    s = Stream("noscore_17_vocal_note_too_short", ["no score 17", "Vocal"], 4.0, case="noscore-17")
    lay_beats(s, 0.0, [(4, 4, 0.5)] * 2)
    s.key(0.0, "C:major")
    s.note(1.01, 1.05, 60)
    out.append(s)

    s = Stream("noscore_17_ins_note_in_last_half_subbeat", ["no score 17", "Ins", "note starting in the "
                                                            "last half subbeat"], 4.0, case="noscore-17")
    lay_beats(s, 0.0, [(4, 4, 0.5)] * 2)
    s.key(0.0, "C:major")
    s.note(0.0, 2.0, 62)
    s.note(3.95, 4.2, 48, 1)
    out.append(s)

    s = Stream("noscore_18_overlap_within_1e-6", ["no score 18", "end past the next onset by < 1e-6 s, "
                                                  "on both sides of a tick half and a subbeat boundary"],
               4.0, case="noscore-18")
    lay_beats(s, 0.0, [(4, 4, 0.5)] * 2)
    s.key(0.0, "C:major")
    s.note(0.5, 2040.5 / 1920 + 4e-7, 60)
    s.note(2040.5 / 1920 - 4e-7, 1.5, 62)
    out.append(s)

    s = Stream("noscore_19_short_chord", ["no score 19 (full)", "the melody-only score exists"], 4.0,
               case="noscore-19")
    lay_beats(s, 0.0, [(4, 4, 0.5)] * 2)
    s.key(0.0, "C:major")
    s.chord(0.0, "F:maj")
    s.chord(2.0, "C:maj")
    s.chord(2.03, "G:maj")
    s.chord(2.5, "F:maj")
    s.note(0.0, 3.0, 60)
    out.append(s)

    s = Stream("noscore_19_short_key", ["no score 19 (both)", "key interval shorter than a subbeat"], 4.0,
               case="noscore-19")
    lay_beats(s, 0.0, [(4, 4, 0.5)] * 2)
    s.key(0.0, "C:major")
    s.key(1.0, "D#:major")
    s.key(1.04, "C:major")
    s.note(0.0, 3.0, 60)
    out.append(s)
    return out


def subbeat_times(beat_times):
    out = []
    for a, b in zip(beat_times, beat_times[1:]):
        out += [a + (b - a) * k / 4 for k in range(4)]
    out.append(beat_times[-1])
    return out


def place_random_melody(s, rng, sub, track, span, first, last):
    """Notes on subbeat cells [first, last) with jitter under a fifth of a cell, never two in one
    cell; lengths of 1..12 cells, rests between."""
    i, pitch = first, rng.randint(*span)
    while i < last:
        if rng.random() < 0.25:
            i += rng.randint(1, 6)
            continue
        length = min(rng.choice([1, 2, 2, 3, 4, 4, 6, 8, 12]), last - i)
        if length < 1:
            break
        cell = sub[i + 1] - sub[i]
        start = round(sub[i] + rng.uniform(-0.18, 0.18) * cell, 6)
        end_cell = sub[i + length] - sub[i + length - 1]
        end = round(sub[i + length] + rng.uniform(-0.18, 0.18) * end_cell, 6)
        s.note(start, end, pitch, track)
        pitch = max(span[0], min(span[1], pitch + rng.choice([-5, -3, -2, -1, 1, 2, 3, 4, 7])))
        i += length


def random_song(name, seed, n_measures, flat_keys=False):
    rng = random.Random(seed)
    meters = [(4, 4, 0.5), (3, 4, 0.55), (6, 8, 0.27), (2, 4, 0.48), (2, 2, 0.95)]
    s = Stream(name, ["generated (fixed seed)", "meter changes", "key changes (release and canonical "
                      "labels)", "chords from the whole vocabulary", "sections", "both voices"], 0.0)
    t, beat_times, downbeats = 0.37, [], []
    meter = meters[0]
    for m in range(n_measures):
        if m > 0 and rng.random() < 0.2:
            meter = rng.choice(meters)
        num, den, period = meter
        downbeats.append(len(beat_times))
        for p in range(num):
            tt = round(t, 6)
            s.beat(tt, p * 8 // den, (num, den) if p == 0 else None)
            beat_times.append(tt)
            t += period * (1 + rng.uniform(-0.02, 0.02))
    beat_times.append(round(t, 6))      # one more decoded beat...
    s.beat(beat_times[-1], 0, (meter[0], meter[1]))
    s.duration = round(beat_times[-1] + 0.6 * meter[2], 6)   # ...and the song ends in its measure
    key_pool = [k for k in KEYS if not flat_keys or k.split(":")[0] in ("C#", "D#", "F", "G#", "A#")]
    canonical = {"C#:major": "Db:major", "D#:major": "Eb:major", "G#:major": "Ab:major",
                 "A#:major": "Bb:major", "A#:minor": "Bb:minor"}
    key = rng.choice(key_pool)
    s.key(beat_times[0], canonical.get(key, key) if rng.random() < 0.5 else key)
    for m, b in enumerate(downbeats):
        if m > 0 and rng.random() < 0.12:
            key = rng.choice(key_pool)
            where = b + (rng.randint(0, 1) if rng.random() < 0.4 else 0)
            s.key(beat_times[where], canonical.get(key, key) if rng.random() < 0.5 else key)
        if rng.random() < 0.18 or m == 0:
            s.structure(beat_times[b], rng.choice(STRUCTURES))
    for i, bt in enumerate(beat_times[:-1]):
        if i == 0 or rng.random() < 0.45:
            s.chord(bt, rng.choice(FULL_CHORDS))
    sub = subbeat_times(beat_times)
    place_random_melody(s, rng, sub, 0, (55, 79), 0, len(sub) - 1)
    place_random_melody(s, rng, sub, 1, (36, 60), 2, len(sub) - 1)
    return s


# ---------------------------------------------------------------------------------------------

def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--original", required=True, help="directory with the saved original modules")
    parser.add_argument("--out", required=True, help="fixture directory (rewritten)")
    args = parser.parse_args()
    notation, exports, midi, comfy, hashes = load_original(args.original)
    mods = (notation, exports, midi, comfy)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("*"):
        if old.is_file() and (old.suffix in (".json", ".abc", ".txt")):
            old.unlink()

    entries = []
    for stream in streams():
        data = stream.build()
        (out / f"{stream.name}.events.json").write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
        result = run_stream(mods, data)
        files = [f"{stream.name}.events.json"]
        for mode, suffix in (("full", ""), ("melody", ".melody")):
            entry = result[mode]
            if "abc" in entry:
                name = f"{stream.name}{suffix}.abc"
                (out / name).write_text(entry.pop("abc"), encoding="utf-8")
                entry["file"] = name
            else:
                name = f"{stream.name}{suffix}.noscore.txt"
                (out / name).write_text(entry["noscore"] + "\n", encoding="utf-8")
                entry["file"] = name
            files.append(name)
        expected = stream.case
        got = "score" if "file" in result["full"] and result["full"]["file"].endswith(".abc") else \
            f"noscore-{result['full'].get('case')}"
        if expected != got and not (expected.startswith("noscore") and
                                    result["melody"].get("case") == int(expected.split("-")[1])):
            raise SystemExit(f"{stream.name}: expected {expected}, got {got}")
        entries.append({"name": stream.name, "case": stream.case, "covers": stream.covers,
                        "duration": data["duration"], "events": len(data["events"]), "files": files,
                        "full": result["full"], "melody": result["melody"]})
        print(f"{stream.name:45s} full={result['full']['file']}  melody={result['melody']['file']}")

    manifest = {
        "what": "SheetSage2 notation fixtures: events.json (+ top-level duration, seconds) -> ABC",
        "follows": "ServeurpersoCom/yue2.cpp src/notation.h @ ba4f845 (notation_abc)",
        "generator": "scripts/ref/notation_reference.py",
        "command": "python scripts/ref/notation_reference.py --original /tmp/sheetsage2-original "
                   "--out fixtures/sheetsage2/notation",
        "files": "per stream NAME.events.json; NAME.abc or NAME.noscore.txt (full score); "
                 "NAME.melody.abc or NAME.melody.noscore.txt (melody_only). A .noscore.txt holds "
                 "notation.h's message and a newline.",
        "original": {name: {"repo": repo, "commit": commit, "path": path, "sha256": hashes[name]}
                     for name, (repo, commit, path) in ORIGINAL_FILES.items()},
        "packages": dict({"python": platform.python_version()},
                         **{name: importlib.metadata.version(name) for name in PACKAGES}),
        "adaptations": {
            "A1": "strict increase of the decoded beats checked right after the beat count "
                  "(notation.h order), before the period, extension and key checks",
            "A2": "note times rounded as notation.h does (round(t*1920)/1920, half away from zero; "
                  "notes with rounded end <= start dropped) and handed to the original as an "
                  "in-memory PrettyMIDI; the pretty_midi write/read round trip (half to even, "
                  "k*tick_scale, open zero-tick notes) is run and compared per stream",
            "A3": "no-score texts are notation.h's messages; the original's exception is kept as "
                  "original_message",
            "A4": "validate_serialized_abc kept (it never rejects a score on these streams)",
            "head_spelling": "comfy normalize_key_name + correct_chord_rows on the unclipped key and "
                             "chord rows, before clipping, in both modes (the release original has no "
                             "such step)",
        },
        "comparisons": "per mode: pretty_midi_route (the raw round trip instead of A2), "
                       "release_spelling (no head spelling), original_check_order (without A1), "
                       "comfy_events_to_abc (the Comfy port's events_to_abc); 'same' or how it "
                       "differs",
        "streams": entries,
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
    print(f"{len(entries)} streams -> {out}")


if __name__ == "__main__":
    main()
