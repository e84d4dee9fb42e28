//! `yued bench`: the speed table of one model pair, measured in one run on one machine.
//! AR prefill and decode (batch 1, the guidance pair, lm_batch_size 4; at several cache
//! lengths) next to the bytes each decode step must read and the machine's read bandwidth
//! measured in the same run; NAR per ODE step; VAE per second of audio; and the real-time
//! factor of a whole song. Every figure is the median of `--reps` runs, with min and max.
use super::bench_common::{demo_pair, stats, threads_of, time, BenchArgs, Stats, Table};
use anyhow::Context;
use std::path::{Path, PathBuf};
use std::time::Instant;
use yued_engine::cancel::CancelToken;
use yued_engine::ggml::llama_ref::mean_steps;
use yued_engine::ggml::{Backend, Kernels};
use yued_engine::gguf::GgufFile;
use yued_engine::kv_cache::KvSet;
use yued_engine::models::yue2::ar::{ArModel, Positions, SeqInput};
use yued_engine::models::yue2::config::BackboneInfo;
use yued_engine::models::yue2::nar::NarModel;
use yued_engine::models::yue2::pipeline::{Pipeline, PipelineOptions};
use yued_engine::models::yue2::vae::VaeModel;
use yued_protocol::{CotMode, Yue2Request};

/// Read bandwidth of this machine: a parallel sum over a buffer far larger than the caches.
/// Integer adds (associative, so the compiler vectorises them into several accumulators):
/// a float fold would measure the add latency, not the memory.
fn read_bandwidth(reps: usize, threads: usize) -> anyhow::Result<Stats> {
    let n = 128usize << 20; // 1 GiB of u64
    let data: Vec<u64> = (0..n as u64).collect();
    let threads = threads.max(1);
    let per = n.div_ceil(threads);
    let mut sink = 0u64;
    let s = time(reps, || {
        let total: u64 = std::thread::scope(|sc| {
            let hs: Vec<_> =
                data.chunks(per).map(|c| sc.spawn(move || c.iter().fold(0u64, |a, &b| a.wrapping_add(b)))).collect();
            hs.into_iter().map(|h| h.join().unwrap()).fold(0u64, u64::wrapping_add)
        });
        sink = sink.wrapping_add(total);
        Ok(())
    })?;
    std::hint::black_box(sink);
    Ok(s.map(|secs| (n * 8) as f64 / secs / 1e9))
}

/// A LoRA of `rank` on every projection of both halves of the backbone (native layout,
/// deterministic pseudo-random factors).
fn write_bench_lora(
    path: &std::path::Path,
    shapes: &yued_engine::models::yue2::adapter::Shapes,
    rank: usize,
) -> anyhow::Result<()> {
    std::fs::create_dir_all(path.parent().context("the adapter's folder")?)?;
    let mut names: Vec<&String> =
        shapes.keys().filter(|n| n.ends_with("_proj.weight") && n.starts_with("model.layers.")).collect();
    names.sort();
    let mut data: Vec<(String, Vec<u8>, Vec<usize>)> = Vec::new();
    for (k, n) in names.into_iter().enumerate() {
        let (out, inp) = (shapes[n][0], shapes[n][1]);
        let module = n.trim_start_matches("model.").trim_end_matches(".weight");
        let val = |i: usize, salt: usize| ((((i * 2654435761 + salt * 97) % 10007) as f32) / 10007.0 - 0.5) * 0.02;
        data.push((
            format!("{module}.lora_A.weight"),
            (0..rank * inp).flat_map(|i| val(i, 2 * k).to_le_bytes()).collect(),
            vec![rank, inp],
        ));
        data.push((
            format!("{module}.lora_B.weight"),
            (0..out * rank).flat_map(|i| val(i, 2 * k + 1).to_le_bytes()).collect(),
            vec![out, rank],
        ));
    }
    let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = data
        .iter()
        .map(|(n, b, s)| Ok((n.clone(), safetensors::tensor::TensorView::new(safetensors::Dtype::F32, s.clone(), b)?)))
        .collect::<Result<_, safetensors::SafeTensorError>>()?;
    std::fs::write(path, safetensors::serialize(views, &None)?)?;
    Ok(())
}

