//! `yued bench --only batching`: songs of different clients in one decode step against the
//! same songs one after another, side by side in one run. For 1, 2, 4 and 8 clients (each
//! a `--batching-seconds` song, cot off, its own seed, guidance on: two rows a song): the
//! AR half's aggregate codes per second and songs per hour, serial and batched; the step
//! a joining song's prompt piece rides in against a plain step (the prefill stall); and
//! when the last client to arrive writes its first chunk of audio codes (the
//! `stream_chunk_seconds` grid), serial and batched.
use super::bench_common::{stats, BenchArgs, Table};
use std::path::Path;
use std::time::Instant;
use yued_engine::models::yue2::generate::ArStages;
use yued_engine::models::yue2::pipeline::{step_together, Pipeline, PipelineOptions, Writer, Written};
use yued_engine::models::yue2::settings::Settings;
use yued_protocol::{CotMode, Yue2Request};

/// Client `i`'s song: `seconds` long (the floor keeps the model from ending it early), cot
/// off, guidance at the request's default.
fn client_song(seconds: f64, code_rate: f64, i: usize) -> anyhow::Result<Settings> {
    let mut req = Yue2Request {
        style: "bench".into(),
        lyrics: format!("[verse] client {i} sings la la la"),
        cot: CotMode::Off,
        duration: seconds,
        lm_seed: 1 + 7 * i as i64,
        seed: 2,
        ..Default::default()
    };
    req.semantic_sampling.min_tokens = (seconds * code_rate) as u32;
    Ok(yued_actors::settings::yue2(&req)?)
}

/// Each turn's batched / serial ratio, when the section took several turns.
fn turn_ratios(ratios: impl Iterator<Item = f64>) -> String {
    let r: Vec<String> = ratios.map(|r| format!("{r:.2}")).collect();
    if r.len() > 1 {
        format!(" (each turn: {})", r.join(", "))
    } else {
        String::new()
    }
}

/// Codes a finished writer wrote.
fn codes_of(items: &[Written]) -> usize {
    items.iter().map(|w| if let Written::Codes(m) = w { m.codes.len() } else { 0 }).sum()
}

/// One way of writing the clients' songs: its seconds, the codes written.
struct Run {
    seconds: f64,
    codes: usize,
    /// When the last client wrote its first chunk's codes (seconds from the start).
    last_first_chunk: f64,
}

/// The songs one after another: each writer stepped alone to its end.
fn serial(st: &mut ArStages<'_>, songs: &[Settings], chunk: usize) -> anyhow::Result<Run> {
    let t0 = Instant::now();
    let (mut codes, mut last_first_chunk) = (0, 0.0);
    for (i, s) in songs.iter().enumerate() {
        let mut w = Writer::new(st, s.clone(), false)?;
        let mut items = Vec::new();
        let mut step = 0;
        while !w.done() {
            items.append(&mut w.step(st)?);
            step += 1;
            if i + 1 == songs.len() && step == chunk {
                last_first_chunk = t0.elapsed().as_secs_f64();
            }
        }
        w.finish()?;
        codes += codes_of(&items);
    }
    Ok(Run { seconds: t0.elapsed().as_secs_f64(), codes, last_first_chunk })
}

/// The songs in one batch, the last client joining after the others' first step.
fn batched(st: &mut ArStages<'_>, songs: &[Settings], chunk: usize) -> anyhow::Result<Run> {
    let t0 = Instant::now();
    let budget = st.prefill_chunk;
    let n = songs.len();
    let mut writers: Vec<Writer> = Vec::with_capacity(n);
    for s in &songs[..n - 1] {
        writers.push(Writer::new(st, s.clone(), false)?);
    }
    let mut codes = 0;
    let (mut step, mut last_steps, mut last_first_chunk) = (0, 0, 0.0);
    let mut open: Vec<bool> = vec![true; n - 1];
    loop {
        if writers.len() < n && (step == 1 || n == 1) {
            writers.push(Writer::new(st, songs[n - 1].clone(), false)?);
            open.push(true);
        }
        let mut live: Vec<&mut Writer> = writers.iter_mut().zip(&open).filter(|(_, o)| **o).map(|(w, _)| w).collect();
        if live.is_empty() {
            break;
        }
        for items in step_together(st, &mut live, budget)? {
            codes += codes_of(&items?);
        }
        if writers.len() == n && open[n - 1] {
            last_steps += 1;
            if last_steps == chunk {
                last_first_chunk = t0.elapsed().as_secs_f64();
            }
        }
        for (w, o) in writers.iter().zip(open.iter_mut()) {
            *o &= !w.done();
        }
        step += 1;
    }
    Ok(Run { seconds: t0.elapsed().as_secs_f64(), codes, last_first_chunk })
}

