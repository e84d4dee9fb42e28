//! The score as ABC text (§5.2 steps 15-22): unit and tempo, the header, groups of at most
//! four measures per voice line, each measure's notes, rests, chords and inline keys.
use super::pitch::BarState;
use super::score::{Cell, Measure, Score, SUBBEATS};
use super::{NoScore, Voice};

/// The note lengths (in units) written as they are; others are split into tied chunks.
const WRITABLE_LENGTHS: [i64; 11] = [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48];

/// The largest `L:1/U` denominator accepted.
const MAX_UNIT: i64 = 1024;

const VOICE_HEADERS: &str = "V: Vocal clef=treble name=\"Vocal Melody\" snm=\"Vocal\"\n\
                             V: Ins clef=treble name=\"Ins Melody\" snm=\"Inst.\"\n";

/// The whole ABC text of a score.
pub(super) fn score_to_abc(s: &Score) -> Result<String, NoScore> {
    let unit = unit_denominator(&s.measures)?;
    let tempo = tempo(s)?;
    let first = &s.measures[0];
    let mut abc = format!("X:1\nT:\nM:{}/{}\nL:1/{unit}\nQ:1/4={tempo}\n", first.abc_numerator, first.abc_denominator);
    abc.push_str(VOICE_HEADERS);
    abc.push_str(&format!("K:{}\n", s.keys[first.start_t()].name()));
    for group in groups(s) {
        for label in &group.labels {
            abc.push_str(&format!("% {label}\n"));
        }
        for voice in [Voice::Vocal, Voice::Ins] {
            abc.push_str(&format!("V: {voice}\n"));
            let opening = &group.measures[0];
            if group.meter_changed {
                abc.push_str(&format!("M:{}/{}\n", opening.abc_numerator, opening.abc_denominator));
            }
            if group.key_changed {
                abc.push_str(&format!("K:{}\n", s.keys[opening.start_t()].name()));
            }
            abc.push_str(&render_line(s, voice, &group.measures, unit)?);
            abc.push('\n');
        }
    }
    Ok(abc)
}

fn gcd(a: i64, b: i64) -> i64 {
    if b == 0 {
        a.abs()
    } else {
        gcd(b, a % b)
    }
}

/// `U` of `L:1/U`: one unit divides every subbeat and every notated measure.
fn unit_denominator(measures: &[Measure]) -> Result<i64, NoScore> {
    let mut lcm = 1;
    for m in measures {
        for den in [m.denominator, m.abc_denominator] {
            let step = i64::from(den) * SUBBEATS as i64;
            lcm = lcm / gcd(lcm, step) * step.abs();
            if lcm > MAX_UNIT {
                return Err(NoScore::UnitTooSmall);
            }
        }
    }
    Ok(lcm)
}

/// Quarter notes per minute over the whole grid, halves to even.
fn tempo(s: &Score) -> Result<i64, NoScore> {
    let span = |v: &[f64]| v[v.len() - 1] - v[0];
    let (seconds, quarters) = (span(&s.subbeat_times), span(&s.subbeat_quarters));
    if seconds <= 0.0 || quarters <= 0.0 {
        return Err(NoScore::ZeroDuration);
    }
    Ok((quarters / seconds * 60.0).round_ties_even() as i64)
}

/// Measures written on one line per voice, with what changes at the line's start.
struct Group {
    measures: Vec<Measure>,
    /// Structure labels starting in the group's first measure, written as `% label` lines.
    labels: Vec<String>,
    meter_changed: bool,
    key_changed: bool,
}

/// A new group at most every four measures, and at a meter change, a key change between
/// measures or a new structure label.
fn groups(s: &Score) -> Vec<Group> {
    let first = &s.measures[0];
    let mut groups: Vec<Group> = Vec::new();
    let mut active_meter = (first.abc_numerator, first.abc_denominator);
    let mut active_key = s.keys[first.start_t()];
    let mut active_structure = "";
    for m in &s.measures {
        let meter_changed = (m.abc_numerator, m.abc_denominator) != active_meter;
        let key_changed = s.keys[m.start_t()] != active_key;
        let mut labels = Vec::new();
        for (t, label) in &s.structure {
            if (m.start_t()..m.end_t()).contains(t) && !label.is_empty() && label != active_structure {
                labels.push(label.clone());
                active_structure = label;
            }
        }
        match groups.last_mut() {
            Some(g) if g.measures.len() < 4 && !meter_changed && !key_changed && labels.is_empty() => {
                g.measures.push(*m)
            }
            _ => groups.push(Group { measures: vec![*m], labels, meter_changed, key_changed }),
        }
        active_meter = (m.abc_numerator, m.abc_denominator);
        active_key = s.keys[m.end_t() - 1];
    }
    groups
}

/// A voice's music line for a group: each measure and a bar line, runs of whole-rest
/// measures as `Z|` or `Z<n>|`.
fn render_line(s: &Score, voice: Voice, measures: &[Measure], unit: i64) -> Result<String, NoScore> {
    let rendered = measures.iter().map(|m| render_measure(s, voice, m, unit)).collect::<Result<Vec<_>, _>>()?;
    let mut line = String::new();
    let mut i = 0;
    while i < rendered.len() {
        let rests = rendered[i..].iter().take_while(|r| is_whole_rest(r)).count();
        match rests {
            0 => {
                line.push_str(&rendered[i]);
                i += 1;
            }
            1 => line.push('Z'),
            n => line.push_str(&format!("Z{n}")),
        }
        i += rests;
        line.push('|');
    }
    Ok(line)
}

