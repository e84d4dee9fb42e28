//! SheetSage2's notation: a song's decoded events become an ABC score (yue2.cpp's
//! `src/notation.h`, the newest revision with canonical keys and chord re-spelling;
//! `docs/design/listening-part2.md` §5).
//!
//! The steps, each in its module:
//! - [`events`]: the input, the stitched events and the song's duration (serde: the
//!   original's `events.json` plus a top-level `duration`);
//! - `rows`: notes clipped to the song, beats from the rhythm events extended to the end at
//!   the last tempo, label intervals clipped to the beats, the monophonic voices on the
//!   pretty_midi tick grid;
//! - `spelling`: key labels by their canonical tonic, chord roots re-spelled for the key at
//!   their midpoint, both as ABC (key signature, chord text with a slash bass);
//! - `score`: measures from the downbeats, four subbeats a beat, the voices, keys and chords
//!   per subbeat;
//! - `render`: the ABC text (header, groups of at most four measures, Z rests, ties) with
//!   `pitch`'s key-relative note spelling and bar accidentals.
//!
//! When the events cannot make a score, [`to_abc`] says why with a [`NoScore`] whose text is
//! notation.h's. The output matches notation.h byte for byte on the fixtures of
//! `fixtures/sheetsage2/notation` (made by `scripts/ref/notation_reference.py`). Two guards
//! are yued's own, for input the model never writes and notation.h does not survive: a
//! meter whose denominator is not positive, and a duration so far past the beats that
//! extending them would not end.
pub mod events;
mod pitch;
mod render;
mod rows;
mod score;
mod spelling;
#[cfg(test)]
mod tests;

pub use events::{Event, Events, Meter, Note};

use rows::{Field, Interval};
use score::{Labels, Score};
use std::fmt;

/// One of the two melody voices of the score.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Voice {
    Vocal = 0,
    Ins = 1,
}

impl fmt::Display for Voice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Voice::Vocal => "Vocal",
            Voice::Ins => "Ins",
        })
    }
}

/// Why the events make no score; the text is notation.h's message. The variants the
/// model's vocabulary cannot reach are kept for parity (§5.3).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NoScore {
    #[error("Eighth position is off the beat grid")]
    EighthOffGrid,
    #[error("Eighth position is outside the meter")]
    EighthOutsideMeter,
    /// yued's own: notation.h divides by such a denominator.
    #[error("Meter denominator {0} is not positive")]
    MeterDenominator(i32),
    #[error("At least two decoded beats are required for ABC")]
    TooFewBeats,
    #[error("beat times must be strictly increasing")]
    BeatsNotIncreasing,
    #[error("Decoded beats must increase in time")]
    NonPositivePeriod,
    /// yued's own: the song lasts far longer than the decoded beats can be extended over.
    #[error("The song's duration is too far past the decoded beats to extend them")]
    TooManyBeats,
    #[error("Invalid key {0}")]
    InvalidKey(String),
    #[error("Unsupported key mode {mode} in {key}")]
    UnsupportedKeyMode { mode: String, key: String },
    #[error("Chord {0} is missing the ':' quality separator")]
    ChordWithoutQuality(String),
    #[error("Unsupported chord {0}")]
    UnsupportedChord(String),
    #[error("Invalid chord {chord} in {key}")]
    InvalidChordInKey { chord: String, key: String },
    #[error("Invalid chord {0}")]
    InvalidChord(String),
    #[error("Invalid chord bass degree {0}")]
    InvalidBassDegree(String),
    #[error("No key was decoded; cannot construct a keyed ABC score")]
    NoKey,
    #[error("at least one key interval is required")]
    NoKeyInBeats,
    #[error("Cannot encode portable ABC key for {0}")]
    KeyWithoutSignature(String),
    #[error("No downbeat (beat ID 1) exists in the beat lab")]
    NoDownbeat,
    #[error("No positive-length measure exists between downbeats")]
    NoMeasure,
    /// The measure's index, the pickup (if any) being 0.
    #[error("Measure {0}: non-consecutive beat IDs")]
    NonConsecutiveBeats(usize),
    #[error("Measure {0}: full measure does not start at beat ID 1")]
    MeasureNotOnDownbeat(usize),
    #[error("Downbeat spans do not cover every beat interval")]
    UncoveredBeatInterval,
    #[error("{0}: MIDI note cannot be represented on the decoded subbeat grid")]
    NoteOffGrid(Voice),
    #[error("{0}: overlapping quantized melody notes")]
    OverlappingNotes(Voice),
    /// The key's ABC name or the chord's re-spelled label.
    #[error("Interval ({0}) is shorter than the ABC subbeat grid")]
    IntervalTooShort(String),
    #[error("Required ABC unit length is unreasonably small")]
    UnitTooSmall,
    #[error("Cannot estimate tempo from a zero-duration score")]
    ZeroDuration,
    #[error("Measure: notated meter is shorter than its decoded span")]
    MeterShorterThanSpan,
    #[error("Non-positive ABC duration")]
    NonPositiveDuration,
}

