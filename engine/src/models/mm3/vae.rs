//! The flow VAE's decoder (a DAC-style stack, diffusers' `MiniMaxMusic3Vocoder`): the 128
//! latent channels are two independent 64-channel tracks (0..63 the left side), each
//! decoded to mono at 512x: `dec_in_proj` (k=1), `conv_in` (k=7), blocks of snake, a
//! transposed convolution (stride s, kernel 2s, padding ceil(s/2)) and three residual units
//! (dilations 1, 3, 9), then snake, `conv_out` (k=7) and tanh. The snake uses its alpha
//! directly: `x + sin^2(alpha x) / (alpha + 1e-9)`. Weight norm is folded by the converter.
use crate::ggml::{Allocator, Backend, Context, GgmlError, GgmlType, TensorStore};
use crate::gguf::{GgufError, GgufFile};
use crate::models::mm3::config::{expect_arch, VAE_ARCH};
use crate::nn::oobleck::Blocks;
use crate::weights::LoadError;

pub(super) const RES_DILATIONS: [usize; 3] = [1, 3, 9];

/// The decoder's shape, read from its tensors.
#[derive(Clone, Debug, PartialEq)]
pub struct VaeInfo {
    pub latent_channels: usize,
    pub sample_rate: u32,
    pub strides: Vec<usize>,
}

impl VaeInfo {
    pub fn hop(&self) -> usize {
        self.strides.iter().product()
    }
    pub fn audio_spec(&self) -> crate::models::AudioSpec {
        crate::models::AudioSpec {
            sample_rate: self.sample_rate,
            channels: 2,
            latent_channels: self.latent_channels,
            samples_per_latent: self.hop(),
            code_rate: super::config::FRAME_RATE,
        }
    }
}

/// The decoder's tensors as the converter writes them (weight norm folded), with their
/// `ne`: `latent` channels (two tracks), `din` after `dec_in_proj`, `hidden` after
/// `conv_in`, halved by each block.
pub fn decoder_shapes(latent: usize, din: usize, hidden: usize, strides: &[usize]) -> Vec<(String, Vec<i64>)> {
    let (half, din, hid) = (latent as i64 / 2, din as i64, hidden as i64);
    let mut v = vec![
        ("dec_in_proj.weight".to_string(), vec![1, half, din]),
        ("dec_in_proj.bias".into(), vec![din]),
        ("conv_in.weight".into(), vec![7, din, hid]),
        ("conv_in.bias".into(), vec![hid]),
    ];
    let mut dim = hid;
    for (i, &s) in strides.iter().enumerate() {
        let (p, out) = (format!("blocks.{i}"), dim / 2);
        v.push((format!("{p}.snake1.alpha"), vec![1, dim, 1]));
        v.push((format!("{p}.conv_t1.weight"), vec![2 * s as i64, out, dim]));
        v.push((format!("{p}.conv_t1.bias"), vec![out]));
        for r in 1..=3 {
            let q = format!("{p}.res_unit{r}");
            v.push((format!("{q}.snake1.alpha"), vec![1, out, 1]));
            v.push((format!("{q}.conv1.weight"), vec![7, out, out]));
            v.push((format!("{q}.conv1.bias"), vec![out]));
            v.push((format!("{q}.snake2.alpha"), vec![1, out, 1]));
            v.push((format!("{q}.conv2.weight"), vec![1, out, out]));
            v.push((format!("{q}.conv2.bias"), vec![out]));
        }
        dim = out;
    }
    v.push(("snake_out.alpha".into(), vec![1, dim, 1]));
    v.push(("conv_out.weight".into(), vec![7, dim, 1]));
    v.push(("conv_out.bias".into(), vec![1]));
    v
}

pub struct VaeModel {
    pub info: VaeInfo,
    weights: TensorStore,
    alloc: Allocator,
}

impl VaeModel {
    pub fn info(f: &GgufFile) -> Result<VaeInfo, GgufError> {
        expect_arch(f, VAE_ARCH)?;
        let half = f.require_tensor("dec_in_proj.weight")?.ne[1] as usize;
        let mut strides = Vec::new();
        while let Some(t) = f.tensor(&format!("blocks.{}.conv_t1.weight", strides.len())) {
            strides.push(t.ne[0] as usize / 2);
        }
        let sample_rate = f.get(&format!("{VAE_ARCH}.sampling_rate")).and_then(|v| v.as_i64()).unwrap_or(44100) as u32;
        if strides.is_empty() {
            return Err(GgufError::Corrupt {
                path: f.path().to_path_buf(),
                what: "no decoder block (blocks.0.conv_t1.weight)".into(),
            });
        }
        Ok(VaeInfo { latent_channels: 2 * half, sample_rate, strides })
    }

