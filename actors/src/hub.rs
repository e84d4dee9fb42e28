//! The StreamHub: per-job listener queues. Publishers (the scheduler and the compute
//! worker) send events and decoded PCM tiles; each listener gets what was already
//! published for the job (a late joiner hears the song from the start), then the live
//! items. A listener's queue is bounded: one that falls too far behind is dropped (its
//! socket is closed with a reason) instead of stalling the render or growing memory.
//!
//! A job's stream exists from its `queued` event (the scheduler's first word on a job) to
//! its terminal event, and is freed then: a finished job's story is its result on disk, and
//! a listener who comes after is answered from there (the daemon's WebSocket replays the
//! result), never by a stream that waits for events that will not come.
//!
//! What the hub keeps for late joiners is bounded in memory: once the running jobs' kept
//! tiles pass the budget (`stream_memory_bytes`), a job's later tiles wait in an unnamed
//! spool file of its own under the data directory, read back by each late joiner as it
//! sends them, and gone with the job's end (or a crash).
//!
//! The hub only distributes: a tile arrives already as s16 bytes and Ogg Opus pages, made
//! by a [`TileEncoder`](yued_contract::stream::TileEncoder) on the compute thread that decoded it. Encoding a tile of
//! Opus
//! takes milliseconds; done here it would hold up every other message of the actor thread
//! the hub shares with the scheduler, and with it every `/job` answer.
use actix::prelude::*;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tokio::sync::mpsc;
use yued_contract::metrics::Metrics;
use yued_contract::stream::{
    items, EncodedTile, HubItem, Queued, SpooledBytes, StreamItem, Subscription, LISTENER_BACKLOG,
};
use yued_protocol::{JobId, StreamCodec, StreamEvent};

#[derive(Message)]
#[rtype(result = "()")]
pub enum Publish {
    Event(JobId, StreamEvent),
    /// A tile, or a track's end (the last Ogg pages of its Opus stream, after its last
    /// tile). A job that ends otherwise (cancelled, failed) has no ends: its Opus streams
    /// just stop, as a broadcast that is cut off does.
    Tile(JobId, EncodedTile),
}

/// Subscribes to a job's stream; `None` when the hub holds none for it (the job ended, or
/// was never queued here).
#[derive(Message)]
#[rtype(result = "Option<Subscription>")]
pub struct Subscribe {
    pub job: JobId,
    pub codec: StreamCodec,
}

struct Listener {
    codec: StreamCodec,
    tx: mpsc::Sender<Queued>,
    ended: Arc<AtomicBool>,
}

/// What the hub may keep of the running jobs' tiles for late joiners.
#[derive(Clone, Debug)]
pub struct HistoryBudget {
    /// Bytes of tiles kept in memory across jobs; beyond them, tiles go to spool files.
    pub memory_bytes: usize,
    /// The folder of the spool files; `None`: everything stays in memory.
    pub spool_dir: Option<PathBuf>,
}

impl HistoryBudget {
    /// Everything in memory (tools and tests without a data directory).
    pub fn in_memory() -> Self {
        HistoryBudget { memory_bytes: usize::MAX, spool_dir: None }
    }
}

/// One item of a job's history.
enum Kept {
    Item(HubItem),
    /// A tile whose bytes wait in the job's spool file (the tile itself holds none).
    Spooled {
        tile: EncodedTile,
        pcm16: SpooledBytes,
        opus: SpooledBytes,
    },
}

#[derive(Default)]
struct JobStream {
    /// Everything published, in order: events and tiles.
    history: Vec<Kept>,
    listeners: Vec<Listener>,
    /// Raw copies of every item (a cluster worker forwards them to the cluster's tile bus);
    /// unbounded, since what reads them forwards them, and one song's tiles at most.
    taps: Vec<mpsc::UnboundedSender<HubItem>>,
    /// Bytes of its tiles in memory, and in its spool file (opened at its first spilled tile).
    memory: usize,
    spooled: usize,
    spool: Option<Arc<std::fs::File>>,
    /// The spool could not be written: the job's tiles stay in memory (said once).
    spool_failed: bool,
}

