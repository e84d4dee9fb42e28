//! From a window's token stream to timed events (`docs/design/listening-part2.md` 3.4, 3.5):
//! shifts add up to a window-local step, the payload tokens after them make one event,
//! timestamp tokens pin steps to seconds, and the steps between are interpolated.
use super::config::{Kind, Vocab};

/// The six fields of an event, in the order the grammar writes them.
pub const FIELDS: usize = 6;
pub const TIMESTAMP: usize = 0;
pub const RHYTHM: usize = 1;
pub const STRUCTURE: usize = 2;
pub const KEY: usize = 3;
pub const CHORD: usize = 4;
pub const MELODY: usize = 5;

/// One note as decoded: MIDI pitch, track (0 vocal, 1 instrumental), length in steps.
#[derive(Clone, Debug, PartialEq)]
pub struct Note {
    pub pitch: u32,
    pub track: u8,
    pub steps: u32,
    /// Song seconds, once the event is accepted.
    pub end_time: f64,
}

/// One event of a window's stream.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Event {
    /// The window-local step.
    pub step: u32,
    /// The raw tokens of each field (re-encoded into a later window's prefix).
    pub fields: [Vec<u32>; FIELDS],
    pub timestamp: Option<f64>,
    pub meter: Option<(u32, u32)>,
    pub eighth: Option<u32>,
    pub structure: Option<String>,
    pub key: Option<String>,
    pub chord: Option<String>,
    pub notes: Vec<Note>,
}

/// The events of one window's sequence and its timestamp anchors `(step, seconds)`.
#[derive(Clone, Debug, Default)]
pub struct Decoded {
    pub events: Vec<Event>,
    pub anchors: Vec<(u32, f64)>,
}

/// Why a stream cannot be read.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum StreamError {
    #[error("token stream without prefix")]
    NoPrefix,
    #[error("unexpected token {0} in the event stream")]
    Unexpected(u32),
}

/// Reads the events of `seq` (sos, the prompts, out, then the stream up to eos); a time token
/// of index `i` stamps `i / time_hz` seconds.
pub fn decode(v: &Vocab, seq: &[u32], time_hz: f64) -> Result<Decoded, StreamError> {
    if seq.first() != Some(&v.sos) {
        return Err(StreamError::NoPrefix);
    }
    let out = seq.iter().position(|t| *t == v.out).ok_or(StreamError::NoPrefix)?;
    let mut d = Decoded::default();
    let mut step = 0u32;
    let mut cur: Option<Event> = None;
    let mut shifting = false;
    for &t in &seq[out + 1..] {
        if t == v.eos {
            break;
        }
        let (kind, idx) = v.kind_of(t).ok_or(StreamError::Unexpected(t))?;
        if kind == Kind::SubbeatShift {
            if !shifting {
                finish(&mut d, cur.take());
                shifting = true;
            }
            step += idx;
            continue;
        }
        shifting = false;
        let e = cur.get_or_insert_with(|| Event { step, ..Event::default() });
        take(v, e, kind, idx, t, time_hz)?;
    }
    finish(&mut d, cur);
    Ok(d)
}

/// Files a payload token in its event.
fn take(v: &Vocab, e: &mut Event, kind: Kind, idx: u32, t: u32, time_hz: f64) -> Result<(), StreamError> {
    let i = idx as usize;
    let field = match kind {
        Kind::Time => {
            e.timestamp = Some(idx as f64 / time_hz);
            TIMESTAMP
        }
        Kind::Meter => {
            e.meter = Some(v.meters[i]);
            RHYTHM
        }
        Kind::EighthPosition => {
            e.eighth = Some(idx);
            RHYTHM
        }
        Kind::Structure => {
            e.structure = Some(v.structures[i].clone());
            STRUCTURE
        }
        Kind::Key => {
            e.key = Some(v.keys[i].clone());
            KEY
        }
        Kind::FullChord => {
            e.chord = Some(v.full_chords[i].clone());
            CHORD
        }
        Kind::MajminChord => {
            e.chord = Some(v.majmin_chords[i].clone());
            CHORD
        }
        Kind::Pitch => {
            let steps = v.duration_templates[0];
            e.notes.push(Note { pitch: idx % 128, track: (idx >= 128) as u8, steps, end_time: 0.0 });
            MELODY
        }
        Kind::Duration => {
            if let Some(n) = e.notes.last_mut() {
                n.steps = v.duration_templates[i];
            }
            MELODY
        }
        Kind::Prompt | Kind::SubbeatShift => return Err(StreamError::Unexpected(t)),
    };
    e.fields[field].push(t);
    Ok(())
}