    /// Loads the decoder: convolutions as F32 `[K, Cin, Cout]`, biases and snake factors as
    /// `[1, C]` rows (`.a` = alpha, `.inv` = 1 / (alpha + 1e-9)).
    pub fn load(f: &GgufFile, backend: &Backend) -> Result<Self, LoadError> {
        let info = Self::info(f)?;
        let decoder =
            |name: &str| !(name.starts_with("encoder.") || name.starts_with("quant") || name.starts_with("post_"));
        let weights = load_stack(f, backend, "VAE weights", decoder)?;
        Ok(VaeModel { info, weights, alloc: Allocator::new(backend) })
    }

    pub fn weight_bytes(&self) -> usize {
        self.weights.bytes()
    }

    /// Decodes `frames` time-major latents (`[T][latent_channels]`): planar stereo
    /// `[left: T * hop][right: T * hop]`, in [-1, 1] (tanh).
    pub fn decode(&mut self, backend: &Backend, latents: &[f32]) -> Result<Vec<f32>, GgmlError> {
        let c = self.info.latent_channels;
        assert!(
            !latents.is_empty() && latents.len().is_multiple_of(c),
            "{} latent values are not whole frames of {c}",
            latents.len()
        );
        let frames = latents.len() / c;
        let half = c / 2;
        let mut out = Vec::with_capacity(2 * frames * self.info.hop());
        for side in 0..2 {
            // The side's channels, time-innermost ([T, half]).
            let mut x = vec![0f32; frames * half];
            for t in 0..frames {
                for ch in 0..half {
                    x[ch * frames + t] = latents[t * c + side * half + ch];
                }
            }
            out.extend(self.decode_track(backend, &x, frames)?);
        }
        Ok(out)
    }

    fn decode_track(&mut self, backend: &Backend, x_in: &[f32], frames: usize) -> Result<Vec<f32>, GgmlError> {
        let nodes = 256 + 128 * self.info.strides.len();
        let ctx = Context::for_graph(nodes)?;
        let mut g = ctx.new_graph("MiniMax VAE decode", nodes);
        let w = &self.weights;
        let b = Blocks { ctx: &ctx, w, snake_inv: "inv" };
        let input = ctx.new_tensor(GgmlType::F32, &[frames as i64, (self.info.latent_channels / 2) as i64]).set_input();
        let mut x = b.conv("dec_in_proj", input, 1, 0, 1);
        x = b.conv("conv_in", x, 1, 3, 1);
        for (i, &s) in self.info.strides.iter().enumerate() {
            let p = format!("blocks.{i}");
            x = b.snake(&format!("{p}.snake1"), x);
            x = b.conv_t(&format!("{p}.conv_t1"), x, s);
            for (r, &d) in RES_DILATIONS.iter().enumerate() {
                x = b.res_unit(&format!("{p}.res_unit{}", r + 1), x, d);
            }
        }
        x = b.snake("snake_out", x);
        let y = ctx.tanh(b.conv("conv_out", x, 1, 3, 1)).set_output();
        g.expand(y);
        self.alloc.alloc_graph(&g)?;
        input.write_f32(x_in);
        backend.compute(&g)?;
        Ok(y.read_f32())
    }
}

/// The tensors of `f` that `keep` names, as F32 on the device: convolutions `[K, Cin, Cout]`,
/// biases and snake factors as `[1, C]` rows (`.a` = alpha, `.inv` = 1 / (alpha + 1e-9)).
pub(super) fn load_stack(
    f: &GgufFile,
    backend: &Backend,
    what: &str,
    keep: impl Fn(&str) -> bool,
) -> Result<TensorStore, LoadError> {
    let mut tensors: Vec<(String, Vec<i64>, Vec<f32>)> = Vec::new();
    for t in f.tensors().iter().filter(|t| keep(&t.name)) {
        let name = t.name.as_str();
        let v = f.tensor_f32(name)?;
        if let Some(p) = name.strip_suffix(".alpha") {
            let c = v.len() as i64;
            tensors.push((format!("{p}.inv"), vec![1, c], v.iter().map(|a| 1.0 / (a + 1e-9)).collect()));
            tensors.push((format!("{p}.a"), vec![1, c], v));
        } else if name.ends_with(".bias") {
            tensors.push((name.to_string(), vec![1, v.len() as i64], v));
        } else {
            tensors.push((name.to_string(), t.ne.clone(), v));
        }
    }
    let mut weights = TensorStore::new(tensors.len())?;
    for (n, ne, _) in &tensors {
        weights.declare(n, GgmlType::F32, ne);
    }
    weights.allocate(backend, what, true)?;
    for (n, _, v) in &tensors {
        weights.get(n).write_f32(v);
    }
    Ok(weights)
}
