//! A recording to timed events, one step at a time: each window's encoding (MERT with the
//! head's LoRA merged, the mix, the memory), then its greedy decoding in pieces of
//! [`TOKENS_A_STEP`] tokens, so the stage that runs it can report progress, stop on cancel
//! and interleave other work between steps ([`Transcription::step`]).
use super::config::{HeadConfig, Kind, CONFIG_KEY};
use super::events::{decode, StreamError, TimeMap};
use super::grammar::{choose, Grammar, Unexpected};
use super::head::{read_config, Decoder, Head, Memory};
use super::notation;
use super::windows::{accept, plan, prefix, stitch, Stitched, Window, PREFIX_MARGIN};
use crate::ggml::{Backend, GgmlError};
use crate::gguf::{GgufError, GgufFile};
use crate::models::mert::config::beside;
use crate::models::mert::model::{Mert, Taps};
use crate::nn::lora::Term;
use crate::weights::LoadError;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The rate the recording is read at (MERT-v2's).
pub const SAMPLE_RATE: u32 = 24_000;
/// The shortest recording MERT's front end takes, in samples.
pub const MIN_SAMPLES: usize = 1025;
/// Tokens fed or drawn in one [`Transcription::step`].
pub const TOKENS_A_STEP: usize = 64;

#[derive(Debug, thiserror::Error)]
pub enum TranscribeError {
    #[error("Audio must contain at least {MIN_SAMPLES} samples at 24 kHz (it has {0})")]
    TooShort(usize),
    #[error(
        "the notes carried over from the previous window fill the head's context ({0} tokens of {1}): the model \
         wrote more events than a window holds"
    )]
    PrefixFull(usize, usize),
    #[error(transparent)]
    Stream(#[from] StreamError),
    #[error(transparent)]
    Grammar(#[from] Unexpected),
    #[error(transparent)]
    Ggml(#[from] GgmlError),
}

/// MERT (with the head's LoRA merged) and the head, loaded together.
pub struct Transcriber {
    pub mert: Mert,
    pub head: Head,
}

impl Transcriber {
    /// Loads the head at `head` and the MERT file beside it in the same quant.
    pub fn open(head: &Path, backend: &Backend) -> Result<Self, LoadError> {
        let (hf, mert) = Self::files(head)?;
        Self::load(&hf, &GgufFile::open(&mert)?, backend)
    }

    /// The head's file, checked to be one, and the path of the MERT file beside it.
    pub fn files(head: &Path) -> Result<(GgufFile, PathBuf), GgufError> {
        let hf = GgufFile::open(head)?;
        let (cfg, _) = read_config(&hf)?;
        let base = &cfg.base_model_name_or_path;
        let mert = beside(head, base).ok_or_else(|| GgufError::Corrupt {
            path: head.to_path_buf(),
            what: format!("no MERT file beside it: base model '{base}', a file name without '-<quant>'"),
        })?;
        Ok((hf, mert))
    }

    pub fn load(head: &GgufFile, mert: &GgufFile, backend: &Backend) -> Result<Self, LoadError> {
        let (cfg, _) = read_config(head)?;
        let mert = Mert::load_merged(mert, backend, &lora_terms(head, &cfg)?)?;
        let head = Head::load(head, mert.cfg.hidden_size, mert.cfg.num_hidden_layers, backend)?;
        Ok(Transcriber { mert, head })
    }

    /// Device bytes of both models' weights.
    pub fn weight_bytes(&self) -> usize {
        self.mert.weight_bytes() + self.head.weight_bytes()
    }

    /// The transcription of `mono` (24 kHz), not yet started.
    pub fn start(&self, mono: Vec<f32>) -> Result<Transcription, TranscribeError> {
        if mono.len() < MIN_SAMPLES {
            return Err(TranscribeError::TooShort(mono.len()));
        }
        let duration = mono.len() as f64 / SAMPLE_RATE as f64;
        let windows = plan(duration, self.head.cfg.input_audio_length);
        Ok(Transcription { mono, duration, windows, next: 0, run: None, stitched: Vec::new(), log: Vec::new() })
    }
}

/// The head's LoRA factors as terms on MERT's weights: `adapter.<module>.lora_A.weight` and
/// its `lora_B` partner change `<module>.weight` by `alpha / rank · B A`.
fn lora_terms(f: &GgufFile, cfg: &HeadConfig) -> Result<HashMap<String, Vec<Term>>, GgufError> {
    let mut terms: HashMap<String, Vec<Term>> = HashMap::new();
    let corrupt = |what: String| GgufError::Corrupt { path: f.path().to_path_buf(), what };
    for t in f.tensors() {
        let Some(module) = t.name.strip_prefix("adapter.").and_then(|n| n.strip_suffix(".lora_A.weight")) else {
            continue;
        };
        let b_name = format!("adapter.{module}.lora_B.weight");
        let b = f.tensor(&b_name).ok_or_else(|| corrupt(format!("'{}' has no partner '{b_name}'", t.name)))?;
        let rank = t.ne.get(1).copied().unwrap_or(0) as usize;
        if rank != cfg.lora_rank || b.ne.first().copied() != Some(rank as i64) {
            return Err(corrupt(format!("'{}' is not of rank {} ({CONFIG_KEY})", t.name, cfg.lora_rank)));
        }
        let term = Term::Lora { a: f.tensor_f32(&t.name)?, b: f.tensor_f32(&b_name)?, rank, scale: cfg.lora_scale() };
        terms.entry(format!("{module}.weight")).or_default().push(term);
    }
    Ok(terms)
}

/// What one window decoded (for tests and logs).
#[derive(Clone, Debug, PartialEq)]
pub struct WindowLog {
    pub window: Window,
    /// The whole sequence: prefix, drawn tokens, eos.
    pub tokens: Vec<u32>,
    pub prefix_len: usize,
    pub anchors: Vec<(u32, f64)>,
    pub step_seconds: f64,
    pub accepted: usize,
}

/// One recording's way through the transcriber.
pub struct Transcription {
    mono: Vec<f32>,
    duration: f64,
    windows: Vec<Window>,
    next: usize,
    run: Option<Run>,
    stitched: Vec<Stitched>,
    log: Vec<WindowLog>,
}

/// The window being decoded.
struct Run {
    memory: Memory,
    decoder: Decoder,
    grammar: Grammar,
    seq: Vec<u32>,
    prefix_len: usize,
    base: i64,
    ended: bool,
}

impl Transcription {
    pub fn duration(&self) -> f64 {
        self.duration
    }

    pub fn windows(&self) -> &[Window] {
        &self.windows
    }

    /// The share of the work done, 0 to 1: whole windows, then the current one's tokens
    /// against its budget.
    pub fn progress(&self, budget: usize) -> f64 {
        let part = self.run.as_ref().map_or(0.0, |r| {
            let room = budget.saturating_sub(r.prefix_len).max(1);
            0.1 + 0.9 * (r.seq.len() - r.prefix_len) as f64 / room as f64
        });
        ((self.log.len() as f64 + part) / self.windows.len() as f64).min(1.0)
    }

    pub fn is_done(&self) -> bool {
        self.log.len() == self.windows.len()
    }

    /// Runs the next step: a window's encoding, or up to [`TOKENS_A_STEP`] of its tokens;
    /// false once every window is decoded.
    pub fn step(&mut self, tr: &mut Transcriber, backend: &Backend) -> Result<bool, TranscribeError> {
        if self.is_done() {
            return Ok(false);
        }
        match &mut self.run {
            None => self.run = Some(self.open(tr, backend)?),
            Some(run) => {
                for _ in 0..TOKENS_A_STEP {
                    if run.advance(tr, backend, &self.windows[self.next])? {
                        break;
                    }
                }
                if run.ended {
                    self.close(tr)?;
                }
            }
        }
        Ok(!self.is_done())
    }

    /// Builds the next window's prefix (refused before the encoding when it fills the context),
    /// then encodes the window.
    fn open(&mut self, tr: &mut Transcriber, backend: &Backend) -> Result<Run, TranscribeError> {
        let w = &self.windows[self.next];
        let cfg = tr.head.cfg.clone();
        let p = prefix(&tr.head.vocab, &self.stitched, w, cfg.time_hz as f64);
        let budget = cfg.max_output_seq_len;
        if p.tokens.len() >= budget.saturating_sub(PREFIX_MARGIN) {
            return Err(TranscribeError::PrefixFull(p.tokens.len(), budget));
        }
        let n = cfg.window_samples();
        let from = ((w.start * SAMPLE_RATE as f64).round() as usize).min(self.mono.len());
        let mut segment = self.mono[from..(from + n).min(self.mono.len())].to_vec();
        segment.resize(n, 0.0);
        let blocks = tr.mert.cfg.num_hidden_layers;
        let enc = tr.mert.encode(backend, &segment, blocks, Taps::Mix(&tr.head.mix))?;
        let memory = tr.head.memory(backend, &enc.states[0], enc.frames, false)?;
        let mut grammar = Grammar::default();
        let out = p.tokens.iter().position(|t| *t == tr.head.vocab.out).expect("a prefix holds out");
        for &t in &p.tokens[out + 1..] {
            grammar.update(&tr.head.vocab, t)?;
        }
        let decoder = tr.head.decoder(backend)?;
        let prefix_len = p.tokens.len();
        Ok(Run { memory, decoder, grammar, seq: p.tokens, prefix_len, base: p.base, ended: false })
    }

    /// Joins the finished window's events to the song's.
    fn close(&mut self, tr: &Transcriber) -> Result<(), TranscribeError> {
        let run = self.run.take().expect("a window being decoded");
        let w = self.windows[self.next].clone();
        let cfg = &tr.head.cfg;
        let d = decode(&tr.head.vocab, &run.seq, cfg.time_hz as f64)?;
        let map = TimeMap::new(&d.anchors, cfg.input_audio_length);
        let got = accept(&w, &d.events, &map, run.base, self.duration);
        let accepted = got.len();
        stitch(&mut self.stitched, got);
        let (anchors, step_seconds) = (d.anchors, map.step_seconds());
        self.log.push(WindowLog {
            window: w,
            tokens: run.seq,
            prefix_len: run.prefix_len,
            anchors,
            step_seconds,
            accepted,
        });
        self.next += 1;
        if self.is_done() {
            self.mono = Vec::new();
        }
        Ok(())
    }

    /// The accepted events, in `(time, global step)` order.
    pub fn stitched(&self) -> &[Stitched] {
        &self.stitched
    }

    pub fn log(&self) -> &[WindowLog] {
        &self.log
    }

    /// The song's events as the notation reads them (once done).
    pub fn events(&self) -> notation::Events {
        notation::Events { duration: self.duration, events: self.stitched.iter().map(notation_event).collect() }
    }

    /// The score, both voices with chords or `melody_only`; an error says why there is none.
    pub fn abc(&self, melody_only: bool) -> Result<String, notation::NoScore> {
        notation::to_abc(&self.events(), melody_only)
    }
}

/// An accepted event as the notation takes it.
fn notation_event(s: &Stitched) -> notation::Event {
    let e = &s.event;
    notation::Event {
        time: s.time,
        meter: e.meter.map(|(n, d)| notation::Meter::new(n as i32, d as i32)),
        eighth_position: e.eighth.map(|p| p as i32),
        structure: e.structure.clone(),
        key: e.key.clone(),
        chord: e.chord.clone(),
        notes: e.notes.iter().map(|n| notation::Note::new(n.pitch as u8, n.track, n.end_time)).collect(),
    }
}

impl Run {
    /// Feeds one token; true when the window's stream has ended.
    fn advance(&mut self, tr: &mut Transcriber, backend: &Backend, w: &Window) -> Result<bool, TranscribeError> {
        let fed = self.decoder.pos();
        if fed + 1 < self.seq.len() {
            tr.head.step(backend, &mut self.decoder, &self.memory, self.seq[fed])?;
            return Ok(false);
        }
        if self.seq.len() >= tr.head.cfg.max_output_seq_len {
            self.seq.push(tr.head.vocab.eos);
            self.ended = true;
            return Ok(true);
        }
        let logits = tr.head.step(backend, &mut self.decoder, &self.memory, self.seq[fed])?;
        let v = &tr.head.vocab;
        let t = choose(&logits, &self.grammar.allowed(v));
        self.grammar.update(v, t)?;
        self.seq.push(t);
        let time = v.range(Kind::Time);
        if t == v.eos {
            self.ended = true;
        } else if time.contains(&t) && (t - time.start) as f64 / tr.head.cfg.time_hz as f64 >= w.stop_time {
            self.seq.push(v.eos);
            self.ended = true;
        }
        Ok(self.ended)
    }
}
