//! One note in ABC (§5.2 step 21): spelled for the key signature, an accidental written
//! only where the letter's state in the bar changes, octave marks.
use super::spelling::KeySignature;

const LETTERS: [char; 7] = ['C', 'D', 'E', 'F', 'G', 'A', 'B'];

/// The twelve pitch classes spelled for a signature of -7 (first row) to +7 accidentals.
const PITCH_NAMES: [[&str; 12]; 15] = [
    ["C", "Db", "D", "Eb", "Fb", "F", "Gb", "G", "Ab", "Bbb", "Bb", "Cb"],
    ["C", "Db", "D", "Eb", "Fb", "F", "Gb", "G", "Ab", "A", "Bb", "Cb"],
    ["C", "Db", "D", "Eb", "E", "F", "Gb", "G", "Ab", "A", "Bb", "Cb"],
    ["C", "Db", "D", "Eb", "E", "F", "Gb", "G", "Ab", "A", "Bb", "B"],
    ["C", "Db", "D", "Eb", "E", "F", "F#", "G", "Ab", "A", "Bb", "B"],
    ["C", "C#", "D", "Eb", "E", "F", "F#", "G", "Ab", "A", "Bb", "B"],
    ["C", "C#", "D", "Eb", "E", "F", "F#", "G", "G#", "A", "Bb", "B"],
    ["C", "C#", "D", "D#", "E", "F", "F#", "G", "G#", "A", "Bb", "B"],
    ["C", "C#", "D", "D#", "E", "F", "F#", "G", "G#", "A", "A#", "B"],
    ["C", "C#", "D", "D#", "E", "E#", "F#", "G", "G#", "A", "A#", "B"],
    ["B#", "C#", "D", "D#", "E", "E#", "F#", "G", "G#", "A", "A#", "B"],
    ["B#", "C#", "D", "D#", "E", "E#", "F#", "F##", "G#", "A", "A#", "B"],
    ["B#", "C#", "C##", "D#", "E", "E#", "F#", "F##", "G#", "A", "A#", "B"],
    ["B#", "C#", "C##", "D#", "E", "E#", "F#", "F##", "G#", "G##", "A#", "B"],
    ["B#", "C#", "C##", "D#", "D##", "E#", "F#", "F##", "G#", "G##", "A#", "B"],
];

/// The accidental marks for -2..=2.
const MARKS: [&str; 5] = ["__", "_", "=", "^", "^^"];

/// The accidentals in force while a bar is written: the key signature's, and those the
/// bar has set so far, per letter across octaves.
pub(super) struct BarState {
    key: KeySignature,
    signature: [i32; 7],
    bar: [Option<i32>; 7],
}

impl BarState {
    pub(super) fn new(key: KeySignature) -> Self {
        let count = key.accidentals();
        let order = if count > 0 { "FCGDAEB" } else { "BEADGCF" };
        let mut signature = [0; 7];
        for letter in order.chars().take(count.unsigned_abs() as usize) {
            signature[letter_index(letter)] = count.signum();
        }
        BarState { key, signature, bar: [None; 7] }
    }

    pub(super) fn key(&self) -> KeySignature {
        self.key
    }

    /// The note `pitch` (MIDI) as ABC, updating the bar's accidentals.
    pub(super) fn note(&mut self, pitch: u8) -> String {
        let pitch = i32::from(pitch);
        let name = PITCH_NAMES[(self.key.accidentals() + 7) as usize][pitch.rem_euclid(12) as usize];
        let letter = name.chars().next().unwrap_or('C');
        let accidental = match &name[1..] {
            "" => 0,
            "#" => 1,
            "##" => 2,
            "b" => -1,
            _ => -2,
        };
        let mut octave = (pitch - 60).div_euclid(12);
        match (pitch.rem_euclid(12), accidental) {
            (11, -1) => octave += 1,
            (0, 1) => octave -= 1,
            _ => {}
        }
        let index = letter_index(letter);
        let mut text = String::new();
        if self.bar[index].unwrap_or(self.signature[index]) != accidental {
            self.bar[index] = Some(accidental);
            text.push_str(MARKS[(accidental + 2) as usize]);
        }
        if octave > 0 {
            text.push(letter.to_ascii_lowercase());
            text.push_str(&"'".repeat(octave as usize - 1));
        } else {
            text.push(letter);
            text.push_str(&",".repeat(octave.unsigned_abs() as usize));
        }
        text
    }
}

fn letter_index(letter: char) -> usize {
    LETTERS.iter().position(|&l| l == letter).unwrap_or(0)
}
