//! The listening tools as the ModelStore and the stages see them: the audio tokenizer and the
//! transcriber (each MERT-v2 and its head, one component; the transcriber's MERT carries its
//! own LoRA, so the two never share one) in a coexistence group of their own, and the runs of
//! `/tokenize` and `/transcribe` jobs.
//!
//! A listening job is a job of an upload, like a `/vae` one: the entry stage pins the
//! listening group (under STRICT it waits for the previous job's groups to go, and the next
//! job waits for this one), and the decode stage reads the upload and runs it. The recording
//! is averaged to mono and resampled to 24 kHz, tokenized a step at a time (each MERT chunk,
//! then each head window: the progress on `/job`, and a cancel taken between steps), and the
//! codes saved as the job's one result file, `codes.json`: `{"codes": "12046,8433,..."}`. A
//! transcription runs the same way, a step per window's encoding and per piece of its tokens,
//! and saves `score.json`: `{"abc": "X:1\n..."}`.
use crate::messages::{EncCmd, JobCtx, Outcome};
use crate::model_store::{Component, ComponentKey, Group, Module};
use crate::stage::{Links, ProgressSink, WorkerConfig};
use crossbeam_channel::Sender;
use std::any::Any;
use yued_contract::results::ResultStore;
use yued_contract::UploadOp;
use yued_engine::ggml::Backend;
use yued_engine::models::audio_tokenizer::pipeline::{AudioTokenizer, SAMPLE_RATE};
use yued_engine::models::sheetsage2::pipeline::Transcriber;
use yued_protocol::{Family, Stage};

/// The listening heads' coexistence group (yue2.cpp's { SS2, ATOK }).
pub const GROUP: &str = "listen";

/// The name of a tokenization's result file.
pub const CODES_FILE: &str = "codes.json";
/// The name of a transcription's result file.
pub const SCORE_FILE: &str = "score.json";

pub fn group() -> Group {
    Group { family: Family::Yue2, name: GROUP }
}

/// The audio tokenizer of `--tokenizer`, when one is served.
pub fn tokenizer(cfg: &WorkerConfig) -> Option<ComponentKey> {
    let file = cfg.tokenizer.clone()?;
    Some(ComponentKey { family: Family::Yue2, component: "tokenizer", group: GROUP, file, variant: String::new() })
}

/// The transcriber of `--transcriber`, when one is served.
pub fn transcriber(cfg: &WorkerConfig) -> Option<ComponentKey> {
    let file = cfg.transcriber.clone()?;
    Some(ComponentKey { family: Family::Yue2, component: "transcriber", group: GROUP, file, variant: String::new() })
}

/// Loads a listening component: a head and the MERT file beside it.
pub fn load(key: &ComponentKey, backend: &Backend) -> Result<Module, String> {
    match key.component {
        "tokenizer" => Ok(Box::new(AudioTokenizer::open(&key.file, backend).map_err(|e| e.to_string())?)),
        "transcriber" => Ok(Box::new(Transcriber::open(&key.file, backend).map_err(|e| e.to_string())?)),
        other => Err(format!("the listening tools have no component '{other}'")),
    }
}

