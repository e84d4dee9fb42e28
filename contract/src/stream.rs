//! A job's live stream as it crosses the job system: the items published for it
//! ([`HubItem`]: events, encoded tiles, each track's end), what one listener receives of them
//! for its codec ([`StreamItem`], by [`items`]) and its end of the stream
//! ([`Subscription`]). A tile is encoded once, by its job's [`TileEncoder`] on the thread
//! that decoded it; the distribution (the single node's hub, the cluster's tile bus) only
//! copies bytes.
use bytes::Bytes;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use tokio::sync::mpsc;
use yued_audio::ogg_opus::OggOpusStream;
use yued_protocol::{JobId, StreamCodec, StreamEvent};

/// Live items a listener may lag behind before it is dropped.
pub const LISTENER_BACKLOG: usize = 256;

/// What a listener receives.
#[derive(Clone, Debug, PartialEq)]
pub enum StreamItem {
    Text(String),
    Binary(Bytes),
}

/// One decoded tile, planar stereo f32.
#[derive(Clone, Debug)]
pub struct PcmTile {
    pub track: u32,
    pub index: u32,
    pub start_sample: u64,
    pub sample_rate: u32,
    pub channels: usize,
    pub planar: Vec<f32>,
}

/// Interleaved little-endian s16 of a planar tile.
pub fn pcm16_bytes(t: &PcmTile) -> Bytes {
    let n = t.planar.len() / t.channels.max(1);
    let mut out = Vec::with_capacity(n * t.channels * 2);
    for i in 0..n {
        for c in 0..t.channels {
            let v = (t.planar[c * n + i].clamp(-1.0, 1.0) * 32767.0).round() as i16;
            out.extend_from_slice(&v.to_le_bytes());
        }
    }
    Bytes::from(out)
}

/// A tile as listeners receive it.
#[derive(Clone, Debug)]
pub struct EncodedTile {
    pub track: u32,
    pub index: u32,
    pub start_sample: u64,
    pub sample_rate: u32,
    pub channels: usize,
    /// Sample frames (per channel); 0 for a track's end, which carries only the last pages
    /// of its Opus stream.
    pub samples: u64,
    /// Interleaved s16 little-endian.
    pub pcm16: Bytes,
    /// The Ogg pages of its track's Opus stream this tile completed (may be empty).
    pub opus_pages: Bytes,
}

/// One track's Opus stream.
struct TrackOpus {
    opus: Option<OggOpusStream>,
    /// For tiles not at 48 kHz (MiniMax Music 3's 44.1 kHz): one resampler for the whole
    /// track, so tile boundaries leave no seam.
    resampler: Option<yued_audio::resample::StreamResampler>,
    /// The sample after the track's last tile, and its format.
    end: u64,
    sample_rate: u32,
    channels: usize,
}

/// A job's stream encoder, owned by the producer of its tiles: every Opus listener
/// receives the pages of this one encoder, so a late joiner's concatenation is the same
/// valid file as an early one's. Each track is its own Ogg Opus stream (its own serial):
/// the binary frames of one track concatenate to that track's file.
pub struct TileEncoder {
    serial: u32,
    tracks: std::collections::BTreeMap<u32, TrackOpus>,
    /// The index the next tile of any track takes (a track's end takes one too).
    next_index: u32,
    job: JobId,
}

/// Opus's own rate.
pub const OPUS_RATE: u32 = 48_000;

impl TileEncoder {
    pub fn new(job: &JobId) -> Self {
        TileEncoder {
            serial: (job.to_u64() & 0xffff_ffff) as u32,
            tracks: Default::default(),
            next_index: 0,
            job: job.clone(),
        }
    }

    pub fn encode(&mut self, t: &PcmTile) -> EncodedTile {
        let job = &self.job;
        let serial = self.serial.wrapping_add(t.track);
        let track = self.tracks.entry(t.track).or_insert_with(|| {
            let opus = OggOpusStream::new(t.channels, STREAM_OPUS_BITRATE, serial)
                .map(|o| o.with_input_rate(t.sample_rate))
                .inspect_err(|err| tracing::error!(job = %job, %err, "opening the Opus stream"))
                .ok();
            let resampler = (t.sample_rate != OPUS_RATE)
                .then(|| yued_audio::resample::StreamResampler::new(t.sample_rate, OPUS_RATE, t.channels))
                .and_then(|r| r.inspect_err(|err| tracing::error!(job = %job, %err, "opening the resampler")).ok());
            TrackOpus { opus, resampler, end: 0, sample_rate: t.sample_rate, channels: t.channels }
        });
        let at48 = match track.resampler.as_mut().map(|r| r.push(&t.planar)) {
            Some(Ok(p)) => std::borrow::Cow::Owned(p),
            Some(Err(err)) => {
                tracing::error!(job = %job, %err, "resampling a tile");
                std::borrow::Cow::Owned(Vec::new())
            }
            None => std::borrow::Cow::Borrowed(&t.planar),
        };
        let opus_pages = match track.opus.as_mut().map(|o| o.push(&at48)) {
            Some(Ok(p)) => Bytes::from(p),
            Some(Err(err)) => {
                tracing::error!(job = %job, %err, "Opus encoding");
                Bytes::new()
            }
            None => Bytes::new(),
        };
        let samples = (t.planar.len() / t.channels.max(1)) as u64;
        track.end = t.start_sample + samples;
        self.next_index = self.next_index.max(t.index + 1);
        EncodedTile {
            track: t.track,
            index: t.index,
            start_sample: t.start_sample,
            sample_rate: t.sample_rate,
            channels: t.channels,
            samples,
            pcm16: pcm16_bytes(t),
            opus_pages,
        }
    }

