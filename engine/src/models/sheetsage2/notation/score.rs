//! The score before it is text: measures from the downbeats, the grid of four subbeats per
//! beat, and per subbeat the two voices, the key and the chord (§5.2 steps 10-14).
use super::rows::{Beat, Interval};
use super::spelling::KeySignature;
use super::{NoScore, Voice};

/// Subbeats per beat.
pub(super) const SUBBEATS: usize = 4;

/// A measure: its beats `[start_beat, end_beat)` and its meter, as decoded and as notated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Measure {
    pub start_beat: usize,
    pub end_beat: usize,
    pub numerator: i32,
    pub denominator: i32,
    pub abc_numerator: i32,
    pub abc_denominator: i32,
    /// The notated meter is longer than the span and the rest goes before (a pickup).
    pub pad_before: bool,
}

impl Measure {
    /// The first subbeat.
    pub(super) fn start_t(&self) -> usize {
        self.start_beat * SUBBEATS
    }

    /// The subbeat after the last one.
    pub(super) fn end_t(&self) -> usize {
        self.end_beat * SUBBEATS
    }
}

/// One subbeat of a voice.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Cell {
    Rest,
    Onset(u8),
    Sustain(u8),
}

impl Cell {
    pub(super) fn pitch(self) -> Option<u8> {
        match self {
            Cell::Rest => None,
            Cell::Onset(p) | Cell::Sustain(p) => Some(p),
        }
    }

    /// Whether `next` is one element with this one: a rest after a rest, or the same note held.
    pub(super) fn same_segment(self, next: Cell) -> bool {
        match self.pitch() {
            None => next == Cell::Rest,
            Some(p) => next == Cell::Sustain(p),
        }
    }

    /// Whether a note is held on into `next` (a tie when `next` starts another element).
    pub(super) fn ties_into(self, next: Cell) -> bool {
        self.pitch().is_some_and(|p| next == Cell::Sustain(p))
    }
}

/// The clipped label rows the score is built from.
pub(super) struct Labels {
    pub keys: Vec<Interval<KeySignature>>,
    /// Each chord as its (re-spelled) label and its ABC text.
    pub chords: Vec<Interval<(String, String)>>,
    pub structures: Vec<Interval<String>>,
}

/// The score on its subbeat grid.
pub(super) struct Score {
    pub measures: Vec<Measure>,
    pub subbeat_times: Vec<f64>,
    /// The quarter-note position of each subbeat boundary, 0 first.
    pub subbeat_quarters: Vec<f64>,
    /// The meter denominator ruling each subbeat.
    pub subbeat_den: Vec<i32>,
    pub keys: Vec<KeySignature>,
    /// An index into `chord_texts` per subbeat; equal indices are equal labels.
    pub chords: Vec<usize>,
    /// The ABC text of each distinct chord label, the first the fallback no-chord `N` (empty).
    pub chord_texts: Vec<String>,
    /// Structure labels at their first subbeat.
    pub structure: Vec<(usize, String)>,
    /// The vocal and the instrumental line.
    pub voices: [Vec<Cell>; 2],
}