fn finish(d: &mut Decoded, e: Option<Event>) {
    let Some(e) = e else { return };
    if let Some(stamp) = e.timestamp {
        match d.anchors.last_mut() {
            Some(last) if last.0 == e.step => last.1 = stamp,
            _ => d.anchors.push((e.step, stamp)),
        }
    }
    d.events.push(e);
}

/// Steps to window seconds: the anchors' interpolation, extended past either end at the
/// median rate, 1/8 s a step when fewer than two anchors give a rate.
#[derive(Clone, Debug)]
pub struct TimeMap {
    anchors: Vec<(u32, f64)>,
    step_seconds: f64,
    window: f64,
}

impl TimeMap {
    pub fn new(anchors: &[(u32, f64)], window: f64) -> Self {
        let mut rates: Vec<f64> =
            anchors.windows(2).map(|w| (w[1].1 - w[0].1) / (w[1].0 as f64 - w[0].0 as f64).max(1.0)).collect();
        let m = median(&mut rates);
        let step_seconds = if anchors.len() >= 2 && m.is_finite() && m > 0.0 { m } else { 0.125 };
        TimeMap { anchors: anchors.to_vec(), step_seconds, window }
    }

    pub fn step_seconds(&self) -> f64 {
        self.step_seconds
    }

    /// The window seconds of `step`.
    pub fn seconds(&self, step: f64) -> f64 {
        let a = &self.anchors;
        let clamp = |t: f64| t.clamp(0.0, self.window);
        let (Some(first), Some(last)) = (a.first(), a.last()) else {
            return clamp(step * 0.125);
        };
        if step <= first.0 as f64 {
            return clamp(first.1 + (step - first.0 as f64) * self.step_seconds);
        }
        if step >= last.0 as f64 {
            return clamp(last.1 + (step - last.0 as f64) * self.step_seconds);
        }
        let i = a.partition_point(|p| (p.0 as f64) <= step);
        let (lo, hi) = (a[i - 1], a[i]);
        let f = (step - lo.0 as f64) / (hi.0 as f64 - lo.0 as f64);
        lo.1 + f * (hi.1 - lo.1)
    }
}

/// numpy's median: the mean of the two middle values of an even count; NaN when empty.
fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shifts_add_up_and_payloads_make_events() {
        let v = Vocab::build(30_000);
        let pitch = |p: u32| v.range(Kind::Pitch).start + p;
        let dur = |b: u32| v.range(Kind::Duration).start + b;
        let mut seq = v.task_prefix();
        // An event without a leading shift at step 0, then shifts of 4 + 2, then a zero shift.
        seq.extend([517 + 50, pitch(60), dur(3), pitch(128 + 64)]);
        seq.extend([260 + 4, 260 + 2, 517 + 100, v.range(Kind::Key).start + 12, 260]);
        seq.push(v.eos);
        let d = decode(&v, &seq, 100.0).unwrap();
        assert_eq!(d.events.len(), 2, "{:?}", d.events);
        assert_eq!(d.events[0].step, 0);
        assert_eq!(
            d.events[0].notes.iter().map(|n| (n.pitch, n.track, n.steps)).collect::<Vec<_>>(),
            [(60, 0, 4), (64, 1, 1)]
        );
        assert_eq!(d.events[1].step, 6);
        assert_eq!(d.events[1].key.as_deref(), Some("C:minor"));
        assert_eq!(d.anchors, [(0, 0.5), (6, 1.0)]);
        assert_eq!(decode(&v, &[v.eos], 100.0).err(), Some(StreamError::NoPrefix));
    }

    #[test]
    fn steps_map_through_the_anchors_and_past_them_at_the_median_rate() {
        let m = TimeMap::new(&[(0, 1.0), (8, 2.0), (16, 4.0)], 300.0);
        assert_eq!(m.step_seconds(), 0.1875);
        assert_eq!(m.seconds(4.0), 1.5);
        assert_eq!(m.seconds(12.0), 3.0);
        assert_eq!(m.seconds(20.0), 4.75);
        assert_eq!(m.seconds(-20.0), 0.0);
        let none = TimeMap::new(&[], 10.0);
        assert_eq!((none.seconds(8.0), none.seconds(1000.0)), (1.0, 10.0));
    }
}