    /// Closes every track's Opus stream: one tile per track, of no samples, with the
    /// stream's last pages, to publish after the job's last tile.
    pub fn finish(&mut self) -> Vec<EncodedTile> {
        let job = &self.job;
        let mut ends = Vec::new();
        for (&track, t) in std::mem::take(&mut self.tracks).iter_mut() {
            let mut tail = Vec::new();
            if let (Some(r), Some(o)) = (t.resampler.take(), t.opus.as_mut()) {
                match r.finish().and_then(|rest| o.push(&rest)) {
                    Ok(p) => tail = p,
                    Err(err) => tracing::error!(job = %job, %err, "the stream's last samples"),
                }
            }
            let pages = match t.opus.take().map(|o| o.finish()) {
                Some(Ok(p)) => [tail, p].concat(),
                Some(Err(err)) => {
                    tracing::error!(job = %job, %err, "closing the Opus stream");
                    Vec::new()
                }
                None => Vec::new(),
            };
            ends.push(EncodedTile {
                track,
                index: self.next_index,
                start_sample: t.end,
                sample_rate: t.sample_rate,
                channels: t.channels,
                samples: 0,
                pcm16: Bytes::new(),
                opus_pages: Bytes::from(pages),
            });
            self.next_index += 1;
        }
        ends
    }
}

/// Bytes kept in a file rather than in memory: a tile the single node's hub keeps for late
/// joiners once its memory budget is spent. The file is unnamed (it vanishes with its last
/// handle), so neither a crash nor a listener that lingers leaves anything behind.
#[derive(Clone, Debug)]
pub struct SpooledBytes {
    pub file: Arc<std::fs::File>,
    pub offset: u64,
    pub len: usize,
}

impl SpooledBytes {
    pub fn read(&self) -> std::io::Result<Bytes> {
        use std::os::unix::fs::FileExt;
        let mut b = vec![0u8; self.len];
        self.file.read_exact_at(&mut b, self.offset)?;
        Ok(Bytes::from(b))
    }
}

/// What waits in a listener's queue: an item, or a binary frame still in its file.
#[derive(Clone, Debug)]
pub enum Queued {
    Item(StreamItem),
    Spooled(SpooledBytes),
}

impl From<StreamItem> for Queued {
    fn from(i: StreamItem) -> Self {
        Queued::Item(i)
    }
}

