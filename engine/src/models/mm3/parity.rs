//! Parity of the AR half with the reference (diffusers 0.42.1 + transformers, tiny random
//! weights; scripts/ref/mm3_ar_reference.py and mm3_prompt_reference.py): the checkpoint in
//! fixtures/mm3/ckpt is converted here by the converter under test, then every quantity the
//! reference dumped is compared: LM logits (prefill and a batched feedback step), hidden
//! states, the feedback embedding, the depth decoder's states and logits for both guidance
//! rows, and two AR runs with injected uniforms (codes exact, states close), sampled and
//! replayed. The prompt fixture checks the caption and lyrics cleaning and the ids with the
//! real layout and Qwen's BPE.
use super::compose::*;
use super::config::*;
use super::convert::{convert_checkpoint, ConvertOptions};
use super::depth::DepthModel;
use super::lm::{tokenizer, LmModel};
use super::prompt;
use crate::ggml::{Backend, GgmlType};
use crate::gguf::GgufFile;
use crate::test_util::{argmax, max_abs, tol};
use serde_json::Value;
use std::path::{Path, PathBuf};

fn repo(p: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..").join(p)
}

fn cases() -> Value {
    serde_json::from_str(&std::fs::read_to_string(repo("fixtures/mm3/ar/cases.json")).unwrap()).unwrap()
}

fn f32s(name: &str) -> Vec<f32> {
    let raw = std::fs::read(repo("fixtures/mm3/ar").join(name)).unwrap();
    raw.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect()
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect()
}

struct Converted {
    backend: Backend,
    lm: LmModel,
    depth: DepthModel,
    prompt: prompt::Prompt,
    files: Vec<PathBuf>,
    _dir: tempfile::TempDir,
}

/// An F32 copy of a GGUF: the reference computes in f32 on the BF16-rounded weights, while
/// ggml's BF16 matrix products round the activations to BF16 too (as torch does in a BF16
/// pipeline); the parity runs compare like with like on the upcast copy.
fn f32_copy(path: &Path) -> PathBuf {
    let f = GgufFile::open(path).unwrap();
    let mut w = crate::gguf::GgufWriter::new();
    for (k, v) in f.metadata_ordered() {
        if !k.starts_with("general.alignment") {
            w.set(k, v.clone());
        }
    }
    for t in f.tensors() {
        w.add_tensor(&t.name, GgmlType::F32, &t.ne);
    }
    let out = path.with_extension("f32.gguf");
    let mut data = w.create(&out).unwrap();
    for t in f.tensors() {
        let v = crate::ggml::decode_to_f32(t.ty, f.tensor_bytes(t)).unwrap();
        data.write(bytemuck::cast_slice(&v)).unwrap();
    }
    data.finish().unwrap();
    out
}

fn converted() -> Converted {
    converted_as(true)
}

fn converted_as(f32_weights: bool) -> Converted {
    let dir = tempfile::tempdir().unwrap();
    let done = convert_checkpoint(
        &repo("fixtures/mm3/ckpt"),
        dir.path(),
        &ConvertOptions { semantic_codes: Some(64) },
        &mut |_| {},
    )
    .unwrap();
    let files: Vec<PathBuf> = done.iter().map(|d| d.path.clone()).collect();
    let backend = Backend::for_tests(1);
    let pick = |p: &PathBuf| if f32_weights { f32_copy(p) } else { p.clone() };
    let lf = GgufFile::open(pick(&files[0])).unwrap();
    let mut lm = LmModel::load(&lf, &backend).unwrap();
    if f32_weights {
        lm.kv_type = GgmlType::F32;
    }
    let depth = DepthModel::load(&GgufFile::open(pick(&files[1])).unwrap(), lm.hidden(), &backend).unwrap();
    let c = cases();
    let tok = tokenizer(&lf, &lm.info).unwrap();
    let prompt = prompt::build(
        &tok,
        &lm.info.tokens,
        c["prompt"]["caption"].as_str().unwrap(),
        c["prompt"]["lyrics"].as_str().unwrap(),
    )
    .unwrap();
    Converted { backend, lm, depth, prompt, files, _dir: dir }
}

