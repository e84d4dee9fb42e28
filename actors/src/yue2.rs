//! YuE2 as the ModelStore and the stages see it: its components (the AR half, the NAR half,
//! the VAE), their coexistence groups ({ AR } and the synthesis group { NAR, VAE }), how
//! each loads, and the family's two halves behind [`ModelFamily`] and [`Synthesis`]: the
//! AR half on the entry stage, flow matching on the synthesis stage, the VAE on the
//! decode stage (tile by tile as the chunks arrive).
use crate::decode_stage::{LiveTiles, Tiling, TrackPlan, UploadJobFn, VaeCmd};
use crate::family::{Batch, Handoff, Left, ModelFamily, Outlets, StageError, Synthesis};
use crate::hub::Publish;
use crate::messages::{CodesReady, EncCmd, JobCtx, Outcome, Resumed};
use crate::model_store::{Component, ComponentKey, Group, GroupPin, Lease, Module};
use crate::stage::WorkerConfig;
use crate::stage::{Links, ProgressSink, TokenMeter};
use crossbeam_channel::{Receiver, Sender};
use std::any::Any;
use std::sync::Arc;
use yued_contract::results::ResultStore;
use yued_contract::{SongCodes, UploadOp};
use yued_engine::ggml::Backend;
use yued_engine::gguf::GgufFile;
use yued_engine::models::yue2::adapter::{shapes_of, stack_terms, Adapter, AdapterDir};
use yued_engine::models::yue2::ar::ArModel;
use yued_engine::models::yue2::generate::ArStages;
use yued_engine::models::yue2::nar::NarModel;
use yued_engine::models::yue2::pipeline::{
    step_together, ChunkReady, Event, PipelineError, Shared, SongMeta, SongNoise, SongWork, Writer, Written,
    WrittenSong,
};
use yued_engine::models::yue2::settings::Settings;
use yued_engine::models::yue2::vae::{VaeError, VaeModel};
use yued_protocol::{Family, Stage, StreamEvent, Yue2Request};

/// The engine's settings of a job's request (its seeds are resolved at submission).
fn settings_of(ctx: &JobCtx) -> Result<Settings, PipelineError> {
    crate::settings::yue2(ctx.yue2()).map_err(|e| PipelineError::Other(e.to_string()))
}

/// The AR half's group.
pub const AR_GROUP: &str = "ar";
/// The NAR half and the VAE: what renders a song once its codes are written.
pub const SYNTHESIS_GROUP: &str = "synthesis";

pub fn synthesis_group() -> Group {
    Group { family: Family::Yue2, name: SYNTHESIS_GROUP }
}

/// The AR half under the adapters of `req` that change it (none for `None`).
pub fn ar(cfg: &WorkerConfig, req: Option<&Yue2Request>) -> ComponentKey {
    ComponentKey {
        family: Family::Yue2,
        component: "ar",
        group: AR_GROUP,
        file: cfg.model.clone(),
        variant: variant(cfg, req, false),
    }
}
/// The NAR half under the adapters of `req` that change it.
pub fn nar(cfg: &WorkerConfig, req: Option<&Yue2Request>) -> ComponentKey {
    ComponentKey {
        family: Family::Yue2,
        component: "nar",
        group: SYNTHESIS_GROUP,
        file: cfg.model.clone(),
        variant: variant(cfg, req, true),
    }
}
pub fn vae(cfg: &WorkerConfig) -> ComponentKey {
    ComponentKey {
        family: Family::Yue2,
        component: "vae",
        group: SYNTHESIS_GROUP,
        file: cfg.vae.clone(),
        variant: String::new(),
    }
}

/// How a variant names the `--companion` adapter (apart from the directory's names).
const COMPANION: &str = "companion:";

