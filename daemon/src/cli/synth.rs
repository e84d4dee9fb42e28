use super::common::{random_u64, read_request};
use super::npy;
use super::synth_args::{numbered, SynthArgs};
use anyhow::Context;
use yued_audio::Pcm;
use yued_engine::cancel::CancelToken;
use yued_engine::models::yue2::pipeline::{Event, Pipeline, PipelineOptions, Track};
use yued_engine::rng::torch_cpu::randn;
use yued_protocol::Stage;

pub fn run(a: SynthArgs) -> anyhow::Result<()> {
    if let (Some(lm), Some(depth), Some(cond), Some(dit), Some(vae)) = (&a.lm, &a.depth, &a.cond, &a.dit, &a.vae_mm3) {
        use yued_engine::registry::{Bucket, Registry};
        let reg = Registry::from_files(&[
            (Bucket::Mm3Lm, lm),
            (Bucket::Mm3Depth, depth),
            (Bucket::Mm3Cond, cond),
            (Bucket::Mm3Dit, dit),
            (Bucket::Mm3Vae, vae),
        ])
        .map_err(|e| anyhow::anyhow!(e))?;
        let body = std::fs::read(&a.request).with_context(|| format!("reading {}", a.request.display()))?;
        let Ok(yued_protocol::Request::Mm3(r)) =
            yued_protocol::Request::from_json(&body, &[yued_protocol::Family::Mm3])
        else {
            anyhow::bail!("{}: not a MiniMax Music 3 request (caption and lyrics)", a.request.display());
        };
        return super::synth_mm3::run(&a, &reg, r);
    }
    let (model, vae) = match (&a.model, &a.vae, &a.models) {
        (Some(m), Some(v), _) => (m.clone(), v.clone()),
        (_, _, Some(dir)) => {
            let (reg, _) =
                yued_engine::registry::Registry::scan(dir).with_context(|| format!("--models {}", dir.display()))?;
            let body = std::fs::read(&a.request).with_context(|| format!("reading {}", a.request.display()))?;
            let served = super::synth_mm3::served(&reg);
            match yued_protocol::Request::from_json(&body, &served)
                .map_err(|e| anyhow::anyhow!("{}: {e}", a.request.display()))?
            {
                yued_protocol::Request::Mm3(r) => return super::synth_mm3::run(&a, &reg, r),
                yued_protocol::Request::Yue2(_) => {
                    use yued_engine::registry::Bucket;
                    let pick = |b: Bucket| {
                        reg.resolve(b, "")
                            .map(|e| e.path.clone())
                            .map_err(|e| anyhow::anyhow!("--models {}: {e}", dir.display()))
                    };
                    (pick(Bucket::Yue2)?, pick(Bucket::Yue2Vae)?)
                }
            }
        }
        _ => anyhow::bail!("give --models, or --model and --vae"),
    };
    let mut req = read_request(&a.request)?;
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
    let req = req.with_resolved_seeds(random_u64);
    let backend = a.device.open()?;
    eprintln!("loading {} and {} on {}", model.display(), vae.display(), backend.name());
    let refs = yued_actors::settings::adapters(&req);
    let terms = yued_engine::models::yue2::adapter::request_terms(a.adapters.as_deref(), &model, &refs)
        .map_err(|e| anyhow::anyhow!("{}: {e}", a.request.display()))?;
    if !req.adapters.is_empty() {
        eprintln!("merging {} adapter(s): {} AR and {} NAR tensors", req.adapters.len(), terms.0.len(), terms.1.len());
    }
    let mut p = Pipeline::load_adapted(
        &model,
        &vae,
        backend,
        &PipelineOptions { max_seq: a.max_seq, vae_core: a.vae_core, vae_halo: a.vae_halo },
        &terms,
    )?;
    let spec = p.audio_spec();
    if yued_engine::gguf::GgufFile::open(&model)?.get(yued_engine::models::yue2::demo::DEMO_KEY).is_some() {
        eprintln!("warning: {} holds RANDOM demo weights: the audio is noise", model.display());
    }
    let limits = yued_actors::settings::yue2_limits(&p.shared, req.lm_batch_size.max(1));
    let fault = |e: yued_protocol::RequestError| anyhow::anyhow!("{}: {e}", a.request.display());
    req.validate(&limits).map_err(fault)?;
    let settings = yued_actors::settings::yue2(&req).map_err(fault)?;
    let pb = super::progress_bar(1, "loading");
    let mut stage = None;
    let core = settings.tile_core(a.vae_core, a.vae_halo);
    let tiles_per_track = |frames: usize| frames.div_ceil(core.max(1)) as u64;
    let tracks = p
        .run(&settings, &CancelToken::new(), &mut |e| match e {
            Event::Progress { phase, done, total, .. } => {
                let s = yued_actors::settings::stage(phase);
                if stage != Some(s) {
                    stage = Some(s);
                    pb.set_message(format!("{s:?}").to_lowercase());
                    pb.reset();
                }
                pb.set_length(total as u64);
                pb.set_position(done as u64);
            }
            Event::Score { song, abc } => pb.println(format!("song {song}: score of {} lines", abc.lines().count())),
            Event::Codes { song, codes, .. } => pb.println(format!(
                "song {song}: {} semantic frames ({:.1} s)",
                codes.len(),
                spec.code_seconds(codes.len())
            )),
            Event::Latents { .. } => {}
            Event::Tile { track, tile } => {
                if stage != Some(Stage::Decode) {
                    stage = Some(Stage::Decode);
                    pb.set_message("decode");
                    pb.reset();
                }
                let _ = track;
                pb.inc(1);
                pb.set_length(pb.position().max(tiles_per_track(tile.samples.div_ceil(spec.samples_per_latent))));
            }
        })
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    pb.finish_and_clear();
    if let Some(dir) = a.out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let batch = tracks.len() > 1;
    for t in &tracks {
        let suffix = if batch { format!("{}{}", t.song, t.variation) } else { String::new() };
        write_track(&a, t, &suffix, &req)?;
    }
    Ok(())
}

