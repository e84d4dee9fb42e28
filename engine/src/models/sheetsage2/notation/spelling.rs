//! Key and chord labels: canonical key tonics, chord roots re-spelled for the key they sound
//! in (the head revision's `chord_spelling`), and both written as ABC (§5.2 steps 5, 6, 8).
use super::NoScore;

const LETTERS: [char; 7] = ['C', 'D', 'E', 'F', 'G', 'A', 'B'];
const SHARP_NAMES: [&str; 12] = ["C", "C#", "D", "D#", "E", "F", "F#", "G", "G#", "A", "A#", "B"];
const FLAT_NAMES: [&str; 12] = ["C", "Db", "D", "Eb", "E", "F", "Gb", "G", "Ab", "A", "Bb", "B"];
const MAJOR_TONICS: [&str; 12] = ["C", "Db", "D", "Eb", "E", "F", "F#", "G", "Ab", "A", "Bb", "B"];
const MINOR_TONICS: [&str; 12] = ["C", "C#", "D", "D#", "E", "F", "F#", "G", "G#", "A", "Bb", "B"];
/// Semitones above the root of the major scale's degrees 1..7.
const MAJOR_SCALE: [i32; 7] = [0, 2, 4, 5, 7, 9, 11];

/// The 30 key signatures ABC has, with their accidental counts (sharps positive).
const SIGNATURES: [(&str, i32); 30] = [
    ("C", 0),
    ("G", 1),
    ("D", 2),
    ("A", 3),
    ("E", 4),
    ("B", 5),
    ("F#", 6),
    ("C#", 7),
    ("F", -1),
    ("Bb", -2),
    ("Eb", -3),
    ("Ab", -4),
    ("Db", -5),
    ("Gb", -6),
    ("Cb", -7),
    ("Am", 0),
    ("Em", 1),
    ("Bm", 2),
    ("F#m", 3),
    ("C#m", 4),
    ("G#m", 5),
    ("D#m", 6),
    ("A#m", 7),
    ("Dm", -1),
    ("Gm", -2),
    ("Cm", -3),
    ("Fm", -4),
    ("Bbm", -5),
    ("Ebm", -6),
    ("Abm", -7),
];

/// A chord quality: its label, its ABC suffix, its tones as offsets on the line of fifths.
struct Quality {
    name: &'static str,
    abc: &'static str,
    fifths: &'static [i32],
}

const QUALITIES: [Quality; 15] = [
    Quality { name: "maj", abc: "", fifths: &[0, 4, 1] },
    Quality { name: "min", abc: "m", fifths: &[0, -3, 1] },
    Quality { name: "dim", abc: "dim", fifths: &[0, -3, -6] },
    Quality { name: "aug", abc: "aug", fifths: &[0, 4, 8] },
    Quality { name: "maj7", abc: "maj7", fifths: &[0, 4, 1, 5] },
    Quality { name: "min7", abc: "m7", fifths: &[0, -3, 1, -2] },
    Quality { name: "7", abc: "7", fifths: &[0, 4, 1, -2] },
    Quality { name: "hdim7", abc: "m7b5", fifths: &[0, -3, -6, -2] },
    Quality { name: "dim7", abc: "dim7", fifths: &[0, -3, -6, -9] },
    Quality { name: "minmaj7", abc: "m(maj7)", fifths: &[0, -3, 1, 5] },
    Quality { name: "sus2", abc: "sus2", fifths: &[0, 2, 1] },
    Quality { name: "sus4", abc: "sus4", fifths: &[0, -1, 1] },
    Quality { name: "sus4(b7)", abc: "7sus4", fifths: &[0, -1, 1, -2] },
    Quality { name: "maj6", abc: "6", fifths: &[0, 4, 1, 3] },
    Quality { name: "min6", abc: "m6", fifths: &[0, -3, 1, 3] },
];

fn quality(name: &str) -> Option<&'static Quality> {
    QUALITIES.iter().find(|q| q.name == name)
}

/// An ABC key signature, one of the 30 that ABC names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct KeySignature(usize);

impl KeySignature {
    fn named(name: &str) -> Option<Self> {
        SIGNATURES.iter().position(|(n, _)| *n == name).map(KeySignature)
    }

    /// The ABC name, `Eb`, `C#m`.
    pub(super) fn name(self) -> &'static str {
        SIGNATURES[self.0].0
    }

    /// Sharps (positive) or flats (negative) of the signature, -7..=7.
    pub(super) fn accidentals(self) -> i32 {
        SIGNATURES[self.0].1
    }
}

