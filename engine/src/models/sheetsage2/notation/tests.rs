//! The notation against the committed fixtures (`fixtures/sheetsage2/notation`, made by
//! `scripts/ref/notation_reference.py` to follow notation.h), byte for byte in both modes,
//! and a few of its rules one at a time.
use super::pitch::BarState;
use super::render::split_duration;
use super::spelling::{chord_abc, key_abc, respell_chord};
use super::*;
use std::path::{Path, PathBuf};

const STREAMS: usize = 41;

fn fixture_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/sheetsage2/notation")
}

/// The expected output of one mode: the score, or the no-score message.
fn expected(dir: &Path, name: &str, mode: &str) -> Result<String, String> {
    let read = |suffix: &str| std::fs::read_to_string(dir.join(format!("{name}{mode}.{suffix}"))).ok();
    match (read("abc"), read("noscore.txt")) {
        (Some(abc), None) => Ok(abc),
        (None, Some(message)) => Err(message.strip_suffix('\n').unwrap_or(&message).to_string()),
        _ => panic!("{name}{mode}: expected exactly one of .abc and .noscore.txt"),
    }
}

/// Where two texts part: the line number and both lines.
fn first_difference(got: &str, want: &str) -> String {
    let (mut got_lines, mut want_lines) = (got.split('\n'), want.split('\n'));
    for line in 1.. {
        match (got_lines.next(), want_lines.next()) {
            (None, None) => break,
            (g, w) if g != w => return format!("line {line}:\n  got:  {g:?}\n  want: {w:?}"),
            _ => {}
        }
    }
    "(no line differs)".to_string()
}

#[test]
fn every_fixture_stream_in_both_modes() {
    let dir = fixture_dir();
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.strip_suffix(".events.json").map(String::from))
        .collect();
    names.sort();
    let (mut checked, mut failures) = (0, Vec::new());
    for name in &names {
        let text = std::fs::read_to_string(dir.join(format!("{name}.events.json"))).unwrap();
        let events: Events = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
        for (mode, melody_only) in [("", false), (".melody", true)] {
            let want = expected(&dir, name, mode);
            let got = to_abc(&events, melody_only).map_err(|e| e.to_string());
            checked += 1;
            if got != want {
                let detail = match (&got, &want) {
                    (Ok(g), Ok(w)) => first_difference(g, w),
                    _ => format!("got {got:?}\n  want {want:?}"),
                };
                failures.push(format!("{name}{mode}: {detail}"));
            }
        }
    }
    assert!(failures.is_empty(), "{} of {checked} differ:\n{}", failures.len(), failures.join("\n"));
    assert_eq!(checked, STREAMS * 2, "streams found in {}: {names:?}", dir.display());
}

#[test]
fn notes_in_c_major_by_octave() {
    let c = key_abc("C:major").unwrap();
    let names: Vec<String> = [60, 72, 84, 59, 47, 61].into_iter().map(|p| BarState::new(c).note(p)).collect();
    assert_eq!(names, ["C", "c", "c'", "B,", "B,,", "^C"]);
}

#[test]
fn accidentals_hold_until_the_bar_line() {
    let mut bar = BarState::new(key_abc("Eb:major").unwrap());
    // E flat is in the signature; E natural needs a mark, then E flat needs one back
    let line: Vec<String> = [63, 64, 76, 63, 63].into_iter().map(|p| bar.note(p)).collect();
    assert_eq!(line, ["E", "=E", "e", "_E", "E"]);
}

#[test]
fn lengths_split_into_writable_values() {
    assert_eq!(split_duration(4), [4]);
    assert_eq!(split_duration(5), [4, 1]);
    assert_eq!(split_duration(7), [6, 1]);
    assert_eq!(split_duration(20), [16, 4]);
    assert_eq!(split_duration(100), [48, 48, 4]);
}

#[test]
fn chord_roots_follow_the_key() {
    assert_eq!(respell_chord("D#:maj", "Eb:major").unwrap(), "Eb:maj");
    assert_eq!(respell_chord("A#:7/b7", "Eb:major").unwrap(), "Bb:7/b7");
    assert_eq!(respell_chord("C#:min", "A:major").unwrap(), "C#:min");
    assert_eq!(respell_chord("N", "Eb:major").unwrap(), "N");
    assert_eq!(chord_abc("Bb:7/b7").unwrap(), "Bb7/Ab");
    assert_eq!(chord_abc("Db:min7/b3").unwrap(), "Dbm7/Fb");
    assert_eq!(chord_abc("C:maj/3").unwrap(), "C/E");
    assert_eq!(chord_abc("N").unwrap(), "");
}

#[test]
fn keys_take_their_canonical_tonic_and_an_abc_signature() {
    assert_eq!(spelling::canonical_key("C#:major").unwrap(), "Db:major");
    assert_eq!(spelling::canonical_key("A#:minor").unwrap(), "Bb:minor");
    assert_eq!(spelling::canonical_key("D#:minor").unwrap(), "D#:minor");
    assert_eq!(key_abc("D#:major").unwrap().name(), "Eb");
    assert_eq!(key_abc("C#:minor").unwrap().name(), "C#m");
    assert_eq!(label_abc("A#:7/b7"), "A#7/G#");
    assert_eq!(label_abc("C#:major"), "C#");
}

#[test]
fn events_built_in_rust_make_a_score() {
    let mut list = Vec::new();
    for beat in 0..8 {
        let mut e = Event::at(beat as f64 * 0.5).with_eighth_position((beat % 4) * 2);
        if beat == 0 {
            e = e.with_meter(4, 4).with_key("C:major").with_chord("C:maj").with_structure("verse");
        }
        list.push(e.with_note(Note::new(60 + beat as u8, Note::VOCAL, beat as f64 * 0.5 + 0.5)));
    }
    let events = Events { duration: 4.0, events: list };
    let abc = to_abc(&events, false).unwrap();
    // the chord symbol opens every measure; sharps in C major, each measure resetting them
    assert!(abc.ends_with("% verse\nV: Vocal\n\"C\"C4^C4D4^D4|\"C\"E4F4^F4G4|\nV: Ins\nZ2|\n"), "{abc}");
    // the serde shape reads back the same events
    let json = serde_json::to_string(&events).unwrap();
    assert_eq!(serde_json::from_str::<Events>(&json).unwrap(), events);
}

#[test]
fn a_missing_duration_is_a_parse_error() {
    assert!(serde_json::from_str::<Events>(r#"{"events": []}"#).is_err());
    let empty: Events = serde_json::from_str(r#"{"duration": 3, "events": [], "extra": 1}"#).unwrap();
    assert_eq!(to_abc(&empty, false), Err(NoScore::TooFewBeats));
}