impl Score {
    /// Lays beats, voices (`(start, end, pitch)` per voice) and labels on the grid.
    pub(super) fn build(
        beats: &[Beat],
        voices: [Vec<(f64, f64, u8)>; 2],
        labels: Labels,
        melody_only: bool,
    ) -> Result<Score, NoScore> {
        let measures = measures(beats)?;
        let Grid { times: subbeat_times, dens: subbeat_den, quarters: subbeat_quarters } = grid(beats, &measures)?;
        let [vocal, ins] = voices;
        let voices = [voice(&vocal, &subbeat_times, Voice::Vocal)?, voice(&ins, &subbeat_times, Voice::Ins)?];
        let fallback_key = labels.keys.first().map(|r| r.label).ok_or(NoScore::NoKeyInBeats)?;
        let keys = fill(&labels.keys, &subbeat_times, fallback_key, |k| k.name().to_string())?;
        let mut chord_labels = vec!["N".to_string()];
        let mut chord_texts = vec![String::new()];
        let mut chord_rows = Vec::with_capacity(labels.chords.len());
        for row in labels.chords {
            let (label, text) = row.label;
            let index = chord_labels.iter().position(|l| *l == label).unwrap_or_else(|| {
                chord_labels.push(label);
                chord_texts.push(text);
                chord_labels.len() - 1
            });
            chord_rows.push(Interval { start: row.start, end: row.end, label: index });
        }
        let chords = if melody_only {
            vec![0; subbeat_times.len()]
        } else {
            fill(&chord_rows, &subbeat_times, 0, |&i| chord_labels[i].clone())?
        };
        let structure = labels.structures.into_iter().map(|r| (quantize(r.start, &subbeat_times), r.label)).collect();
        Ok(Score {
            measures,
            subbeat_times,
            subbeat_quarters,
            subbeat_den,
            keys,
            chords,
            chord_texts,
            structure,
            voices,
        })
    }
}

/// The most frequent value, the earliest of equally frequent ones.
fn mode_first(values: &[i32]) -> i32 {
    let count = |v: i32| values.iter().filter(|&&w| w == v).count();
    values.iter().copied().fold((values[0], 0), |best, v| if count(v) > best.1 { (v, count(v)) } else { best }).0
}

/// A run of beats between downbeats, before the first (pickup) or after the last (partial).
struct Span {
    start: usize,
    end: usize,
    pickup: bool,
    partial: bool,
}

fn spans(beats: &[Beat]) -> Result<Vec<Span>, NoScore> {
    let downbeats: Vec<usize> = (0..beats.len()).filter(|&i| beats[i].id == 1).collect();
    let (&first, &last) = downbeats.first().zip(downbeats.last()).ok_or(NoScore::NoDownbeat)?;
    let mut spans = Vec::new();
    if first > 0 {
        spans.push(Span { start: 0, end: first, pickup: true, partial: false });
    }
    spans.extend(downbeats.windows(2).map(|w| Span { start: w[0], end: w[1], pickup: false, partial: false }));
    if last < beats.len() - 1 {
        spans.push(Span { start: last, end: beats.len() - 1, pickup: false, partial: true });
    }
    if spans.is_empty() {
        return Err(NoScore::NoMeasure);
    }
    Ok(spans)
}

/// The measures: the numerator is the span's beat count; a final partial span keeps its
/// declared meter (trailing rest) when that is unambiguous and long enough; a first measure
/// shorter than the second's notated meter is notated at it (leading rest).
fn measures(beats: &[Beat]) -> Result<Vec<Measure>, NoScore> {
    let mut measures = Vec::new();
    for (index, span) in spans(beats)?.iter().enumerate() {
        let run = &beats[span.start..span.end];
        if run.iter().enumerate().any(|(i, b)| b.id != run[0].id + i as i32) {
            return Err(NoScore::NonConsecutiveBeats(index));
        }
        if !span.pickup && run[0].id != 1 {
            return Err(NoScore::MeasureNotOnDownbeat(index));
        }
        let dens: Vec<i32> = run.iter().map(|b| b.denominator).collect();
        let nums: Vec<i32> = run.iter().map(|b| b.numerator).collect();
        let count = run.len() as i32;
        let denominator = mode_first(&dens);
        let declared = mode_first(&nums);
        let uniform = nums.iter().all(|&n| n == nums[0]) && dens.iter().all(|&d| d == denominator);
        let abc_numerator = if span.partial && uniform && declared >= count { declared } else { count };
        measures.push(Measure {
            start_beat: span.start,
            end_beat: span.end,
            numerator: count,
            denominator,
            abc_numerator,
            abc_denominator: denominator,
            pad_before: false,
        });
    }
    if let [first, following, ..] = measures.as_mut_slice() {
        let length = |n: i32, d: i32| f64::from(n) / f64::from(d);
        if length(first.numerator, first.denominator) < length(following.abc_numerator, following.abc_denominator) {
            first.abc_numerator = following.abc_numerator;
            first.abc_denominator = following.abc_denominator;
            first.pad_before = true;
        }
    }
    Ok(measures)
}