fn models(a: &BenchArgs) -> anyhow::Result<(PathBuf, PathBuf, String)> {
    if let (Some(m), Some(v)) = (&a.model, &a.vae) {
        return Ok((m.clone(), v.clone(), m.display().to_string()));
    }
    let (m, v) = demo_pair(&a.cache, &a.preset)?;
    Ok((m, v, format!("demo preset {} (random weights)", a.preset)))
}

/// What every section of a YuE2 run measures on.
struct Ctx<'a> {
    a: &'a BenchArgs,
    backend: &'a Backend,
    model: &'a Path,
    vae: &'a Path,
    f: &'a GgufFile,
    info: &'a BackboneInfo,
    spec: yued_engine::models::AudioSpec,
    threads: usize,
    /// The host's read bandwidth, when measured (GB/s).
    bandwidth: Option<f64>,
}

/// AR prefill: tokens per second of one forward at two prompt lengths.
fn bench_prefill(c: &Ctx<'_>, ar: &mut ArModel, t: &mut Table) -> anyhow::Result<()> {
    for n in if c.a.quick { vec![128, 512] } else { vec![512, 2048] } {
        let tokens: Vec<u32> = (0..n).map(|i| (i * 7919 % c.info.config.vocab_size.min(150_000)) as u32).collect();
        let mut sets = vec![KvSet::new(c.backend, c.info.config.kv_dims(), n)?];
        let s = time(c.a.reps, || {
            sets[0].reset();
            ar.forward(
                c.backend,
                &mut sets,
                &[SeqInput { tokens: &tokens, set: 0 }],
                c.info.tokens.semantic_rows(),
                Positions::Last,
            )?;
            Ok(())
        })?;
        t.push(
            "prefill",
            format!("AR prefill {n} tokens"),
            "tok/s",
            s.map(|t| n as f64 / t),
            format!("{:.1} ms per forward", s.median * 1e3),
        );
    }
    Ok(())
}

/// llama.cpp on the same weights (the AR half exported as a qwen3 GGUF once), for the
/// side-by-side decode rows.
fn llama_of(c: &Ctx<'_>) -> anyhow::Result<yued_engine::ggml::llama_ref::LlamaRef> {
    let q = c.model.with_extension("qwen3.gguf");
    if !q.exists() {
        eprintln!("exporting the AR half as a qwen3 GGUF: {}", q.display());
        yued_engine::models::yue2::export_qwen3::export_qwen3(c.model, &q)?;
    }
    yued_engine::ggml::llama_ref::LlamaRef::load(&q, c.backend.name() != "CPU").map_err(|e| anyhow::anyhow!(e))
}