/// A pitch name: a letter A-G and at most two sharps or flats.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Root {
    pitch_class: i32,
    letter: char,
    accidental: i32,
}

impl Root {
    fn parse(text: &str) -> Option<Root> {
        let mut chars = text.chars();
        let letter = chars.next().filter(|c| ('A'..='G').contains(c))?;
        let accidental = match chars.as_str() {
            "" => 0,
            "#" => 1,
            "##" => 2,
            "b" => -1,
            "bb" => -2,
            _ => return None,
        };
        Some(Root { pitch_class: (natural_pitch_class(letter) + accidental).rem_euclid(12), letter, accidental })
    }
}

fn letter_index(letter: char) -> usize {
    LETTERS.iter().position(|&l| l == letter).unwrap_or(6)
}

fn natural_pitch_class(letter: char) -> i32 {
    MAJOR_SCALE[letter_index(letter)]
}

/// The letter's position on the line of fifths, F = 0 up to B = 6.
fn natural_fifth(letter: char) -> i32 {
    match letter {
        'F' => 0,
        'C' => 1,
        'G' => 2,
        'D' => 3,
        'A' => 4,
        'E' => 5,
        _ => 6,
    }
}

/// The accidental (-6..=5) that makes `letter` sound as `pitch_class`.
fn accidental_to(letter: char, pitch_class: i32) -> i32 {
    (pitch_class - natural_pitch_class(letter) + 6).rem_euclid(12) - 6
}

fn spell(letter: char, accidental: i32) -> String {
    let mark = if accidental >= 0 { "#" } else { "b" };
    format!("{letter}{}", mark.repeat(accidental.unsigned_abs() as usize))
}

/// `None`, `X` and `?` are the labels without a chord.
fn is_no_chord(chord: &str) -> bool {
    matches!(chord, "N" | "X" | "?")
}

/// `C#:major` -> `Db:major`: the tonic a key is named by, one per pitch class and mode.
pub(super) fn canonical_key(key: &str) -> Result<String, NoScore> {
    let (tonic, mode) = key.split_once(':').ok_or_else(|| NoScore::InvalidKey(key.to_string()))?;
    let root = Root::parse(tonic).ok_or_else(|| NoScore::InvalidKey(key.to_string()))?;
    let tonics = match mode {
        "major" => MAJOR_TONICS,
        "minor" => MINOR_TONICS,
        _ => return Err(NoScore::UnsupportedKeyMode { mode: mode.to_string(), key: key.to_string() }),
    };
    Ok(format!("{}:{mode}", tonics[root.pitch_class as usize]))
}

/// The chord's root spelled nearest the key on the line of fifths, quality and inversion
/// kept: `D#:maj` in `Eb:major` -> `Eb:maj`. The key is a canonical label.
pub(super) fn respell_chord(chord: &str, key: &str) -> Result<String, NoScore> {
    if is_no_chord(chord) {
        return Ok(chord.to_string());
    }
    let (root_text, descriptor) = chord.split_once(':').ok_or_else(|| NoScore::ChordWithoutQuality(chord.into()))?;
    let quality_name = descriptor.split('/').next().unwrap_or_default();
    let quality = quality(quality_name).ok_or_else(|| NoScore::UnsupportedChord(chord.into()))?;
    let (tonic_text, mode) = key.split_once(':').unwrap_or((key, key));
    let invalid = || NoScore::InvalidChordInKey { chord: chord.into(), key: key.into() };
    let root = Root::parse(root_text).ok_or_else(invalid)?;
    let tonic = Root::parse(tonic_text).ok_or_else(invalid)?;
    let relative_major = if mode == "minor" { tonic.pitch_class - 9 } else { tonic.pitch_class };
    let major = Root::parse(MAJOR_TONICS[relative_major.rem_euclid(12) as usize]).ok_or_else(invalid)?;
    let key_position = natural_fifth(major.letter) + 7 * major.accidental;
    let cost = |letter: char| {
        let position = natural_fifth(letter) + 7 * accidental_to(letter, root.pitch_class);
        let distance = |offset: i32| ((position + offset - (key_position + 2)).abs() - 3).max(0);
        distance(quality.fifths[0]) + quality.fifths.iter().map(|&f| distance(f)).sum::<i32>()
    };
    // min_by_key keeps the first of equal costs: ties go to the earlier letter of CDEFGAB
    let best = LETTERS.into_iter().min_by_key(|&letter| cost(letter)).unwrap_or('C');
    Ok(format!("{}:{descriptor}", spell(best, accidental_to(best, root.pitch_class))))
}

