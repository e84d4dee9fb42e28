//! `yued synth` for a MiniMax Music 3 request: the AR half (sampled, or replayed from
//! `audio_codes`), then each song's variations rendered window by window, normalised and
//! encoded, with the replay request of every track beside it.
use super::common::random_u64;
use super::synth_args::{numbered, SynthArgs};
use anyhow::Context;
use yued_audio::Pcm;
use yued_engine::ggml::Backend;
use yued_engine::gguf::GgufFile;
use yued_engine::models::mm3::{
    compose, cond::CondEncoder, config, depth::DepthModel, dit::DitModel, lm, pipeline, prompt, vae::VaeModel,
};
use yued_engine::registry::{Bucket, Registry};
use yued_protocol::{Family, Limits, Mm3Request, Request};

/// The families a registry can serve a `yued synth` or `yued compose` of.
pub fn served(reg: &Registry) -> Vec<Family> {
    let mut f = Vec::new();
    if !reg.entries(Bucket::Yue2).is_empty() {
        f.push(Family::Yue2);
    }
    if !reg.entries(Bucket::Mm3Lm).is_empty() {
        f.push(Family::Mm3);
    }
    f
}

pub fn run(a: &SynthArgs, reg: &Registry, mut req: Mm3Request) -> anyhow::Result<()> {
    let what = a.request.display();
    // YuE2's flags mean nothing here: refused rather than passed over in silence.
    let yue2_only = [
        ("--score", a.score.is_some()),
        ("--tokens", a.tokens.is_some()),
        ("--latent", a.latent.is_some()),
        ("--adapters", a.adapters.is_some()),
        ("--companion", a.companion.is_some()),
        ("--max-seq", a.max_seq != 0),
    ];
    if let Some((flag, _)) = yue2_only.iter().find(|(_, given)| *given) {
        anyhow::bail!("{what}: {flag} is YuE2's; a MiniMax Music 3 request does not take it");
    }
    if let Some(d) = a.duration {
        req.duration = d;
    }
    if let Some(s) = a.lm_seed {
        req.lm_seed = s;
    }
    if let Some(s) = a.seed {
        req.seed = s;
    }
    if let Some(s) = a.steps {
        req.steps = s;
    }
    let mut req = req.with_resolved_seeds(random_u64);
    let mut paths = Vec::new();
    for ((field, name), bucket) in req.models().into_iter().zip(Bucket::MM3) {
        paths.push(reg.resolve(bucket, name).map_err(|e| anyhow::anyhow!("{what}: {field}: {e}"))?.path.clone());
    }
    let files: Vec<GgufFile> = paths.iter().map(GgufFile::open).collect::<Result<_, _>>()?;
    if files.iter().any(|f| f.get(config::DEMO_KEY).is_some()) {
        eprintln!("warning: MiniMax Music 3 demo files hold RANDOM weights: the audio is noise");
    }
    let backend = a.device.open()?;
    let loading = |i: usize| format!("loading {}", paths[i].display());
    let (songs, replayed) = ar_half(a, &backend, &files, &loading, &mut req)?;
    eprintln!("loading the condition encoder, the DiT and the VAE");
    let mut cond = CondEncoder::load(&files[2], &backend).with_context(|| loading(2))?;
    let mut dit = DitModel::load(&files[3], &backend).with_context(|| loading(3))?;
    let mut vae = VaeModel::load(&files[4], &backend).with_context(|| loading(4))?;
    let spec = vae.info.audio_spec();
    if let Some(dir) = a.out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let variations = req.synth_batch_size.max(1) as usize;
    let s = yued_actors::settings::mm3_synth(&req, !a.no_batch_cfg);
    let many = songs.len() * variations > 1;
    for (i, song) in songs.iter().enumerate() {
        let pb = super::progress_bar(0, &format!("song {i}"));
        let tracks = pipeline::render_song(
            &backend,
            &mut cond,
            &mut dit,
            &mut vae,
            song,
            req.seed,
            variations,
            &s,
            &|| false,
            &mut |d, t| {
                pb.set_length(t as u64);
                pb.set_position(d as u64);
            },
            &mut |_| {},
        )
        .map_err(|e| anyhow::anyhow!("{e}"))?;
        pb.finish_and_clear();
        for (j, pcm) in tracks.into_iter().enumerate() {
            let suffix = if many { format!("{i}{j}") } else { String::new() };
            let audio = Pcm::new(spec.sample_rate, spec.channels, pcm);
            let replay = yued_actors::settings::mm3_replay(&req, song, i, j, replayed);
            write_track(a, &req, song, &suffix, audio, &Request::Mm3(replay))?;
        }
    }
    Ok(())
}

