//! The tile bus on JetStream: a job's stream is the subject `yued.tiles.<id>` of the
//! `YUED_TILES` stream. Each message is one hub item: an event (its JSON text) or a tile
//! (its s16 bytes then its Ogg Opus pages, the layout in a header; a track's end is a tile
//! of no samples). Tiles carry the message id `<job>:t<track>.<index>`, so the same tile sent
//! again by the worker that took over a job is dropped by the server as a duplicate.
//!
//! A listener is an ordered consumer of its job's subject from the first message: it hears
//! the stream from the start (a late joiner too) and then live, and a slow one lags only in
//! its own consumer, since the forwarding task waits for its listener.
use crate::{retry, RETRY_WITHIN};
use async_nats::jetstream::{self, consumer};
use async_nats::HeaderMap;
use bytes::Bytes;
use futures_util::StreamExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use yued_contract::stream::{items, EncodedTile, HubItem, StreamItem, Subscription, LISTENER_BACKLOG};
use yued_protocol::{JobId, StreamCodec, StreamEvent};

const KIND: &str = "yued-kind";
const TILE: &str = "yued-tile";
const PART: &str = "yued-part";
/// Unix microseconds when the worker took the item from its pipeline.
const SENT: &str = "yued-sent-us";
/// Tiles are cut into messages of at most this many bytes (a server's default
/// `max_payload` is 1 MiB; a YuE2 tile of s16 is about 1.2 MB).
pub const PART_BYTES: usize = 256 * 1024;

pub fn subject(id: &JobId) -> String {
    format!("yued.tiles.{id}")
}

/// A hub item as a message: its headers and payload.
pub fn encode(item: &HubItem) -> (HeaderMap, Bytes) {
    let mut h = HeaderMap::new();
    match item {
        HubItem::Event(e) => {
            h.insert(KIND, "event");
            (h, Bytes::from(e.to_text()))
        }
        HubItem::Tile(t) => {
            h.insert(KIND, "tile");
            h.insert(
                TILE,
                format!(
                    "{},{},{},{},{},{},{}",
                    t.track,
                    t.index,
                    t.start_sample,
                    t.sample_rate,
                    t.channels,
                    t.samples,
                    t.pcm16.len()
                )
                .as_str(),
            );
            let mut b = Vec::with_capacity(t.pcm16.len() + t.opus_pages.len());
            b.extend_from_slice(&t.pcm16);
            b.extend_from_slice(&t.opus_pages);
            (h, Bytes::from(b))
        }
    }
}

/// A message back into a hub item; `None` for one this release cannot read.
pub fn decode(headers: Option<&HeaderMap>, payload: &Bytes) -> Option<HubItem> {
    let h = headers?;
    match h.get(KIND)?.as_str() {
        "event" => StreamEvent::from_text(std::str::from_utf8(payload).ok()?).ok().map(HubItem::Event),
        "tile" => {
            let f: Vec<u64> = h.get(TILE)?.as_str().split(',').map(|v| v.parse().ok()).collect::<Option<_>>()?;
            let [track, index, start_sample, sample_rate, channels, samples, pcm_len] = f[..] else { return None };
            let pcm_len = pcm_len as usize;
            if pcm_len > payload.len() {
                return None;
            }
            Some(HubItem::Tile(EncodedTile {
                track: track as u32,
                index: index as u32,
                start_sample,
                sample_rate: sample_rate as u32,
                channels: channels as usize,
                samples,
                pcm16: payload.slice(..pcm_len),
                opus_pages: payload.slice(pcm_len..),
            }))
        }
        _ => None,
    }
}

/// The message id that makes a re-send of the item a duplicate: tiles and the stream's
/// end by their place in the song, the terminal event as the job's last word; other events
/// (progress, score) by `fallback`, unique to one publish.
pub fn message_id(id: &JobId, item: &HubItem, fallback: &str) -> String {
    match item {
        HubItem::Tile(t) => format!("{id}:t{}.{}", t.track, t.index),
        HubItem::Event(e) if e.is_terminal() => format!("{id}:final"),
        HubItem::Event(StreamEvent::Queued { .. }) => format!("{id}:queued"),
        HubItem::Event(_) => format!("{id}:{fallback}"),
    }
}