/// AR decode: milliseconds a step at several batch sizes and cache lengths, beside the
/// bytes a step reads (and llama.cpp's step on the same weights, with `--llama-cpp`).
fn bench_decode(
    c: &Ctx<'_>,
    ar: &mut ArModel,
    llama: Option<&yued_engine::ggml::llama_ref::LlamaRef>,
    t: &mut Table,
) -> anyhow::Result<()> {
    let lengths = c.a.cache_lengths.clone().unwrap_or(if c.a.quick { vec![0, 512] } else { vec![0, 2048, 8192] });
    // llama.cpp's filled contexts, one per cache length, shared by the batch sizes.
    let mut sessions = std::collections::BTreeMap::new();
    for (batch, what) in [(1usize, "batch 1"), (2, "guidance pair"), (4, "lm_batch_size 4"), (8, "four guided songs")] {
        for &len in &lengths {
            // One set of `batch` streams, as the semantic stage holds its batch.
            let mut sets = vec![KvSet::with_streams(c.backend, c.info.config.kv_dims(), len + 1, batch)?];
            let toks: Vec<[u32; 1]> = (0..batch).map(|b| [c.info.tokens.code_token(17 + b as u32)]).collect();
            // A semantic step runs on the row-exact kernels (see `Kernels`); the fast ones
            // are measured beside them.
            // Each returns its step time and the logits of its last step.
            let mut step_on = |kernels: Kernels| {
                let mut logits = Vec::new();
                let mut step = || -> anyhow::Result<f64> {
                    sets[0].assume_filled(len);
                    let seqs: Vec<SeqInput<'_>> =
                        toks.iter().enumerate().map(|(i, t)| SeqInput { tokens: t, set: i }).collect();
                    let t = Instant::now();
                    let rows = c.info.tokens.semantic_rows();
                    let l = ar.forward_on(c.backend, &mut sets, &seqs, rows, Positions::Last, kernels)?;
                    let took = t.elapsed().as_secs_f64();
                    logits = l.per_seq.into_iter().flatten().flatten().collect::<Vec<f32>>();
                    Ok(took)
                };
                let times = mean_steps(c.a.reps, &mut step)?;
                anyhow::Ok((stats(times), logits))
            };
            let (s, exact_logits) = step_on(Kernels::RowExact)?;
            let (fast, fast_logits) = step_on(Kernels::Fast)?;
            // Where the two sets of kernels round apart, and by how much, on the same inputs.
            let apart = exact_logits.iter().zip(&fast_logits).filter(|(a, b)| a.to_bits() != b.to_bits()).count();
            let most = exact_logits.iter().zip(&fast_logits).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
            let weights = ar.step_read_bytes(c.info.tokens.semantic_rows().len(), batch);
            let kv = batch * KvSet::bytes_for(c.info.config.kv_dims(), len);
            let bytes = (weights + kv) as f64;
            let gbs = bytes / s.median / 1e9;
            let ratio = c
                .bandwidth
                .map(|b| format!(" = {:.0}% of the measured read bandwidth", 100.0 * gbs / b))
                .unwrap_or_default();
            t.push(
                "decode",
                format!("AR decode, {what}, cache {len}"),
                "ms/step",
                s.map(|t| t * 1e3),
                format!(
                    "reads {:.1} MB (weights {:.1} + KV {:.1}): {gbs:.1} GB/s{ratio}",
                    bytes / 1e6,
                    weights as f64 / 1e6,
                    kv as f64 / 1e6
                ),
            );
            t.push(
                "decode",
                format!("AR decode on the fast kernels, {what}, cache {len}"),
                "ms/step",
                fast.map(|t| t * 1e3),
                format!(
                    "row-exact / fast = {:.2}; logits apart in {apart} of {} (at most {most:.2e})",
                    s.median / fast.median,
                    exact_logits.len()
                ),
            );
            if let Some(l) = &llama {
                let session = match sessions.entry(len) {
                    std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
                    std::collections::btree_map::Entry::Vacant(e) => {
                        e.insert(l.session(8, len, c.threads).map_err(|e| anyhow::anyhow!(e))?)
                    }
                };
                let ls = stats(session.steps(batch, c.a.reps.max(1)).map_err(|e| anyhow::anyhow!(e))?);
                t.push(
                    "llama",
                    format!("llama.cpp decode, {what}, cache {len}"),
                    "ms/step",
                    ls.map(|t| t * 1e3),
                    format!("yued / llama.cpp = {:.2}", s.median / ls.median),
                );
            }
        }
    }
    Ok(())
}

/// Adapters: each half loaded plain and with a rank-16 LoRA merged.
fn bench_adapters(c: &Ctx<'_>, t: &mut Table) -> anyhow::Result<()> {
    // One rank-16 LoRA on every projection of both halves (random factors, written once
    // beside the model): each half loaded plain and with the adapter merged; the
    // difference is what a job with a new adapter set pays per half.
    let shapes = yued_engine::models::yue2::adapter::shapes_of(c.f);
    let dir = c.model.with_extension("bench-adapters");
    let file = dir.join("lora-r16.safetensors");
    if !file.exists() {
        eprintln!("writing a rank-16 LoRA on every projection: {}", file.display());
        write_bench_lora(&file, &shapes, 16)?;
    }
    let scanned = yued_engine::models::yue2::adapter::AdapterDir::scan(&dir, &shapes)?;
    let adapter = scanned.get("lora-r16.safetensors").map_err(|e| anyhow::anyhow!(e))?;
    let ty = c.f.require_tensor("model.layers.0.mlp.up_proj.weight")?.ty;
    for (nar, half) in [(false, "AR"), (true, "NAR")] {
        let t0 = Instant::now();
        let terms = yued_engine::models::yue2::adapter::stack_terms(&[(adapter, 1.0)], &shapes, nar)
            .map_err(|e| anyhow::anyhow!(e))?;
        let read = t0.elapsed().as_secs_f64();
        let load = |terms: &yued_engine::models::yue2::adapter::HalfTerms| -> anyhow::Result<()> {
            if nar {
                drop(NarModel::load_with(c.f, c.info, c.backend, terms)?);
            } else {
                drop(ArModel::load_with(c.f, c.info, c.backend, terms)?);
            }
            Ok(())
        };
        let plain = time(c.a.reps, || load(&Default::default()))?;
        let merged = time(c.a.reps, || load(&terms))?;
        t.push("adapters", format!("{half} half load, plain ({})", ty.name()), "s", plain, String::new());
        t.push(
            "adapters",
            format!("{half} half load, one LoRA merged ({})", ty.name()),
            "s",
            merged,
            format!(
                "+{:.2} s merge per job ({} tensors; reading the adapter {:.2} s)",
                merged.median - plain.median,
                terms.len(),
                read
            ),
        );
    }
    Ok(())
}

