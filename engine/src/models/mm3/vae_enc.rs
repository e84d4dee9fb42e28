//! The flow VAE's encoder (minimaxmusic.cpp's `neural-codec --encode`): audio to the latent space the
//! decoder reads, deterministically (the posterior mean, no sampling). The mirror of the
//! decoder, per side: each stereo channel alone to its own `half` latent channels (left
//! first): `encoder.conv_in` (1 -> E0, k=7), blocks of three residual units (dilations 1, 3,
//! 9), snake and a strided convolution (stride s, kernel 2s, padding ceil(s/2)), then
//! `snake_out`, `conv_out` (k=3) and `mean_proj` (k=1). The strides multiply to the
//! decoder's hop. The published `vocoder/` has no encoder: its tensors come from `dav.pth`
//! beside it, which `yued convert mm3` reads; a file without them is refused with a message.
use crate::ggml::{Allocator, Backend, Context, GgmlError, GgmlType, TensorStore};
use crate::gguf::{GgufError, GgufFile};
use crate::models::mm3::config::{expect_arch, VAE_ARCH};
use crate::models::mm3::vae::{load_stack, RES_DILATIONS};
use crate::nn::oobleck::Blocks;
use crate::weights::LoadError;

/// The encoder's tensors (`encoder.*`) with their GGUF `ne`: widths `widths[0..=n]` over
/// `strides[0..n]`, `half` latent channels per side.
pub fn encoder_shapes(widths: &[usize], strides: &[usize], half: usize) -> Vec<(String, Vec<i64>)> {
    assert_eq!(widths.len(), strides.len() + 1, "one width more than strides");
    let w: Vec<i64> = widths.iter().map(|&c| c as i64).collect();
    let mut v =
        vec![("encoder.conv_in.weight".to_string(), vec![7, 1, w[0]]), ("encoder.conv_in.bias".into(), vec![w[0]])];
    for (i, &s) in strides.iter().enumerate() {
        let (p, c) = (format!("encoder.blocks.{i}"), w[i]);
        for r in 1..=3 {
            let q = format!("{p}.res_unit{r}");
            v.push((format!("{q}.snake1.alpha"), vec![1, c, 1]));
            v.push((format!("{q}.conv1.weight"), vec![7, c, c]));
            v.push((format!("{q}.conv1.bias"), vec![c]));
            v.push((format!("{q}.snake2.alpha"), vec![1, c, 1]));
            v.push((format!("{q}.conv2.weight"), vec![1, c, c]));
            v.push((format!("{q}.conv2.bias"), vec![c]));
        }
        v.push((format!("{p}.snake1.alpha"), vec![1, c, 1]));
        v.push((format!("{p}.conv1.weight"), vec![2 * s as i64, c, w[i + 1]]));
        v.push((format!("{p}.conv1.bias"), vec![w[i + 1]]));
    }
    let last = *w.last().expect("widths");
    v.push(("encoder.snake_out.alpha".into(), vec![1, last, 1]));
    v.push(("encoder.conv_out.weight".into(), vec![3, last, last]));
    v.push(("encoder.conv_out.bias".into(), vec![last]));
    v.push(("encoder.mean_proj.weight".into(), vec![1, last, half as i64]));
    v.push(("encoder.mean_proj.bias".into(), vec![half as i64]));
    v
}

pub struct VaeEncoder {
    /// Latent channels of both sides (`2 * half`).
    pub latent_channels: usize,
    pub strides: Vec<usize>,
    weights: TensorStore,
    alloc: Allocator,
}

impl VaeEncoder {
    /// Loads the `encoder.*` tensors of a vocoder file (F32 on the device; snake factors as
    /// `[1, C]` rows `.a` = alpha and `.inv` = 1 / (alpha + 1e-9)).
    pub fn load(f: &GgufFile, backend: &Backend) -> Result<Self, LoadError> {
        expect_arch(f, VAE_ARCH)?;
        if f.tensor("encoder.conv_in.weight").is_none() {
            return Err(GgufError::Corrupt {
                path: f.path().to_path_buf(),
                what: "no encoder (encoder.* tensors): the published vocoder/ has none; convert the checkpoint again \
                    with its dav.pth beside vocoder/ (`yued convert mm3`)"
                    .into(),
            }
            .into());
        }
        let mut strides = Vec::new();
        while let Some(t) = f.tensor(&format!("encoder.blocks.{}.conv1.weight", strides.len())) {
            strides.push(t.ne[0] as usize / 2);
        }
        let half = f.require_tensor("encoder.mean_proj.weight")?.ne[2] as usize;
        let weights = load_stack(f, backend, "VAE encoder weights", |name| name.starts_with("encoder."))?;
        Ok(VaeEncoder { latent_channels: 2 * half, strides, weights, alloc: Allocator::new(backend) })
    }

    /// Samples per latent frame.
    pub fn hop(&self) -> usize {
        self.strides.iter().product()
    }

    pub fn weight_bytes(&self) -> usize {
        self.weights.bytes()
    }