pub struct StreamHub {
    jobs: HashMap<JobId, JobStream>,
    metrics: Metrics,
    budget: HistoryBudget,
    /// Bytes of tiles kept in memory across jobs.
    memory: usize,
}

impl StreamHub {
    pub fn new(metrics: Metrics, budget: HistoryBudget) -> Self {
        StreamHub { jobs: HashMap::new(), metrics, budget, memory: 0 }
    }
}

impl Actor for StreamHub {
    type Context = Context<Self>;
}

impl Handler<Publish> for StreamHub {
    type Result = ();
    fn handle(&mut self, msg: Publish, _: &mut Self::Context) {
        let (job, item) = match msg {
            Publish::Event(j, e) => (j, HubItem::Event(e)),
            Publish::Tile(j, t) => (j, HubItem::Tile(t)),
        };
        self.distribute(job, item);
    }
}

impl StreamHub {
    /// Sends one item to every listener of the job and keeps it for late joiners. A job's
    /// stream starts with its `queued` event; anything else for a job without one (a stage
    /// reporting after the job ended) is dropped.
    fn distribute(&mut self, job: JobId, item: HubItem) {
        let terminal = matches!(&item, HubItem::Event(e) if e.is_terminal());
        let first_tile = matches!(&item, HubItem::Tile(..));
        let opens = matches!(&item, HubItem::Event(StreamEvent::Queued { .. }));
        if !opens && !self.jobs.contains_key(&job) {
            return;
        }
        let s = self.jobs.entry(job.clone()).or_default();
        let had_tile = s.history.iter().any(|h| !matches!(h, Kept::Item(HubItem::Event(..))));
        let mut dropped = 0;
        s.listeners.retain(|l| {
            for it in items(&item, l.codec, first_tile && !had_tile) {
                let it = Queued::Item(it);
                let n = it.len();
                match l.tx.try_send(it) {
                    Ok(()) => self.metrics.ws_bytes_total.inc_by(n as u64),
                    // Too slow: dropped, and counted.
                    Err(mpsc::error::TrySendError::Full(_)) => {
                        dropped += 1;
                        return false;
                    }
                    // Gone (the listener hung up): let go quietly.
                    Err(mpsc::error::TrySendError::Closed(_)) => return false,
                }
            }
            true
        });
        if dropped > 0 {
            self.metrics.ws_dropped_listeners_total.inc_by(dropped);
            tracing::warn!(job = %job, dropped, "stream listeners dropped (too slow or gone)");
        }
        s.taps.retain(|t| t.send(item.clone()).is_ok());
        if terminal {
            // Dropping the senders ends the sockets after the terminal event (and the last
            // reader of the spool file, its file).
            for l in &s.listeners {
                l.ended.store(true, Ordering::Release);
            }
            self.memory -= s.memory;
            self.jobs.remove(&job);
        } else {
            let kept = keep(s, &job, item, &self.budget, &mut self.memory);
            s.history.push(kept);
        }
        self.metrics.ws_streams.set(self.jobs.len() as i64);
        self.metrics.ws_kept_memory_bytes.set(self.memory as i64);
        self.metrics.ws_kept_spooled_bytes.set(self.jobs.values().map(|s| s.spooled as i64).sum());
    }
}

/// Keeps one item in a job's history: in memory while the hub's budget allows (or it has no
/// spool folder, or the job's spool failed), else its bytes in the job's spool file.
fn keep(s: &mut JobStream, job: &JobId, item: HubItem, budget: &HistoryBudget, memory: &mut usize) -> Kept {
    let HubItem::Tile(tile) = item else { return Kept::Item(item) };
    let n = tile.pcm16.len() + tile.opus_pages.len();
    let spill = match &budget.spool_dir {
        Some(dir) if !s.spool_failed && memory.saturating_add(n) > budget.memory_bytes => Some(dir),
        _ => None,
    };
    if let Some(dir) = spill {
        match spool(s, dir, &tile) {
            Ok(kept) => return kept,
            Err(err) => {
                s.spool_failed = true;
                tracing::error!(job = %job, dir = %dir.display(), %err,
                    "spooling the stream's tiles: its history stays in memory");
            }
        }
    }
    *memory += n;
    s.memory += n;
    Kept::Item(HubItem::Tile(tile))
}

