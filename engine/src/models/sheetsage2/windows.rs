//! The sliding windows a long recording is transcribed in, and how their events are joined
//! (`docs/design/listening-part2.md` section 4). A window of `L` seconds overlaps the one
//! before by two thirds of it and looks one third ahead (the published 300 s head: 200 s
//! overlap, 100 s lookahead, a 100 s hop); each window accepts the events of its new part,
//! and a later window starts from the accepted events of its overlap, re-encoded as its
//! prefix, so its decoding continues the score rather than starting over.
use super::config::{Kind, Vocab};
use super::events::{Event, TimeMap, CHORD, FIELDS, KEY, RHYTHM, STRUCTURE, TIMESTAMP};

/// Slack on the acceptance bounds, seconds.
const EPS: f64 = 1e-4;
/// Notes last at least this long, seconds.
const MIN_NOTE: f64 = 0.04;
/// A prefix leaves at least this many tokens to decode.
pub const PREFIX_MARGIN: usize = 128;

/// One window of the plan.
#[derive(Clone, Debug, PartialEq)]
pub struct Window {
    pub index: usize,
    /// Song seconds where the window's audio starts.
    pub start: f64,
    /// The song seconds whose events this window keeps: `[accept_start, accept_end)`.
    pub accept_start: f64,
    pub accept_end: f64,
    /// Decoding stops at a time token at or past this window second.
    pub stop_time: f64,
    pub last: bool,
}

/// The windows of a `duration`-second recording for a head of `window` seconds.
pub fn plan(duration: f64, window: f64) -> Vec<Window> {
    let (keep, hop) = (window * 2.0 / 3.0, window / 3.0);
    let mut out = Vec::new();
    let (mut start, mut accepted) = (0.0f64, 0.0f64);
    loop {
        let last = start + window >= duration - 1e-6;
        let accept_end = if last { duration } else { start + keep };
        let stop_time = if last { (duration - start).min(window) } else { keep };
        out.push(Window { index: out.len(), start, accept_start: accepted, accept_end, stop_time, last });
        if last {
            return out;
        }
        accepted = accept_end;
        start = (start + hop).min(duration - window);
    }
}

/// An accepted event: its window's event with song time and a step on the song's grid.
#[derive(Clone, Debug, PartialEq)]
pub struct Stitched {
    pub event: Event,
    /// Song seconds.
    pub time: f64,
    pub global_step: i64,
    pub window: usize,
    pub window_start: f64,
}

/// Keeps the events of `w` that fall in its accepted span, timed by `map`; `base` is the
/// song step the window's step 0 stands for. Notes end where their length in steps maps to,
/// at least 40 ms after their onset, at most at the song's end.
pub fn accept(w: &Window, events: &[Event], map: &TimeMap, base: i64, duration: f64) -> Vec<Stitched> {
    let mut out = Vec::new();
    for e in events {
        let abs = w.start + map.seconds(e.step as f64);
        if abs < w.accept_start - EPS || abs >= w.accept_end - EPS || abs >= duration - EPS {
            continue;
        }
        let time = abs.clamp(0.0, duration);
        let mut event = e.clone();
        event.timestamp = event.timestamp.map(|_| time);
        for n in &mut event.notes {
            let end = w.start + map.seconds(e.step as f64 + n.steps as f64);
            n.end_time = duration.min((time + MIN_NOTE).max(end));
        }
        out.push(Stitched { event, time, global_step: base + e.step as i64, window: w.index, window_start: w.start });
    }
    out
}

/// Adds a window's events and keeps the whole list in `(time, global step)` order (stable).
pub fn stitch(all: &mut Vec<Stitched>, new: Vec<Stitched>) {
    all.extend(new);
    all.sort_by(|a, b| a.time.total_cmp(&b.time).then(a.global_step.cmp(&b.global_step)));
}

/// A window's prefix and the song step its step 0 stands for.
#[derive(Clone, Debug, PartialEq)]
pub struct Prefix {
    pub tokens: Vec<u32>,
    pub base: i64,
}

/// The prefix of window `w`: the task prompts, then the accepted events of its overlap
/// (`[w.start, w.accept_start)`) from the first one with a timestamp or a rhythm, their steps
/// counted from it, their timestamps re-encoded in window time, the first one completed with
/// the structure, key, chord and meter in force. The plain task prefix when there are none.
pub fn prefix(v: &Vocab, all: &[Stitched], w: &Window, time_hz: f64) -> Prefix {
    let task = v.task_prefix();
    let mut src: Vec<&Stitched> =
        all.iter().filter(|s| s.time >= w.start - EPS && s.time < w.accept_start - EPS).collect();
    src.sort_by(|a, b| a.global_step.cmp(&b.global_step).then(a.time.total_cmp(&b.time)));
    let has_anchor = |s: &&Stitched| !s.event.fields[TIMESTAMP].is_empty() || !s.event.fields[RHYTHM].is_empty();
    let Some(first) = src.iter().position(has_anchor) else {
        return Prefix { tokens: task, base: 0 };
    };
    let src = &src[first..];
    let (base, t0) = (src[0].global_step, src[0].time);
    let ctx = context(v, all, t0 + 1e-6);
    let shift0 = v.range(Kind::SubbeatShift).start;
    let max_shift = v.range(Kind::SubbeatShift).len() as i64 - 1;
    let last_time = v.time_ids() as i64 - 1;
    let mut tokens = task;
    let mut prev = 0i64;
    for (i, s) in src.iter().enumerate() {
        let step = (s.global_step - base).max(0);
        let mut shift = step - prev;
        while shift > max_shift {
            tokens.push(shift0 + max_shift as u32);
            shift -= max_shift;
        }
        tokens.push(shift0 + shift as u32);
        prev = step;
        let mut fields = s.event.fields.clone();
        if !fields[TIMESTAMP].is_empty() {
            let id = ((s.time - w.start) * time_hz).round() as i64;
            fields[TIMESTAMP] = vec![v.range(Kind::Time).start + id.clamp(0, last_time) as u32];
        }
        if i == 0 {
            complete(v, &mut fields, &ctx);
        }
        tokens.extend(fields.into_iter().flatten());
    }
    Prefix { tokens, base }
}