/// The step a joining song's first prompt piece rides in, against the plain step of the
/// same batch: `others` songs decoding.
fn stall(
    st: &mut ArStages<'_>,
    seconds: f64,
    code_rate: f64,
    others: usize,
    reps: usize,
) -> anyhow::Result<(f64, f64)> {
    let (mut plain, mut joined) = (Vec::new(), Vec::new());
    let piece = st.prefill_chunk;
    for r in 0..reps.max(1) {
        let mut ws: Vec<Writer> = (0..others)
            .map(|i| Writer::new(st, client_song(seconds, code_rate, i).unwrap(), false))
            .collect::<Result<_, _>>()?;
        // Past the others' prompts.
        for _ in 0..4 {
            step_together(st, &mut ws.iter_mut().collect::<Vec<_>>(), piece)?;
        }
        let t = Instant::now();
        step_together(st, &mut ws.iter_mut().collect::<Vec<_>>(), piece)?;
        plain.push(t.elapsed().as_secs_f64());
        let mut long = client_song(seconds, code_rate, 100 + r)?;
        // A prompt of at least one whole piece.
        long.lyrics = "[verse] la ".repeat(piece);
        ws.push(Writer::new(st, long, false)?);
        let t = Instant::now();
        step_together(st, &mut ws.iter_mut().collect::<Vec<_>>(), piece)?;
        joined.push(t.elapsed().as_secs_f64());
    }
    Ok((stats(plain).median, stats(joined).median))
}

pub fn run(a: &BenchArgs, model: &Path, vae: &Path, t: &mut Table) -> anyhow::Result<()> {
    let mut p = Pipeline::load(model, vae, a.device.open()?, &PipelineOptions::default())?;
    let code_rate = p.audio_spec().code_rate;
    let seconds = a.batching_seconds;
    let clients = super::bench_common::batching_clients(a);
    // The first chunk of a streamed song: `stream_chunk_seconds` of codes (the whole song
    // when it is shorter).
    let chunk = ((a.stream_seconds.min(seconds) * code_rate) as usize).max(1);
    let mut st = p.shared.ar_stages(&mut p.ar, &p.backend);
    // Warm the graphs on two short songs.
    let warm: Vec<Settings> = (0..2).map(|i| client_song(1.0, code_rate, i)).collect::<Result<_, _>>()?;
    batched(&mut st, &warm, chunk)?;
    for c in clients {
        let songs: Vec<Settings> = (0..c).map(|i| client_song(seconds, code_rate, i)).collect::<Result<_, _>>()?;
        // Both ways in turn, so that a slow spell of the host falls on both alike.
        let (mut one, mut all) = (Vec::new(), Vec::new());
        for _ in 0..a.batching_reps.max(1) {
            one.push(serial(&mut st, &songs, chunk)?);
            all.push(batched(&mut st, &songs, chunk)?);
            let (o, b) = (&one[one.len() - 1], &all[all.len() - 1]);
            anyhow::ensure!(o.codes == b.codes, "batching changed the codes written: {} vs {}", o.codes, b.codes);
        }
        let rows = songs.iter().map(Writer::max_rows).sum::<usize>();
        let median = |runs: &[Run], f: &dyn Fn(&Run) -> f64| stats(runs.iter().map(f).collect()).median;
        let per_hour = |r: &Run| c as f64 * 3600.0 / r.seconds;
        let tps = |r: &Run| r.codes as f64 / r.seconds;
        let first = |r: &Run| r.last_first_chunk;
        let pairs = turn_ratios(one.iter().zip(&all).map(|(o, b)| tps(b) / tps(o)));
        t.push(
            "batching",
            format!("AR, {c} clients of {seconds:.0} s, one after another"),
            "codes/s",
            stats(one.iter().map(tps).collect()),
            format!(
                "{:.0} songs/h; the last client's first {chunk} codes at {:.1} s",
                median(&one, &per_hour),
                median(&one, &first)
            ),
        );
        t.push(
            "batching",
            format!("AR, {c} clients of {seconds:.0} s, one batch ({rows} rows)"),
            "codes/s",
            stats(all.iter().map(tps).collect()),
            format!(
                "{:.2}x serial{pairs}; {:.0} songs/h; the last client's first {chunk} codes at {:.1} s",
                median(&all, &tps) / median(&one, &tps),
                median(&all, &per_hour),
                median(&all, &first)
            ),
        );
    }
    let others = 3;
    let (plain, joined) = stall(&mut st, seconds, code_rate, others, if a.quick { 1 } else { a.reps.min(3) })?;
    t.push(
        "batching",
        format!("AR step of {others} songs, a joining prompt's {}-token piece beside", st.prefill_chunk),
        "ms/step",
        stats(vec![joined * 1e3]),
        format!("the prefill stall: {:.1} ms over the plain step's {:.1} ms", (joined - plain) * 1e3, plain * 1e3),
    );
    Ok(())
}