    /// Encodes planar stereo (`[left: N][right: N]`, N a multiple of the hop) to the
    /// posterior mean, time-major `[N / hop][latent_channels]` (the left side's channels first).
    pub fn encode(&mut self, backend: &Backend, audio: &[f32]) -> Result<Vec<f32>, EncodeError> {
        let hop = self.hop();
        if audio.is_empty() || !audio.len().is_multiple_of(2 * hop) {
            return Err(EncodeError::Input(format!(
                "{} samples are not whole frames of {hop} samples x 2 channels",
                audio.len()
            )));
        }
        let n = audio.len() / 2;
        let (frames, half) = (n / hop, self.latent_channels / 2);
        let mut out = vec![0f32; frames * self.latent_channels];
        for side in 0..2 {
            let mean = self.encode_side(backend, &audio[side * n..(side + 1) * n])?; // [half][frames]
            for ch in 0..half {
                for t in 0..frames {
                    out[t * self.latent_channels + side * half + ch] = mean[ch * frames + t];
                }
            }
        }
        Ok(out)
    }

    fn encode_side(&mut self, backend: &Backend, x_in: &[f32]) -> Result<Vec<f32>, GgmlError> {
        let nodes = 256 + 128 * self.strides.len();
        let ctx = Context::for_graph(nodes)?;
        let mut g = ctx.new_graph("MiniMax VAE encode", nodes);
        let w = &self.weights;
        let b = Blocks { ctx: &ctx, w, snake_inv: "inv" };
        let input = ctx.new_tensor(GgmlType::F32, &[x_in.len() as i64, 1]).set_input();
        let mut x = b.conv("encoder.conv_in", input, 1, 3, 1);
        for (i, &s) in self.strides.iter().enumerate() {
            let p = format!("encoder.blocks.{i}");
            for (r, &d) in RES_DILATIONS.iter().enumerate() {
                x = b.res_unit(&format!("{p}.res_unit{}", r + 1), x, d);
            }
            x = b.snake(&format!("{p}.snake1"), x);
            x = b.conv(&format!("{p}.conv1"), x, s as i32, s.div_ceil(2) as i32, 1);
        }
        x = b.snake("encoder.snake_out", x);
        x = b.conv("encoder.conv_out", x, 1, 1, 1);
        let y = b.conv("encoder.mean_proj", x, 1, 0, 1).set_output(); // [frames, half]
        g.expand(y);
        self.alloc.alloc_graph(&g)?;
        input.write_f32(x_in);
        backend.compute(&g)?;
        Ok(y.read_f32())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum EncodeError {
    #[error(transparent)]
    Ggml(#[from] GgmlError),
    #[error("{0}")]
    Input(String),
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gguf::GgufWriter;
    use crate::test_util::read_f32;
    use std::path::Path;

    /// The encoder against the float64 numpy reference of minimaxmusic.cpp's description
    /// (`scripts/ref/mm3_encoder_reference.py`, fixtures/mm3/encoder/), on tiny widths.
    #[test]
    fn the_encoder_matches_the_float64_reference_of_the_description() {
        let fx = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/mm3/encoder");
        let doc: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(fx.join("manifest.json")).unwrap()).unwrap();
        let blob = read_f32(fx.join("weights.f32"));
        let strides: Vec<usize> =
            doc["strides"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as usize).collect();
        let widths: Vec<usize> =
            doc["widths"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as usize).collect();
        let half = doc["half"].as_u64().unwrap() as usize;
        // The fixture's names and shapes are the ones the demo writer declares.
        let declared = encoder_shapes(&widths, &strides, half);
        let tensors = doc["tensors"].as_array().unwrap();
        assert_eq!(tensors.len(), declared.len());
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("enc.gguf");
        let mut w = GgufWriter::new();
        w.set_str("general.architecture", VAE_ARCH);
        let mut data = Vec::new();
        for (t, (name, ne)) in tensors.iter().zip(&declared) {
            assert_eq!(t["name"].as_str().unwrap(), name);
            let fne: Vec<i64> = t["ne"].as_array().unwrap().iter().map(|v| v.as_i64().unwrap()).collect();
            assert_eq!(&fne, ne, "{name}");
            let (o, n) = (t["offset"].as_u64().unwrap() as usize, t["count"].as_u64().unwrap() as usize);
            w.add_tensor(name, GgmlType::F32, ne);
            data.push(blob[o..o + n].iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>());
        }
        let mut out = w.create(&path).unwrap();
        for d in &data {
            out.write(d).unwrap();
        }
        out.finish().unwrap();
        let backend = Backend::for_tests(2);
        let mut enc = VaeEncoder::load(&GgufFile::open(&path).unwrap(), &backend).unwrap();
        assert_eq!((enc.hop(), enc.latent_channels), (512, 2 * half));
        let audio = read_f32(fx.join("audio.f32"));
        let got = enc.encode(&backend, &audio).unwrap();
        let want = read_f32(fx.join("mean.f32"));
        assert_eq!(got.len(), want.len());
        let num: f64 = got.iter().zip(&want).map(|(a, b)| ((a - b) as f64).powi(2)).sum();
        let den: f64 = want.iter().map(|b| (*b as f64).powi(2)).sum();
        let rel = (num / den).sqrt();
        assert!(
            rel < crate::test_util::tol(&backend, 1e-5) as f64,
            "relative RMS {rel:.3e} against the float64 reference"
        );
        // Deterministic, and whole frames only.
        assert!(enc.encode(&backend, &audio).unwrap() == got);
        assert!(matches!(enc.encode(&backend, &audio[..audio.len() - 2]), Err(EncodeError::Input(_))));
    }
}