/// Appends a tile's bytes to the job's spool file (opened unnamed at its first tile).
fn spool(s: &mut JobStream, dir: &std::path::Path, tile: &EncodedTile) -> std::io::Result<Kept> {
    use std::os::unix::fs::FileExt;
    let file = match &s.spool {
        Some(f) => f.clone(),
        None => {
            std::fs::create_dir_all(dir)?;
            let f = Arc::new(tempfile::tempfile_in(dir)?);
            s.spool = Some(f.clone());
            f
        }
    };
    let at = s.spooled as u64;
    file.write_all_at(&tile.pcm16, at)?;
    file.write_all_at(&tile.opus_pages, at + tile.pcm16.len() as u64)?;
    s.spooled += tile.pcm16.len() + tile.opus_pages.len();
    let pcm16 = SpooledBytes { file: file.clone(), offset: at, len: tile.pcm16.len() };
    let opus = SpooledBytes { file, offset: at + tile.pcm16.len() as u64, len: tile.opus_pages.len() };
    let bare = EncodedTile { pcm16: bytes::Bytes::new(), opus_pages: bytes::Bytes::new(), ..tile.clone() };
    Ok(Kept::Spooled { tile: bare, pcm16, opus })
}

/// What a listener with `codec` is sent of one kept item: its items, a spooled tile's binary
/// frame left in the file for the listener to read as it sends it.
fn backlog(kept: &Kept, codec: StreamCodec, first_tile: bool) -> Vec<Queued> {
    match kept {
        Kept::Item(h) => items(h, codec, first_tile).into_iter().map(Queued::Item).collect(),
        Kept::Spooled { tile, pcm16, opus } => items(&HubItem::Tile(tile.clone()), codec, first_tile)
            .into_iter()
            .map(|it| match it {
                StreamItem::Binary(_) => {
                    Queued::Spooled(if codec == StreamCodec::Pcm16 { pcm16 } else { opus }.clone())
                }
                text => Queued::Item(text),
            })
            .collect(),
    }
}

impl Handler<Subscribe> for StreamHub {
    type Result = Option<Subscription>;
    fn handle(&mut self, msg: Subscribe, _: &mut Self::Context) -> Self::Result {
        let s = self.jobs.get_mut(&msg.job)?;
        let mut queued: Vec<Queued> = Vec::new();
        let mut seen_tile = false;
        for h in &s.history {
            let tile = !matches!(h, Kept::Item(HubItem::Event(..)));
            queued.extend(backlog(h, msg.codec, tile && !seen_tile));
            seen_tile |= tile;
        }
        let (tx, rx) = mpsc::channel(queued.len() + LISTENER_BACKLOG);
        let bytes: usize = queued.iter().map(Queued::len).sum();
        self.metrics.ws_bytes_total.inc_by(bytes as u64);
        for it in queued {
            let _ = tx.try_send(it);
        }
        let ended = Arc::new(AtomicBool::new(false));
        s.listeners.push(Listener { codec: msg.codec, tx, ended: ended.clone() });
        Some(Subscription::new(rx, ended))
    }
}

/// A raw copy of a job's stream (history, then live, to the terminal event); `None` when
/// the hub holds none for it.
#[derive(Message)]
#[rtype(result = "Option<mpsc::UnboundedReceiver<HubItem>>")]
pub struct Tap(pub JobId);