/// The subbeats: their times, the denominator of each, the running quarter-note position.
struct Grid {
    times: Vec<f64>,
    dens: Vec<i32>,
    quarters: Vec<f64>,
}

/// Four equal subbeats per beat interval, the final beat closing the grid.
fn grid(beats: &[Beat], measures: &[Measure]) -> Result<Grid, NoScore> {
    let mut interval_den = vec![0; beats.len() - 1];
    for m in measures {
        interval_den[m.start_beat..m.end_beat].fill(m.denominator);
    }
    if interval_den.contains(&0) {
        return Err(NoScore::UncoveredBeatInterval);
    }
    let mut times = Vec::with_capacity(interval_den.len() * SUBBEATS + 1);
    let mut dens = Vec::with_capacity(times.capacity());
    let mut quarters = vec![0.0];
    let mut quarter = 0.0;
    for (pair, &den) in beats.windows(2).zip(&interval_den) {
        let (start, end) = (pair[0].time, pair[1].time);
        for k in 0..SUBBEATS {
            times.push(start + (end - start) * k as f64 / SUBBEATS as f64);
            dens.push(den);
            quarter += 4.0 / f64::from(den) / SUBBEATS as f64;
            quarters.push(quarter);
        }
    }
    times.push(beats[beats.len() - 1].time);
    dens.push(interval_den[interval_den.len() - 1]);
    Ok(Grid { times, dens, quarters })
}

/// The subbeat a time falls on: how many midpoints between consecutive subbeats lie before it
/// (numpy's `searchsorted`, left side), at most the last subbeat.
pub(super) fn quantize(time: f64, subbeat_times: &[f64]) -> usize {
    let (mut lo, mut hi) = (0, subbeat_times.len() - 1);
    while lo < hi {
        let mid = (lo + hi) / 2;
        if 0.5 * (subbeat_times[mid] + subbeat_times[mid + 1]) < time {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo
}

/// One voice's notes on the grid: an onset cell, then sustain cells; no two notes may share
/// a subbeat and every note must cover at least one.
fn voice(notes: &[(f64, f64, u8)], subbeat_times: &[f64], which: Voice) -> Result<Vec<Cell>, NoScore> {
    let mut cells = vec![Cell::Rest; subbeat_times.len()];
    for &(start, end, pitch) in notes {
        let (start_t, end_t) = (quantize(start, subbeat_times), quantize(end, subbeat_times));
        if end_t <= start_t {
            return Err(NoScore::NoteOffGrid(which));
        }
        let span = &mut cells[start_t..end_t];
        if span.iter().any(|&c| c != Cell::Rest) {
            return Err(NoScore::OverlappingNotes(which));
        }
        span.fill(Cell::Sustain(pitch));
        span[0] = Cell::Onset(pitch);
    }
    Ok(cells)
}

/// A label per subbeat from the rows (`fallback` where none holds), the last subbeat
/// copying the one before; a row must cover at least one subbeat.
fn fill<T: Copy>(
    rows: &[Interval<T>],
    subbeat_times: &[f64],
    fallback: T,
    name: impl Fn(&T) -> String,
) -> Result<Vec<T>, NoScore> {
    let mut cells = vec![fallback; subbeat_times.len()];
    for row in rows {
        let (start_t, end_t) = (quantize(row.start, subbeat_times), quantize(row.end, subbeat_times));
        if end_t <= start_t {
            return Err(NoScore::IntervalTooShort(name(&row.label)));
        }
        cells[start_t..end_t].fill(row.label);
    }
    let n = cells.len();
    if n > 1 {
        cells[n - 1] = cells[n - 2];
    }
    Ok(cells)
}