/// NAR: milliseconds per ODE step (two velocity evaluations) at several block lengths.
fn bench_nar(c: &Ctx<'_>, t: &mut Table) -> anyhow::Result<()> {
    let mut nar = NarModel::load(c.f, c.info, c.backend)?;
    let prefix = 300;
    for n in c.a.nar_frames.clone().unwrap_or(if c.a.quick { vec![50, 250] } else { vec![250, 1500, 5000] }) {
        let window = prefix + n + 1;
        if window + n > c.info.config.max_position_embeddings {
            eprintln!(
                "  nar      {n} frames skipped: a {window}-token window plus the block exceeds the model's \
                {} positions",
                c.info.config.max_position_embeddings
            );
            continue;
        }
        let mut kv = KvSet::new(c.backend, c.info.config.kv_dims(), window)?;
        kv.assume_filled(window);
        let x = yued_engine::rng::torch_cpu::randn(1, n * nar.latent);
        let s = time(c.a.reps, || {
            nar.velocity(c.backend, &kv, &x, n, 1, 0.5)?;
            Ok(())
        })?;
        // The midpoint solver evaluates the velocity twice per step.
        t.push(
            "nar",
            format!("NAR ODE step, {n} frames ({:.0} s)", c.spec.latent_seconds(n)),
            "ms/step",
            s.map(|t| 2e3 * t),
            format!("window {window} tokens"),
        );
    }
    Ok(())
}

/// VAE: milliseconds of tiled decode per second of audio.
fn bench_vae(c: &Ctx<'_>, t: &mut Table) -> anyhow::Result<()> {
    let vf = GgufFile::open(c.vae)?;
    let mut v = VaeModel::load(&vf, c.backend)?;
    let frames = if c.a.quick { 50 } else { 250 };
    let z = yued_engine::rng::torch_cpu::randn(2, frames * v.info.latent_channels);
    let secs = c.spec.latent_seconds(frames);
    let s = time(c.a.reps, || {
        v.decode_tiled(c.backend, &z, 512, 16, &CancelToken::new(), &mut |_| {})?;
        Ok(())
    })?;
    t.push(
        "vae",
        format!("VAE tiled decode (core 512, halo 16), {secs:.0} s"),
        "ms/s",
        s.map(|t| t * 1e3 / secs),
        String::new(),
    );
    Ok(())
}

/// The song the whole-song sections render: `seconds` long (the floor keeps the model from
/// ending it early), cot off, fixed seeds.
fn song_request(seconds: f64, code_rate: f64) -> Yue2Request {
    let mut req = Yue2Request {
        style: "bench".into(),
        lyrics: "[verse] la la la".into(),
        cot: CotMode::Off,
        duration: seconds,
        lm_seed: 1,
        seed: 2,
        ..Default::default()
    };
    req.semantic_sampling.min_tokens = (seconds * code_rate) as u32;
    req
}

