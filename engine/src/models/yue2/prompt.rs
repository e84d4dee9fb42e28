//! Prompt assembly: the id sequences the AR half reads, exactly as the protocol lays them:
//!
//! ```text
//! [endoftext] + bpe(instruction + "\n[Tags]\n" + style + "\n[Lyrics]\n" + lyrics + "\n")
//!             + [abc_start] (+ bpe(abc) + [abc_end]) + [music_start]
//! ```
//!
//! The instruction depends on the cot mode (full: chord annotated score, melody: melody-only
//! score, off: straight to codec tokens with the score slot closed at once). Style and lyrics
//! reach the model verbatim; the only transformation is the tokenizer's NFC. The
//! unconditional stream of guidance keeps the instruction alone, repeats the same score ids,
//! and in off mode has no score slot at all.
//!
//! The instruction texts are data the checkpoint was trained on, like the token ids: the
//! defaults below are the published model's (the reference implementation's, word for
//! word). A backbone GGUF may carry others as `yue2.prompt.instruction.{full,melody,off}`.
use crate::gguf::GgufFile;
use crate::models::yue2::config::TokenLayout;
use crate::tokenizer::BpeTokenizer;

/// The score the prompt asks for (a request's `cot`): chord annotated, melody only, or
/// none (straight to codes).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Cot {
    #[default]
    Full,
    Melody,
    Off,
}

/// Instruction texts by cot mode.
#[derive(Clone, Debug, PartialEq)]
pub struct Instructions {
    pub full: String,
    pub melody: String,
    pub off: String,
}

impl Default for Instructions {
    fn default() -> Self {
        Instructions {
            full: "Generate a chord-annotated ABC transcription, then generate music with codec tokens from the given \
                conditions."
                .into(),
            melody: "Generate a melody-only ABC transcription without chord symbols, then generate music with codec \
                tokens from the given conditions."
                .into(),
            off: "Generate music with codec tokens from the given conditions.".into(),
        }
    }
}

impl Instructions {
    /// The file's texts where present, the built-in ones otherwise.
    pub fn from_gguf(f: &GgufFile) -> Self {
        let d = Instructions::default();
        let get = |k: &str, def: String| {
            f.get(&format!("yue2.prompt.instruction.{k}")).and_then(|v| v.as_str()).map(String::from).unwrap_or(def)
        };
        Instructions { full: get("full", d.full), melody: get("melody", d.melody), off: get("off", d.off) }
    }
    pub fn for_mode(&self, cot: Cot) -> &str {
        match cot {
            Cot::Full => &self.full,
            Cot::Melody => &self.melody,
            Cot::Off => &self.off,
        }
    }
}

/// What the score slot holds.
#[derive(Clone, Debug, PartialEq)]
pub enum Score<'a> {
    /// Open slot: the planning stage writes the score from here.
    Open,
    /// A written score (given by the caller or planned), as token ids.
    Ids(&'a [u32]),
    /// cot off: the slot is closed immediately (abc_start then abc_end).
    None,
}

/// Builds prompt id sequences.
pub struct PromptBuilder<'a> {
    pub tokenizer: &'a BpeTokenizer,
    pub tokens: TokenLayout,
    pub instructions: &'a Instructions,
}

impl PromptBuilder<'_> {
    fn header(&self, cot: Cot, text: &str) -> Vec<u32> {
        let mut ids = vec![self.tokens.endoftext];
        ids.extend(self.tokenizer.encode(&format!("{}{text}", self.instructions.for_mode(cot))));
        ids
    }

    /// The conditional stream. With `Score::Open` it ends on abc_start (the planning
    /// prefix); otherwise it ends on music_start (the semantic prefix).
    pub fn conditional(&self, cot: Cot, style: &str, lyrics: &str, score: &Score<'_>) -> Vec<u32> {
        let mut ids = self.header(cot, &format!("\n[Tags]\n{style}\n[Lyrics]\n{lyrics}\n"));
        ids.push(self.tokens.abc_start);
        match score {
            Score::Open => return ids,
            Score::Ids(s) => ids.extend_from_slice(s),
            Score::None => {}
        }
        ids.push(self.tokens.abc_end);
        ids.push(self.tokens.music_start);
        ids
    }

    /// The unconditional stream of guidance: the instruction alone (no newline after it),
    /// the same score ids, no score slot in off mode.
    pub fn unconditional(&self, cot: Cot, score: &Score<'_>) -> Vec<u32> {
        let mut ids = self.header(cot, "");
        match score {
            Score::None => {}
            Score::Ids(s) => {
                ids.push(self.tokens.abc_start);
                ids.extend_from_slice(s);
                ids.push(self.tokens.abc_end);
            }
            Score::Open => panic!("the unconditional stream needs a written score"),
        }
        ids.push(self.tokens.music_start);
        ids
    }
}