impl Component for AudioTokenizer {
    fn weight_bytes(&self) -> usize {
        AudioTokenizer::weight_bytes(self)
    }
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

impl Component for Transcriber {
    fn weight_bytes(&self) -> usize {
        Transcriber::weight_bytes(self)
    }
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

/// A listening job on the decode stage ([`crate::decode_stage::UploadJobFn`]): always reports
/// its own end.
pub(crate) fn run_job(
    links: &Links,
    backend: &Backend,
    job: &std::sync::Arc<JobCtx>,
    op: UploadOp,
    bytes: &[u8],
    results: &ResultStore,
    _enc: &Sender<EncCmd>,
) -> Option<Outcome> {
    Some(match op {
        UploadOp::Tokenize => tokenize(links, backend, job, bytes, results),
        UploadOp::Transcribe => transcribe(links, backend, job, bytes, results, false),
        UploadOp::TranscribeMelody => transcribe(links, backend, job, bytes, results, true),
        other => Outcome::Failed(format!("the listening tools do not run a {other:?} job")),
    })
}

/// The upload, decoded, averaged to mono and resampled to 24 kHz.
fn mono(bytes: &[u8]) -> Result<Vec<f32>, String> {
    yued_audio::decode::decode(bytes)
        .and_then(|pcm| yued_audio::resample::mono_at(&pcm, SAMPLE_RATE))
        .map_err(|e| format!("audio: {e}"))
}

/// Saves a job's one JSON result file.
fn save(results: &ResultStore, job: &JobCtx, file: &str, body: serde_json::Value) -> Result<(), String> {
    let body = serde_json::to_vec(&body).expect("a JSON object");
    let parts = vec![(file.into(), "application/json".into(), body)];
    results.save(&job.id, parts).map(|_| ()).map_err(|e| format!("saving the result: {e}"))
}

/// Progress in thousandths of the work.
const PROGRESS_STEPS: usize = 1000;

fn transcribe(
    links: &Links,
    backend: &Backend,
    job: &JobCtx,
    bytes: &[u8],
    results: &ResultStore,
    melody_only: bool,
) -> Outcome {
    let Some(key) = transcriber(&links.cfg) else {
        return Outcome::Failed("this daemon serves no transcriber (--transcriber)".into());
    };
    let mono = match mono(bytes) {
        Ok(m) => m,
        Err(e) => return Outcome::Failed(e),
    };
    let mut lease = match links.store.lease(&key, backend) {
        Ok(l) => l,
        Err(e) => return Outcome::Failed(e),
    };
    let tr = lease.get::<Transcriber>();
    let mut run = match tr.start(mono) {
        Ok(r) => r,
        Err(e) => return Outcome::Failed(format!("audio: {e}")),
    };
    let budget = tr.head.cfg.max_output_seq_len;
    let mut sink = ProgressSink::new(links, job);
    sink.report(Stage::Transcribe, 0, PROGRESS_STEPS);
    loop {
        if job.cancel.is_cancelled() {
            return Outcome::Cancelled;
        }
        match run.step(tr, backend) {
            Ok(more) => {
                sink.report(Stage::Transcribe, (run.progress(budget) * PROGRESS_STEPS as f64) as usize, PROGRESS_STEPS);
                if !more {
                    break;
                }
            }
            Err(e) => return Outcome::Failed(format!("transcribe: {e}")),
        }
    }
    drop(lease);
    let abc = match run.abc(melody_only) {
        Ok(abc) => abc,
        Err(e) => return Outcome::Failed(format!("no score: {e}")),
    };
    tracing::info!(windows = run.windows().len(), seconds = run.duration(), melody_only, "transcribe done");
    if let Err(e) = save(results, job, SCORE_FILE, serde_json::json!({ "abc": abc })) {
        return Outcome::Failed(e);
    }
    Outcome::Done { tracks: 0, audio_seconds: run.duration(), metrics: None }
}

fn tokenize(links: &Links, backend: &Backend, job: &JobCtx, bytes: &[u8], results: &ResultStore) -> Outcome {
    let Some(key) = tokenizer(&links.cfg) else {
        return Outcome::Failed("this daemon serves no audio tokenizer (--tokenizer)".into());
    };
    let mono = match mono(bytes) {
        Ok(m) => m,
        Err(e) => return Outcome::Failed(e),
    };
    let seconds = mono.len() as f64 / SAMPLE_RATE as f64;
    let mut lease = match links.store.lease(&key, backend) {
        Ok(l) => l,
        Err(e) => return Outcome::Failed(e),
    };
    let tok = lease.get::<AudioTokenizer>();
    let Some(mut run) = tok.start(mono) else {
        return Outcome::Failed("audio: under a second; the tokenizer reads whole seconds".into());
    };
    let mut sink = ProgressSink::new(links, job);
    sink.report(Stage::Tokenize, 0, run.steps());
    loop {
        if job.cancel.is_cancelled() {
            return Outcome::Cancelled;
        }
        match run.step(tok, backend) {
            Ok(more) => {
                sink.report(Stage::Tokenize, run.done(), run.steps());
                if !more {
                    break;
                }
            }
            Err(e) => return Outcome::Failed(format!("tokenize: {e}")),
        }
    }
    drop(lease);
    let codes = run.codes().iter().map(|c| c.to_string()).collect::<Vec<_>>().join(",");
    tracing::info!(frames = run.frames(), seconds, "tokenize done");
    if let Err(e) = save(results, job, CODES_FILE, serde_json::json!({ "codes": codes })) {
        return Outcome::Failed(e);
    }
    Outcome::Done { tracks: 0, audio_seconds: seconds, metrics: None }
}