fn write_track(a: &SynthArgs, t: &Track, suffix: &str, req: &yued_protocol::Yue2Request) -> anyhow::Result<()> {
    let replay = yued_actors::settings::yue2_replay(req, &t.meta(), t.variation);
    let pcm = Pcm::new(t.audio.sample_rate, t.audio.channels, t.pcm.clone());
    let seconds = pcm.seconds();
    let out = numbered(&a.out, suffix, req.output_format.extension());
    let bytes = yued_audio::encode::normalize_and_encode(pcm, req.output_format, req.peak_clip, req.mp3_bitrate)?;
    std::fs::write(&out, bytes).with_context(|| format!("writing {}", out.display()))?;
    let json = numbered(&a.out, suffix, "json");
    std::fs::write(&json, serde_json::to_string_pretty(&replay)?)?;
    println!(
        "{}: {:.2} s ({} frames{}), replay {}",
        out.display(),
        seconds,
        t.frames,
        if t.truncated { ", cut by the budget" } else { "" },
        json.display()
    );
    if let Some(p) = &a.score {
        std::fs::write(numbered(p, suffix, "abc"), &t.abc)?;
    }
    if let Some(p) = &a.tokens {
        std::fs::write(numbered(p, suffix, "csv"), &replay.semantic_tokens)?;
    }
    if let Some(p) = &a.latent {
        std::fs::write(numbered(p, suffix, "vae"), t.latents.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<_>>())?;
    }
    if let Some(dir) = &a.dump {
        std::fs::create_dir_all(dir)?;
        let tag = if suffix.is_empty() { "track".to_string() } else { format!("track{suffix}") };
        let codes: Vec<i32> = t.codes.iter().map(|&c| c as i32).collect();
        npy::write_i32(&dir.join(format!("{tag}_codes.npy")), &[codes.len()], &codes)?;
        npy::write_f32(
            &dir.join(format!("{tag}_noise.npy")),
            &[t.frames, 64],
            &randn(replay.seed as u64, t.frames * 64),
        )?;
        npy::write_f32(&dir.join(format!("{tag}_latents.npy")), &[t.frames, 64], &t.latents)?;
        npy::write_f32(&dir.join(format!("{tag}_pcm.npy")), &[2, t.pcm.len() / 2], &t.pcm)?;
    }
    Ok(())
}