/// The variant of a half a request's adapters make ([`yued_engine::models::yue2::adapter::half_key`]):
/// "" without adapters, or when none of them changes this half at a non-zero strength (each at
/// its strength on this half). A name the directory lacks keeps its place in the key; the load
/// then says what is wrong. The NAR half's starts with the companion at the request's
/// `companion_scale`, unless the request names the same file itself (it is merged once, at the
/// request's strength). No request (the warm-up) is the default request.
fn variant(cfg: &WorkerConfig, req: Option<&Yue2Request>, nar: bool) -> String {
    let default = Yue2Request::default();
    let req = req.unwrap_or(&default);
    let dir = cfg.adapters.as_deref();
    let mut entries: Vec<String> = Vec::new();
    if let (true, Some(c)) = (nar, cfg.companion.as_deref()) {
        let named = dir.is_some_and(|d| req.adapters.iter().any(|a| d.get(&a.name).is_ok_and(|x| same_file(x, c))));
        if !named && req.companion_scale != 0.0 {
            entries.push(format!("{COMPANION}{}@{}", c.name, req.companion_scale as f32));
        }
    }
    if let Some(dir) = dir {
        for a in &req.adapters {
            let s = a.half_scale(nar) as f32;
            if s != 0.0 && dir.get(&a.name).map(|x| if nar { x.nar } else { x.ar }).unwrap_or(true) {
                entries.push(format!("{}@{s}", a.name));
            }
        }
    }
    entries.join(",")
}

/// Whether two adapters are one file (a directory's entry naming the companion).
fn same_file(a: &Adapter, b: &Adapter) -> bool {
    a.file == b.file
        || std::fs::canonicalize(&a.file).ok().is_some_and(|x| std::fs::canonicalize(&b.file).ok() == Some(x))
}

/// A variant's adapters and strengths.
fn stack_of<'a>(
    dir: Option<&'a AdapterDir>,
    companion: Option<&'a Adapter>,
    variant: &str,
) -> Result<Vec<(&'a Adapter, f32)>, String> {
    variant
        .split(',')
        .filter(|e| !e.is_empty())
        .map(|e| {
            let (name, s) = e.rsplit_once('@').ok_or_else(|| format!("a variant entry '{e}' without its strength"))?;
            let adapter = match name.strip_prefix(COMPANION) {
                Some(_) => companion.ok_or("this daemon has no --companion adapter")?,
                None => dir.ok_or("adapters: this daemon has no --adapters directory")?.get(name)?,
            };
            Ok((adapter, s.parse::<f32>().map_err(|x| format!("{e}: {x}"))?))
        })
        .collect()
}

/// Every component, in load order (the warm-up under `--keep-loaded`).
pub fn components(cfg: &WorkerConfig) -> Vec<ComponentKey> {
    vec![ar(cfg, None), nar(cfg, None), vae(cfg)]
}

/// Loads a YuE2 component from its file, a half with the adapters its variant names
/// merged in; the backbone's config comes from `shared`.
pub fn load(
    key: &ComponentKey,
    backend: &Backend,
    shared: &Shared,
    adapters: Option<&AdapterDir>,
    companion: Option<&Adapter>,
) -> Result<Module, String> {
    let f = GgufFile::open(&key.file).map_err(|e| e.to_string())?;
    let terms = |nar: bool| -> Result<
        std::collections::HashMap<String, Vec<yued_engine::models::yue2::adapter::Term>>,
        String,
    > {
        if key.variant.is_empty() {
            return Ok(Default::default());
        }
        let t0 = std::time::Instant::now();
        let t = stack_terms(&stack_of(adapters, companion, &key.variant)?, &shapes_of(&f), nar)?;
        tracing::info!(variant = %key.variant, tensors = t.len(), seconds = t0.elapsed().as_secs_f64(), "adapter terms \
            read");
        Ok(t)
    };
    Ok(match key.component {
        "ar" => Box::new(ArModel::load_with(&f, &shared.info, backend, &terms(false)?).map_err(|e| e.to_string())?),
        "nar" => Box::new(NarModel::load_with(&f, &shared.info, backend, &terms(true)?).map_err(|e| e.to_string())?),
        "vae" => Box::new(VaeModel::load(&f, backend).map_err(|e| e.to_string())?),
        other => return Err(format!("YuE2 has no component '{other}'")),
    })
}

