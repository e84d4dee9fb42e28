//! From events to timed rows: the song's notes, the beats (decoded, then extended to the
//! end), the label intervals and their clip to the beats, the monophonic voices on the MIDI
//! tick grid (§5.2 steps 1-4, 7 and 9).
use super::events::Event;
use super::NoScore;
use std::cmp::Ordering;

/// Beats past this many are refused rather than allocated (a duration far beyond the
/// decoded tempo, or an infinite one); a song of six days at 120 BPM stays under it.
const MAX_BEATS: usize = 1 << 20;

/// A note in song seconds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct TimedNote {
    pub start: f64,
    pub end: f64,
    pub pitch: u8,
    pub track: u8,
}

/// A beat: its time, its 1-based position in the measure, the meter it was decoded under.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Beat {
    pub time: f64,
    pub id: i32,
    pub numerator: i32,
    pub denominator: i32,
}

/// A label holding over `[start, end)` seconds.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Interval<T> {
    pub start: f64,
    pub end: f64,
    pub label: T,
}

/// Which label field of the events an interval row comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Field {
    Chord,
    Key,
    Structure,
}

/// Compares floats as C++'s `<` does (no NaN is expected).
fn cmp_f64(a: f64, b: f64) -> Ordering {
    a.partial_cmp(&b).unwrap_or(Ordering::Equal)
}

/// The start, end, pitch, track order of the notes.
fn by_start_end(a: &TimedNote, b: &TimedNote) -> Ordering {
    cmp_f64(a.start, b.start).then(cmp_f64(a.end, b.end)).then(a.pitch.cmp(&b.pitch)).then(a.track.cmp(&b.track))
}

/// Every note, its end clipped to the song; notes that end by their start are dropped.
pub(super) fn song_notes(events: &[Event], duration: f64) -> Vec<TimedNote> {
    let mut notes: Vec<TimedNote> = events
        .iter()
        .flat_map(|e| e.notes.iter().map(move |n| (e.time, n)))
        .map(|(start, n)| TimedNote {
            start,
            end: if n.end_time < duration { n.end_time } else { duration },
            pitch: n.pitch,
            track: n.track,
        })
        .filter(|n| n.end > n.start)
        .collect();
    notes.sort_by(by_start_end);
    notes
}

/// The decoded beats: an eighth position under the current meter is a beat.
pub(super) fn decoded_beats(events: &[Event]) -> Result<Vec<Beat>, NoScore> {
    let mut beats = Vec::new();
    let (mut numerator, mut denominator) = (0, 0);
    for event in events {
        if let Some(meter) = event.meter {
            (numerator, denominator) = (meter.numerator, meter.denominator);
        }
        let Some(eighth) = event.eighth_position.filter(|&e| e >= 0 && numerator > 0) else {
            continue;
        };
        if denominator <= 0 {
            return Err(NoScore::MeterDenominator(denominator));
        }
        let steps = i64::from(eighth) * i64::from(denominator);
        if steps % 8 != 0 {
            return Err(NoScore::EighthOffGrid);
        }
        let position = steps / 8;
        if position >= i64::from(numerator) {
            return Err(NoScore::EighthOutsideMeter);
        }
        beats.push(Beat { time: event.time, id: position as i32 + 1, numerator, denominator });
    }
    if beats.len() < 2 {
        return Err(NoScore::TooFewBeats);
    }
    if beats.windows(2).any(|w| w[1].time <= w[0].time) {
        return Err(NoScore::BeatsNotIncreasing);
    }
    Ok(beats)
}

/// The median, the mean of the two middle values for an even count.
pub(super) fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(|a, b| cmp_f64(*a, *b));
    let n = values.len();
    if n % 2 == 1 {
        values[n / 2]
    } else {
        0.5 * (values[n / 2 - 1] + values[n / 2])
    }
}

/// The beats continued at the median period of the last nine to the end of the song (or
/// of the last note): the last beat is the score's end boundary.
pub(super) fn extend_beats(mut beats: Vec<Beat>, notes: &[TimedNote], duration: f64) -> Result<Vec<Beat>, NoScore> {
    let recent = &beats[beats.len().saturating_sub(9)..];
    let period = median(recent.windows(2).map(|w| w[1].time - w[0].time).collect());
    if period.is_nan() || period <= 0.0 {
        return Err(NoScore::NonPositivePeriod);
    }
    let end = notes.iter().fold(duration, |end, n| if end < n.end { n.end } else { end });
    while let Some(&last) = beats.last().filter(|b| b.time < end - 1e-6) {
        if beats.len() >= MAX_BEATS {
            return Err(NoScore::TooManyBeats);
        }
        let id = last.id % last.numerator + 1;
        beats.push(Beat { time: last.time + period, id, ..last });
    }
    Ok(beats)
}

/// One row per event carrying the field, up to the next such row or the song's end; a row
/// that ends by its start (two labels at one time) is dropped.
pub(super) fn intervals(events: &[Event], field: Field, duration: f64) -> Vec<Interval<String>> {
    let label = |e: &Event| match field {
        Field::Chord => e.chord.clone(),
        Field::Key => e.key.clone(),
        Field::Structure => e.structure.clone(),
    };
    let starts: Vec<(f64, String)> =
        events.iter().filter_map(|e| label(e).filter(|l| !l.is_empty()).map(|l| (e.time, l))).collect();
    let ends = starts.iter().skip(1).map(|(t, _)| *t).chain(std::iter::once(duration));
    starts
        .iter()
        .zip(ends)
        .map(|((start, label), end)| Interval { start: *start, end, label: label.clone() })
        .filter(|r| r.end > r.start)
        .collect()
}

/// The rows overlapping `[first, last]`, clipped to it.
pub(super) fn clip<T>(rows: Vec<Interval<T>>, first: f64, last: f64) -> Vec<Interval<T>> {
    rows.into_iter()
        .filter(|r| r.end > first && r.start < last)
        .map(|r| Interval { start: r.start.max(first), end: r.end.min(last), ..r })
        .collect()
}

/// The pretty_midi round trip of the original: a time on the nearest tick of a 960 PPQ file
/// at 120 BPM, halves away from zero.
pub(super) fn midi_round(t: f64) -> f64 {
    (t * 1920.0).round() / 1920.0
}

/// One track as a monophonic line on the tick grid: by onset then pitch, each note cut at
/// the next onset, notes of 1e-6 s or less dropped, then rounded to ticks, sorted by start,
/// end and pitch; returns `(start, end, pitch)`.
pub(super) fn monophonic(notes: &[TimedNote], track: u8) -> Vec<(f64, f64, u8)> {
    let mut ordered: Vec<TimedNote> = notes.iter().filter(|n| n.track == track).copied().collect();
    ordered.sort_by(|a, b| cmp_f64(a.start, b.start).then(a.pitch.cmp(&b.pitch)).then(cmp_f64(a.end, b.end)));
    let mut kept: Vec<TimedNote> = Vec::with_capacity(ordered.len());
    for (i, note) in ordered.iter().enumerate() {
        let mut note = *note;
        if let Some(next) = ordered.get(i + 1).filter(|next| note.end > next.start + 1e-6) {
            note.end = next.start;
        }
        if note.end > note.start + 1e-6 {
            kept.push(note);
        }
    }
    kept.sort_by(by_start_end);
    kept.into_iter()
        .map(|n| (midi_round(n.start), midi_round(n.end), n.pitch))
        .filter(|(start, end, _)| end > start)
        .collect()
}
