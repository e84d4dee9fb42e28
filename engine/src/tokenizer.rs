//! The text and ABC tokenizer: byte-level BPE with NFC normalisation and Qwen's
//! pre-tokenizer pattern, built from the GGUF's `tokenizer.ggml.*` metadata on top of the
//! `tokenizers` crate (which brings the Unicode tables and the regex engine).
//!
//! Special tokens are ids, never text: they are left out of the BPE vocabulary, so a
//! literal `<|endoftext|>` in lyrics encodes as the characters it is made of. Prompt
//! assembly inserts control ids directly.
use crate::gguf::{GgufError, GgufFile};
use std::collections::HashMap;
use tokenizers::models::bpe::BPE;
use tokenizers::normalizers::unicode::NFC;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::{PreTokenizerWrapper, SplitDelimiterBehavior, Tokenizer};

/// Qwen's pre-tokenizer: contractions, letter runs with one leading non-letter, single
/// digits, punctuation runs, newlines, and whitespace (a trailing space stays separate).
pub const QWEN_PATTERN: &str =
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// GGUF token types (llama.cpp numbering).
pub mod token_type {
    pub const NORMAL: i32 = 1;
    pub const UNKNOWN: i32 = 2;
    pub const CONTROL: i32 = 3;
    pub const USER_DEFINED: i32 = 4;
    pub const UNUSED: i32 = 5;
    pub const BYTE: i32 = 6;
}

#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    #[error(transparent)]
    Gguf(#[from] GgufError),
    #[error("{0}")]
    Build(String),
}

/// GPT-2's reversible map from bytes to printable characters (byte-level BPE alphabet).
pub fn byte_to_char_table() -> [char; 256] {
    let mut table = ['\0'; 256];
    let mut n = 0u32;
    for b in 0..256u32 {
        let printable = (0x21..=0x7e).contains(&b) || (0xa1..=0xac).contains(&b) || (0xae..=0xff).contains(&b);
        table[b as usize] = if printable {
            char::from_u32(b).unwrap()
        } else {
            n += 1;
            char::from_u32(255 + n).unwrap()
        };
    }
    table
}

/// Bytes to their byte-level BPE string.
pub fn bytes_to_bpe_string(bytes: &[u8], table: &[char; 256]) -> String {
    bytes.iter().map(|&b| table[b as usize]).collect()
}

/// The tokenizer of a backbone.
pub struct BpeTokenizer {
    inner: Tokenizer,
    tokens: Vec<String>,
    token_types: Vec<i32>,
    special: HashMap<String, u32>,
}

impl BpeTokenizer {
    /// Builds it from `tokenizer.ggml.tokens`, `.token_type` and `.merges`.
    pub fn from_gguf(f: &GgufFile) -> Result<Self, TokenizerError> {
        let model = f.get_str("tokenizer.ggml.model")?;
        if model != "gpt2" {
            return Err(TokenizerError::Build(format!(
                "{}: tokenizer.ggml.model is '{model}', only 'gpt2' byte-level BPE is supported",
                f.path().display()
            )));
        }
        let tokens: Vec<String> = f.get_str_array("tokenizer.ggml.tokens")?.into_iter().map(String::from).collect();
        let types: Vec<i32> = match f.get("tokenizer.ggml.token_type") {
            Some(_) => f.get_i64_array("tokenizer.ggml.token_type")?.into_iter().map(|t| t as i32).collect(),
            None => vec![token_type::NORMAL; tokens.len()],
        };
        let merges: Vec<String> = f.get_str_array("tokenizer.ggml.merges")?.into_iter().map(String::from).collect();
        Self::from_parts(tokens, types, &merges)
            .map_err(|e| TokenizerError::Build(format!("{}: {e}", f.path().display())))
    }

    /// Builds it from the token list, token types and "left right" merge lines.
    pub fn from_parts(tokens: Vec<String>, token_types: Vec<i32>, merges: &[String]) -> Result<Self, String> {
        if token_types.len() != tokens.len() {
            return Err(format!("{} token types for {} tokens", token_types.len(), tokens.len()));
        }
        let mut vocab: tokenizers::models::bpe::Vocab = Default::default();
        let mut special = HashMap::new();
        for (i, (t, &ty)) in tokens.iter().zip(&token_types).enumerate() {
            if ty == token_type::NORMAL || ty == token_type::BYTE {
                if vocab.insert(t.clone(), i as u32).is_some() {
                    return Err(format!("duplicate token {t:?} at id {i}"));
                }
            } else {
                special.insert(t.clone(), i as u32);
            }
        }
        let mut pairs = Vec::with_capacity(merges.len());
        for (i, m) in merges.iter().enumerate() {
            let (l, r) = m.split_once(' ').ok_or_else(|| format!("merge #{i} {m:?} is not 'left right'"))?;
            if !vocab.contains_key(l) || !vocab.contains_key(r) {
                return Err(format!("merge #{i} {m:?} names a token outside the vocabulary"));
            }
            pairs.push((l.to_string(), r.to_string()));
        }
        let bpe = BPE::builder().vocab_and_merges(vocab, pairs).build().map_err(|e| e.to_string())?;
        let mut inner = Tokenizer::new(bpe);
        inner.with_normalizer(Some(NFC));
        let split = Split::new(SplitPattern::Regex(QWEN_PATTERN.into()), SplitDelimiterBehavior::Isolated, false)
            .map_err(|e| e.to_string())?;
        let byte_level = ByteLevel::new(false, false, false);
        inner.with_pre_tokenizer(Some(Sequence::new(vec![
            PreTokenizerWrapper::Split(split),
            PreTokenizerWrapper::ByteLevel(byte_level),
        ])));
        inner.with_decoder(Some(ByteLevel::default()));
        Ok(BpeTokenizer { inner, tokens, token_types, special })
    }

