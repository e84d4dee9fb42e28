//! The Oobleck VAE: decoder (64-channel latents at 25 Hz to 48 kHz stereo, 1920x) with
//! exact tiling, and the encoder (audio to the posterior mean).
//!
//! Loading folds weight norm (w = g * v / ||v||, the norm over every axis but the first of
//! the torch layout: per output channel for convolutions, per input channel for the
//! transposed ones) and the log-scale snake parameters (exp(alpha), 1 / exp(beta)), so the
//! graphs see the inference form of the weights. Widths come from the tensor shapes, the
//! strides from `yue2-vae.upsampling_ratios`.
//!
//! SnakeBeta is written as its five-op decomposition (mul, sin, sqr, mul, add) so a backend
//! with a fused kernel can match it. A transposed convolution with stride s and kernel 2s
//! computes its full output and crops ceil(s/2) samples on each side, which makes the output
//! of T frames exactly 1920 * T - 64 samples with the left edge anchored: a tile decoded with
//! a halo and cropped to its core is bit-for-bit the same signal as one pass would give.
use crate::cancel::CancelToken;
use crate::ggml::{Allocator, Backend, Context, GgmlError, GgmlType, TensorStore};
use crate::gguf::{GgufError, GgufFile};
use crate::models::yue2::config::VAE_ARCH;
use crate::models::yue2::vae_layout::{decoder_shapes, encoder_shapes, RES_DILATIONS};
use crate::nn::oobleck::Blocks;
use crate::weights::LoadError;

/// Geometry of a loaded VAE.
#[derive(Clone, Debug, PartialEq)]
pub struct VaeInfo {
    pub latent_channels: usize,
    pub audio_channels: usize,
    pub sample_rate: u32,
    /// Decoder strides, first block first.
    pub strides: Vec<usize>,
    /// Decoder widths, C0 .. C_n.
    pub channels: Vec<usize>,
    pub has_encoder: bool,
}

impl VaeInfo {
    /// The audio this VAE makes; YuE2 writes one semantic code per latent frame.
    pub fn audio_spec(&self) -> crate::models::AudioSpec {
        let hop = self.hop();
        crate::models::AudioSpec {
            sample_rate: self.sample_rate,
            channels: self.audio_channels,
            latent_channels: self.latent_channels,
            samples_per_latent: hop,
            code_rate: self.sample_rate as f64 / hop as f64,
        }
    }

    /// Samples per latent frame.
    pub fn hop(&self) -> usize {
        self.strides.iter().product()
    }
    /// Output samples (per channel) of `frames` latent frames.
    pub fn samples_for(&self, frames: usize) -> usize {
        samples_for(&self.strides, frames)
    }
}

/// Output samples (per channel) of `frames` latent frames through transposed convolutions
/// of these strides (kernel 2s, padding ceil(s / 2)).
fn samples_for(strides: &[usize], frames: usize) -> usize {
    let mut len = frames;
    for &s in strides {
        len = len * s + s - 2 * s.div_ceil(2);
    }
    len
}

/// The tiled decode of one track fed in pieces: latents arrive as the NAR finishes each
/// chunk, and every tile whose core and right halo are available is decoded at once. Same
/// tiles, hence the same samples, as one `decode_tiled` call, whether the length is known
/// from the start or only when the song ends.
pub struct TileStream {
    channels: usize,
    audio_channels: usize,
    hop: usize,
    /// The track's length; `None` while a streamed song is still being written (tiles then
    /// wait for their right halo, the last ones for [`set_frames`](Self::set_frames)).
    frames: Option<usize>,
    core: usize,
    halo: usize,
    strides: Vec<usize>,
    latents: Vec<f32>,
    /// First frame of the next tile's core.
    next: usize,
    index: usize,
    /// Each audio channel's samples decoded so far (tiles are contiguous and in order).
    out: Vec<Vec<f32>>,
}

impl TileStream {
    pub fn new(info: &VaeInfo, frames: usize, core: usize, halo: usize) -> Result<Self, VaeError> {
        let mut s = Self::open(info, core, halo)?;
        s.set_frames(frames)?;
        Ok(s)
    }

    /// A track whose length is not known yet: the tile grid is the same as a known
    /// length's, so the audio is too.
    pub fn open(info: &VaeInfo, core: usize, halo: usize) -> Result<Self, VaeError> {
        if core == 0 {
            return Err(VaeError::Input("tile core must be at least one frame".into()));
        }
        Ok(TileStream {
            channels: info.latent_channels,
            audio_channels: info.audio_channels,
            hop: info.hop(),
            frames: None,
            core,
            halo,
            strides: info.strides.clone(),
            latents: Vec::new(),
            next: 0,
            index: 0,
            out: vec![Vec::new(); info.audio_channels],
        })
    }