/// The NAR solvers side by side on one composed song (`--e2e-seconds`, cot off): its
/// synthesis half at 16 steps under midpoint and under AB2 (the chunk prefills outside the
/// timing), and the correlation of the two renders' log-mel spectrograms (2048-point
/// windows, hop 512, 128 bands, the left channel).
fn bench_solver(a: &BenchArgs, model: &Path, vae: &Path, t: &mut Table) -> anyhow::Result<()> {
    use yued_engine::models::yue2::nar::Solver;
    use yued_engine::models::yue2::pipeline::WrittenSong;
    let mut p = Pipeline::load(model, vae, a.device.open()?, &PipelineOptions::default())?;
    let spec = p.audio_spec();
    let req = Yue2Request { steps: 16, ..song_request(a.e2e_seconds, spec.code_rate) };
    let s = yued_actors::settings::yue2(&req)?;
    let cancel = CancelToken::new();
    let song = p.shared.compose_codes(&mut p.ar, &p.backend, &s, &cancel, &mut |_| {})?.remove(0);
    let (meta, prefix) = (song.meta, song.prefix);
    let reps = if a.quick { 1 } else { a.reps.min(3) };
    let mut runs = Vec::new();
    for solver in [Solver::Midpoint, Solver::Ab2] {
        let s = yued_engine::models::yue2::settings::Settings { solver, ..s.clone() };
        let mut times = Vec::with_capacity(reps);
        let mut latents = Vec::new();
        for _ in 0..reps + 1 {
            let song = WrittenSong { meta: meta.clone(), prefix: prefix.clone(), kv: None };
            let work = p.shared.prefill_chunks(&mut p.ar, &p.backend, &s, song, &cancel)?;
            let t0 = Instant::now();
            latents = p.shared.render(&mut p.nar, &p.backend, work, &s, &cancel, &mut |_| {})?.remove(0);
            times.push(t0.elapsed().as_secs_f64());
        }
        times.remove(0); // the first run warms the graphs
        let pcm = p.vae.decode_tiled(&p.backend, &latents, 512, 16, &cancel, &mut |_| {})?;
        let left = &pcm[..pcm.len() / spec.channels];
        runs.push((solver, stats(times), yued_audio::mel::log_mel(left, spec.sample_rate, 2048, 512, 128)));
    }
    let (base, base_mel) = (runs[0].1, runs[0].2.clone());
    let secs = spec.latent_seconds(meta.codes.len());
    for (solver, st, mel) in runs {
        let note = if solver == Solver::Midpoint {
            format!("{} evaluations", solver.evaluations(16))
        } else {
            format!(
                "{} evaluations, {:.2}x midpoint's speed, mel correlation {:.4}",
                solver.evaluations(16),
                base.median / st.median,
                yued_audio::mel::correlation(&base_mel, &mel)
            )
        };
        t.push("solver", format!("NAR {solver:?} solve, 16 steps, {secs:.0} s song"), "s", st, note);
    }
    Ok(())
}

/// A whole song end to end, as a real-time factor.
fn bench_e2e(
    a: &BenchArgs,
    model: &Path,
    vae: &Path,
    spec: yued_engine::models::AudioSpec,
    t: &mut Table,
) -> anyhow::Result<()> {
    let mut p = Pipeline::load(model, vae, a.device.open()?, &PipelineOptions::default())?;
    let req = song_request(a.e2e_seconds, spec.code_rate);
    let reps = if a.quick { 1 } else { a.reps.min(3) };
    // Warm up on a 2 s song, not on a whole one: at full size on a CPU a 30 s song
    // takes a quarter of an hour, and the warm-up only has to touch every graph once.
    let warm = song_request(a.e2e_seconds.min(2.0), spec.code_rate);
    p.run(&yued_actors::settings::yue2(&warm)?, &CancelToken::new(), &mut |_| {})?;
    let settings = yued_actors::settings::yue2(&req)?;
    let mut audio = 0.0;
    let mut v = Vec::with_capacity(reps);
    let mut last = Vec::new();
    for r in 0..reps {
        let pb = super::progress_bar(1, "e2e");
        let t = std::time::Instant::now();
        let tracks = p.run(&settings, &CancelToken::new(), &mut |e| {
            if let yued_engine::models::yue2::pipeline::Event::Progress { phase, done, total, .. } = e {
                let stage = yued_actors::settings::stage(phase);
                pb.set_message(format!("e2e {}/{reps} {stage}", r + 1));
                pb.set_length(total as u64);
                pb.set_position(done as u64);
            }
        })?;
        v.push(t.elapsed().as_secs_f64());
        pb.finish_and_clear();
        audio = tracks.iter().map(|t| t.audio.latent_seconds(t.frames)).sum();
        last = tracks;
    }
    let s = stats(v);
    // The request's defaults, guidance included (1.01 in cot off: both streams decode
    // as one batch and the song's stream is copied out of the pair at the end).
    t.push(
        "e2e",
        format!("whole song, {:.0} s, cot off, cfg {}, {} steps", a.e2e_seconds, req.effective_cfg_scale(), req.steps),
        "x realtime",
        s.map(|t| audio / t),
        format!("{:.1} s per song", s.median),
    );
    // What a song of one chunk no longer runs before its NAR, and a replay of it still does:
    // the prefill of its whole sequence.
    if let Some(track) = last.first() {
        let replay = track.replay(&settings);
        let t0 = std::time::Instant::now();
        p.shared.compose(&mut p.ar, &p.backend, &replay, &CancelToken::new(), &mut |_| {})?;
        let prefill = t0.elapsed().as_secs_f64();
        t.push(
            "e2e",
            format!("the song's sequence prefilled ({} codes): a replay's, skipped by the song", track.frames),
            "s",
            stats(vec![prefill]),
            format!("{:.0}% of the song's time above", 100.0 * prefill / s.median),
        );
    }
    Ok(())
}