macro_rules! component {
    ($t:ty) => {
        impl Component for $t {
            fn weight_bytes(&self) -> usize {
                <$t>::weight_bytes(self)
            }
            fn as_any_mut(&mut self) -> &mut dyn Any {
                self
            }
        }
    };
}
component!(ArModel);
component!(NarModel);
component!(VaeModel);

/// YuE2 as the stages drive it: the backbone's shared state (tokenizer, prompts, config),
/// `None` when the backbone file did not open (every song then fails; `/vae` jobs, which
/// need only the VAE, still run).
pub(crate) struct Yue2 {
    shared: Option<Arc<Shared>>,
}

impl Yue2 {
    pub fn new(shared: Option<Arc<Shared>>) -> Self {
        Yue2 { shared }
    }
}

crate::family::engine_error!(PipelineError);

impl ModelFamily for Yue2 {
    fn family(&self) -> Family {
        Family::Yue2
    }

    fn synthesis_group(&self) -> Group {
        synthesis_group()
    }

    fn vae_job(&self) -> UploadJobFn {
        oobleck_vae_job
    }

    /// A job alone (fresh songs go through [`Yue2Batch`]; this is a job resumed from the
    /// journal): the whole AR half first, then the hand-off ([`Yue2Synthesis`]).
    fn compose(
        &mut self,
        links: &Links,
        backend: &Backend,
        ctx: &Arc<JobCtx>,
        out: &mut Handoff<'_>,
    ) -> Result<(), StageError> {
        let shared = self
            .shared
            .clone()
            .ok_or_else(|| StageError::Failed("the model failed to load; see the daemon log".into()))?;
        let songs = compose(links, &shared, backend, ctx)?;
        out.send(Box::new(Yue2Synthesis { shared, songs }));
        Ok(())
    }

    /// Fresh songs and replays batch; a job resumed from the journal composes alone.
    fn batch(&mut self, links: &Links, job: &JobCtx) -> Option<Box<dyn Batch>> {
        let shared = self.shared.clone()?;
        if resumes(job) {
            return None;
        }
        let key = ar(&links.cfg, Some(job.yue2()));
        Some(Box::new(Yue2Batch { shared, cfg: links.cfg.clone(), key, lease: None, members: Vec::new() }))
    }
}

/// Whether the job's chunks stream to the synthesis half while its AR half writes them:
/// a fresh song under `stream_chunk_seconds` with both groups resident, when the synthesis
/// stage's queue has room for it now ([`Handoff::can_stream`]; else it hands over when its
/// codes are written, rendering the same bytes).
fn streams(ctx: &JobCtx, out: &Handoff<'_>) -> bool {
    let req = ctx.yue2();
    req.stream_chunk_seconds > 0.0 && out.can_stream() && !resumes(ctx) && req.semantic_tokens.is_empty()
}

/// YuE2's AR halves of several jobs over one AR module, stepped together
/// ([`pipeline::step_together`](yued_engine::models::yue2::pipeline::step_together)).
struct Yue2Batch {
    shared: Arc<Shared>,
    cfg: WorkerConfig,
    key: ComponentKey,
    /// Taken at the first join, given back with the batch.
    lease: Option<Lease>,
    members: Vec<Member>,
}

/// A job in a [`Yue2Batch`].
struct Member {
    ctx: Arc<JobCtx>,
    settings: Settings,
    writer: Writer,
    reports: ArReports,
    /// A streamed job's chunks go out through this as they are written.
    stream: Option<Sender<Streamed>>,
}

impl Yue2Batch {
    /// A member's end once its writer is done: the chunks prefilled and its hand-off (a
    /// streamed job's went at the join).
    fn conclude(&mut self, backend: &Backend, m: Member) -> Left {
        m.reports.finish();
        let songs = m.writer.finish()?;
        if m.stream.is_some() {
            return Ok(None);
        }
        let lease = self.lease.as_mut().expect("a batch with members holds its lease");
        let ar = lease.get::<ArModel>();
        let mut out = Vec::with_capacity(songs.len());
        for song in songs {
            out.push(self.shared.prefill_chunks(ar, backend, &m.settings, song, &m.ctx.cancel)?);
        }
        Ok(Some(Box::new(Yue2Synthesis { shared: self.shared.clone(), songs: out })))
    }
}