/// Publishes one item of a job's stream (a large tile as several parts, each its own
/// message id) and waits for the server to store it, retrying through a server restart.
pub async fn publish(js: &jetstream::Context, id: &JobId, item: &HubItem, msg_id: &str) -> Result<(), String> {
    let (mut headers, payload) = encode(item);
    headers.insert(SENT, now_us().to_string().as_str());
    let n = payload.len().div_ceil(PART_BYTES).max(1);
    let messages: Vec<(HeaderMap, Bytes)> = (0..n)
        .map(|i| {
            let mut headers = headers.clone();
            if n > 1 {
                headers.insert(PART, format!("{i}/{n}").as_str());
                headers.insert("Nats-Msg-Id", format!("{msg_id}.p{i}").as_str());
            } else {
                headers.insert("Nats-Msg-Id", msg_id);
            }
            (headers, payload.slice(i * PART_BYTES..((i + 1) * PART_BYTES).min(payload.len())))
        })
        .collect();
    // Every part sent before any acknowledgement is awaited (one round trip per tile, not
    // one per part) ...
    let mut acks = Vec::with_capacity(n);
    for (headers, part) in &messages {
        acks.push(js.publish_with_headers(subject(id), headers.clone(), part.clone()).await.ok());
    }
    let mut stored = true;
    for ack in acks {
        stored &= match ack {
            Some(a) => a.await.is_ok(),
            None => false,
        };
    }
    if stored {
        return Ok(());
    }
    // ... and after a failure (a server restarting) all of them again, one by one: those
    // already stored are duplicates the server drops.
    for (headers, part) in &messages {
        retry("publishing a tile", RETRY_WITHIN, || {
            let (headers, part) = (headers.clone(), part.clone());
            async move {
                js.publish_with_headers(subject(id), headers, part)
                    .await?
                    .await
                    .map(|_| ())
                    .map_err(|e| async_nats::Error::from(e.to_string()))
            }
        })
        .await
        .map_err(|e| format!("job {id}: the cluster's tile stream: {e}"))?;
    }
    Ok(())
}

/// Puts the parts of cut tiles back together. The parts of one tile may arrive in any
/// order (a part re-sent after a failed publish lands after the ones stored before it), and
/// other events may come between them (a worker that took the job over re-sends its
/// progress events while the server drops the tile parts it already has); a tile's parts
/// all come before the next tile's.
#[derive(Default)]
struct Parts {
    tile: String,
    got: Vec<Option<Bytes>>,
}

impl Parts {
    /// The whole item once its last part is in; items that are not parts pass through.
    fn take(&mut self, headers: Option<&HeaderMap>, payload: &Bytes) -> Option<(HeaderMap, Bytes)> {
        let h = headers?;
        let Some(part) = h.get(PART) else { return Some((h.clone(), payload.clone())) };
        let (i, n) = part.as_str().split_once('/')?;
        let (i, n): (usize, usize) = (i.parse().ok()?, n.parse().ok()?);
        let tile = h.get(TILE).map(|v| v.to_string()).unwrap_or_default();
        if tile != self.tile || self.got.len() != n {
            self.tile = tile;
            self.got = vec![None; n];
        }
        if i >= n {
            return None;
        }
        self.got[i] = Some(payload.clone());
        if self.got.iter().any(Option::is_none) {
            return None;
        }
        let whole: Vec<u8> = self.got.drain(..).flatten().flat_map(|b| b.to_vec()).collect();
        self.tile.clear();
        let mut h = h.clone();
        h.insert(PART, "");
        Some((h, Bytes::from(whole)))
    }
}

fn now_us() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_micros() as u64).unwrap_or(0)
}