/// The codes of a source song between `start` and `end` seconds (-1 = the end), at 25 Hz.
pub fn source_section(codes: &[u32], start: f64, end: f64) -> &[u32] {
    let fps = 25.0;
    let a = ((start.max(0.0) * fps).round() as usize).min(codes.len());
    let b = if end < 0.0 { codes.len() } else { ((end * fps).round() as usize).clamp(a, codes.len()) };
    &codes[a..b]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::yue2::demo::{write_demo, Preset};

    fn with_tiny<R>(f: impl FnOnce(&BpeTokenizer, TokenLayout) -> R) -> R {
        let dir = tempfile::tempdir().unwrap();
        let (bb, _) = write_demo(dir.path(), Preset::Tiny, 0, &mut |_, _| {}).unwrap();
        let g = GgufFile::open(bb).unwrap();
        let tok = BpeTokenizer::from_gguf(&g).unwrap();
        let info = crate::models::yue2::config::BackboneInfo::from_gguf(&g).unwrap();
        f(&tok, info.tokens)
    }

    #[test]
    fn layouts_of_every_mode() {
        with_tiny(|tok, t| {
            let ins = Instructions { full: "F".into(), melody: "M".into(), off: "O".into() };
            let pb = PromptBuilder { tokenizer: tok, tokens: t, instructions: &ins };
            let text = |s: &str| tok.encode(s);
            let mut want = vec![t.endoftext];
            want.extend(text("F\n[Tags]\npop\n[Lyrics]\nla\n"));
            want.push(t.abc_start);
            assert_eq!(pb.conditional(Cot::Full, "pop", "la", &Score::Open), want);
            let abc = text("X:1");
            let mut closed = want.clone();
            closed.extend(&abc);
            closed.extend([t.abc_end, t.music_start]);
            assert_eq!(pb.conditional(Cot::Full, "pop", "la", &Score::Ids(&abc)), closed);

            let mut off = vec![t.endoftext];
            off.extend(text("O\n[Tags]\npop\n[Lyrics]\nla\n"));
            off.extend([t.abc_start, t.abc_end, t.music_start]);
            assert_eq!(pb.conditional(Cot::Off, "pop", "la", &Score::None), off);

            let mut u = vec![t.endoftext];
            u.extend(text("M"));
            u.push(t.abc_start);
            u.extend(&abc);
            u.extend([t.abc_end, t.music_start]);
            assert_eq!(pb.unconditional(Cot::Melody, &Score::Ids(&abc)), u);
            let mut uo = vec![t.endoftext];
            uo.extend(text("O"));
            uo.push(t.music_start);
            assert_eq!(pb.unconditional(Cot::Off, &Score::None), uo);
        });
    }

    #[test]
    fn lyrics_stay_verbatim_and_specials_stay_text() {
        with_tiny(|tok, t| {
            let ins = Instructions::default();
            let pb = PromptBuilder { tokenizer: tok, tokens: t, instructions: &ins };
            let ids = pb.conditional(Cot::Full, "", "<|endoftext|>  [chorus]", &Score::Open);
            assert_eq!(
                ids.iter().filter(|&&i| i == t.endoftext).count(),
                1,
                "only the leading endoftext is a control id"
            );
            assert!(tok.decode(&ids).contains("\n[Lyrics]\n<|endoftext|>  [chorus]\n"));
        });
    }

    #[test]
    fn source_section_in_seconds() {
        let codes: Vec<u32> = (0..250).collect();
        assert_eq!(source_section(&codes, 2.0, 4.0), &codes[50..100]);
        assert_eq!(source_section(&codes, 9.0, -1.0), &codes[225..]);
        assert_eq!(source_section(&codes, 20.0, -1.0).len(), 0);
        assert_eq!(source_section(&codes, 3.0, 1.0).len(), 0);
    }
}