impl Queued {
    /// Bytes this item puts on the wire.
    pub fn len(&self) -> usize {
        match self {
            Queued::Item(StreamItem::Text(t)) => t.len(),
            Queued::Item(StreamItem::Binary(b)) => b.len(),
            Queued::Spooled(s) => s.len,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A listener's end of a job's stream.
pub struct Subscription {
    rx: mpsc::Receiver<Queued>,
    /// A spooled frame could not be read back: nothing more is returned.
    cut: bool,
    /// Set when the job has ended: the hub has freed its history, so what the listener has
    /// not read yet is held for it alone. The reader gives a listener that is still behind
    /// a short grace to drain, then drops it (and with it that memory).
    pub ended: Arc<AtomicBool>,
}

impl Subscription {
    pub fn new(rx: mpsc::Receiver<Queued>, ended: Arc<AtomicBool>) -> Self {
        Subscription { rx, cut: false, ended }
    }

    /// The next item; `None` once the stream has ended (or a spooled frame could not be
    /// read back: the stream is cut there, as a broken one is). Cancel safe: once an item
    /// is taken from the queue it is returned (a spooled frame is read without yielding),
    /// so a `select!` that drops this future loses nothing.
    pub async fn recv(&mut self) -> Option<StreamItem> {
        if self.cut {
            return None;
        }
        let q = self.rx.recv().await?;
        self.resolve(q)
    }

    /// The next item if one waits (see `recv`).
    pub fn try_recv(&mut self) -> Option<StreamItem> {
        if self.cut {
            return None;
        }
        let q = self.rx.try_recv().ok()?;
        self.resolve(q)
    }

    fn resolve(&mut self, q: Queued) -> Option<StreamItem> {
        match q {
            Queued::Item(i) => Some(i),
            Queued::Spooled(s) => match s.read() {
                Ok(b) => Some(StreamItem::Binary(b)),
                Err(err) => {
                    tracing::error!(%err, "reading a spooled tile back: the stream is cut");
                    self.cut = true;
                    None
                }
            },
        }
    }

    /// Whether the stream was cut by a spooled frame that could not be read back (a `None`
    /// from `recv` is then no slow listener's drop).
    pub fn is_cut(&self) -> bool {
        self.cut
    }

    /// Items waiting.
    pub fn len(&self) -> usize {
        self.rx.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rx.is_empty()
    }
}

/// One published item of a job's stream, before it is shaped for a listener's codec.
#[derive(Clone, Debug)]
pub enum HubItem {
    Event(StreamEvent),
    Tile(EncodedTile),
}

/// Opus bitrate of the streams.
pub const STREAM_OPUS_BITRATE: i32 = 128_000;

/// What a listener with `codec` receives for one item (`first_tile`: the job's first
/// tile, which a format event precedes). Every `tile` event is followed by exactly one
/// binary frame: its s16 samples, or the Ogg pages of its track's Opus stream it
/// completed (possibly none: an empty frame). A track's end (a tile of no samples) only
/// carries its Opus stream's last pages: a PCM listener is not sent it.
pub fn items(item: &HubItem, codec: StreamCodec, first_tile: bool) -> Vec<StreamItem> {
    match item {
        HubItem::Event(e) => vec![StreamItem::Text(e.to_text())],
        HubItem::Tile(t) if t.samples == 0 && codec == StreamCodec::Pcm16 => vec![],
        HubItem::Tile(t) => {
            let mut v = Vec::new();
            if first_tile {
                // Opus always decodes at 48 kHz (the encoder resamples other rates).
                let sample_rate = if codec == StreamCodec::Opus { OPUS_RATE } else { t.sample_rate };
                v.push(StreamItem::Text(
                    StreamEvent::Format { codec, sample_rate, channels: t.channels as u16 }.to_text(),
                ));
            }
            // An Opus stream counts in its own 48 kHz samples (the rate its format event names).
            let at = |n: u64| match codec {
                StreamCodec::Opus if t.sample_rate != OPUS_RATE && t.sample_rate > 0 => {
                    (n as u128 * OPUS_RATE as u128 / t.sample_rate as u128) as u64
                }
                _ => n,
            };
            let (start_sample, end) = (at(t.start_sample), at(t.start_sample + t.samples));
            v.push(StreamItem::Text(
                StreamEvent::Tile { track: t.track, index: t.index, start_sample, samples: end - start_sample }
                    .to_text(),
            ));
            v.push(StreamItem::Binary(match codec {
                StreamCodec::Pcm16 => t.pcm16.clone(),
                StreamCodec::Opus => t.opus_pages.clone(),
            }));
            v
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 44.1 kHz tile (MiniMax Music 3's) counts in 48 kHz samples on an Opus stream, whose
    /// format event says 48000, and in its own on a PCM one; consecutive tiles still join.
    #[test]
    fn opus_tile_events_count_the_rate_their_format_names() {
        let tile = |start: u64, samples: u64| {
            HubItem::Tile(EncodedTile {
                track: 0,
                index: 0,
                start_sample: start,
                sample_rate: 44_100,
                channels: 2,
                samples,
                pcm16: Bytes::new(),
                opus_pages: Bytes::new(),
            })
        };
        let event = |item: &HubItem, codec| -> (u64, u64) {
            let texts: Vec<StreamEvent> = items(item, codec, false)
                .into_iter()
                .filter_map(|i| match i {
                    StreamItem::Text(t) => StreamEvent::from_text(&t).ok(),
                    StreamItem::Binary(_) => None,
                })
                .collect();
            match texts.as_slice() {
                [StreamEvent::Tile { start_sample, samples, .. }] => (*start_sample, *samples),
                other => panic!("{other:?}"),
            }
        };
        assert_eq!(event(&tile(44_100, 44_100), StreamCodec::Pcm16), (44_100, 44_100));
        assert_eq!(event(&tile(44_100, 44_100), StreamCodec::Opus), (48_000, 48_000));
        let (a, b) = (event(&tile(0, 1000), StreamCodec::Opus), event(&tile(1000, 1000), StreamCodec::Opus));
        assert_eq!(a.0 + a.1, b.0, "consecutive tiles join");
    }
}