#[test]
fn the_checkpoint_converts_to_five_files_in_native_dtypes() {
    let t = converted();
    let names: Vec<String> = t.files.iter().map(|p| p.file_name().unwrap().to_string_lossy().into_owned()).collect();
    assert_eq!(
        names,
        [
            "MiniMax-Music3-language_model-BF16.gguf",
            "MiniMax-Music3-rvq_depth_decoder-BF16.gguf",
            "MiniMax-Music3-condition_encoder-F32.gguf",
            "MiniMax-Music3-transformer-F32.gguf",
            "MiniMax-Music3-vocoder-F32.gguf"
        ]
    );
    let arch: Vec<String> = t
        .files
        .iter()
        .map(|p| GgufFile::open(p).unwrap().get_str("general.architecture").unwrap().to_string())
        .collect();
    assert_eq!(arch, [LM_ARCH, DEPTH_ARCH, COND_ARCH, DIT_ARCH, VAE_ARCH]);
    // Byte for byte: an LM matrix in BF16 equals the safetensors bytes.
    let lf = GgufFile::open(&t.files[0]).unwrap();
    let st_bytes = std::fs::read(repo("fixtures/mm3/ckpt/language_model/model.safetensors")).unwrap();
    let st = safetensors::SafeTensors::deserialize(&st_bytes).unwrap();
    for name in ["model.layers.2.mlp.down_proj.weight", "lm_head.weight", "model.norm.weight"] {
        let info = lf.require_tensor(name).unwrap();
        assert_eq!(info.ty, GgmlType::BF16, "{name}");
        assert_eq!(lf.tensor_bytes(info), st.tensor(name).unwrap().data(), "{name}");
    }
    assert_eq!(t.lm.info.tokens, TokenLayout::shifted(256, 64));
    assert_eq!(lf.get_str_array("tokenizer.ggml.tokens").unwrap().len(), 288, "256 bytes and the 32 added tokens");
    let d = GgufFile::open(&t.files[1]).unwrap();
    assert_eq!(DepthConfig::from_gguf(&d).unwrap().audio_vocab_size, 32);
    // The vocoder's weight norm is folded: no g/v pair is left.
    let v = GgufFile::open(&t.files[4]).unwrap();
    assert!(v.tensors().iter().all(|t| !t.name.ends_with("weight_g") && !t.name.ends_with("weight_v")));
    assert!(v.tensors().iter().any(|t| t.name.ends_with(".weight")));
    // The converted cond, DiT and VAE carry their config keys.
    assert_eq!(GgufFile::open(&t.files[3]).unwrap().get_i64("mm3-dit.num_layers").unwrap(), 2);
}

/// The native BF16 files run too: their activations are rounded to BF16 in the matrix
/// products, so they sit at BF16 precision from the reference, with the same prompt ids.
#[test]
fn the_native_bf16_files_run_at_bf16_precision() {
    let mut t = converted_as(false);
    let l = t.prompt.cond.len();
    let mut set = t.lm.kv_set(&t.backend, l + 4, 2).unwrap();
    let out = t.lm.prefill(&t.backend, &mut set, &[(&t.prompt.cond, 0), (&t.prompt.uncond, 1)], true).unwrap();
    let hid = f32s("prefill_last_hidden.f32");
    let e = max_abs(&out.hidden.concat(), &hid);
    assert!(e < 0.1, "prefill hidden of the BF16 file: {e}");
}

#[test]
fn a_file_of_the_wrong_architecture_is_refused() {
    let t = converted();
    let backend = Backend::for_tests(1);
    let e = LmModel::load(&GgufFile::open(&t.files[1]).unwrap(), &backend).err().unwrap().to_string();
    assert!(e.contains("mm3-depth") && e.contains("mm3-lm"), "{e}");
    let e = DepthModel::load(&GgufFile::open(&t.files[0]).unwrap(), 64, &backend).err().unwrap().to_string();
    assert!(e.contains("mm3-depth"), "{e}");
}