/// A listener on a job's stream, from its first message: the same items in the same order
/// as the single node's hub gives (a format event before the first tile), to the terminal
/// event.
pub async fn listen(
    js: &jetstream::Context,
    id: &JobId,
    codec: StreamCodec,
    latency: prometheus::Histogram,
) -> Result<Subscription, String> {
    let stream = retry("opening the tile stream", RETRY_WITHIN, || js.get_stream(crate::TILES_STREAM))
        .await
        .map_err(|e| format!("the cluster's tile stream: {e}"))?;
    let consumer = stream
        .create_consumer(consumer::pull::OrderedConfig {
            filter_subject: subject(id),
            deliver_policy: consumer::DeliverPolicy::All,
            ..Default::default()
        })
        .await
        .map_err(|e| format!("a listener on job {id}: {e}"))?;
    let mut messages = consumer.messages().await.map_err(|e| format!("a listener on job {id}: {e}"))?;
    let (tx, rx) = tokio::sync::mpsc::channel(LISTENER_BACKLOG);
    let ended = Arc::new(AtomicBool::new(false));
    let end = ended.clone();
    let job = id.clone();
    tokio::spawn(async move {
        let mut seen_tile = false;
        let mut parts = Parts::default();
        loop {
            // A listener that has gone (its socket closed) ends its consumer now, not at the
            // job's next message, which a queued or stalled job may never send.
            let next = tokio::select! {
                m = messages.next() => m,
                _ = tx.closed() => return,
            };
            let Some(m) = next else { break };
            let m = match m {
                Ok(m) => m,
                Err(e) => {
                    tracing::debug!(job = %job, error = %e, "tile listener: a consumer error (it resumes where it \
                        was)");
                    continue;
                }
            };
            let Some((headers, payload)) = parts.take(m.headers.as_ref(), &m.payload) else { continue };
            let Some(item) = decode(Some(&headers), &payload) else { continue };
            // Live tiles only: one replayed for a late joiner waited in the stream on purpose.
            if let (HubItem::Tile(_), Some(sent)) =
                (&item, headers.get(SENT).and_then(|v| v.as_str().parse::<u64>().ok()))
            {
                let age = now_us().saturating_sub(sent) as f64 / 1e6;
                if m.info().map(|i| i.pending == 0).unwrap_or(false) {
                    latency.observe(age);
                }
            }
            let first = matches!(item, HubItem::Tile(..)) && !seen_tile;
            seen_tile |= matches!(item, HubItem::Tile(..));
            let terminal = matches!(&item, HubItem::Event(e) if e.is_terminal());
            for it in items(&item, codec, first) {
                // Waiting here is the back-pressure: a slow listener lags in its own consumer.
                if tx.send(it.into()).await.is_err() {
                    return;
                }
            }
            if terminal {
                end.store(true, Ordering::Release);
                return;
            }
        }
    });
    Ok(Subscription::new(rx, ended))
}