impl Batch for Yue2Batch {
    fn admits(&self, job: &JobCtx) -> bool {
        job.request.family() == Family::Yue2 && !resumes(job) && ar(&self.cfg, Some(job.yue2())) == self.key
    }

    fn rows_of(&self, job: &JobCtx) -> usize {
        settings_of(job).map(|s| Writer::max_rows(&s)).unwrap_or(1)
    }

    fn rows(&self) -> usize {
        self.members.iter().map(|m| Writer::max_rows(&m.settings)).sum()
    }

    fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    fn jobs(&self) -> Vec<Arc<JobCtx>> {
        self.members.iter().map(|m| m.ctx.clone()).collect()
    }

    fn join(
        &mut self,
        links: &Links,
        backend: &Backend,
        ctx: Arc<JobCtx>,
        out: &mut Handoff<'_>,
    ) -> Result<(), StageError> {
        let settings = settings_of(&ctx)?;
        if self.lease.is_none() {
            self.lease = Some(links.store.lease(&self.key, backend)?);
        }
        let lease = self.lease.as_mut().expect("taken above");
        let streamed = streams(&ctx, out);
        let writer =
            Writer::new(&mut self.shared.ar_stages(lease.get::<ArModel>(), backend), settings.clone(), streamed)?;
        let stream = streamed.then(|| {
            let (tx, rx) = crossbeam_channel::unbounded();
            let songs = settings.songs;
            out.send(Box::new(Yue2Stream { shared: self.shared.clone(), settings: settings.clone(), rx, songs }));
            tx
        });
        let mut reports = ArReports::new(links, &ctx);
        if settings.replay.is_none() {
            // The stage shows from the join: its prompt's prefill (pieces, steps) is its first work.
            let (stage, total) = if settings.plans() {
                (Stage::Plan, settings.plan.max_tokens as usize)
            } else {
                (Stage::Semantic, settings.semantic_steps())
            };
            reports.sink.report(stage, 0, total);
        }
        tracing::info!(job = %ctx.id, members = self.members.len() + 1, "joins the AR batch");
        self.members.push(Member { ctx, settings, writer, reports, stream });
        Ok(())
    }

    fn step(&mut self, links: &Links, backend: &Backend) -> Vec<(Arc<JobCtx>, Left)> {
        let left = self.step_members(links, backend);
        if self.members.is_empty() {
            self.lease = None;
        }
        left
    }
}

impl Yue2Batch {
    fn step_members(&mut self, links: &Links, backend: &Backend) -> Vec<(Arc<JobCtx>, Left)> {
        let mut left = Vec::new();
        // The cancelled leave before the step.
        let (gone, kept): (Vec<Member>, Vec<Member>) =
            std::mem::take(&mut self.members).into_iter().partition(|m| m.ctx.cancel.is_cancelled());
        self.members = kept;
        left.extend(gone.into_iter().map(|m| (m.ctx, Err(StageError::Cancelled))));
        if self.members.is_empty() {
            return left;
        }
        let lease = self.lease.as_mut().expect("a batch with members holds its lease");
        let mut stages = self.shared.ar_stages(lease.get::<ArModel>(), backend);
        let budget = stages.prefill_chunk;
        let mut writers: Vec<&mut Writer> = self.members.iter_mut().map(|m| &mut m.writer).collect();
        let results = match step_together(&mut stages, &mut writers, budget) {
            Ok(r) => r,
            Err(e) => {
                let msg = e.to_string();
                let all = std::mem::take(&mut self.members);
                left.extend(all.into_iter().map(|m| (m.ctx, Err(StageError::Failed(msg.clone())))));
                return left;
            }
        };
        let mut done = Vec::new();
        for (i, r) in results.into_iter().enumerate() {
            let m = &mut self.members[i];
            match r {
                Err(e) => done.push((i, Some(StageError::from(e)))),
                Ok(items) => {
                    for item in items {
                        if let Some(c) = m.reports.tell(item, true) {
                            if let Some(tx) = &m.stream {
                                let count = matches!(c, ChunkReady::Chunk { .. })
                                    .then(|| KvCount::new(&links.metrics.kv_sets_in_use));
                                let _ = tx.send((c, count));
                            }
                        }
                    }
                    if m.writer.done() {
                        done.push((i, None));
                    }
                }
            }
        }
        let mut ended: Vec<(Member, Option<StageError>)> =
            done.into_iter().rev().map(|(i, err)| (self.members.remove(i), err)).collect();
        ended.reverse();
        for (m, err) in ended {
            let ctx = m.ctx.clone();
            let span = m.writer.span().clone();
            let _in = span.enter();
            let how = match err {
                Some(e) => Err(e),
                None => self.conclude(backend, m),
            };
            left.push((ctx, how));
        }
        left
    }
}