impl Handler<Tap> for StreamHub {
    type Result = Option<mpsc::UnboundedReceiver<HubItem>>;
    fn handle(&mut self, msg: Tap, _: &mut Self::Context) -> Self::Result {
        let s = self.jobs.get_mut(&msg.0)?;
        let (tx, rx) = mpsc::unbounded_channel();
        for h in &s.history {
            let item = match h {
                Kept::Item(h) => h.clone(),
                Kept::Spooled { tile, pcm16, opus } => match (pcm16.read(), opus.read()) {
                    (Ok(pcm16), Ok(opus_pages)) => HubItem::Tile(EncodedTile { pcm16, opus_pages, ..tile.clone() }),
                    (Err(err), _) | (_, Err(err)) => {
                        tracing::error!(job = %msg.0, %err, "reading a spooled tile back for the tap");
                        return None;
                    }
                },
            };
            let _ = tx.send(item);
        }
        s.taps.push(tx);
        Some(rx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use yued_contract::stream::{PcmTile, TileEncoder};

    fn tile(i: u32) -> PcmTile {
        PcmTile {
            track: 0,
            index: i,
            start_sample: i as u64 * 4,
            sample_rate: 48000,
            channels: 2,
            planar: vec![0.5, 1.0, -0.5, -2.0, 0.0, 0.25, 0.0, 0.0],
        }
    }

    #[actix_rt::test]
    async fn late_joiners_get_history_then_live_and_slow_ones_are_dropped() {
        let metrics = Metrics::new();
        let hub = StreamHub::new(metrics.clone(), HistoryBudget::in_memory()).start();
        let job = JobId::from_u64(1);
        hub.send(Publish::Event(job.clone(), StreamEvent::Queued { position: 0 })).await.unwrap();
        let mut enc = TileEncoder::new(&job);
        hub.send(Publish::Tile(job.clone(), enc.encode(&tile(0)))).await.unwrap();
        let mut rx = hub.send(Subscribe { job: job.clone(), codec: StreamCodec::Pcm16 }).await.unwrap().unwrap();
        let mut got = Vec::new();
        while let Some(it) = rx.try_recv() {
            got.push(it);
        }
        assert_eq!(got.len(), 4, "queued, format, tile header, pcm");
        assert!(matches!(&got[1], StreamItem::Text(t) if t.contains("\"format\"")));
        // interleaved s16: L0 R0 L1 R1 ... (planar L = [0.5, 1.0, -0.5, -2.0], R = [0, .25, 0, 0])
        let StreamItem::Binary(b) = &got[3] else { panic!() };
        let s: Vec<i16> = b.chunks(2).map(|c| i16::from_le_bytes([c[0], c[1]])).collect();
        assert_eq!(s, vec![16384, 0, 32767, 8192, -16384, 0, -32767, 0]);
        // live items arrive; a listener that never reads is dropped once full, one that hung
        // up is let go without counting as dropped
        let slow = hub.send(Subscribe { job: job.clone(), codec: StreamCodec::Pcm16 }).await.unwrap().unwrap();
        drop(hub.send(Subscribe { job: job.clone(), codec: StreamCodec::Pcm16 }).await.unwrap().unwrap());
        for i in 1..=(LISTENER_BACKLOG as u32) {
            hub.send(Publish::Tile(job.clone(), enc.encode(&tile(i)))).await.unwrap();
            while rx.try_recv().is_some() {}
        }
        // A late joiner gets the whole history queued (more than a live lag's worth).
        let late = hub.send(Subscribe { job: job.clone(), codec: StreamCodec::Pcm16 }).await.unwrap().unwrap();
        assert!(late.len() > LISTENER_BACKLOG);
        hub.send(Publish::Event(job.clone(), StreamEvent::Done { tracks: 1, audio_seconds: 1.0 })).await.unwrap();
        // the reading listener got the terminal event, then its channel closed
        let mut last = None;
        while let Some(it) = rx.recv().await {
            last = Some(it);
        }
        assert!(matches!(last, Some(StreamItem::Text(t)) if t.contains("\"done\"")));
        assert_eq!(metrics.ws_dropped_listeners_total.get(), 1, "the listener that never read (only) was dropped");
        assert!(!slow.ended.load(Ordering::Acquire), "a dropped listener is not told of the end");
        assert!(late.ended.load(Ordering::Acquire), "a listener still behind at the end is told the job ended");
        // The ended job's stream is freed: a late listener is told there is none (the
        // daemon then answers from the result), and a stage's late report opens nothing.
        assert!(hub.send(Subscribe { job: job.clone(), codec: StreamCodec::Pcm16 }).await.unwrap().is_none());
        hub.send(Publish::Event(job.clone(), StreamEvent::Cancelled {})).await.unwrap();
        assert!(hub.send(Subscribe { job: job.clone(), codec: StreamCodec::Pcm16 }).await.unwrap().is_none());
        assert_eq!(metrics.ws_streams.get(), 0);
        // A job never queued has no stream either.
        assert!(hub.send(Subscribe { job: JobId::from_u64(99), codec: StreamCodec::Opus }).await.unwrap().is_none());
    }

    fn drain(sub: &mut Subscription) -> Vec<StreamItem> {
        std::iter::from_fn(|| sub.try_recv()).collect()
    }

    /// Past the memory budget, a job's tiles wait in its spool file: a late joiner of either
    /// codec gets the same items, bytes for bytes, as one that heard it all in memory; the
    /// tap reads them back whole; the gauges say where the bytes are, and the job's end frees
    /// them.
    #[actix_rt::test]
    async fn tiles_past_the_memory_budget_wait_in_a_spool_file_and_read_back_the_same() {
        let dir = tempfile::tempdir().unwrap();
        let metrics = Metrics::new();
        // Less than the tiles take (16 bytes of s16 each, the Opus pages, the first with the
        // stream's headers): the later ones spill, whatever the encoder's page sizes.
        let budget = HistoryBudget { memory_bytes: 150, spool_dir: Some(dir.path().join("spool")) };
        let hub = StreamHub::new(metrics.clone(), budget).start();
        let all_in_memory = StreamHub::new(Metrics::new(), HistoryBudget::in_memory()).start();
        let job = JobId::from_u64(7);
        let mut enc = TileEncoder::new(&job);
        let mut published = vec![HubItem::Event(StreamEvent::Queued { position: 0 })];
        for i in 0..6 {
            published.push(HubItem::Tile(enc.encode(&tile(i))));
        }
        published.extend(enc.finish().into_iter().map(HubItem::Tile));
        for h in &published {
            for hub in [&hub, &all_in_memory] {
                hub.send(match h.clone() {
                    HubItem::Event(e) => Publish::Event(job.clone(), e),
                    HubItem::Tile(t) => Publish::Tile(job.clone(), t),
                })
                .await
                .unwrap();
            }
        }
        let kept = metrics.ws_kept_memory_bytes.get();
        let spooled = metrics.ws_kept_spooled_bytes.get();
        assert!(kept <= 150, "memory within the budget: {kept}");
        assert!(spooled > 0, "the rest spooled");
        let total: usize = published
            .iter()
            .map(|h| match h {
                HubItem::Tile(t) => t.pcm16.len() + t.opus_pages.len(),
                HubItem::Event(_) => 0,
            })
            .sum();
        assert_eq!((kept + spooled) as usize, total);
        for codec in [StreamCodec::Pcm16, StreamCodec::Opus] {
            let mut spilled = hub.send(Subscribe { job: job.clone(), codec }).await.unwrap().unwrap();
            let mut whole = all_in_memory.send(Subscribe { job: job.clone(), codec }).await.unwrap().unwrap();
            let (a, b) = (drain(&mut spilled), drain(&mut whole));
            assert!(a.len() > 10);
            assert_eq!(a, b, "{codec:?}: the late joiner hears what it would have heard from memory");
        }
        let mut tap = hub.send(Tap(job.clone())).await.unwrap().unwrap();
        for h in &published {
            match (tap.recv().await.unwrap(), h) {
                (HubItem::Tile(a), HubItem::Tile(b)) => {
                    assert_eq!((a.index, &a.pcm16, &a.opus_pages), (b.index, &b.pcm16, &b.opus_pages))
                }
                (HubItem::Event(a), HubItem::Event(b)) => assert_eq!(a.to_text(), b.to_text()),
                _ => panic!("the tap's items out of order"),
            }
        }
        // A listener still reading when the job ends keeps its spooled frames readable.
        let mut behind = hub.send(Subscribe { job: job.clone(), codec: StreamCodec::Pcm16 }).await.unwrap().unwrap();
        hub.send(Publish::Event(job.clone(), StreamEvent::Done { tracks: 1, audio_seconds: 1.0 })).await.unwrap();
        assert_eq!(metrics.ws_kept_memory_bytes.get(), 0);
        assert_eq!(metrics.ws_kept_spooled_bytes.get(), 0);
        let late = drain(&mut behind);
        assert!(matches!(late.last(), Some(StreamItem::Text(t)) if t.contains("\"done\"")));
        // The spool file was unnamed: nothing is left in its folder.
        assert_eq!(std::fs::read_dir(dir.path().join("spool")).unwrap().count(), 0);
    }
}