/// Whether an item is what the listener's socket shows as a terminal event.
pub fn is_terminal(item: &StreamItem) -> bool {
    matches!(item, StreamItem::Text(t) if StreamEvent::from_text(t).is_ok_and(|e| e.is_terminal()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tile(pcm: usize, opus: usize) -> HubItem {
        HubItem::Tile(EncodedTile {
            track: 1,
            index: 7,
            start_sample: 1234,
            sample_rate: 48000,
            channels: 2,
            samples: (pcm / 4) as u64,
            pcm16: Bytes::from((0..pcm).map(|i| i as u8).collect::<Vec<_>>()),
            opus_pages: Bytes::from(vec![9u8; opus]),
        })
    }

    /// What `publish` sends for an item: each message's headers and payload.
    fn messages(item: &HubItem) -> Vec<(HeaderMap, Bytes)> {
        let (headers, payload) = encode(item);
        let n = payload.len().div_ceil(PART_BYTES).max(1);
        (0..n)
            .map(|i| {
                let mut h = headers.clone();
                if n > 1 {
                    h.insert(PART, format!("{i}/{n}").as_str());
                }
                (h, payload.slice(i * PART_BYTES..((i + 1) * PART_BYTES).min(payload.len())))
            })
            .collect()
    }

    #[test]
    fn a_tile_cut_in_parts_comes_back_whole_across_events_between_them() {
        let item = tile(3 * PART_BYTES / 2 * 2 + 10, 300);
        let msgs = messages(&item);
        assert_eq!(msgs.len(), 4);
        let mut parts = Parts::default();
        let mut out = Vec::new();
        let event = encode(&HubItem::Event(StreamEvent::Stage {
            stage: yued_protocol::Stage::Decode,
            progress: 0.5,
            done: 1,
            total: 2,
        }));
        for (i, (h, p)) in msgs.iter().enumerate() {
            if i == 2 {
                // A progress event re-sent by a worker that took the job over lands between parts.
                out.extend(parts.take(Some(&event.0), &event.1).and_then(|(h, p)| decode(Some(&h), &p)));
            }
            out.extend(parts.take(Some(h), p).and_then(|(h, p)| decode(Some(&h), &p)));
        }
        assert_eq!(out.len(), 2, "{out:?}");
        assert!(matches!(&out[0], HubItem::Event(StreamEvent::Stage { .. })));
        let (HubItem::Tile(a), HubItem::Tile(b)) = (&out[1], &item) else { panic!("{out:?}") };
        assert_eq!(
            (a.track, a.index, a.start_sample, a.sample_rate, a.channels, a.samples),
            (b.track, b.index, b.start_sample, b.sample_rate, b.channels, b.samples)
        );
        assert_eq!((&a.pcm16, &a.opus_pages), (&b.pcm16, &b.opus_pages));
    }

    #[test]
    fn a_tile_missing_a_part_is_not_delivered_and_small_items_pass_through() {
        let msgs = messages(&tile(2 * PART_BYTES, 0));
        assert_eq!(msgs.len(), 2);
        let mut parts = Parts::default();
        assert!(parts.take(Some(&msgs[1].0), &msgs[1].1).is_none(), "a second part without its first");
        // The first, re-sent after it: the tile is whole.
        let (h, p) = parts.take(Some(&msgs[0].0), &msgs[0].1).expect("whole in any order");
        let HubItem::Tile(t) = decode(Some(&h), &p).unwrap() else { panic!() };
        assert_eq!(t.pcm16.len(), 2 * PART_BYTES);
        assert_eq!(t.pcm16[PART_BYTES - 1], ((PART_BYTES - 1) % 256) as u8);
        for item in [
            tile(100, 20),
            // A track's end: no samples, its Opus stream's last pages.
            tile(0, 4),
            HubItem::Event(StreamEvent::Done { tracks: 1, audio_seconds: 2.0 }),
        ] {
            let m = messages(&item);
            assert_eq!(m.len(), 1);
            let (h, p) = parts.take(Some(&m[0].0), &m[0].1).unwrap();
            assert_eq!(format!("{:?}", decode(Some(&h), &p).unwrap()), format!("{item:?}"));
        }
    }

    #[test]
    fn message_ids_make_resent_tiles_and_the_end_duplicates() {
        let id = JobId::from_u64(42);
        assert_eq!(message_id(&id, &tile(4, 0), "a2.9"), "000000000000002a:t1.7");
        assert_eq!(message_id(&id, &HubItem::Event(StreamEvent::Cancelled {}), "a2.9"), "000000000000002a:final");
        assert_eq!(
            message_id(&id, &HubItem::Event(StreamEvent::Score { abc: String::new() }), "a2.9"),
            "000000000000002a:a2.9"
        );
        assert_eq!(crate::client_token("key:abc"), crate::client_token("key:abc"));
        assert_ne!(crate::client_token("key:abc"), crate::client_token("key:abd"));
        assert_eq!(crate::key_safe("host.name:1/2"), "host_name_1_2");
    }
}