    /// Fixes the track's length (once, at least what was received); the tiles it completes
    /// are decoded by the next [`push`](Self::push).
    pub fn set_frames(&mut self, frames: usize) -> Result<(), VaeError> {
        if frames == 0 {
            return Err(VaeError::Input("a track of zero frames".into()));
        }
        if self.frames.is_some() || frames < self.received() {
            return Err(VaeError::Input(format!(
                "a track of {frames} frames ({} received, length {:?})",
                self.received(),
                self.frames
            )));
        }
        self.frames = Some(frames);
        for v in &mut self.out {
            v.reserve(self.hop * frames);
        }
        Ok(())
    }

    /// Frames received so far.
    pub fn received(&self) -> usize {
        self.latents.len() / self.channels
    }

    pub fn is_complete(&self) -> bool {
        self.frames.is_some_and(|f| self.next >= f)
    }

    /// Appends time-major latents and decodes every tile they complete.
    pub fn push(
        &mut self,
        vae: &mut VaeModel,
        backend: &Backend,
        latents: &[f32],
        cancel: &CancelToken,
        on_tile: &mut dyn FnMut(Tile<'_>),
    ) -> Result<(), VaeError> {
        let c = self.channels;
        let frames = self.frames.unwrap_or(usize::MAX);
        if !latents.len().is_multiple_of(c) || self.received() + latents.len() / c > frames {
            return Err(VaeError::Input(format!(
                "{} latent values do not fit the {frames} frames of this track ({} received)",
                latents.len(),
                self.received()
            )));
        }
        self.latents.extend_from_slice(latents);
        let have = self.received();
        let (hop, ch) = (self.hop, self.audio_channels);
        while self.next < frames {
            let a = self.next;
            let b = (a + self.core).min(frames);
            let (s, e) = (a.saturating_sub(self.halo), (b + self.halo).min(frames));
            if e > have {
                break;
            }
            if cancel.is_cancelled() {
                return Err(VaeError::Cancelled);
            }
            let pcm = vae.decode(backend, &self.latents[s * c..e * c])?;
            let tile_len = vae.info.samples_for(e - s);
            let off = (a - s) * hop;
            let n = if b == frames { samples_for(&self.strides, frames) - a * hop } else { (b - a) * hop };
            let mut planar = Vec::with_capacity(n * ch);
            for k in 0..ch {
                let src = &pcm[k * tile_len + off..k * tile_len + off + n];
                self.out[k].extend_from_slice(src);
                planar.extend_from_slice(src);
            }
            on_tile(Tile { index: self.index, start_sample: a * hop, pcm: &planar, samples: n });
            self.index += 1;
            self.next = b;
        }
        Ok(())
    }

    /// The whole planar signal and the latents it was decoded from.
    pub fn finish(self) -> (Vec<f32>, Vec<f32>) {
        (self.out.concat(), self.latents)
    }
}

/// One decoded tile handed to the caller as soon as it exists.
pub struct Tile<'a> {
    pub index: usize,
    /// First output sample (per channel) of this tile in the whole song.
    pub start_sample: usize,
    /// Planar stereo: `samples` left values then `samples` right values.
    pub pcm: &'a [f32],
    pub samples: usize,
}