#[test]
fn lm_logits_and_hidden_states_match_the_reference() {
    let mut t = converted();
    let c = cases();
    assert_eq!(t.prompt.cond, ids(&c["prompt"]["cond_ids"]), "conditional prompt ids");
    assert_eq!(t.prompt.uncond, ids(&c["prompt"]["uncond_ids"]), "unconditional prompt ids");
    let (l, v) = (t.prompt.cond.len(), 384);
    let want = f32s("prefill_logits.f32");
    for (row, p) in [&t.prompt.cond, &t.prompt.uncond].into_iter().enumerate() {
        let mut set = t.lm.kv_set(&t.backend, l + 4, 1).unwrap();
        let got = t.lm.prompt_logits(&t.backend, &mut set, p, 0).unwrap();
        for (pos, g) in got.iter().enumerate() {
            let w = &want[(row * l + pos) * v..(row * l + pos + 1) * v];
            assert!(max_abs(g, w) < tol(&t.backend, 2e-4), "prefill logits row {row} pos {pos}: {}", max_abs(g, w));
            let (a, b) = (argmax(g), argmax(w));
            if t.backend.is_cpu() {
                assert_eq!(a, b, "row {row} pos {pos}");
            } else if a != b {
                // Two logits the reference has within the device's rounding (held above).
                let name = t.backend.name();
                eprintln!("{name}: row {row} pos {pos}: argmax {a}, the reference's {b} ({:.1e} above)", w[b] - w[a]);
            }
        }
    }
    // The guidance pair as one batch over two streams, then one feedback step.
    let mut set = t.lm.kv_set(&t.backend, l + 4, 2).unwrap();
    let out = t.lm.prefill(&t.backend, &mut set, &[(&t.prompt.cond, 0), (&t.prompt.uncond, 1)], true).unwrap();
    let hid = f32s("prefill_last_hidden.f32");
    assert!(
        max_abs(&out.hidden.concat(), &hid) < tol(&t.backend, 1e-4),
        "prefill hidden: {}",
        max_abs(&out.hidden.concat(), &hid)
    );
    let rows = t.lm.info.tokens.sample_rows();
    for r in 0..2 {
        let w = &want[(r * l + l - 1) * v..(r * l + l) * v];
        assert!(
            max_abs(&out.logits[r], &w[rows.start as usize..rows.end as usize]) < tol(&t.backend, 2e-4),
            "sampled rows of stream {r}"
        );
    }
    let fb_case = &c["feedback_embed"];
    let mut codes = [fb_case["semantic"].as_u64().unwrap() as u32; 8];
    for (i, a) in ids(&fb_case["acoustic"]).into_iter().enumerate() {
        codes[i + 1] = a;
    }
    let fb = feedback(&t.lm, &t.depth, &codes);
    assert!(
        max_abs(&fb, &f32s("feedback_embed.f32")) < 1e-6,
        "feedback: {}",
        max_abs(&fb, &f32s("feedback_embed.f32"))
    );
    let out = t.lm.feed(&t.backend, &mut set, &[(&fb, 0), (&fb, 1)], true).unwrap();
    let (dl, dh) = (f32s("decode_logits.f32"), f32s("decode_last_hidden.f32"));
    assert!(max_abs(&out.hidden.concat(), &dh) < tol(&t.backend, 1e-4), "decode hidden");
    for r in 0..2 {
        let w = &dl[r * v + rows.start as usize..r * v + rows.end as usize];
        assert!(
            max_abs(&out.logits[r], w) < tol(&t.backend, 2e-4),
            "decode logits of stream {r}: {}",
            max_abs(&out.logits[r], w)
        );
    }
}

