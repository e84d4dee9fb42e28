//! PCM post-processing and containers. The pipeline hands out planar stereo float at
//! 48 kHz, full range; this crate normalises it and writes files.
#![forbid(unsafe_code)]
pub mod aac;
pub mod decode;
pub mod encode;
pub mod mel;
pub mod normalize;
pub mod ogg_opus;
pub mod resample;
pub mod wav;

pub use normalize::peak_normalize;

#[derive(Debug, thiserror::Error)]
pub enum AudioError {
    #[error("{0}")]
    Format(String),
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("{0}")]
    Wav(#[from] hound::Error),
}

/// Planar multi-channel PCM: `channels` runs of `frames` samples.
#[derive(Clone, Debug, PartialEq)]
pub struct Pcm {
    pub sample_rate: u32,
    pub channels: usize,
    pub data: Vec<f32>,
}

impl Pcm {
    pub fn new(sample_rate: u32, channels: usize, data: Vec<f32>) -> Self {
        assert!(
            channels > 0 && data.len().is_multiple_of(channels),
            "planar data of {} values for {channels} channels",
            data.len()
        );
        Pcm { sample_rate, channels, data }
    }
    /// Samples per channel.
    pub fn frames(&self) -> usize {
        self.data.len() / self.channels
    }
    pub fn channel(&self, c: usize) -> &[f32] {
        let n = self.frames();
        &self.data[c * n..(c + 1) * n]
    }
    pub fn seconds(&self) -> f64 {
        self.frames() as f64 / self.sample_rate as f64
    }
}

/// What a decode found: the rate, the channels, and the frames the container keeps after
/// `skip` (an encoder's priming); `over` when it stopped past its bound.
pub(crate) struct Blocks {
    pub rate: u32,
    pub channels: usize,
    pub skip: usize,
    pub frames: usize,
    pub over: bool,
}

impl Blocks {
    /// The kept frames of the decoded interleaved samples `inter`, planar.
    pub(crate) fn planar(&self, inter: &[f32]) -> Vec<f32> {
        let (n, ch) = (self.frames, self.channels);
        let mut planar = vec![0f32; n * ch];
        for i in 0..n {
            for c in 0..ch {
                planar[c * n + i] = inter[(self.skip + i) * ch + c];
            }
        }
        planar
    }

    /// The frames a bound of `max_seconds` lets a decode read at `rate` before it stops: the
    /// bound, plus a second for what the container trims off afterwards.
    pub(crate) fn limit(max_seconds: Option<f64>, rate: u32) -> Option<u64> {
        max_seconds.map(|m| (m.max(0.0) * f64::from(rate)).ceil() as u64 + u64::from(rate))
    }
}
