//! A recording to codes, one step at a time: each MERT chunk, then each head window, so the
//! stage that runs it can report progress, stop on cancel and interleave other work between
//! steps ([`Tokenization::step`]).
use super::head::{Head, CONFIG_KEY};
use super::plan::{resample, Grid, Window};
use crate::ggml::{Backend, GgmlError};
use crate::gguf::{GgufError, GgufFile};
use crate::models::mert::config::beside;
use crate::models::mert::model::{Mert, Taps};
use crate::weights::LoadError;
use std::ops::Range;
use std::path::Path;

/// The rate the recording is read at (MERT-v2's; its configuration is checked for it).
pub const SAMPLE_RATE: u32 = 24_000;

/// MERT and the head, loaded together.
pub struct AudioTokenizer {
    pub mert: Mert,
    pub head: Head,
}

impl AudioTokenizer {
    /// Loads the head at `head` and the MERT file beside it in the same quant (yue2.cpp's
    /// rule, [`beside`]).
    pub fn open(head: &Path, backend: &Backend) -> Result<Self, LoadError> {
        let (hf, mert) = Self::files(head)?;
        Self::load(&hf, &GgufFile::open(&mert)?, backend)
    }

    /// The head's file, checked to be one (its architecture and configuration), and the path
    /// of the MERT file beside it; what a daemon checks at start without loading either.
    pub fn files(head: &Path) -> Result<(GgufFile, std::path::PathBuf), GgufError> {
        let hf = GgufFile::open(head)?;
        hf.expect_arch(super::head::ARCH)?;
        let corrupt = |what: String| GgufError::Corrupt { path: head.to_path_buf(), what };
        let cfg: serde_json::Value = serde_json::from_str(hf.get_str(CONFIG_KEY)?)
            .map_err(|e| corrupt(format!("{CONFIG_KEY} is not JSON: {e}")))?;
        let base = cfg["base_model_name_or_path"].as_str().unwrap_or_default();
        let mert = beside(head, base).ok_or_else(|| {
            corrupt(format!("no MERT file beside it: base model '{base}', a file name without '-<quant>'"))
        })?;
        Ok((hf, mert))
    }

    pub fn load(head: &GgufFile, mert: &GgufFile, backend: &Backend) -> Result<Self, LoadError> {
        let mert = Mert::load(mert, backend)?;
        let head = Head::load(head, mert.cfg.hidden_size, mert.cfg.num_hidden_layers, backend)?;
        Ok(AudioTokenizer { mert, head })
    }

    /// Device bytes of both models' weights.
    pub fn weight_bytes(&self) -> usize {
        self.mert.weight_bytes() + self.head.weight_bytes()
    }

    pub fn grid(&self) -> Grid {
        self.head.cfg.grid()
    }

    /// The tokenization of `mono` (24 kHz), not yet started; None when the recording is
    /// under a second (MERT reads no chunk of it).
    pub fn start(&self, mono: Vec<f32>) -> Option<Tokenization> {
        let grid = self.grid();
        let chunks = grid.chunks(mono.len());
        if chunks.is_empty() {
            return None;
        }
        let frames = grid.code_frames(mono.len());
        Some(Tokenization {
            windows: grid.windows(frames),
            codes: vec![0; frames],
            frames,
            chunks,
            mono,
            states: Vec::new(),
            features: Vec::new(),
            done: 0,
        })
    }
}

/// One recording's way through the tokenizer.
pub struct Tokenization {
    mono: Vec<f32>,
    chunks: Vec<Range<usize>>,
    windows: Vec<Window>,
    /// The chunks' states so far, time-major.
    states: Vec<f32>,
    /// The standardised states on the code grid, once every chunk is encoded.
    features: Vec<f32>,
    codes: Vec<u32>,
    frames: usize,
    done: usize,
}

impl Tokenization {
    /// Steps in all: one per MERT chunk, one per head window.
    pub fn steps(&self) -> usize {
        self.chunks.len() + self.windows.len()
    }

    pub fn done(&self) -> usize {
        self.done
    }

    /// Codes of the recording (25 Hz, its length rounded half to even).
    pub fn frames(&self) -> usize {
        self.frames
    }

    /// The head's windows, in the order they run.
    pub fn windows(&self) -> &[Window] {
        &self.windows
    }

    /// Runs the next step; false once every step has run.
    pub fn step(&mut self, tok: &mut AudioTokenizer, backend: &Backend) -> Result<bool, GgmlError> {
        let dim = tok.mert.cfg.hidden_size;
        if let Some(r) = self.chunks.get(self.done).cloned() {
            let e = tok.mert.encode(backend, &self.mono[r], tok.head.cfg.mert_layer + 1, Taps::Last)?;
            self.states.extend_from_slice(&e.states[0]);
            if self.done + 1 == self.chunks.len() {
                let t_in = self.states.len() / dim;
                self.features = resample(&self.states, t_in, dim, self.frames);
                tok.grid().standardise(&mut self.features, dim);
                self.states = Vec::new();
                self.mono = Vec::new();
            }
        } else if let Some(w) = self.windows.get(self.done - self.chunks.len()).cloned() {
            let got = tok.head.codes(backend, &self.features[w.start * dim..(w.start + w.len) * dim], w.len)?;
            for t in w.keep.clone() {
                self.codes[t] = got[t - w.start];
            }
        } else {
            return Ok(false);
        }
        self.done += 1;
        Ok(self.done < self.steps())
    }

    /// The head's input, once every chunk is encoded: `frames` rows of the MERT's width.
    pub fn features(&self) -> &[f32] {
        &self.features
    }

    /// The codes, once every step has run.
    pub fn codes(&self) -> &[u32] {
        assert_eq!(self.done, self.steps(), "codes of a tokenization {} steps short", self.steps() - self.done);
        &self.codes
    }
}

#[cfg(test)]
mod tests;
