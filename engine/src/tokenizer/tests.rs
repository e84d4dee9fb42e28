use super::*;
use std::path::PathBuf;

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// A tiny byte-level vocabulary: the 256 byte tokens, a few merges, two specials.
fn tiny() -> BpeTokenizer {
    let table = byte_to_char_table();
    let mut tokens: Vec<String> = (0..=255u8).map(|b| table[b as usize].to_string()).collect();
    let mut types = vec![token_type::BYTE; 256];
    let g = |s: &str| bytes_to_bpe_string(s.as_bytes(), &table);
    let merges =
        vec![format!("{} {}", g("h"), g("e")), format!("{} {}", g("he"), g("l")), format!("{} {}", g(" "), g("w"))];
    for m in ["he", "hel", " w"] {
        tokens.push(g(m));
        types.push(token_type::NORMAL);
    }
    tokens.push("<|endoftext|>".into());
    types.push(token_type::CONTROL);
    BpeTokenizer::from_parts(tokens, types, &merges).unwrap()
}

#[test]
fn byte_table_is_a_bijection_onto_printables() {
    let t = byte_to_char_table();
    let set: std::collections::HashSet<char> = t.iter().copied().collect();
    assert_eq!(set.len(), 256);
    assert_eq!(t[b'A' as usize], 'A');
    assert_eq!(t[b' ' as usize], 'Ġ');
    assert_eq!(t[b'\n' as usize], 'Ċ');
}

#[test]
fn merges_apply_and_specials_stay_text() {
    let tok = tiny();
    assert_eq!(tok.encode("hel w"), vec![257, 258]);
    let ids = tok.encode("<|endoftext|>");
    assert_eq!(ids.len(), "<|endoftext|>".len(), "special must encode byte by byte: {ids:?}");
    assert!(!ids.contains(&259));
    assert_eq!(tok.special_id("<|endoftext|>"), Some(259));
    assert_eq!(tok.decode(&[257, 258, 259, 999]), "hel w");
}

#[test]
fn nfc_is_applied_before_bpe() {
    let tok = tiny();
    assert_eq!(tok.encode("e\u{301}"), tok.encode("\u{e9}"));
    assert_eq!(tok.encode("\u{e9}"), [0xc3, 0xa9].iter().map(|&b| b as u32).collect::<Vec<_>>());
}

#[test]
fn tiktoken_conversion_builds_merges_by_rank() {
    // ranks: a b c ab abc ; base64 of each
    let text = "YQ== 0\nYg== 1\nYw== 2\nYWI= 3\nYWJj 4\n";
    let v = convert_tiktoken(text).unwrap();
    assert_eq!(v.tokens, vec!["a", "b", "c", "ab", "abc"]);
    assert_eq!(v.merges, vec!["a b", "ab c"]);
    assert!(convert_tiktoken("YQ== 0\nYw== 2\n").unwrap_err().contains("rank 1 is missing"));
    assert!(convert_tiktoken("!!! 0\n").unwrap_err().contains("base64"));
}

/// The real Qwen BPE from the ranks file that scripts/fetch-qwen-tiktoken.sh fetches from
/// PyPI (the test command runs it first).
fn qwen() -> BpeTokenizer {
    let ranks_path = std::env::var_os("YUED_QWEN_TIKTOKEN")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join(".cache/qwen.tiktoken"));
    let text = std::fs::read_to_string(&ranks_path).unwrap_or_else(|e| {
        panic!("{}: {e}; run scripts/fetch-qwen-tiktoken.sh (the test command does)", ranks_path.display())
    });
    let v = convert_tiktoken(&text).unwrap();
    assert_eq!(v.tokens.len(), 151643);
    let mut tokens = v.tokens;
    let mut types = vec![token_type::NORMAL; tokens.len()];
    tokens.push("<|endoftext|>".into());
    types.push(token_type::CONTROL);
    BpeTokenizer::from_parts(tokens, types, &v.merges).unwrap()
}

/// The prompt streams of the three cot modes with the built-in (published) instruction
/// texts, against the ids that scripts/ref/tokenizer_ids.py assembled with tiktoken from
/// yue2.cpp's layout (fixtures/tokenizer/prompts.json).
#[test]
fn published_prompts_match_the_reference_ids() {
    use crate::models::yue2::prompt::{Cot, Instructions, PromptBuilder, Score};
    let tok = qwen();
    let f: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(repo_root().join("fixtures/tokenizer/prompts.json")).unwrap())
            .unwrap();
    let ids = |v: &serde_json::Value| -> Vec<u32> {
        v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect()
    };
    let ins = Instructions::default();
    let pb =
        PromptBuilder { tokenizer: &tok, tokens: crate::models::yue2::config::TokenLayout::FULL, instructions: &ins };
    let (style, lyrics) = (f["style"].as_str().unwrap(), f["lyrics"].as_str().unwrap());
    let abc = tok.encode(f["abc"].as_str().unwrap());
    assert_eq!(abc, ids(&f["abc_ids"]));
    let modes = f["modes"].as_array().unwrap();
    assert_eq!(modes.len(), 3);
    for m in modes {
        let cot = match m["cot"].as_str().unwrap() {
            "full" => Cot::Full,
            "melody" => Cot::Melody,
            "off" => Cot::Off,
            other => panic!("cot mode {other}"),
        };
        assert_eq!(ins.for_mode(cot), m["instruction"].as_str().unwrap());
        let (open, uncond) = if cot == Cot::Off { (Score::None, Score::None) } else { (Score::Open, Score::Ids(&abc)) };
        assert_eq!(pb.conditional(cot, style, lyrics, &open), ids(&m["conditional"]), "{cot:?} conditional");
        assert_eq!(pb.unconditional(cot, &uncond), ids(&m["unconditional"]), "{cot:?} unconditional");
    }
}

/// The real Qwen ranks against ids produced by tiktoken (fixtures/tokenizer/expected.jsonl,
/// written by scripts/ref/tokenizer_ids.py).
#[test]
fn qwen_ranks_match_tiktoken_exactly() {
    let tok = qwen();
    let fixture = std::fs::read_to_string(repo_root().join("fixtures/tokenizer/expected.jsonl")).unwrap();
    let mut cases = 0;
    let mut failures = Vec::new();
    for line in fixture.lines().filter(|l| !l.trim().is_empty()) {
        let case: serde_json::Value = serde_json::from_str(line).unwrap();
        let text = case["text"].as_str().unwrap();
        let want: Vec<u32> = case["ids"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect();
        let got = tok.encode(text);
        if got != want {
            failures.push(format!("{text:?}\n  want {want:?}\n  got  {got:?}"));
        }
        cases += 1;
    }
    assert!(cases >= 70, "only {cases} cases in the fixture");
    assert!(failures.is_empty(), "{} of {cases} cases differ:\n{}", failures.len(), failures.join("\n"));
}