/// The ABC score of a song's events: both melody voices (`Vocal`, `Ins`) with chord symbols,
/// or without them under `melody_only` (the score a YuE2 cover takes). Lines end in `\n`.
pub fn to_abc(events: &Events, melody_only: bool) -> Result<String, NoScore> {
    let (list, duration) = (events.events.as_slice(), events.duration);
    let notes = rows::song_notes(list, duration);
    let beats = rows::extend_beats(rows::decoded_beats(list)?, &notes, duration)?;
    let labels = labels(list, duration, (beats[0].time, beats[beats.len() - 1].time))?;
    let voices = [rows::monophonic(&notes, Note::VOCAL), rows::monophonic(&notes, Note::INS)];
    let score = Score::build(&beats, voices, labels, melody_only)?;
    render::score_to_abc(&score)
}

/// The ABC text of a vocabulary label as the head GGUF's `keys_abc` and `full_chords_abc`
/// tables hold it (the release's `key_symbol_to_abc` / `chord_symbol_to_abc`, no re-spelling):
/// `C#:major` -> `C#`, `D#:minor` -> `D#m`, `A#:7/b7` -> `A#7/G#`, `N` -> ``. A label neither
/// spells is returned as it is.
pub fn label_abc(label: &str) -> String {
    let is_key = matches!(label.split_once(':'), Some((_, "major" | "minor")));
    let text = if is_key { spelling::key_abc(label).map(|k| k.name().to_string()) } else { spelling::chord_abc(label) };
    text.unwrap_or_else(|_| label.to_string())
}

/// The key, chord and structure rows: keys canonical, chords re-spelled for the key at their
/// midpoint, then clipped to the beats `[first, last]`, keys and chords written as ABC.
fn labels(events: &[Event], duration: f64, (first, last): (f64, f64)) -> Result<Labels, NoScore> {
    let mut keys = rows::intervals(events, Field::Key, duration);
    let mut chords = rows::intervals(events, Field::Chord, duration);
    let structures = rows::intervals(events, Field::Structure, duration);
    for key in &mut keys {
        key.label = spelling::canonical_key(&key.label)?;
    }
    if let Some(last_key) = keys.last() {
        for chord in &mut chords {
            let mid = 0.5 * (chord.start + chord.end);
            // the first key ending at or after the midpoint: a tie on a boundary is the left key's
            let key = keys.iter().find(|k| k.end >= mid).unwrap_or(last_key);
            chord.label = spelling::respell_chord(&chord.label, &key.label)?;
        }
    }
    let decoded_keys = !keys.is_empty();
    let (keys, chords) = (rows::clip(keys, first, last), rows::clip(chords, first, last));
    let structures = rows::clip(structures, first, last);
    if !decoded_keys {
        return Err(NoScore::NoKey);
    }
    if keys.is_empty() {
        return Err(NoScore::NoKeyInBeats);
    }
    let keys = keys
        .into_iter()
        .map(|r| Ok(Interval { start: r.start, end: r.end, label: spelling::key_abc(&r.label)? }))
        .collect::<Result<_, NoScore>>()?;
    let chords = chords
        .into_iter()
        .map(|r| {
            let text = spelling::chord_abc(&r.label)?;
            Ok(Interval { start: r.start, end: r.end, label: (r.label, text) })
        })
        .collect::<Result<_, NoScore>>()?;
    Ok(Labels { keys, chords, structures })
}
