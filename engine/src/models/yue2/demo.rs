//! Demo models: backbone and VAE GGUFs of the exact YuE2 architecture with deterministic
//! random weights, so every route, the streaming and the metrics work without the 7 GB
//! checkpoint. `tiny` is a few MB and runs in seconds on a CPU (shrunken vocabulary,
//! described by `yue2.token.*` keys); `deep` is tiny's vocabulary and widths at the
//! published depth and head layout (28 layers, 16 query heads over 8 KV heads), so bugs
//! that need depth show in the test suite; `full` has the published dimensions, written
//! Q8_0, for benchmarks. The weights are noise: the music is noise too, and the loader says so.
use crate::ggml::GgmlType;
use crate::gguf::{GgufError, GgufWriter, Value};
use crate::models::yue2::config::{backbone_tensor_shapes, TokenLayout, Yue2Config, ARCH, VAE_ARCH};
use crate::models::yue2::vae_layout;
pub use crate::nn::demo::Preset;
use crate::nn::demo::{tensor_type, write_tensors};
use crate::tokenizer::{byte_to_char_table, token_type};
use std::path::{Path, PathBuf};

/// Metadata key that marks a file as random demo weights.
pub const DEMO_KEY: &str = "yue2.demo_preset";
pub const LATENT_DIM: usize = 64;
pub const TIME_FREQ_DIM: usize = 256;
pub const STRIDES: [usize; 6] = [6, 5, 4, 4, 2, 2];

/// Everything that defines a demo preset.
pub struct DemoSpec {
    pub config: Yue2Config,
    pub tokens: TokenLayout,
    /// Type of the 2-D weight matrices (norms and biases are always F32).
    pub matrix_type: GgmlType,
    /// VAE decoder widths, one more than the strides.
    pub vae_channels: Vec<usize>,
}

impl DemoSpec {
    pub fn new(p: Preset) -> Self {
        // 256 byte tokens, then <|endoftext|> <|im_start|> <|im_end|> <abc> </abc>, then
        // music_start, music_end and 1024 codes.
        let small_tokens = TokenLayout {
            endoftext: 256,
            abc_start: 259,
            abc_end: 260,
            music_start: 261,
            music_end: 262,
            code_base: 263,
            codebook_size: 1024,
        };
        match p {
            Preset::Deep => DemoSpec {
                config: Yue2Config {
                    hidden_size: 64,
                    intermediate_size: 128,
                    num_hidden_layers: 28,
                    num_attention_heads: 16,
                    num_key_value_heads: 8,
                    head_dim: 16,
                    ..DemoSpec::new(Preset::Tiny).config
                },
                ..DemoSpec::new(Preset::Tiny)
            },
            Preset::Tiny => {
                let tokens = small_tokens;
                DemoSpec {
                    config: Yue2Config {
                        hidden_size: 64,
                        intermediate_size: 128,
                        num_hidden_layers: 2,
                        num_attention_heads: 4,
                        num_key_value_heads: 2,
                        head_dim: 16,
                        rms_norm_eps: 1e-6,
                        rope_theta: 1e6,
                        max_position_embeddings: 24576,
                        vocab_size: 1288,
                        timestep_shift: 1.0,
                    },
                    tokens,
                    matrix_type: GgmlType::F32,
                    vae_channels: vec![32, 16, 16, 8, 8, 4, 4],
                }
            }
            Preset::Full => DemoSpec {
                config: Yue2Config::full(),
                tokens: TokenLayout::FULL,
                matrix_type: GgmlType::Q8_0,
                vae_channels: vec![2048, 1024, 512, 256, 128, 64, 64],
            },
        }
    }

    /// Token strings and types of the tokenizer, laid out to match `tokens`: the 256
    /// byte tokens, placeholders up to endoftext, then the Qwen specials.
    fn vocabulary(&self) -> (Vec<String>, Vec<i32>) {
        let table = byte_to_char_table();
        let mut toks: Vec<String> = (0..=255u8).map(|b| table[b as usize].to_string()).collect();
        let mut types = vec![token_type::BYTE; 256];
        while toks.len() < self.tokens.endoftext as usize {
            toks.push(format!("<|unused_{}|>", toks.len()));
            types.push(token_type::UNUSED);
        }
        self.tokens.append_specials(&mut toks, &mut types);
        (toks, types)
    }
}