#[derive(Debug, thiserror::Error)]
pub enum VaeError {
    #[error(transparent)]
    Ggml(#[from] GgmlError),
    #[error("cancelled")]
    Cancelled,
    #[error("{0}")]
    Input(String),
}

pub struct VaeModel {
    pub info: VaeInfo,
    weights: TensorStore,
    alloc: Allocator,
}

fn fold_weight_norm(g: &[f32], v: &[f32]) -> Vec<f32> {
    let slab = v.len() / g.len();
    let mut w = Vec::with_capacity(v.len());
    for (o, chunk) in v.chunks(slab).enumerate() {
        let norm = chunk.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
        let scale = if norm > 0.0 { g[o] as f64 / norm } else { 0.0 };
        w.extend(chunk.iter().map(|x| (*x as f64 * scale) as f32));
    }
    w
}

impl VaeModel {
    /// Reads the geometry of a VAE file and checks every tensor's shape.
    pub fn info(f: &GgufFile) -> Result<VaeInfo, GgufError> {
        let corrupt = |what: String| GgufError::Corrupt { path: f.path().to_path_buf(), what };
        let arch = f.get_str("general.architecture")?;
        if arch != VAE_ARCH {
            return Err(corrupt(format!("general.architecture is '{arch}', expected '{VAE_ARCH}' (a YuE2 VAE)")));
        }
        let latent = f.get_i64("yue2-vae.latent_channels")? as usize;
        let strides: Vec<usize> =
            f.get_i64_array("yue2-vae.upsampling_ratios")?.into_iter().map(|s| s as usize).collect();
        if strides.is_empty() || strides.iter().any(|&s| s == 0 || s > 64) {
            return Err(corrupt(format!("yue2-vae.upsampling_ratios {strides:?} is not a list of strides")));
        }
        let audio = f.get("yue2-vae.audio_channels").and_then(|v| v.as_i64()).unwrap_or(2) as usize;
        let sample_rate = f.get("yue2-vae.sampling_rate").and_then(|v| v.as_i64()).unwrap_or(48000) as u32;
        let mut channels = vec![f.require_tensor("decoder.conv1.weight_v")?.ne4()[2] as usize];
        for i in 0..strides.len() {
            channels.push(f.require_tensor(&format!("decoder.block.{i}.conv_t1.weight_v"))?.ne4()[1] as usize);
        }
        for (name, ne) in decoder_shapes(latent, &channels, &strides, audio) {
            f.expect_tensor(&name, &ne)?;
        }
        let has_encoder = f.tensor("encoder.conv1.weight_v").is_some();
        if has_encoder {
            for (name, ne) in encoder_shapes(latent, &channels, &strides, audio) {
                f.expect_tensor(&name, &ne)?;
            }
        }
        Ok(VaeInfo { latent_channels: latent, audio_channels: audio, sample_rate, strides, channels, has_encoder })
    }

    pub fn load(f: &GgufFile, backend: &Backend) -> Result<Self, LoadError> {
        let info = Self::info(f)?;
        let mut shapes = decoder_shapes(info.latent_channels, &info.channels, &info.strides, info.audio_channels);
        if info.has_encoder {
            shapes.extend(encoder_shapes(info.latent_channels, &info.channels, &info.strides, info.audio_channels));
        }
        // Folded tensors: {conv}.weight, {conv}.bias [1, C], {snake}.a / .inv_b [1, C].
        let mut folded: Vec<(String, Vec<i64>, Vec<f32>)> = Vec::new();
        for (name, ne) in &shapes {
            if let Some(prefix) = name.strip_suffix(".weight_v") {
                let g = f.tensor_f32(&format!("{prefix}.weight_g"))?;
                let v = f.tensor_f32(name)?;
                folded.push((format!("{prefix}.weight"), ne.clone(), fold_weight_norm(&g, &v)));
            } else if name.ends_with(".bias") {
                folded.push((name.clone(), vec![1, ne[0]], f.tensor_f32(name)?));
            } else if let Some(prefix) = name.strip_suffix(".alpha") {
                let a = f.tensor_f32(name)?.iter().map(|x| x.exp()).collect();
                folded.push((format!("{prefix}.a"), vec![1, ne[0]], a));
            } else if let Some(prefix) = name.strip_suffix(".beta") {
                let b = f.tensor_f32(name)?.iter().map(|x| 1.0 / x.exp()).collect();
                folded.push((format!("{prefix}.inv_b"), vec![1, ne[0]], b));
            }
        }
        let mut weights = TensorStore::new(folded.len())?;
        for (n, ne, _) in &folded {
            weights.declare(n, GgmlType::F32, ne);
        }
        weights.allocate(backend, "VAE weights", true)?;
        for (n, _, v) in &folded {
            weights.get(n).write_f32(v);
        }
        Ok(VaeModel { info, weights, alloc: Allocator::new(backend) })
    }

    pub fn weight_bytes(&self) -> usize {
        self.weights.bytes()
    }

    /// Node budget of a decode or encode graph: it grows with the blocks (one per stride,
    /// about 110 nodes each), never with the length.
    fn graph_nodes(&self) -> usize {
        512 + 256 * self.info.strides.len()
    }

