//! MiniMax Music 3's prompt: the caption and lyrics cleaned as the reference pipeline
//! cleans them (diffusers' `_clean_caption` and `_normalize_lyrics`, which the published
//! checkpoint was sampled with; where minimaxmusic.cpp's prose differs, the code wins), BPE-encoded
//! between the control tokens, and the unconditional stream of the guidance pair.
//!
//! ```text
//! [im_start, caption_start] caption [caption_end, lyrics_start] lyrics [lyrics_end, im_end, audio_start]
//! ```
//! No EOS. The unconditional stream is the same sequence with everything between the first
//! and the last two tokens replaced by the audio CFG token.
use crate::models::mm3::config::{TokenLayout, MAX_PROMPT_TOKENS};
use crate::tokenizer::{token_type, BpeTokenizer as Tokenizer};
use regex::Regex;
use std::sync::LazyLock;

static SPECIAL_TAG: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"<\|([^|]*)\|>").unwrap());
static HEADING: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"^\s{0,3}#{1,6}\s+").unwrap());
static BULLET: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"^\s*[*+-]\s+").unwrap());
static STAR_BULLET: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"^\s*\*\s+").unwrap());
static BOLD: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"\*\*([^*]+)\*\*").unwrap());
static RULE: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"(?m)^\s*[-*_]{3,}\s*$").unwrap());
static BLANK_LINES: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"\n{2,}").unwrap());
static LEADING_TAGS: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"^[ \t]*((?:\[[^\]]+\][ \t]*)+)").unwrap());
static TAG: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"\[([^\]]+)\]").unwrap());

/// Python's `str.splitlines()`: every line boundary it knows, `\r\n` as one, no empty
/// last line after a trailing boundary.
fn split_lines(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut it = s.char_indices().peekable();
    while let Some((i, c)) = it.next() {
        if matches!(c, '\n' | '\r' | '\x0b' | '\x0c' | '\x1c' | '\x1d' | '\x1e' | '\u{85}' | '\u{2028}' | '\u{2029}') {
            out.push(&s[start..i]);
            let mut end = i + c.len_utf8();
            if c == '\r' {
                if let Some(&(j, '\n')) = it.peek() {
                    it.next();
                    end = j + 1;
                }
            }
            start = end;
        }
    }
    if start < s.len() {
        out.push(&s[start..]);
    }
    out
}

/// Python's whitespace (`str.isspace`): Unicode White_Space plus the separators 0x1c-0x1f.
fn is_py_space(c: char) -> bool {
    c.is_whitespace() || ('\x1c'..='\x1f').contains(&c)
}

/// `(?<!\*)\*([^*\n]+)\*(?!\*)` -> `\1`, scanning as Python's `re.sub` does (lookarounds
/// see the original text).
fn strip_italics(line: &str) -> String {
    let b: Vec<char> = line.chars().collect();
    let mut out = String::with_capacity(line.len());
    let mut p = 0;
    while p < b.len() {
        if b[p] == '*' && (p == 0 || b[p - 1] != '*') {
            // The group runs to the next '*' (it cannot hold one), at least one character.
            if let Some(q) = (p + 1..b.len()).find(|&q| b[q] == '*' || b[q] == '\n') {
                if b[q] == '*' && q > p + 1 && b.get(q + 1) != Some(&'*') {
                    out.extend(&b[p + 1..q]);
                    p = q + 1;
                    continue;
                }
            }
        }
        out.push(b[p]);
        p += 1;
    }
    out
}

/// diffusers' `_clean_caption`: `<|x y|>` tags become "x is y", markdown headings, bullets,
/// bold and italics are stripped line by line, rules and blank lines removed.
pub fn clean_caption(caption: &str) -> String {
    let text = SPECIAL_TAG.replace_all(caption, |c: &regex::Captures<'_>| {
        let inner = c[1].trim_matches(is_py_space);
        match inner.split_once(is_py_space) {
            Some((a, b)) => format!("{a} is {}", b.trim_start_matches(is_py_space)),
            None => inner.to_string(),
        }
    });
    let lines: Vec<String> = split_lines(&text)
        .into_iter()
        .map(|line| {
            let line = HEADING.replace(line, "");
            let line = BULLET.replace(&line, "");
            let mut line = STAR_BULLET.replace(&line, "").into_owned();
            while line.contains("**") {
                let updated = BOLD.replace_all(&line, "$1").into_owned();
                if updated == line {
                    break;
                }
                line = updated;
            }
            strip_italics(&line).trim_end_matches(is_py_space).to_string()
        })
        .collect();
    let text = lines.join("\n");
    let text = RULE.replace_all(&text, "");
    let text = text.replace("• ", "").replace("    ", "");
    BLANK_LINES.replace_all(&text, "\n").into_owned()
}

