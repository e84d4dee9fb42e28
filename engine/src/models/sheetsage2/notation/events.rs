//! The notation's input: the stitched events of a song and its duration.
//!
//! On disk this is the original's `events.json` (`docs/design/listening-part2.md` §6.1) with a
//! top-level `duration` in seconds added. Only `time`, `values.rhythm.meter`,
//! `values.rhythm.eighth_position`, `values.structure`, `values.key`, `values.chord` and, per
//! note of `values.melody`, `pitch`, `track` and `end_time` are read; every other key is
//! accepted and ignored. Serialising writes that same shape, with only the keys read back.
use serde::{Deserialize, Serialize};

/// A song's events, in the order the transcriber stitched them (by time, then global step).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Events {
    /// The song's length in seconds: notes are clipped to it and the beats run up to it.
    pub duration: f64,
    /// The decoded events.
    pub events: Vec<Event>,
}

/// One decoded event at its song time; a field the token stream did not carry is `None`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(from = "RawEvent", into = "RawEvent")]
pub struct Event {
    /// Song time in seconds.
    pub time: f64,
    /// A meter change (it holds until the next one).
    pub meter: Option<Meter>,
    /// The beat position in eighth notes from the downbeat (0 is the downbeat).
    pub eighth_position: Option<i32>,
    /// A structure label (`"verse"`, `"chorus"`, ...).
    pub structure: Option<String>,
    /// A key label, `"Eb:major"`, `"C#:minor"`.
    pub key: Option<String>,
    /// A chord label, `"C:maj/3"`, `"A#:7/b7"`, or `"N"` for no chord.
    pub chord: Option<String>,
    /// The notes starting at this event.
    pub notes: Vec<Note>,
}

/// A time signature, `numerator / denominator`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Meter {
    pub numerator: i32,
    pub denominator: i32,
}

/// A note starting at its event's time.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Note {
    /// MIDI pitch (60 is middle C).
    pub pitch: u8,
    /// [`Note::VOCAL`] or [`Note::INS`]; notes of any other track are not notated.
    pub track: u8,
    /// End in song seconds.
    pub end_time: f64,
}

impl Note {
    /// The vocal melody's track.
    pub const VOCAL: u8 = 0;
    /// The instrumental melody's track.
    pub const INS: u8 = 1;

    pub fn new(pitch: u8, track: u8, end_time: f64) -> Self {
        Self { pitch, track, end_time }
    }
}

impl Meter {
    pub fn new(numerator: i32, denominator: i32) -> Self {
        Self { numerator, denominator }
    }
}

impl Event {
    /// An event at `time` carrying nothing yet; add fields with the `with_*` methods.
    pub fn at(time: f64) -> Self {
        Self { time, ..Self::default() }
    }

    pub fn with_meter(mut self, numerator: i32, denominator: i32) -> Self {
        self.meter = Some(Meter::new(numerator, denominator));
        self
    }

    pub fn with_eighth_position(mut self, eighth: i32) -> Self {
        self.eighth_position = Some(eighth);
        self
    }

    pub fn with_structure(mut self, label: impl Into<String>) -> Self {
        self.structure = Some(label.into());
        self
    }

    pub fn with_key(mut self, label: impl Into<String>) -> Self {
        self.key = Some(label.into());
        self
    }

    pub fn with_chord(mut self, label: impl Into<String>) -> Self {
        self.chord = Some(label.into());
        self
    }

    pub fn with_note(mut self, note: Note) -> Self {
        self.notes.push(note);
        self
    }
}

/// The event as `events.json` nests it.
#[derive(Clone, Serialize, Deserialize)]
struct RawEvent {
    time: f64,
    #[serde(default)]
    values: RawValues,
}

#[derive(Clone, Default, Serialize, Deserialize)]
struct RawValues {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    rhythm: Option<RawRhythm>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    structure: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    key: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    chord: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    melody: Vec<Note>,
}

#[derive(Clone, Default, Serialize, Deserialize)]
struct RawRhythm {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    meter: Option<(i32, i32)>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    eighth_position: Option<i32>,
}

impl From<RawEvent> for Event {
    fn from(raw: RawEvent) -> Self {
        let values = raw.values;
        let rhythm = values.rhythm.unwrap_or_default();
        Event {
            time: raw.time,
            meter: rhythm.meter.map(|(numerator, denominator)| Meter { numerator, denominator }),
            eighth_position: rhythm.eighth_position,
            structure: values.structure,
            key: values.key,
            chord: values.chord,
            notes: values.melody,
        }
    }
}

impl From<Event> for RawEvent {
    fn from(event: Event) -> Self {
        let rhythm = (event.meter.is_some() || event.eighth_position.is_some()).then(|| RawRhythm {
            meter: event.meter.map(|m| (m.numerator, m.denominator)),
            eighth_position: event.eighth_position,
        });
        let values =
            RawValues { rhythm, structure: event.structure, key: event.key, chord: event.chord, melody: event.notes };
        RawEvent { time: event.time, values }
    }
}