    /// Ids of ordinary text (NFC-normalised first; specials are never matched).
    pub fn encode(&self, text: &str) -> Vec<u32> {
        self.inner.encode_fast(text, false).map(|e| e.get_ids().to_vec()).unwrap_or_default()
    }

    /// Text of ordinary ids; control and out-of-vocabulary ids are skipped.
    pub fn decode(&self, ids: &[u32]) -> String {
        let plain: Vec<u32> = ids
            .iter()
            .copied()
            .filter(|&i| (i as usize) < self.tokens.len() && !self.special.contains_key(&self.tokens[i as usize]))
            .collect();
        self.inner.decode(&plain, false).unwrap_or_default()
    }

    /// Number of entries (ordinary and special).
    pub fn len(&self) -> usize {
        self.tokens.len()
    }
    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }
    /// Id of a special token by its text (`<|endoftext|>`, `<abc>`).
    pub fn special_id(&self, text: &str) -> Option<u32> {
        self.special.get(text).copied()
    }
    pub fn token(&self, id: u32) -> Option<(&str, i32)> {
        self.tokens.get(id as usize).map(|t| (t.as_str(), self.token_types[id as usize]))
    }
}

/// Appends Qwen's special tokens after the ordinary ones (whose count is the id of
/// `<|endoftext|>`): `<|endoftext|>`, `<|im_start|>`, `<|im_end|>`, then `<|extra_i|>` slots
/// up to `end`, with each of `named` (user-defined tokens, YuE2's `<abc>` and `</abc>`)
/// taking the slot of its id. In YuE2's published layout that is 208 entries, 151851 in all.
pub fn append_qwen_specials(toks: &mut Vec<String>, types: &mut Vec<i32>, end: u32, named: &[(u32, &str)]) {
    let eot = toks.len();
    for t in ["<|endoftext|>", "<|im_start|>", "<|im_end|>"] {
        toks.push(t.into());
        types.push(token_type::CONTROL);
    }
    while toks.len() < end as usize {
        let id = toks.len() as u32;
        let (t, ty) = match named.iter().find(|(i, _)| *i == id) {
            Some((_, text)) => (text.to_string(), token_type::USER_DEFINED),
            None => (format!("<|extra_{}|>", id as usize - eot - 3), token_type::CONTROL),
        };
        toks.push(t);
        types.push(ty);
    }
}

/// The byte-level vocabulary and merges of a tiktoken ranks file (`base64 rank` lines),
/// in the GPT-2 layout GGUF expects: token `i` is the token of rank `i`, and every split
/// of a token into two tokens of the vocabulary is a merge, ordered by the rank of the
/// token it makes, ties by the ranks of its halves.
#[derive(Debug)]
pub struct TiktokenVocab {
    pub tokens: Vec<String>,
    pub merges: Vec<String>,
}

/// Parses and converts a tiktoken ranks file.
pub fn convert_tiktoken(text: &str) -> Result<TiktokenVocab, String> {
    use std::collections::HashMap as Map;
    let mut by_rank: Vec<Option<Vec<u8>>> = Vec::new();
    for (lineno, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let (b64, rank) = line.split_once(' ').ok_or_else(|| format!("line {}: not 'base64 rank'", lineno + 1))?;
        let rank: usize = rank.trim().parse().map_err(|_| format!("line {}: bad rank {rank:?}", lineno + 1))?;
        let bytes = base64_decode(b64).ok_or_else(|| format!("line {}: bad base64", lineno + 1))?;
        if rank >= by_rank.len() {
            by_rank.resize(rank + 1, None);
        }
        if by_rank[rank].replace(bytes).is_some() {
            return Err(format!("line {}: rank {rank} appears twice", lineno + 1));
        }
    }
    let ranks: Vec<Vec<u8>> = by_rank
        .into_iter()
        .enumerate()
        .map(|(r, b)| b.ok_or_else(|| format!("rank {r} is missing")))
        .collect::<Result<_, _>>()?;
    let index: Map<&[u8], usize> = ranks.iter().enumerate().map(|(r, b)| (b.as_slice(), r)).collect();
    let table = byte_to_char_table();
    let tokens: Vec<String> = ranks.iter().map(|b| bytes_to_bpe_string(b, &table)).collect();
    let mut merges: Vec<(usize, usize, usize)> = Vec::new();
    for (rank, bytes) in ranks.iter().enumerate() {
        if bytes.len() < 2 {
            continue;
        }
        let mut local: Vec<(usize, usize, usize)> =
            (1..bytes.len()).filter_map(|k| Some((rank, *index.get(&bytes[..k])?, *index.get(&bytes[k..])?))).collect();
        local.sort_by_key(|&(_, a, b)| (a, b));
        merges.extend(local);
    }
    // Already grouped by increasing rank of the merged token.
    let merges = merges.into_iter().map(|(_, a, b)| format!("{} {}", tokens[a], tokens[b])).collect();
    Ok(TiktokenVocab { tokens, merges })
}

fn base64_decode(s: &str) -> Option<Vec<u8>> {
    fn val(c: u8) -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => (c - b'A') as u32,
            b'a'..=b'z' => (c - b'a' + 26) as u32,
            b'0'..=b'9' => (c - b'0' + 52) as u32,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        })
    }
    let s = s.trim().trim_end_matches('=').as_bytes();
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    for chunk in s.chunks(4) {
        let mut acc = 0u32;
        for (i, &c) in chunk.iter().enumerate() {
            acc |= val(c)? << (18 - 6 * i);
        }
        let n = match chunk.len() {
            4 => 3,
            3 => 2,
            2 => 1,
            _ => return None,
        };
        for i in 0..n {
            out.push((acc >> (16 - 8 * i)) as u8);
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests;