/// Whether the job resumes from journaled codes (the replay path).
fn resumes(ctx: &JobCtx) -> bool {
    let req = ctx.yue2();
    !ctx.known_songs.is_empty()
        && (ctx.known_songs.len() as u32 == req.lm_batch_size.max(1) || !req.semantic_tokens.is_empty())
}

/// The AR half's reports: progress and token counts, the score, each song's codes
/// (journaled unless they came from the journal).
struct ArReports {
    links: Links,
    ctx: Arc<JobCtx>,
    sink: ProgressSink,
    meter: TokenMeter,
}

impl ArReports {
    fn new(links: &Links, ctx: &Arc<JobCtx>) -> Self {
        ArReports {
            links: links.clone(),
            ctx: ctx.clone(),
            sink: ProgressSink::new(links, ctx),
            meter: TokenMeter::new(ctx.request.family()),
        }
    }

    /// Tells a writer's item; returns the hand-outs (a streamed song's chunks and ends).
    fn tell(&mut self, item: Written, journal: bool) -> Option<ChunkReady> {
        let (links, id) = (&self.links, &self.ctx.id);
        match item {
            Written::Progress { phase, song, done, total } => {
                let stage = crate::settings::stage(phase);
                self.meter.count(links, stage, song, done);
                self.sink.report(stage, done, total)
            }
            Written::Score { abc, .. } => links.hub.do_send(Publish::Event(id.clone(), StreamEvent::Score { abc })),
            Written::Codes(m) => {
                let frames = m.codes.len() as u32;
                if journal {
                    let song = SongCodes { song: m.index, abc: m.abc, codes: m.codes };
                    links.scheduler.do_send(CodesReady { id: id.clone(), song });
                }
                links.hub.do_send(Publish::Event(id.clone(), StreamEvent::Codes { frames }));
            }
            Written::Chunk { song, chunk } => return Some(ChunkReady::Chunk { song, chunk }),
            Written::SongEnd(meta) => return Some(ChunkReady::SongEnd(meta)),
        }
        None
    }

    fn finish(&self) {
        self.meter.finish(&self.links);
    }
}

/// The stage loop of a job's AR half alone: its [`Writer`] stepped to the end, the cancel
/// checked between steps, each step's items told.
fn write(
    stages: &mut ArStages<'_>,
    s: Settings,
    reports: &mut ArReports,
    journal: bool,
) -> Result<Vec<WrittenSong>, PipelineError> {
    let mut writer = Writer::new(stages, s, false)?;
    while !writer.done() {
        if reports.ctx.cancel.is_cancelled() {
            return Err(PipelineError::Cancelled);
        }
        for item in writer.step(stages)? {
            reports.tell(item, journal);
        }
    }
    writer.finish()
}