/// A double sharp or flat as the plain pitch, unless it is kept.
fn portable_pitch(text: &str, root: Root, keep_double: bool) -> String {
    if keep_double || root.accidental.abs() <= 1 {
        text.to_string()
    } else if root.accidental > 0 {
        SHARP_NAMES[root.pitch_class as usize].to_string()
    } else {
        FLAT_NAMES[root.pitch_class as usize].to_string()
    }
}

/// The slash bass of a chord: a pitch name as it is, or a scale degree (1..=13, at most two
/// sharps or flats before it) from the root: `C` with `3` -> `E`, `Db` with `b3` -> `Fb`.
fn bass_pitch(root: Root, degree_text: &str) -> Result<String, NoScore> {
    if let Some(bass) = Root::parse(degree_text) {
        return Ok(portable_pitch(degree_text, bass, true));
    }
    let invalid = || NoScore::InvalidBassDegree(degree_text.to_string());
    let digits = degree_text.find(|c: char| c.is_ascii_digit()).ok_or_else(invalid)?;
    let (accidentals, number) = degree_text.split_at(digits);
    let degree: i32 = match number.parse::<u32>() {
        Ok(d @ 1..=13) if number.bytes().all(|b| b.is_ascii_digit()) => d as i32,
        _ => return Err(invalid()),
    };
    let shift = match accidentals {
        "" => 0,
        "#" | "##" => accidentals.len() as i32,
        "b" | "bb" => -(accidentals.len() as i32),
        _ => return Err(invalid()),
    };
    let interval = MAJOR_SCALE[((degree - 1) % 7) as usize] + 12 * ((degree - 1) / 7) + shift;
    let target = (root.pitch_class + interval).rem_euclid(12);
    let letter = LETTERS[(letter_index(root.letter) + degree as usize - 1) % 7];
    let accidental = accidental_to(letter, target);
    Ok(if accidental.abs() <= 2 {
        spell(letter, accidental)
    } else if root.accidental > 0 || shift > 0 {
        SHARP_NAMES[target as usize].to_string()
    } else {
        FLAT_NAMES[target as usize].to_string()
    })
}

/// A chord label as ABC chord text: `Db:min7/b3` -> `Dbm7/Fb`, `C:maj/3` -> `C/E`; empty for
/// no chord.
pub(super) fn chord_abc(chord: &str) -> Result<String, NoScore> {
    if is_no_chord(chord) {
        return Ok(String::new());
    }
    let (root_text, descriptor) = chord.split_once(':').ok_or_else(|| NoScore::ChordWithoutQuality(chord.into()))?;
    let (quality_name, bass) = match descriptor.split_once('/') {
        Some((q, b)) => (q, Some(b)),
        None => (descriptor, None),
    };
    let quality = quality(quality_name).ok_or_else(|| NoScore::UnsupportedChord(chord.into()))?;
    let root = Root::parse(root_text).ok_or_else(|| NoScore::InvalidChord(chord.into()))?;
    let mut text = portable_pitch(root_text, root, true) + quality.abc;
    if let Some(bass) = bass {
        text.push('/');
        text.push_str(&bass_pitch(root, bass)?);
    }
    Ok(text)
}

/// A key label as an ABC key signature: `Db:major` -> `Db`, `C#:minor` -> `C#m` (a bare
/// `Bbm` or `Eb` is taken too). A name ABC lacks is tried in flats, then in sharps, or the
/// other way round when the label is in sharps.
pub(super) fn key_abc(key: &str) -> Result<KeySignature, NoScore> {
    let (root_text, suffix) = match key.split_once(':') {
        Some((root, "major")) => (root, ""),
        Some((root, "minor")) => (root, "m"),
        Some((_, mode)) => {
            return Err(NoScore::UnsupportedKeyMode { mode: mode.to_string(), key: key.to_string() });
        }
        None => key.strip_suffix('m').map_or((key, ""), |root| (root, "m")),
    };
    let root = Root::parse(root_text).ok_or_else(|| NoScore::InvalidKey(key.to_string()))?;
    let pc = root.pitch_class as usize;
    let (first, second) =
        if root.accidental < 0 { (FLAT_NAMES[pc], SHARP_NAMES[pc]) } else { (SHARP_NAMES[pc], FLAT_NAMES[pc]) };
    [portable_pitch(root_text, root, false), first.to_string(), second.to_string()]
        .iter()
        .find_map(|name| KeySignature::named(&format!("{name}{suffix}")))
        .ok_or_else(|| NoScore::KeyWithoutSignature(key.to_string()))
}