/// The AR half on the LM and the depth decoder (unloaded when it returns, before the
/// synthesis modules load): the songs sampled, or replayed from the request's codes
/// (`true`), with the states a replay would give; `--dump` writes them.
fn ar_half(
    a: &SynthArgs,
    backend: &Backend,
    files: &[GgufFile],
    loading: &dyn Fn(usize) -> String,
    req: &mut Mm3Request,
) -> anyhow::Result<(Vec<compose::Song>, bool)> {
    let what = a.request.display();
    eprintln!("loading the LM and the depth decoder on {}", backend.name());
    let mut lm_model = lm::LmModel::load(&files[0], backend).with_context(|| loading(0))?;
    let tok = lm::tokenizer(&files[0], &lm_model.info)?;
    let mut depth = DepthModel::load(&files[1], lm_model.hidden(), backend).with_context(|| loading(1))?;
    let codebooks = yued_protocol::Mm3Codebooks {
        semantic: lm_model.info.tokens.semantic_size,
        acoustic: depth.cfg.audio_vocab_size as u32,
    };
    req.validate(&Limits { max_batch: req.lm_batch_size.max(1), mm3_codebooks: codebooks, ..Limits::default() })
        .map_err(|e| anyhow::anyhow!("{what}: {e}"))?;
    let prompt = prompt::build(&tok, &lm_model.info.tokens, &req.caption, &req.lyrics)
        .map_err(|e| anyhow::anyhow!("{what}: lyrics: {e}"))?;
    let codes = req.checked_audio_codes(&codebooks).map_err(|e| anyhow::anyhow!("{what}: {e}"))?;
    let replayed = !codes.is_empty();
    let songs = if replayed {
        vec![compose::replay(backend, &mut lm_model, &mut depth, &prompt, &codes, &|| false)
            .map_err(|e| anyhow::anyhow!("{e}"))?]
    } else {
        let n = req.lm_batch_size.max(1) as usize;
        let s = yued_actors::settings::mm3_ar(req, !a.no_batch_cfg);
        let pb = super::progress_bar(s.max_frames as u64 + 1, "frames");
        let mut songs = compose::compose(
            backend,
            &mut lm_model,
            &mut depth,
            &prompt,
            n,
            &s,
            &mut compose::SeedDraws::new(req.lm_seed, n),
            &|| false,
            &mut |f, _| pb.set_position(f as u64 + 1),
        )
        .map_err(|e| anyhow::anyhow!("{e}"))?;
        pb.finish_and_clear();
        // The replay's states, so a track's replay request renders the same bytes.
        compose::restate(backend, &mut lm_model, &mut depth, &prompt, &mut songs, &|| false)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        songs
    };
    if let Some(dir) = &a.dump {
        // The AR half's outputs: each song's codes and the states the condition encoder reads.
        std::fs::create_dir_all(dir)?;
        let h = lm_model.hidden();
        for (i, song) in songs.iter().enumerate() {
            let codes: Vec<i32> = song.codes.iter().flatten().map(|&c| c as i32).collect();
            super::npy::write_i32(&dir.join(format!("song{i}_codes.npy")), &[song.codes.len(), 8], &codes)?;
            super::npy::write_f32(&dir.join(format!("song{i}_states.npy")), &[song.frames(), 8, h], &song.states)?;
        }
    }
    Ok((songs, replayed))
}

/// One track's audio in the request's format and its replay request beside it.
fn write_track(
    a: &SynthArgs,
    req: &Mm3Request,
    song: &compose::Song,
    suffix: &str,
    audio: Pcm,
    replay: &Request,
) -> anyhow::Result<()> {
    let seconds = audio.seconds();
    a.check_outputs(suffix)?;
    let out = numbered(&a.out, suffix, req.output_format.extension());
    let bytes = yued_audio::encode::normalize_and_encode(audio, req.output_format, req.peak_clip, req.mp3_bitrate)?;
    super::common::write_file(&out, bytes)?;
    let json = numbered(&a.out, suffix, "json");
    super::common::write_file(&json, serde_json::to_string_pretty(replay)?)?;
    println!(
        "{}: {seconds:.2} s ({} frames{}), replay {}",
        out.display(),
        song.frames(),
        if song.ended { ", ended by the LM" } else { "" },
        json.display()
    );
    Ok(())
}