#[test]
fn depth_states_and_logits_match_the_reference_for_both_rows() {
    let mut t = converted();
    let c = &cases()["depth_frame"];
    let h = t.lm.hidden();
    let sem = c["semantic"].as_u64().unwrap() as u32;
    let ac = ids(&c["acoustic"]);
    let lm_pair = f32s("prefill_last_hidden.f32");
    let e = t.lm.embeddings(&[sem + t.lm.info.tokens.semantic_base]);
    let (hl, lc, lu, lg) = (
        f32s("depth_hidden_last.f32"),
        f32s("depth_logits_cond.f32"),
        f32s("depth_logits_uncond.f32"),
        f32s("depth_logits_guided.f32"),
    );
    let audio: Vec<Vec<f32>> = ac.iter().enumerate().map(|(book, &a)| t.depth.audio_embedding(book, a)).collect();
    let seq = |row: usize, s: usize| -> Vec<f32> {
        let mut v = lm_pair[row * h..(row + 1) * h].to_vec();
        v.extend_from_slice(&e);
        for a in audio.iter().take(s - 2) {
            v.extend_from_slice(a);
        }
        v
    };
    for s in 2..=8 {
        let input: Vec<f32> = [seq(0, s), seq(1, s)].concat();
        let o = t.depth.forward(&t.backend, &input, s, 2, false).unwrap();
        let k = s - 2;
        for row in 0..2 {
            let w = &hl[(k * 2 + row) * h..(k * 2 + row + 1) * h];
            let e = max_abs(&o.hidden[row], w);
            assert!(e < tol(&t.backend, 1e-4), "S={s} row {row} hidden: {e}");
        }
        assert!(max_abs(&o.logits[0], &lc[k * 32..(k + 1) * 32]) < tol(&t.backend, 1e-4), "S={s} cond logits");
        assert!(max_abs(&o.logits[1], &lu[k * 32..(k + 1) * 32]) < tol(&t.backend, 1e-4), "S={s} uncond logits");
        let guided: Vec<f32> = o.logits[0].iter().zip(&o.logits[1]).map(|(a, b)| b + (a - b) * 1.5).collect();
        assert!(max_abs(&guided, &lg[k * 32..(k + 1) * 32]) < tol(&t.backend, 2e-4), "S={s} guided logits");
    }
    // The same frame in steps over the frame cache (what the composer runs).
    for s in 2..=8 {
        let from = super::depth::step_positions(s).start * h;
        let input: Vec<f32> = [&seq(0, s)[from..], &seq(1, s)[from..]].concat();
        let o = t.depth.step(&t.backend, &input, s, 2).unwrap();
        let k = s - 2;
        for row in 0..2 {
            let w = &hl[(k * 2 + row) * h..(k * 2 + row + 1) * h];
            assert!(
                max_abs(&o.hidden[row], w) < tol(&t.backend, 1e-4),
                "step S={s} row {row} hidden: {}",
                max_abs(&o.hidden[row], w)
            );
        }
        assert!(max_abs(&o.logits[0], &lc[k * 32..(k + 1) * 32]) < tol(&t.backend, 1e-4), "step S={s} cond logits");
        assert!(max_abs(&o.logits[1], &lu[k * 32..(k + 1) * 32]) < tol(&t.backend, 1e-4), "step S={s} uncond logits");
    }
    let input: Vec<f32> = [seq(0, 8), seq(1, 8)].concat();
    let o = t.depth.forward(&t.backend, &input, 8, 2, true).unwrap();
    assert!(
        max_abs(&o.hidden.concat(), &f32s("depth_hidden_s8_full.f32")) < tol(&t.backend, 1e-4),
        "S=8, every position"
    );
}

