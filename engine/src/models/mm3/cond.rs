//! The condition encoder: the 8 states of each 25 Hz frame (the LM's, then the depth
//! decoder's 7) mixed by `softmax(layer_weight_logits) * layer_scale` (folded into 8 weights
//! at load), projected by a k=3 convolution, and resampled to the latent rate by nearest
//! neighbour, as torch's `interpolate` picks (in f32).
use crate::ggml::{Allocator, Backend, Context, GgmlError, GgmlType, TensorStore};
use crate::gguf::{GgufError, GgufFile};
use crate::models::mm3::config::{expect_arch, COND_ARCH};
use crate::weights::{load_tensors, LoadError};

/// The encoder's dimensions and rates (its `config.json`, as `mm3-cond.*` keys).
#[derive(Clone, Debug, PartialEq)]
pub struct CondConfig {
    pub condition_hidden_dim: usize,
    pub num_condition_layers: usize,
    pub out_dim: usize,
    pub input_sampling_rate: usize,
    pub input_hop_length: usize,
    pub output_sampling_rate: usize,
    pub output_hop_length: usize,
}

impl CondConfig {
    pub fn from_gguf(f: &GgufFile) -> Result<Self, GgufError> {
        let get = |k: &str, d: usize| {
            f.get(&format!("{COND_ARCH}.{k}")).and_then(|v| v.as_i64()).map(|v| v as usize).unwrap_or(d)
        };
        let proj = f.require_tensor("proj.weight")?; // [3, in, out]
        Ok(CondConfig {
            condition_hidden_dim: proj.ne[1] as usize,
            num_condition_layers: get("num_condition_layers", 8),
            out_dim: proj.ne[2] as usize,
            input_sampling_rate: get("input_sampling_rate", 24000),
            input_hop_length: get("input_hop_length", 960),
            output_sampling_rate: get("output_sampling_rate", 44100),
            output_hop_length: get("output_hop_length", 512),
        })
    }

    /// Latent frames of `frames` LM frames, as the reference computes it (f64, left to
    /// right, truncated; at least 1): 200 frames are 689 latents.
    pub fn latent_length(&self, frames: usize) -> usize {
        let v = frames as f64 * self.output_sampling_rate as f64 / self.input_sampling_rate as f64
            * self.input_hop_length as f64
            / self.output_hop_length as f64;
        (v as usize).max(1)
    }
}

/// The source frame of each of `out` latents resampled from `n` frames, as torch's
/// nearest `interpolate` computes it: `floor(f32(i) * (f32(n) / f32(out)))`, clamped.
pub fn nearest_sources(n: usize, out: usize) -> Vec<usize> {
    if n == out {
        return (0..out).collect();
    }
    let scale = n as f32 / out as f32;
    (0..out).map(|i| ((i as f32 * scale).floor() as usize).min(n - 1)).collect()
}

pub struct CondEncoder {
    pub cfg: CondConfig,
    /// The folded mix: `softmax(logits)[l] * scale`.
    pub mix: Vec<f32>,
    weights: TensorStore,
    alloc: Allocator,
}

impl CondEncoder {
    pub fn load(f: &GgufFile, backend: &Backend) -> Result<Self, LoadError> {
        expect_arch(f, COND_ARCH)?;
        let cfg = CondConfig::from_gguf(f)?;
        let logits = f.tensor_f32("layer_weight_logits")?;
        let scale = f.tensor_f32("layer_scale")?;
        if logits.len() != cfg.num_condition_layers || scale.len() != 1 {
            return Err(GgufError::Corrupt {
                path: f.path().to_path_buf(),
                what: format!("{} mix logits for {} layers", logits.len(), cfg.num_condition_layers),
            }
            .into());
        }
        let mx = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let e: Vec<f32> = logits.iter().map(|l| (l - mx).exp()).collect();
        let sum: f32 = e.iter().sum();
        let mix = e.iter().map(|x| x / sum * scale[0]).collect();
        let (h, o) = (cfg.condition_hidden_dim as i64, cfg.out_dim as i64);
        let weights = load_tensors(
            f,
            &[("proj.weight".into(), vec![3, h, o]), ("proj.bias".into(), vec![o])],
            backend,
            "condition encoder weights",
        )?;
        Ok(CondEncoder { cfg, mix, weights, alloc: Allocator::new(backend) })
    }

    pub fn weight_bytes(&self) -> usize {
        self.weights.bytes()
    }

    /// Encodes one window: `states` holds `frames` frames of `layers * hidden` values
    /// (layer-major); returns `latent_length(frames)` rows of `out_dim`, time-major.
    pub fn encode(&mut self, backend: &Backend, states: &[f32], frames: usize) -> Result<Vec<f32>, GgmlError> {
        let c = &self.cfg;
        let (h, nl) = (c.condition_hidden_dim, c.num_condition_layers);
        assert_eq!(states.len(), frames * nl * h, "{} state values for {frames} frames of {nl} x {h}", states.len());
        // The mix, channel-major ([hidden][frames]: the convolution's time-innermost input).
        let mut mixed = vec![0f32; h * frames];
        for t in 0..frames {
            let row = &states[t * nl * h..(t + 1) * nl * h];
            for (l, &w) in self.mix.iter().enumerate() {
                for (j, &v) in row[l * h..(l + 1) * h].iter().enumerate() {
                    mixed[j * frames + t] += w * v;
                }
            }
        }
        let ctx = Context::for_graph(64)?;
        let mut g = ctx.new_graph("condition encoder", 64);
        let x = ctx.new_tensor(GgmlType::F32, &[frames as i64, h as i64]).set_input();
        let w = &self.weights;
        let y = ctx.conv_1d_f32(w.get("proj.weight"), x, 1, 1, 1);
        let y = ctx.reshape_2d(y, y.ne()[0], y.ne()[1]); // [frames, out]
        let bias = ctx.reshape_2d(w.get("proj.bias"), 1, c.out_dim as i64);
        let y = ctx.add(y, bias).set_output();
        g.expand(y);
        self.alloc.alloc_graph(&g)?;
        x.write_f32(&mixed);
        backend.compute(&g)?;
        let proj = y.read_f32(); // [out][frames]
        let out_len = c.latent_length(frames);
        let src = nearest_sources(frames, out_len);
        let mut out = Vec::with_capacity(out_len * c.out_dim);
        for &s in &src {
            out.extend((0..c.out_dim).map(|o| proj[o * frames + s]));
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_sources_follow_torch_in_f32() {
        let c = CondConfig {
            condition_hidden_dim: 1,
            num_condition_layers: 8,
            out_dim: 1,
            input_sampling_rate: 24000,
            input_hop_length: 960,
            output_sampling_rate: 44100,
            output_hop_length: 512,
        };
        assert_eq!(c.latent_length(200), 689);
        assert_eq!(c.latent_length(1), 3);
        // n = 150: the exact-integer formula floor(i * n / L) differs from torch's f32 one.
        let (n, l) = (150, c.latent_length(150));
        let f32_src = nearest_sources(n, l);
        let exact: Vec<usize> = (0..l).map(|i| i * n / l).collect();
        assert_ne!(f32_src, exact);
        assert!(f32_src.iter().all(|&s| s < n));
    }
}