/// MiniMax Music 3's side of `--only batching` (`yued bench --family mm3`): the same table
/// for its AR half, frames (8 codes each) instead of codes, over composers stepped together.
pub mod mm3 {
    use super::{stats, Table};
    use std::time::Instant;
    use yued_engine::ggml::Backend;
    use yued_engine::models::mm3::compose::{step_together, ArSettings, Composer, Draws, Member, SeedDraws, Song};
    use yued_engine::models::mm3::depth::DepthModel;
    use yued_engine::models::mm3::lm::LmModel;
    use yued_engine::models::mm3::prompt::Prompt;

    /// The LM, the depth decoder and the prompt every client sings.
    pub struct Models<'a> {
        pub backend: &'a Backend,
        pub lm: &'a mut LmModel,
        pub depth: &'a mut DepthModel,
        pub prompt: &'a Prompt,
    }

    /// One way of writing the clients' songs: its seconds, the songs, and when the last
    /// client had written its first `first` frames.
    struct Run {
        seconds: f64,
        songs: Vec<Vec<Song>>,
        last_first: Option<f64>,
    }

    fn frames_of(songs: &[Vec<Song>]) -> usize {
        songs.iter().flatten().map(Song::frames).sum()
    }

    /// Each client's song stepped alone to its end, one after another.
    fn serial(m: &mut Models<'_>, s: &ArSettings, clients: usize, first: usize) -> anyhow::Result<Run> {
        let t0 = Instant::now();
        let (mut songs, mut last_first) = (Vec::new(), None);
        for i in 0..clients {
            let mut c = Composer::new(m.backend, m.lm, m.prompt, 1, s)?;
            let mut draws = SeedDraws::new(1 + 7 * i as i64, 1);
            let mut frame = 0;
            while !c.done() {
                c.step(m.backend, m.lm, m.depth, &mut draws)?;
                frame += 1;
                if i + 1 == clients && frame == first {
                    last_first = Some(t0.elapsed().as_secs_f64());
                }
            }
            songs.push(c.finish()?.0);
        }
        Ok(Run { seconds: t0.elapsed().as_secs_f64(), songs, last_first })
    }

    /// The clients' songs in one batch, the last client joining after the others' first
    /// step (its prompt going in one piece a step, as the entry stage's batch does).
    fn batched(m: &mut Models<'_>, s: &ArSettings, clients: usize, first: usize) -> anyhow::Result<Run> {
        let t0 = Instant::now();
        let mut running: Vec<(Composer, SeedDraws)> = Vec::new();
        let mut last_first = None;
        let (mut step, mut last_frames) = (0, 0);
        let start = |m: &mut Models<'_>, i: usize| -> anyhow::Result<(Composer, SeedDraws)> {
            Ok((Composer::start(m.backend, m.lm, m.prompt, 1, s)?, SeedDraws::new(1 + 7 * i as i64, 1)))
        };
        for i in 0..clients.max(2) - 1 {
            running.push(start(m, i)?);
        }
        loop {
            if step == 1 && clients > 1 {
                running.push(start(m, clients - 1)?);
            }
            if let Some((c, _)) = running.iter_mut().find(|(c, _)| !c.prefilled()) {
                c.prefill_piece(m.backend, m.lm)?;
            }
            // Whether the last client to arrive writes a frame this step.
            let last_steps = running.get(clients - 1).is_some_and(|(c, _)| c.prefilled() && !c.done());
            if running.len() == clients && running.iter().all(|(c, _)| c.done()) {
                break;
            }
            let mut members: Vec<Member<'_>> = running
                .iter_mut()
                .filter(|(c, _)| c.prefilled() && !c.done())
                .map(|(c, d)| (c, d as &mut dyn Draws))
                .collect();
            if !members.is_empty() {
                step_together(m.backend, m.lm, m.depth, &mut members)?;
            }
            if last_steps {
                last_frames += 1;
                if last_frames == first {
                    last_first = Some(t0.elapsed().as_secs_f64());
                }
            }
            step += 1;
        }
        let seconds = t0.elapsed().as_secs_f64();
        let songs = running.into_iter().map(|(c, _)| c.finish().map(|s| s.0)).collect::<Result<_, _>>()?;
        Ok(Run { seconds, songs, last_first })
    }

    /// The step a joining job's first prompt piece rides in (a piece of its own before the
    /// others' step), against the plain step of `others` songs decoding.
    fn stall(
        m: &mut Models<'_>,
        s: &ArSettings,
        long: &Prompt,
        others: usize,
        reps: usize,
    ) -> anyhow::Result<(f64, f64)> {
        let (mut plain, mut joined) = (Vec::new(), Vec::new());
        for r in 0..reps.max(1) {
            let mut running: Vec<(Composer, SeedDraws)> = (0..others)
                .map(|i| Ok((Composer::new(m.backend, m.lm, m.prompt, 1, s)?, SeedDraws::new(i as i64, 1))))
                .collect::<anyhow::Result<_>>()?;
            let step = |m: &mut Models<'_>, running: &mut Vec<(Composer, SeedDraws)>| -> anyhow::Result<f64> {
                let t = Instant::now();
                if let Some((c, _)) = running.iter_mut().find(|(c, _)| !c.prefilled()) {
                    c.prefill_piece(m.backend, m.lm)?;
                }
                let mut members: Vec<Member<'_>> = running
                    .iter_mut()
                    .filter(|(c, _)| c.prefilled() && !c.done())
                    .map(|(c, d)| (c, d as &mut dyn Draws))
                    .collect();
                step_together(m.backend, m.lm, m.depth, &mut members)?;
                Ok(t.elapsed().as_secs_f64())
            };
            for _ in 0..3 {
                step(m, &mut running)?;
            }
            plain.push(step(m, &mut running)?);
            running.push((Composer::start(m.backend, m.lm, long, 1, s)?, SeedDraws::new(100 + r as i64, 1)));
            joined.push(step(m, &mut running)?);
        }
        Ok((stats(plain).median, stats(joined).median))
    }

    /// What the section runs: the client counts, each written both ways `reps` times in
    /// turn, and the repetitions of the prefill stall.
    pub struct Runs<'a> {
        pub clients: &'a [usize],
        pub reps: usize,
        pub stall_reps: usize,
    }

    /// The table's rows: `runs.clients` counts, each client a `seconds` song under guidance.
    pub fn run(
        m: &mut Models<'_>,
        long: &Prompt,
        seconds: f64,
        stream_seconds: f64,
        runs: &Runs<'_>,
        t: &mut Table,
    ) -> anyhow::Result<()> {
        let frames = (seconds * 25.0).round() as usize;
        let s = ArSettings { lm_cfg: 1.5, top_k: 50, max_frames: frames, batch_cfg: true };
        // When the last client has written its first `stream_seconds` of frames.
        let first = ((stream_seconds.min(seconds) * 25.0) as usize).max(1);
        batched(m, &ArSettings { max_frames: 8, ..s }, 2, 1)?;
        for &c in runs.clients {
            let (mut one, mut all) = (Vec::new(), Vec::new());
            for _ in 0..runs.reps.max(1) {
                one.push(serial(m, &s, c, first)?);
                all.push(batched(m, &s, c, first)?);
                anyhow::ensure!(one[one.len() - 1].songs == all[all.len() - 1].songs, "batching changed the songs");
            }
            let median = |v: &[Run], f: &dyn Fn(&Run) -> f64| stats(v.iter().map(f).collect()).median;
            let per_hour = |r: &Run| c as f64 * 3600.0 / r.seconds;
            let fps = |r: &Run| frames_of(&r.songs) as f64 / r.seconds;
            // A song the LM ended before `first` frames never reaches it.
            let at = |v: &[Run]| match v.iter().map(|r| r.last_first).collect::<Option<Vec<f64>>>() {
                Some(t) => format!("the last client's first {first} frames at {:.1} s", stats(t).median),
                None => format!("the last client's song ended before {first} frames"),
            };
            t.push(
                "batching",
                format!("MiniMax AR, {c} clients of {seconds:.0} s, one after another"),
                "frames/s",
                stats(one.iter().map(fps).collect()),
                format!("{:.0} songs/h; {}", median(&one, &per_hour), at(&one)),
            );
            t.push(
                "batching",
                format!("MiniMax AR, {c} clients of {seconds:.0} s, one batch ({} rows)", 2 * c),
                "frames/s",
                stats(all.iter().map(fps).collect()),
                format!(
                    "{:.2}x serial{}, the same songs; {:.0} songs/h; {}",
                    median(&all, &fps) / median(&one, &fps),
                    super::turn_ratios(one.iter().zip(&all).map(|(o, b)| fps(b) / fps(o))),
                    median(&all, &per_hour),
                    at(&all)
                ),
            );
        }
        let others = 3;
        let (plain, joined) = stall(m, &s, long, others, runs.stall_reps)?;
        t.push(
            "batching",
            format!("MiniMax AR step of {others} songs, a joining prompt's first piece before it"),
            "ms/step",
            stats(vec![joined * 1e3]),
            format!(
                "the prefill stall: {:.1} ms over the plain step's {:.1} ms ({}-token prompt)",
                (joined - plain) * 1e3,
                plain * 1e3,
                long.cond.len()
            ),
        );
        Ok(())
    }
}