#[test]
fn ar_runs_with_injected_uniforms_pick_the_reference_codes() {
    let mut t = converted();
    let h = t.lm.hidden();
    for run in cases()["ar_runs"].as_array().unwrap() {
        let name = run["name"].as_str().unwrap();
        let uniforms: std::collections::VecDeque<f32> =
            run["uniforms"].as_array().unwrap().iter().map(|u| u.as_f64().unwrap() as f32).collect();
        let used = run["uniforms_used"].as_u64().unwrap() as usize;
        let mut draws = FixedDraws(vec![uniforms]);
        let s = ArSettings {
            lm_cfg: 1.5,
            top_k: 5,
            max_frames: run["max_frames"].as_u64().unwrap() as usize,
            batch_cfg: true,
        };
        let songs =
            compose(&t.backend, &mut t.lm, &mut t.depth, &t.prompt, 1, &s, &mut draws, &|| false, &mut |_, _| {})
                .unwrap();
        let song = &songs[0];
        let want: Vec<Vec<u32>> = run["codes"].as_array().unwrap().iter().map(ids).collect();
        assert_eq!(song.codes.iter().map(|c| c.to_vec()).collect::<Vec<_>>(), want, "{name}: codes");
        assert_eq!(draws.0[0].len(), run["uniforms"].as_array().unwrap().len() - used, "{name}: uniforms consumed");
        assert_eq!(song.ended, run["ended_by"] == "end_of_audio", "{name}");
        assert_eq!(song.frames(), run["kept_frames"].as_u64().unwrap() as usize);
        let states = f32s(run["frame_hiddens"].as_str().unwrap());
        assert_eq!(song.states.len(), states.len());
        let e = max_abs(&song.states, &states);
        assert!(e < tol(&t.backend, 2e-4), "{name}: states {e}");
        // The replay of those codes.
        let r = replay(&t.backend, &mut t.lm, &mut t.depth, &t.prompt, &song.codes, &|| false).unwrap();
        let rs = f32s(run["replay_frame_hiddens"].as_str().unwrap());
        assert!(max_abs(&r.states, &rs) < tol(&t.backend, 2e-4), "{name}: replay states {}", max_abs(&r.states, &rs));
        assert_eq!(r.states.len(), song.frames() * 8 * h);
        // The split guidance path draws the same codes here.
        let uniforms: std::collections::VecDeque<f32> =
            run["uniforms"].as_array().unwrap().iter().map(|u| u.as_f64().unwrap() as f32).collect();
        let split = compose(
            &t.backend,
            &mut t.lm,
            &mut t.depth,
            &t.prompt,
            1,
            &ArSettings { batch_cfg: false, ..s },
            &mut FixedDraws(vec![uniforms]),
            &|| false,
            &mut |_, _| {},
        )
        .unwrap();
        if t.backend.is_cpu() {
            assert_eq!(split[0].codes, song.codes, "{name}: --no-batch-cfg");
        } else {
            let what = format!("{name}: --no-batch-cfg parts from the batch");
            super::tests::where_songs_part(&t.backend, h, &split[0], song, &what);
        }
    }
}

/// Qwen's BPE with MiniMax Music 3's added tokens, from the ranks file the test command
/// fetches.
fn real_tokenizer() -> crate::tokenizer::BpeTokenizer {
    let ranks =
        std::env::var_os("YUED_QWEN_TIKTOKEN").map(PathBuf::from).unwrap_or_else(|| repo(".cache/qwen.tiktoken"));
    let text = std::fs::read_to_string(&ranks).unwrap_or_else(|e| {
        panic!("{}: {e}; run scripts/fetch-qwen-tiktoken.sh (the test command does)", ranks.display())
    });
    let v = crate::tokenizer::convert_tiktoken(&text).unwrap();
    let mut tokens = v.tokens;
    let mut types = vec![crate::tokenizer::token_type::NORMAL; tokens.len()];
    for t in super::demo::ADDED_TOKENS {
        tokens.push(t.into());
        types.push(crate::tokenizer::token_type::CONTROL);
    }
    crate::tokenizer::BpeTokenizer::from_parts(tokens, types, &v.merges).unwrap()
}

#[test]
fn prompts_clean_and_encode_as_the_reference() {
    let p: Value =
        serde_json::from_str(&std::fs::read_to_string(repo("fixtures/mm3/prompt/cases.json")).unwrap()).unwrap();
    let tok = real_tokenizer();
    let mut checked = 0;
    for c in p["cases"].as_array().unwrap() {
        let name = c["name"].as_str().unwrap();
        let (caption, lyrics) = (c["caption"].as_str().unwrap(), c["lyrics"].as_str().unwrap());
        assert_eq!(prompt::clean_caption(caption), c["clean_caption"].as_str().unwrap(), "{name}: caption {caption:?}");
        assert_eq!(
            prompt::normalize_lyrics(lyrics),
            c["normalized_lyrics"].as_str().unwrap(),
            "{name}: lyrics {lyrics:?}"
        );
        let built = prompt::build(&tok, &TokenLayout::FULL, caption, lyrics).unwrap();
        assert_eq!(built.cond, ids(&c["cond_ids"]), "{name}: ids");
        assert_eq!(built.uncond, ids(&c["uncond_ids"]), "{name}: unconditional ids");
        checked += 1;
    }
    assert!(checked >= 20);
}