/// The AR half: the scores and semantic streams written (or taken from the replay fields
/// or the journal), one KV set prefilled per acoustic chunk.
fn compose(
    links: &Links,
    shared: &Shared,
    backend: &Backend,
    ctx: &Arc<JobCtx>,
) -> Result<Vec<SongWork>, PipelineError> {
    let s = settings_of(ctx)?;
    let mut lease = links.store.lease(&ar(&links.cfg, Some(ctx.yue2())), backend).map_err(PipelineError::Other)?;
    let mut reports = ArReports::new(links, ctx);
    // A resumed job renders every song through the replay path from its journaled codes,
    // under its own index and score (its tracks' replay requests come out as the first
    // run's).
    let journal = !resumes(ctx);
    let runs: Vec<(Option<u32>, Settings)> = if journal {
        vec![(None, s)]
    } else {
        tracing::info!(songs = ctx.known_songs.len(), "resuming from journaled codes");
        links.scheduler.do_send(Resumed { id: ctx.id.clone() });
        let mut known = ctx.known_songs.clone();
        known.sort_by_key(|k| k.song);
        known.iter().map(|k| (Some(k.song), s.for_song(k.song, &k.abc, &k.codes, None))).collect()
    };
    let mut out = Vec::new();
    for (index, run) in runs {
        let ar = lease.get::<ArModel>();
        let songs = write(&mut shared.ar_stages(ar, backend), run.clone(), &mut reports, journal);
        for mut song in songs? {
            song.meta.index = index.unwrap_or(song.meta.index);
            out.push(shared.prefill_chunks(ar, backend, &run, song, &ctx.cancel)?);
        }
    }
    reports.finish();
    Ok(out)
}

/// A chunk's KV set in flight to the synthesis half: counted in the KV gauge until
/// painted or dropped (with the channel, when the synthesis half gave up).
struct KvCount(prometheus::IntGauge);

impl KvCount {
    fn new(gauge: &prometheus::IntGauge) -> Self {
        gauge.inc();
        KvCount(gauge.clone())
    }
}

impl Drop for KvCount {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// What the streamed AR half sends the synthesis half.
type Streamed = (ChunkReady, Option<KvCount>);

/// A YuE2 job between its halves: each song's codes with one prefilled KV set per chunk.
struct Yue2Synthesis {
    shared: Arc<Shared>,
    songs: Vec<SongWork>,
}

impl Synthesis for Yue2Synthesis {
    fn kv_sets(&self) -> usize {
        self.songs.iter().map(|s| s.chunks.len()).sum()
    }

    fn describe(&self) -> String {
        format!(
            "{} songs, {} KV sets of {} bytes",
            self.songs.len(),
            self.kv_sets(),
            self.songs.iter().map(SongWork::kv_bytes).sum::<usize>()
        )
    }

    /// Flow matching over each song's chunks, every variation in one graph per chunk; each
    /// chunk's latents go to the decode stage the moment its solve ends (the tracks announced
    /// first, with the pin). On failure the decode stage drops what it holds of the job.
    fn render(
        self: Box<Self>,
        links: &Links,
        backend: &Backend,
        job: &Arc<JobCtx>,
        pin: GroupPin,
        out: &Outlets,
    ) -> Result<(), StageError> {
        let r = render(links, &self.shared, backend, job, self.songs, pin, &out.vae);
        if r.is_err() {
            let _ = out.vae.send(VaeCmd::Abort(job.id.clone()));
        }
        Ok(r?)
    }
}

fn render(
    links: &Links,
    shared: &Shared,
    backend: &Backend,
    job: &Arc<JobCtx>,
    songs: Vec<SongWork>,
    pin: GroupPin,
    vae_tx: &Sender<VaeCmd>,
) -> Result<(), PipelineError> {
    if job.cancel.is_cancelled() {
        return Err(PipelineError::Cancelled);
    }
    let s = settings_of(job)?;
    let m = s.variations;
    let tracks: Vec<TrackPlan> = songs
        .iter()
        .flat_map(|s| (0..m).map(move |j| TrackPlan { meta: s.meta.clone(), variation: j as u32, open: false }))
        .collect();
    let _ = vae_tx.send(VaeCmd::Begin { job: job.clone(), tracks, tiling: tiling(links, job, &s), pin });
    let mut lease = links.store.lease(&nar(&links.cfg, Some(job.yue2())), backend).map_err(PipelineError::Other)?;
    let mut sink = ProgressSink::new(links, job);
    let mut first = 0;
    for song in songs {
        shared.render(lease.get::<NarModel>(), backend, song, &s, &job.cancel, &mut |e| match e {
            Event::Progress { phase, done, total, .. } => sink.report(crate::settings::stage(phase), done, total),
            Event::Latents { variation, start_frame, latents, .. } => {
                let track = first + variation as usize;
                let _ =
                    vae_tx.send(VaeCmd::Latents { id: job.id.clone(), track, start_frame, latents: latents.to_vec() });
            }
            _ => {}
        })?;
        first += m;
    }
    Ok(())
}

/// How the decode stage tiles a YuE2 job's tracks (the chunk grid bounds a tile) and the
/// replay request of each finished track.
fn tiling(links: &Links, job: &JobCtx, s: &Settings) -> Tiling {
    let (core, halo) = (links.cfg.options.vae_core, links.cfg.options.vae_halo);
    let req = job.yue2().clone();
    Tiling {
        core: s.tile_core(core, halo),
        open_frames: s.budget,
        vae: vae(&links.cfg),
        replay: Box::new(move |song, variation| {
            serde_json::to_value(crate::settings::yue2_replay(&req, song, variation)).expect("a request serializes")
        }),
    }
}

/// A streamed YuE2 job between its halves: the songs' chunks arrive while the AR half
/// writes them, each painted the moment it arrives (every variation in one graph) and its
/// latents sent on to the decode stage, whose tracks learn their length at each song's end.
struct Yue2Stream {
    shared: Arc<Shared>,
    settings: Settings,
    rx: Receiver<Streamed>,
    songs: usize,
}

impl Synthesis for Yue2Stream {
    fn describe(&self) -> String {
        format!("{} songs, streamed chunk by chunk as they are written", self.songs)
    }