    /// Decodes `frames` time-major latents ([T, 64]) in one pass; planar stereo out.
    pub fn decode(&mut self, backend: &Backend, latents: &[f32]) -> Result<Vec<f32>, VaeError> {
        let c = self.info.latent_channels;
        if latents.is_empty() || !latents.len().is_multiple_of(c) {
            return Err(VaeError::Input(format!("{} latent values are not whole frames of {c}", latents.len())));
        }
        let frames = latents.len() / c;
        let ctx = Context::for_graph(self.graph_nodes())?;
        let mut g = ctx.new_graph("VAE decode", self.graph_nodes());
        let input = ctx.new_tensor(GgmlType::F32, &[c as i64, frames as i64]).set_input();
        let w = &self.weights;
        let b = Blocks { ctx: &ctx, w, snake_inv: "inv_b" };
        let x = ctx.cont(ctx.transpose(input)); // [T, C]
        let mut x = b.conv("decoder.conv1", x, 1, 3, 1);
        for (i, &s) in self.info.strides.iter().enumerate() {
            let p = format!("decoder.block.{i}");
            x = b.snake(&format!("{p}.snake1"), x);
            x = b.conv_t(&format!("{p}.conv_t1"), x, s);
            for (r, &d) in RES_DILATIONS.iter().enumerate() {
                x = b.res_unit(&format!("{p}.res_unit{}", r + 1), x, d);
            }
        }
        x = b.snake("decoder.snake1", x);
        let out = b.conv("decoder.conv2", x, 1, 3, 1).set_output();
        g.expand(out);
        self.alloc.alloc_graph(&g)?;
        input.write_f32(latents);
        backend.compute(&g)?;
        let pcm = out.read_f32();
        debug_assert_eq!(pcm.len(), self.info.samples_for(frames) * self.info.audio_channels);
        Ok(pcm)
    }

    /// Decodes in tiles of `core` frames with `halo` frames of context on each side,
    /// handing each tile's core to `on_tile` as soon as it is decoded; returns the whole
    /// planar signal, identical to a single pass.
    pub fn decode_tiled(
        &mut self,
        backend: &Backend,
        latents: &[f32],
        core: usize,
        halo: usize,
        cancel: &CancelToken,
        on_tile: &mut dyn FnMut(Tile<'_>),
    ) -> Result<Vec<f32>, VaeError> {
        let c = self.info.latent_channels;
        if latents.is_empty() || !latents.len().is_multiple_of(c) {
            return Err(VaeError::Input(format!("{} latent values are not whole frames of {c}", latents.len())));
        }
        let mut stream = TileStream::new(&self.info, latents.len() / c, core, halo)?;
        stream.push(self, backend, latents, cancel, on_tile)?;
        Ok(stream.finish().0)
    }

    /// Encodes planar audio ([channels, N], N a multiple of the hop) to the posterior mean,
    /// time-major [T, latent].
    pub fn encode(&mut self, backend: &Backend, audio: &[f32]) -> Result<Vec<f32>, VaeError> {
        if !self.info.has_encoder {
            return Err(VaeError::Input("this VAE file has no encoder".into()));
        }
        let ch = self.info.audio_channels;
        let hop = self.info.hop();
        if audio.is_empty() || !audio.len().is_multiple_of(ch * hop) {
            return Err(VaeError::Input(format!(
                "{} samples are not whole frames of {hop} x {ch} channels",
                audio.len()
            )));
        }
        let n = audio.len() / ch;
        let ctx = Context::for_graph(self.graph_nodes())?;
        let mut g = ctx.new_graph("VAE encode", self.graph_nodes());
        let input = ctx.new_tensor(GgmlType::F32, &[n as i64, ch as i64]).set_input();
        let w = &self.weights;
        let b = Blocks { ctx: &ctx, w, snake_inv: "inv_b" };
        let mut x = b.conv("encoder.conv1", input, 1, 3, 1);
        let strides: Vec<usize> = self.info.strides.iter().rev().copied().collect();
        for (i, &s) in strides.iter().enumerate() {
            let p = format!("encoder.block.{i}");
            for (r, &d) in RES_DILATIONS.iter().enumerate() {
                x = b.res_unit(&format!("{p}.res_unit{}", r + 1), x, d);
            }
            x = b.snake(&format!("{p}.snake1"), x);
            x = b.conv(&format!("{p}.conv1"), x, s as i32, s.div_ceil(2) as i32, 1);
        }
        x = b.snake("encoder.snake1", x);
        let y = b.conv("encoder.conv2", x, 1, 1, 1); // [T, 2 * latent]
        let lat = self.info.latent_channels as i64;
        let t = y.ne()[0];
        let mean = ctx.view_2d(y, t, lat, y.nb()[1], 0);
        let out = ctx.cont(ctx.transpose(mean)).set_output(); // [latent, T]: time-major
        g.expand(out);
        self.alloc.alloc_graph(&g)?;
        input.write_f32(audio);
        backend.compute(&g)?;
        Ok(out.read_f32())
    }
}

#[cfg(test)]
mod tests;