/// diffusers' `_normalize_lyrics`: a line that starts with tags keeps only its tags (the
/// text after them on that line is dropped), tags and `^` separators go to their own
/// lines, tag contents are lowercased, and `[start]` opens the lyrics.
pub fn normalize_lyrics(lyrics: &str) -> String {
    let lines: Vec<String> = lyrics
        .split('\n')
        .map(|line| match LEADING_TAGS.captures(line) {
            Some(c) => c[1].trim_matches(is_py_space).to_string(),
            None => line.to_string(),
        })
        .collect();
    let text = lines.join("\n").replace("] ", "]\n").replace(" [", "\n[").replace(" ^ ", "\n");
    let text = TAG.replace_all(&text, |c: &regex::Captures<'_>| format!("[{}]", c[1].to_lowercase()));
    format!("[start]\n{text}")
}

/// Encodes `text` as the reference's tokenizer does: the strings of added tokens map to
/// their ids, the rest is BPE.
fn encode(tok: &Tokenizer, layout: &TokenLayout, text: &str) -> Vec<u32> {
    let added: Vec<(String, u32)> = (layout.text_vocab..tok.len() as u32)
        .filter_map(|id| {
            tok.token(id)
                .filter(|(t, ty)| !t.is_empty() && *ty == token_type::CONTROL)
                .map(|(t, _)| (t.to_string(), id))
        })
        .collect();
    let mut ids = Vec::new();
    let mut rest = text;
    loop {
        // The earliest added token, the longest at one position.
        let hit = added
            .iter()
            .filter_map(|(t, id)| rest.find(t.as_str()).map(|at| (at, std::cmp::Reverse(t.len()), *id)))
            .min();
        match hit {
            Some((at, std::cmp::Reverse(len), id)) => {
                if at > 0 {
                    ids.extend(tok.encode(&rest[..at]));
                }
                ids.push(id);
                rest = &rest[at + len..];
            }
            None => {
                if !rest.is_empty() {
                    ids.extend(tok.encode(rest));
                }
                return ids;
            }
        }
    }
}

/// The two token streams of a song.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Prompt {
    pub cond: Vec<u32>,
    pub uncond: Vec<u32>,
}

/// The prompt of `caption` and `lyrics`; more than [`MAX_PROMPT_TOKENS`] is an error.
pub fn build(tok: &Tokenizer, layout: &TokenLayout, caption: &str, lyrics: &str) -> Result<Prompt, String> {
    let l = layout;
    let mut cond = vec![l.im_start, l.caption_start];
    cond.extend(encode(tok, l, &clean_caption(caption)));
    cond.extend([l.caption_end, l.lyrics_start]);
    cond.extend(encode(tok, l, &normalize_lyrics(lyrics)));
    cond.extend([l.lyrics_end, l.im_end, l.audio_start]);
    if cond.len() > MAX_PROMPT_TOKENS {
        return Err(format!(
            "the prompt is {} tokens, over the {MAX_PROMPT_TOKENS} the model takes: shorten the lyrics or the caption",
            cond.len()
        ));
    }
    let n = cond.len();
    let mut uncond = cond.clone();
    uncond[1..n - 2].fill(l.audio_cfg);
    Ok(Prompt { cond, uncond })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caption_cleaning() {
        assert_eq!(clean_caption("<|genre  pop rock|> and <|x|>"), "genre is pop rock and x");
        assert_eq!(clean_caption("## Title\n- item\n* star\n**bold** and *it*"), "Title\nitem\nstar\nbold and it");
        assert_eq!(clean_caption("a\n\n\n---\nb"), "a\nb");
        assert_eq!(clean_caption("x\r\ny"), "x\ny");
        assert_eq!(clean_caption("**a*b"), "**a*b");
        assert_eq!(clean_caption("• one    two"), "onetwo");
    }

    #[test]
    fn lyrics_normalizing() {
        assert_eq!(normalize_lyrics("[Verse 1] hello\nla la"), "[start]\n[verse 1]\nla la");
        assert_eq!(normalize_lyrics("[Intro][Verse]\nla"), "[start]\n[intro][verse]\nla");
        assert_eq!(normalize_lyrics("one ^ two"), "[start]\none\ntwo");
        assert_eq!(normalize_lyrics("(Intro [Soft])"), "[start]\n(Intro\n[soft])");
        assert_eq!(normalize_lyrics("[A] [B]"), "[start]\n[a]\n[b]");
    }
}
