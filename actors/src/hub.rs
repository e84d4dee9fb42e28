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
//! The hub only distributes: a tile arrives already as s16 bytes and Ogg Opus pages, made
//! by a [`TileEncoder`](yued_contract::stream::TileEncoder) on the compute thread that decoded it. Encoding a tile of
//! Opus
//! takes milliseconds; done here it would hold up every other message of the actor thread
//! the hub shares with the scheduler, and with it every `/job` answer.
use actix::prelude::*;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tokio::sync::mpsc;
use yued_contract::metrics::Metrics;
use yued_contract::stream::{items, EncodedTile, HubItem, StreamItem, Subscription, LISTENER_BACKLOG};
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
    tx: mpsc::Sender<StreamItem>,
    ended: Arc<AtomicBool>,
}

#[derive(Default)]
struct JobStream {
    /// Everything published, in order: events and tiles.
    history: Vec<HubItem>,
    listeners: Vec<Listener>,
    /// Raw copies of every item (a cluster worker forwards them to the cluster's tile bus);
    /// unbounded, since what reads them forwards them, and one song's tiles at most.
    taps: Vec<mpsc::UnboundedSender<HubItem>>,
}

pub struct StreamHub {
    jobs: HashMap<JobId, JobStream>,
    metrics: Metrics,
}

impl StreamHub {
    pub fn new(metrics: Metrics) -> Self {
        StreamHub { jobs: HashMap::new(), metrics }
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
        let had_tile = s.history.iter().any(|h| matches!(h, HubItem::Tile(..)));
        let mut dropped = 0;
        s.listeners.retain(|l| {
            for it in items(&item, l.codec, first_tile && !had_tile) {
                let n = match &it {
                    StreamItem::Text(t) => t.len(),
                    StreamItem::Binary(b) => b.len(),
                };
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
            // Dropping the senders ends the sockets after the terminal event.
            for l in &s.listeners {
                l.ended.store(true, Ordering::Release);
            }
            self.jobs.remove(&job);
        } else {
            s.history.push(item);
        }
        self.metrics.ws_streams.set(self.jobs.len() as i64);
    }
}

impl Handler<Subscribe> for StreamHub {
    type Result = Option<Subscription>;
    fn handle(&mut self, msg: Subscribe, _: &mut Self::Context) -> Self::Result {
        let s = self.jobs.get_mut(&msg.job)?;
        let mut backlog: Vec<StreamItem> = Vec::new();
        let mut seen_tile = false;
        for h in &s.history {
            let first = matches!(h, HubItem::Tile(..)) && !seen_tile;
            if matches!(h, HubItem::Tile(..)) {
                seen_tile = true;
            }
            backlog.extend(items(h, msg.codec, first));
        }
        let (tx, rx) = mpsc::channel(backlog.len() + LISTENER_BACKLOG);
        let bytes: usize = backlog
            .iter()
            .map(|it| match it {
                StreamItem::Text(t) => t.len(),
                StreamItem::Binary(b) => b.len(),
            })
            .sum();
        self.metrics.ws_bytes_total.inc_by(bytes as u64);
        for it in backlog {
            let _ = tx.try_send(it);
        }
        let ended = Arc::new(AtomicBool::new(false));
        s.listeners.push(Listener { codec: msg.codec, tx, ended: ended.clone() });
        Some(Subscription { rx, ended })
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
            let _ = tx.send(h.clone());
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
        let hub = StreamHub::new(metrics.clone()).start();
        let job = JobId::from_u64(1);
        hub.send(Publish::Event(job.clone(), StreamEvent::Queued { position: 0 })).await.unwrap();
        let mut enc = TileEncoder::new(&job);
        hub.send(Publish::Tile(job.clone(), enc.encode(&tile(0)))).await.unwrap();
        let mut rx = hub.send(Subscribe { job: job.clone(), codec: StreamCodec::Pcm16 }).await.unwrap().unwrap().rx;
        let mut got = Vec::new();
        while let Ok(it) = rx.try_recv() {
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
            while rx.try_recv().is_ok() {}
        }
        // A late joiner gets the whole history queued (more than a live lag's worth).
        let late = hub.send(Subscribe { job: job.clone(), codec: StreamCodec::Pcm16 }).await.unwrap().unwrap();
        assert!(late.rx.len() > LISTENER_BACKLOG);
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
}