pub fn run(a: BenchArgs) -> anyhow::Result<()> {
    if cfg!(debug_assertions) {
        eprintln!("warning: a debug build; measure with `cargo run --release -p yued -- bench`");
    }
    if a.family == yued_protocol::Family::Mm3 {
        return super::bench_mm3::run(&a);
    }
    let only: Vec<&str> = a.only.split(',').map(str::trim).collect();
    let want = |s: &str| only.contains(&s);
    let threads = threads_of(&a);
    let backend = a.device.open()?;
    let mut table = Table::default();
    // The listening tools need none of the backbone's files.
    if want("tokenize") {
        eprintln!("yued bench: the audio tokenizer ({}), device {}, {threads} threads", a.preset, backend.name());
        super::bench_listen::run(&a, &backend, threads, &mut table)?;
        if only.iter().all(|s| *s == "tokenize") {
            return table.report(&a, &format!("listening demo ({})", a.preset), backend.name(), threads);
        }
    }
    if want("transcribe") {
        eprintln!("yued bench: the transcriber ({}), device {}, {threads} threads", a.preset, backend.name());
        super::bench_transcribe::run(&a, &backend, threads, &mut table)?;
        if only.iter().all(|s| *s == "transcribe" || *s == "tokenize") {
            return table.report(&a, &format!("listening demo ({})", a.preset), backend.name(), threads);
        }
    }
    let (model, vae, label) = models(&a)?;
    eprintln!("yued bench: {label}, device {}, {threads} threads, {} reps", backend.name(), a.reps);
    let mut bandwidth = None;
    if want("mem") || want("decode") {
        let bw = read_bandwidth(a.reps, threads)?;
        bandwidth = Some(bw.median);
        table.push("mem", "host read bandwidth (parallel sum, 1 GiB)".into(), "GB/s", bw, String::new());
    }
    let spec = VaeModel::info(&GgufFile::open(&vae)?)?.audio_spec();
    {
        let f = GgufFile::open(&model)?;
        let info = BackboneInfo::from_gguf(&f)?;
        let c =
            Ctx { a: &a, backend: &backend, model: &model, vae: &vae, f: &f, info: &info, spec, threads, bandwidth };
        if want("prefill") || want("decode") {
            let mut ar = ArModel::load(&f, &info, &backend)?;
            if want("prefill") {
                bench_prefill(&c, &mut ar, &mut table)?;
            }
            if want("decode") {
                let llama = if a.llama_cpp { Some(llama_of(&c)?) } else { None };
                bench_decode(&c, &mut ar, llama.as_ref(), &mut table)?;
            }
        }
        if want("adapters") {
            bench_adapters(&c, &mut table)?;
        }
        if want("nar") {
            bench_nar(&c, &mut table)?;
        }
        if want("vae") {
            bench_vae(&c, &mut table)?;
        }
    }
    if want("solver") {
        bench_solver(&a, &model, &vae, &mut table)?;
    }
    if want("batching") {
        super::bench_batching::run(&a, &model, &vae, &mut table)?;
    }
    if want("seam") {
        for r in super::bench_stream::seam(&a, &model, &vae, spec.code_rate)? {
            table.add(r);
        }
    }
    if want("stream") {
        super::bench_stream::run(&a, &model, &vae, spec.code_rate, &mut |r| table.add(r))?;
    }
    if want("e2e") {
        bench_e2e(&a, &model, &vae, spec, &mut table)?;
    }
    table.report(&a, &label, backend.name(), threads)
}