    fn render(
        self: Box<Self>,
        links: &Links,
        backend: &Backend,
        job: &Arc<JobCtx>,
        pin: GroupPin,
        out: &Outlets,
    ) -> Result<(), StageError> {
        let r = render_stream(links, &self.shared, &self.settings, backend, job, &self.rx, pin, &out.vae);
        // Chunks still on their way are dropped with the channel (and leave the gauge).
        if !matches!(r, Ok(true)) {
            let _ = out.vae.send(VaeCmd::Abort(job.id.clone()));
        }
        r.map(|_| ()).map_err(StageError::from)
    }
}

/// Returns whether every song ended (false: the AR half stopped early and reports why).
#[allow(clippy::too_many_arguments)]
fn render_stream(
    links: &Links,
    shared: &Shared,
    s: &Settings,
    backend: &Backend,
    job: &Arc<JobCtx>,
    rx: &Receiver<Streamed>,
    pin: GroupPin,
    vae_tx: &Sender<VaeCmd>,
) -> Result<bool, PipelineError> {
    let (songs, m) = (s.songs, s.variations);
    let open =
        |i: usize| SongMeta { index: i as u32, abc: String::new(), plan_seed: None, codes: Vec::new(), ended: false };
    let tracks: Vec<TrackPlan> = (0..songs)
        .flat_map(|i| (0..m).map(move |j| TrackPlan { meta: open(i), variation: j as u32, open: true }))
        .collect();
    let _ = vae_tx.send(VaeCmd::Begin { job: job.clone(), tracks, tiling: tiling(links, job, s), pin });
    let mut lease = links.store.lease(&nar(&links.cfg, Some(job.yue2())), backend).map_err(PipelineError::Other)?;
    let mut sink = ProgressSink::new(links, job);
    let budget = s.budget;
    let mut noise: Vec<Option<SongNoise>> = (0..songs).map(|_| None).collect();
    let (mut ended, mut painted) = (0, 0);
    for (item, _count) in rx.iter() {
        match item {
            ChunkReady::SongEnd(meta) => {
                for j in 0..m {
                    let _ = vae_tx.send(VaeCmd::TrackEnd {
                        id: job.id.clone(),
                        track: meta.index as usize * m + j,
                        meta: meta.clone(),
                    });
                }
                ended += 1;
            }
            ChunkReady::Chunk { song, chunk } => {
                // The stage's clock runs from its first chunk (its progress shows once the
                // songs are written).
                sink.begin(Stage::Synth);
                let nz = noise[song as usize]
                    .get_or_insert_with(|| SongNoise::new(s.seed, m, lease.get::<NarModel>().latent, budget));
                shared.render_chunk(
                    lease.get::<NarModel>(),
                    backend,
                    song,
                    chunk,
                    nz,
                    s,
                    (0, 1),
                    &job.cancel,
                    &mut |e| {
                        if let Event::Latents { variation, start_frame, latents, .. } = e {
                            let track = song as usize * m + variation as usize;
                            let _ = vae_tx.send(VaeCmd::Latents {
                                id: job.id.clone(),
                                track,
                                start_frame,
                                latents: latents.to_vec(),
                            });
                        }
                    },
                )?;
                painted += 1;
                // The AR stage reports its own progress while it writes; this stage's shows
                // once the songs are written.
                if ended == songs {
                    sink.report(Stage::Synth, painted, painted + rx.len());
                }
            }
        }
    }
    Ok(ended == songs)
}

/// A YuE2 `/vae` job on the Oobleck VAE: encode an uploaded file to raw latents (the
/// result is saved here), or decode uploaded latents tile by tile, streaming the tiles like
/// a song's, and hand the audio to the Encoder (which then reports the job: `None` here).
fn oobleck_vae_job(
    links: &Links,
    backend: &Backend,
    job: &Arc<JobCtx>,
    op: UploadOp,
    bytes: &[u8],
    results: &ResultStore,
    enc_tx: &Sender<EncCmd>,
) -> Option<Outcome> {
    let mut lease = match links.store.lease(&crate::yue2::vae(&links.cfg), backend) {
        Ok(l) => l,
        Err(e) => return Some(Outcome::Failed(e)),
    };
    let vae = lease.get::<VaeModel>();
    let lat = vae.info.latent_channels;
    let spec = vae.info.audio_spec();
    let mut sink = ProgressSink::new(links, job);
    match op {
        UploadOp::Tokenize | UploadOp::Transcribe | UploadOp::TranscribeMelody => {
            Some(Outcome::Failed("a listening job is not a VAE job".into()))
        }
        UploadOp::Encode => {
            sink.report(Stage::Encode, 0, 1);
            let z = match crate::codec::audio_to_latents(vae, backend, bytes) {
                Ok(z) => z,
                Err(e) => return Some(Outcome::Failed(format!("audio: {e}"))),
            };
            drop(lease);
            sink.report(Stage::Encode, 1, 1);
            tracing::info!(frames = z.len() / lat, "vae encode done");
            let files = vec![(
                "latents.vae".to_string(),
                "application/octet-stream".to_string(),
                z.iter().flat_map(|x| x.to_le_bytes()).collect(),
            )];
            if let Err(e) = results.save(&job.id, files) {
                return Some(Outcome::Failed(format!("saving the result: {e}")));
            }
            Some(Outcome::Done { tracks: 1, audio_seconds: spec.latent_seconds(z.len() / lat), metrics: None })
        }
        UploadOp::Decode => {
            let z: Vec<f32> = bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
            let (core, halo) = (links.cfg.options.vae_core, links.cfg.options.vae_halo);
            let tiles = (z.len() / lat).div_ceil(core.max(1));
            let mut live = LiveTiles::new(links, job, tiles, crate::stage::FirstAudio::unobserved());
            live.begin();
            let (rate, channels) = (vae.info.sample_rate, vae.info.audio_channels);
            let decoded = vae.decode_tiled(backend, &z, core, halo, &job.cancel, &mut |tile| {
                live.publish(&links.hub, 0, spec, tile)
            });
            drop(lease);
            match decoded {
                Ok(pcm) => {
                    live.finish(&links.hub);
                    let _ =
                        enc_tx.send(EncCmd::Audio { job: job.clone(), pcm: yued_audio::Pcm::new(rate, channels, pcm) });
                    None
                }
                Err(VaeError::Cancelled) => Some(Outcome::Cancelled),
                Err(e) => Some(Outcome::Failed(format!("decode: {e}"))),
            }
        }
    }
}