/// Whether a rendered measure is rests alone: no note, chord, inline key or tie.
fn is_whole_rest(measure: &str) -> bool {
    let mut rest = measure;
    if rest.is_empty() {
        return false;
    }
    while let Some(after) = rest.strip_prefix('z') {
        rest = after.trim_start_matches(|c: char| c.is_ascii_digit());
        if rest.starts_with('-') {
            return false;
        }
    }
    rest.is_empty()
}

/// The first subbeat after `t` (before `end`) where a new element starts: the note or rest
/// ends, the key changes, or (chords shown) the chord changes.
fn next_cut(s: &Score, cells: &[Cell], t: usize, end: usize, show_chords: bool) -> usize {
    let after = t + 1..end;
    let segment = after.clone().find(|&p| !cells[t].same_segment(cells[p]));
    let key = after.clone().find(|&p| s.keys[p] != s.keys[p - 1]);
    let chord = show_chords.then(|| after.clone().find(|&p| s.chords[p] != s.chords[p - 1])).flatten();
    [segment, key, chord].into_iter().flatten().min().unwrap_or(end)
}

/// Units of the subbeats `[start_t, end_t)`.
fn duration_units(s: &Score, start_t: usize, end_t: usize, unit: i64) -> i64 {
    s.subbeat_den[start_t..end_t].iter().map(|&den| unit / (i64::from(den) * SUBBEATS as i64)).sum()
}

/// One measure of a voice, the bar's accidentals starting from the key signature.
fn render_measure(s: &Score, voice: Voice, m: &Measure, unit: i64) -> Result<String, NoScore> {
    let cells = &s.voices[voice as usize];
    let show_chords = voice == Voice::Vocal;
    let notated = i64::from(m.abc_numerator) * unit / i64::from(m.abc_denominator);
    let padding = notated - i64::from(m.numerator) * unit / i64::from(m.denominator);
    if padding < 0 {
        return Err(NoScore::MeterShorterThanSpan);
    }
    let (mut leading, mut trailing) = if m.pad_before { (padding, 0) } else { (0, padding) };
    let (start, end) = (m.start_t(), m.end_t());
    let mut bar = BarState::new(s.keys[start]);
    let mut out = String::new();
    let mut t = start;
    while t < end {
        let next_t = next_cut(s, cells, t, end, show_chords);
        let mut prefix = String::new();
        if t > start && s.keys[t] != bar.key() {
            bar = BarState::new(s.keys[t]);
            prefix.push_str(&format!("[K:{}]", s.keys[t].name()));
        }
        if show_chords && (t == start || s.chords[t] != s.chords[t - 1]) {
            let text = &s.chord_texts[s.chords[t]];
            if !text.is_empty() {
                prefix.push_str(&format!("\"{text}\""));
            }
        }
        let cell = cells[t];
        let element = cell.pitch().map_or_else(|| "z".to_string(), |p| bar.note(p));
        let mut duration = duration_units(s, t, next_t, unit);
        if t == start && leading > 0 {
            if cell == Cell::Rest && prefix.is_empty() {
                duration += leading;
            } else {
                write_duration(&mut out, "", "z", leading, false);
            }
            leading = 0;
        }
        if cell == Cell::Rest && next_t == end && trailing > 0 {
            duration += trailing;
            trailing = 0;
        }
        if duration <= 0 {
            return Err(NoScore::NonPositiveDuration);
        }
        let tie_out = cells.get(next_t).is_some_and(|&next| cell.ties_into(next));
        write_duration(&mut out, &prefix, &element, duration, tie_out);
        t = next_t;
    }
    if trailing > 0 {
        write_duration(&mut out, "", "z", trailing, false);
    }
    Ok(out)
}

/// A length as writable chunks: as it is if writable, else the largest writable length
/// below what remains, repeatedly.
pub(super) fn split_duration(duration: i64) -> Vec<i64> {
    let mut chunks = Vec::new();
    let mut remaining = duration;
    while remaining > 0 {
        let chunk = if WRITABLE_LENGTHS.contains(&remaining) {
            remaining
        } else {
            WRITABLE_LENGTHS.iter().copied().filter(|&v| v < remaining).max().unwrap_or(remaining)
        };
        chunks.push(chunk);
        remaining -= chunk;
    }
    chunks
}

/// An element of `duration` units: its chunks, the prefix before the first; a note's
/// chunks tied to each other and, with `tie_out`, the last to what follows.
fn write_duration(out: &mut String, prefix: &str, element: &str, duration: i64, tie_out: bool) {
    let chunks = split_duration(duration);
    for (i, &chunk) in chunks.iter().enumerate() {
        if i == 0 {
            out.push_str(prefix);
        }
        out.push_str(element);
        if chunk != 1 {
            out.push_str(&chunk.to_string());
        }
        if element != "z" && (i + 1 < chunks.len() || tie_out) {
            out.push('-');
        }
    }
}
