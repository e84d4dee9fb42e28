//! The Encoder stage: gathers a job's finished tracks, normalises and encodes each into
//! the requested container off the compute threads (checking the cancel token between
//! tracks), writes the result to the ResultStore and reports the job done with its
//! schema-1 metrics.
use crate::messages::{EncCmd, Finished, JobCtx, Outcome, TrackOut};
use crate::stage::{guarded, test_fault, Links, ProgressSink};
use crossbeam_channel::Receiver;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;
use yued_audio::encode::normalize_and_encode;
use yued_audio::Pcm;
use yued_contract::results::ResultStore;
use yued_protocol::{JobId, JobMetrics, Stage};

pub(crate) fn run(links: Links, rx: Receiver<EncCmd>, results: Arc<ResultStore>) {
    // The tracks of each job gathered so far, with the job (a job another stage failed or
    // cancelled sends no more tracks: its entry goes at the next command).
    let mut pending: HashMap<JobId, (Arc<JobCtx>, Vec<Option<TrackOut>>)> = HashMap::new();
    while let Ok(cmd) = rx.recv() {
        pending.retain(|_, (job, _)| !job.cancel.is_cancelled());
        let (job, index, of, track) = match cmd {
            EncCmd::Shutdown => break,
            EncCmd::Track { job, index, of, track } => (job, index, of, track),
            EncCmd::Audio { job, pcm } => {
                let span = tracing::info_span!("job", job = %job.id);
                let _g = span.enter();
                if let Some(outcome) = guarded(&links, &job, "encode", || package_audio(&links, &job, pcm, &results)) {
                    links.scheduler.do_send(Finished::of(&job, outcome));
                }
                continue;
            }
        };
        let span = tracing::info_span!("job", job = %job.id);
        let _g = span.enter();
        if job.cancel.is_cancelled() {
            pending.remove(&job.id);
            links.cancelled(&job);
            continue;
        }
        let (_, slots) =
            pending.entry(job.id.clone()).or_insert_with(|| (job.clone(), (0..of).map(|_| None).collect()));
        if index < slots.len() {
            slots[index] = Some(*track);
        }
        if slots.iter().any(Option::is_none) {
            continue;
        }
        let tracks: Vec<TrackOut> = pending.remove(&job.id).unwrap().1.into_iter().map(Option::unwrap).collect();
        let outcome = guarded(&links, &job, "encode", || {
            test_fault("encode", &job);
            package(&links, &job, &tracks, &results)
        });
        if let Some(outcome) = outcome {
            links.scheduler.do_send(Finished::of(&job, outcome));
        }
    }
    tracing::info!("encoder stopped");
}

fn package_audio(links: &Links, job: &JobCtx, audio: Pcm, results: &ResultStore) -> Outcome {
    if job.cancel.is_cancelled() {
        return Outcome::Cancelled;
    }
    let req = &job.request;
    let mut sink = ProgressSink::new(links, job);
    sink.report(Stage::Encode, 0, 1);
    let seconds = audio.seconds();
    let encoded = match normalize_and_encode(audio, req.output_format(), req.peak_clip(), req.mp3_bitrate()) {
        Ok(b) => b,
        Err(e) => return Outcome::Failed(format!("encoding: {e}")),
    };
    if job.cancel.is_cancelled() {
        return Outcome::Cancelled;
    }
    sink.report(Stage::Encode, 1, 1);
    let f = req.output_format();
    if let Err(e) = results.save(&job.id, vec![(format!("audio.{}", f.extension()), f.mime().to_string(), encoded)]) {
        return Outcome::Failed(format!("saving the result: {e}"));
    }
    links.metrics.audio_seconds_total.inc_by(seconds);
    Outcome::Done { tracks: 1, audio_seconds: seconds, metrics: None }
}

fn package(links: &Links, job: &JobCtx, tracks: &[TrackOut], results: &ResultStore) -> Outcome {
    let pipeline_seconds = job.started.elapsed().as_secs_f64();
    let t1 = Instant::now();
    let req = &job.request;
    let format = req.output_format();
    let mut sink = ProgressSink::new(links, job);
    let mut files = Vec::with_capacity(3 * tracks.len());
    let mut audio_seconds = 0.0;
    let mut truncated = false;
    for (k, t) in tracks.iter().enumerate() {
        if job.cancel.is_cancelled() {
            return Outcome::Cancelled;
        }
        sink.report(Stage::Encode, k, tracks.len());
        audio_seconds += t.audio.seconds();
        truncated |= t.truncated;
        let encoded = match normalize_and_encode(t.audio.clone(), format, req.peak_clip(), req.mp3_bitrate()) {
            Ok(w) => w,
            Err(e) => return Outcome::Failed(format!("encoding track {k}: {e}")),
        };
        files.push((
            format!("track{k:02}.json"),
            "application/json".to_string(),
            serde_json::to_vec_pretty(&t.replay).unwrap(),
        ));
        files.push((format!("track{k:02}.{}", format.extension()), format.mime().to_string(), encoded));
        if !t.latents.is_empty() {
            files.push((
                format!("track{k:02}.vae"),
                "application/octet-stream".to_string(),
                t.latents.iter().flat_map(|x| x.to_le_bytes()).collect(),
            ));
        }
    }
    if job.cancel.is_cancelled() {
        return Outcome::Cancelled;
    }
    sink.report(Stage::Encode, tracks.len(), tracks.len());
    if let Err(e) = results.save(&job.id, files) {
        return Outcome::Failed(format!("saving the result: {e}"));
    }
    let encoding = t1.elapsed().as_secs_f64();
    links.metrics.audio_seconds_total.inc_by(audio_seconds);
    if pipeline_seconds > 0.0 {
        links.metrics.real_time_factor.observe(audio_seconds / pipeline_seconds);
    }
    let r = links.store.residency();
    let m = JobMetrics {
        queue_seconds: job.queue_seconds,
        pipeline_seconds,
        encoding_packaging_seconds: encoding,
        worker_seconds: pipeline_seconds + encoding,
        audio_seconds,
        steps: req.steps(),
        truncated,
        keep_loaded: links.cfg.keep_loaded,
        module_loads: r.loads - job.loads_at_start,
        resident_modules: r.modules as u32,
        resident_weight_bytes: r.weight_bytes as u64,
        ..JobMetrics::default()
    };
    Outcome::Done { tracks: tracks.len() as u32, audio_seconds, metrics: Some(m) }
}