/// Writes `yue2-demo-{preset}.gguf` and `yue2-demo-{preset}-vae.gguf` into `dir`.
/// `progress(done, total)` is called after each tensor.
pub fn write_demo(
    dir: &Path,
    preset: Preset,
    seed: u64,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<(PathBuf, PathBuf), GgufError> {
    std::fs::create_dir_all(dir).map_err(|source| GgufError::Io { path: dir.to_path_buf(), error: source })?;
    let spec = DemoSpec::new(preset);
    let tag = preset.name();
    let c = &spec.config;

    let mut w = GgufWriter::new();
    w.set_str("general.architecture", ARCH)
        .set_str("general.name", &format!("yued demo backbone ({tag}, RANDOM WEIGHTS)"))
        .set_str(DEMO_KEY, tag)
        .set_str("yue2.config_json", &c.to_json())
        .set_u32("yue2.block_count", c.num_hidden_layers as u32)
        .set_u32("yue2.demo_seed", seed as u32);
    if preset != Preset::Full {
        let t = spec.tokens;
        for (k, v) in [
            ("endoftext", t.endoftext),
            ("abc_start", t.abc_start),
            ("abc_end", t.abc_end),
            ("music_start", t.music_start),
            ("music_end", t.music_end),
            ("code_base", t.code_base),
            ("codebook_size", t.codebook_size),
        ] {
            w.set_u32(&format!("yue2.token.{k}"), v);
        }
    }
    let (toks, types) = spec.vocabulary();
    w.set_str("tokenizer.ggml.model", "gpt2")
        .set_str("tokenizer.ggml.pre", "qwen2")
        .set_strs("tokenizer.ggml.tokens", &toks)
        .set_i32s("tokenizer.ggml.token_type", &types);
    w.set("tokenizer.ggml.merges", Value::Array(vec![]));
    w.set_u32("tokenizer.ggml.eos_token_id", spec.tokens.endoftext);
    let tensors: Vec<(String, GgmlType, Vec<i64>)> = backbone_tensor_shapes(c, LATENT_DIM, TIME_FREQ_DIM)
        .into_iter()
        .map(|(n, ne)| (n, tensor_type(spec.matrix_type, &ne), ne))
        .collect();
    let vae_tensors: Vec<(String, GgmlType, Vec<i64>)> =
        vae_layout::decoder_shapes(LATENT_DIM, &spec.vae_channels, &STRIDES, 2)
            .into_iter()
            .chain(vae_layout::encoder_shapes(LATENT_DIM, &spec.vae_channels, &STRIDES, 2))
            .map(|(n, ne)| (n, GgmlType::F32, ne))
            .collect();
    for (n, ty, ne) in &tensors {
        w.add_tensor(n, *ty, ne);
    }
    let total = tensors.len() + vae_tensors.len();
    let backbone = dir.join(format!("yue2-demo-{tag}.gguf"));
    write_tensors(&backbone, &w, &tensors, seed, &mut |i, _| progress(i, total))?;

    let mut v = GgufWriter::new();
    v.set_str("general.architecture", VAE_ARCH)
        .set_str("general.name", &format!("yued demo VAE ({tag}, RANDOM WEIGHTS)"))
        .set_str(DEMO_KEY, tag)
        .set_u32("yue2-vae.latent_channels", LATENT_DIM as u32)
        .set_u32("yue2-vae.sampling_rate", 48000)
        .set_u32("yue2-vae.audio_channels", 2)
        .set_i32s("yue2-vae.upsampling_ratios", &STRIDES.map(|s| s as i32));
    for (n, ty, ne) in &vae_tensors {
        v.add_tensor(n, *ty, ne);
    }
    let vae = dir.join(format!("yue2-demo-{tag}-vae.gguf"));
    let done = tensors.len();
    write_tensors(&vae, &v, &vae_tensors, seed ^ 0x5645, &mut |i, _| progress(done + i, total))?;
    Ok((backbone, vae))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gguf::GgufFile;
    use crate::models::yue2::config::BackboneInfo;
    use crate::tokenizer::BpeTokenizer;

    #[test]
    fn tiny_demo_loads_with_its_layout_and_tokenizer() {
        let dir = tempfile::tempdir().unwrap();
        let mut calls = 0;
        let (bb, vae) = write_demo(dir.path(), Preset::Tiny, 7, &mut |_, _| calls += 1).unwrap();
        let f = GgufFile::open(&bb).unwrap();
        let info = BackboneInfo::from_gguf(&f).unwrap();
        assert_eq!(info.config, DemoSpec::new(Preset::Tiny).config);
        assert_eq!(info.tokens.music_start, 261);
        assert_eq!(f.tensors().len(), 2 * 22 + 3 + 8);
        assert!(calls >= f.tensors().len());
        let tok = BpeTokenizer::from_gguf(&f).unwrap();
        assert_eq!(tok.len(), 261);
        assert_eq!(tok.special_id("<abc>"), Some(259));
        assert_eq!(tok.encode("Hi"), vec![b'H' as u32, b'i' as u32]);
        assert!(std::fs::metadata(&bb).unwrap().len() < 8 << 20);
        // deterministic: the same seed writes the same bytes
        let dir2 = tempfile::tempdir().unwrap();
        let (bb2, _) = write_demo(dir2.path(), Preset::Tiny, 7, &mut |_, _| {}).unwrap();
        assert_eq!(std::fs::read(&bb).unwrap(), std::fs::read(&bb2).unwrap());
        let v = GgufFile::open(&vae).unwrap();
        assert_eq!(v.get_str("general.architecture").unwrap(), VAE_ARCH);
        assert_eq!(v.get_i64_array("yue2-vae.upsampling_ratios").unwrap(), vec![6, 5, 4, 4, 2, 2]);
        assert_eq!(v.require_tensor("decoder.block.0.conv_t1.weight_v").unwrap().ne, vec![12, 16, 32]);
    }

    #[test]
    fn full_spec_vocabulary_keeps_the_published_ids() {
        let spec = DemoSpec::new(Preset::Full);
        let (toks, types) = spec.vocabulary();
        assert_eq!(toks.len(), 151851);
        assert_eq!(toks[151643], "<|endoftext|>");
        assert_eq!(toks[151847], "<abc>");
        assert_eq!(toks[151848], "</abc>");
        assert_eq!(types[151847], token_type::USER_DEFINED);
    }
}