/// The structure, key and chord tokens in force at `until`, and the last meter token.
struct Context {
    fields: [Vec<u32>; FIELDS],
    meter: Option<u32>,
}

fn context(v: &Vocab, all: &[Stitched], until: f64) -> Context {
    let mut c = Context { fields: Default::default(), meter: None };
    let meters = v.range(Kind::Meter);
    for s in all.iter().filter(|s| s.time <= until) {
        for f in [STRUCTURE, KEY, CHORD] {
            if !s.event.fields[f].is_empty() {
                c.fields[f] = s.event.fields[f].clone();
            }
        }
        if let Some(m) = s.event.fields[RHYTHM].iter().find(|t| meters.contains(t)) {
            c.meter = Some(*m);
        }
    }
    c
}

/// Fills a first event's missing structure, key and chord from `ctx`, and puts the meter in
/// force before an eighth position that has none.
fn complete(v: &Vocab, fields: &mut [Vec<u32>; FIELDS], ctx: &Context) {
    for f in [STRUCTURE, KEY, CHORD] {
        if fields[f].is_empty() {
            fields[f] = ctx.fields[f].clone();
        }
    }
    let meters = v.range(Kind::Meter);
    let rhythm = &mut fields[RHYTHM];
    if !rhythm.is_empty() && !rhythm.iter().any(|t| meters.contains(t)) {
        if let Some(m) = ctx.meter {
            rhythm.insert(0, m);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stitched(step: i64, time: f64, fields: &[(usize, u32)]) -> Stitched {
        let mut event = Event::default();
        for &(f, t) in fields {
            event.fields[f].push(t);
        }
        Stitched { event, time, global_step: step, window: 0, window_start: 0.0 }
    }

    #[test]
    fn an_overlap_prefix_starts_at_its_first_anchor_and_splits_long_shifts() {
        let v = Vocab::build(30_000);
        let w =
            Window { index: 1, start: 100.0, accept_start: 200.0, accept_end: 300.0, stop_time: 200.0, last: false };
        let (key, chord, meter) = (v.range(Kind::Key).start + 3, v.range(Kind::FullChord).start + 4, 30517 + 20);
        let pitch = v.range(Kind::Pitch).start + 60;
        let all = vec![
            stitched(10, 50.0, &[(KEY, key), (RHYTHM, meter)]),
            // In the overlap, before its first anchor: dropped; its chord is in force after it.
            stitched(20, 120.0, &[(CHORD, chord), (5, pitch)]),
            stitched(30, 130.0, &[(RHYTHM, 30709 + 2), (5, pitch)]),
            stitched(330, 150.0, &[(TIMESTAMP, 517 + 5000)]),
        ];
        let p = prefix(&v, &all, &w, 100.0);
        assert_eq!(p.base, 30);
        let mut want = v.task_prefix();
        // Step 0: the key, chord and meter in force completed around the bare eighth position.
        want.extend([260, meter, 30711, key, chord, pitch]);
        // 300 steps later: a shift of 256, then one of 44; the timestamp in window seconds.
        want.extend([516, 260 + 44, 517 + 5000]);
        assert_eq!(p.tokens, want);
        // No event with a timestamp or a rhythm in the overlap: the plain task prefix.
        let bare = vec![stitched(5, 150.0, &[(CHORD, chord)])];
        assert_eq!(prefix(&v, &bare, &w, 100.0), Prefix { tokens: v.task_prefix(), base: 0 });
    }

    #[test]
    fn the_published_plan_of_450_seconds() {
        let w = plan(450.0, 300.0);
        let spans: Vec<_> = w.iter().map(|w| (w.start, w.accept_start, w.accept_end, w.stop_time, w.last)).collect();
        assert_eq!(
            spans,
            [(0.0, 0.0, 200.0, 200.0, false), (100.0, 200.0, 300.0, 200.0, false), (150.0, 300.0, 450.0, 300.0, true)]
        );
        assert_eq!(
            plan(120.0, 300.0),
            [Window { index: 0, start: 0.0, accept_start: 0.0, accept_end: 120.0, stop_time: 120.0, last: true }]
        );
    }
}
