//! Messages of the per-job WebSocket stream.
//!
//! The server sends [`StreamEvent`]s as text frames; the audio itself travels in binary
//! frames, exactly one after each `tile` event, which announces it (an Opus frame may be
//! empty; a track's end is a `tile` of 0 samples with its Ogg stream's last pages). The
//! client may send a [`StreamCommand`] as a text frame.

use serde::{Deserialize, Serialize};

use crate::job::Stage;

/// Encoding of the binary audio frames of a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StreamCodec {
    /// Ogg Opus pages, for listeners on a budget: one Ogg stream per track.
    Opus,
    /// Interleaved little-endian signed 16-bit PCM: the decoded tiles, attenuated by the
    /// loudest peak heard so far (the result file is normalised over the whole song).
    Pcm16,
}

/// A server to client text event, tagged by its `event` field.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "lowercase")]
pub enum StreamEvent {
    /// The job waits; `position` jobs are ahead of it.
    Queued {
        position: u32,
    },
    /// Progress inside a stage: `done` of `total` units (tokens for plan and semantic,
    /// ODE steps for synth, tiles for decode), `progress` being their ratio in `[0, 1]`.
    Stage {
        stage: Stage,
        progress: f32,
        done: u64,
        total: u64,
    },
    /// The score the plan stage wrote (or the one the request supplied).
    Score {
        abc: String,
    },
    /// The semantic stream is complete: `frames` codes at 25 Hz fix the song length.
    Codes {
        frames: u32,
    },
    /// Sent once before the first tile: how to read the binary frames.
    Format {
        codec: StreamCodec,
        sample_rate: u32,
        channels: u16,
    },
    /// Announces the binary frame that follows: decoded tile `index`, starting at
    /// `start_sample` (per channel, from the song start) and `samples` long per channel, both
    /// counted at the `format` event's `sample_rate` (an Opus stream's 48 kHz).
    Tile {
        /// Track of the job (song-major: song * synth_batch_size + variation).
        #[serde(default)]
        track: u32,
        index: u32,
        start_sample: u64,
        samples: u64,
    },
    /// Rendering finished; the full result is at `GET /job?id=N&result=1`.
    Done {
        tracks: u32,
        audio_seconds: f64,
    },
    Failed {
        error: String,
    },
    Cancelled {},
}

impl StreamEvent {
    /// The text frame of this event.
    pub fn to_text(&self) -> String {
        serde_json::to_string(self).expect("stream events always serialize")
    }

    pub fn from_text(text: &str) -> Result<Self, serde_json::Error> {
        serde_json::from_str(text)
    }

    /// The last event of a stream: the server closes the socket after it.
    pub fn is_terminal(&self) -> bool {
        matches!(self, StreamEvent::Done { .. } | StreamEvent::Failed { .. } | StreamEvent::Cancelled {})
    }
}

/// A client to server text command, tagged by its `cmd` field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "cmd", rename_all = "lowercase")]
pub enum StreamCommand {
    /// Cancel the job being streamed, like `POST /job?id=N&cancel=1`.
    Cancel,
}

impl StreamCommand {
    pub fn to_text(&self) -> String {
        serde_json::to_string(self).expect("stream commands always serialize")
    }

    pub fn from_text(text: &str) -> Result<Self, serde_json::Error> {
        serde_json::from_str(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_serialize_exactly() {
        let cases = [
            (StreamEvent::Queued { position: 2 }, r#"{"event":"queued","position":2}"#),
            (
                StreamEvent::Stage { stage: Stage::Semantic, progress: 0.25, done: 250, total: 1000 },
                r#"{"event":"stage","stage":"semantic","progress":0.25,"done":250,"total":1000}"#,
            ),
            (StreamEvent::Score { abc: "X:1\nK:C".into() }, r#"{"event":"score","abc":"X:1\nK:C"}"#),
            (StreamEvent::Codes { frames: 1620 }, r#"{"event":"codes","frames":1620}"#),
            (
                StreamEvent::Format { codec: StreamCodec::Opus, sample_rate: 48000, channels: 2 },
                r#"{"event":"format","codec":"opus","sample_rate":48000,"channels":2}"#,
            ),
            (
                StreamEvent::Format { codec: StreamCodec::Pcm16, sample_rate: 48000, channels: 2 },
                r#"{"event":"format","codec":"pcm16","sample_rate":48000,"channels":2}"#,
            ),
            (
                StreamEvent::Tile { track: 1, index: 1, start_sample: 983040, samples: 983040 },
                r#"{"event":"tile","track":1,"index":1,"start_sample":983040,"samples":983040}"#,
            ),
            (
                StreamEvent::Done { tracks: 2, audio_seconds: 64.8 },
                r#"{"event":"done","tracks":2,"audio_seconds":64.8}"#,
            ),
            (
                StreamEvent::Failed { error: "cancelled by shutdown".into() },
                r#"{"event":"failed","error":"cancelled by shutdown"}"#,
            ),
            (StreamEvent::Cancelled {}, r#"{"event":"cancelled"}"#),
        ];
        for (event, text) in cases {
            assert_eq!(event.to_text(), text);
            assert_eq!(StreamEvent::from_text(text).unwrap(), event);
        }
    }

    #[test]
    fn terminal_events() {
        assert!(StreamEvent::Cancelled {}.is_terminal());
        assert!(StreamEvent::Failed { error: "x".into() }.is_terminal());
        assert!(StreamEvent::Done { tracks: 1, audio_seconds: 1.0 }.is_terminal());
        assert!(!StreamEvent::Codes { frames: 1 }.is_terminal());
        assert!(StreamEvent::from_text(r#"{"event":"bogus"}"#).is_err());
    }

    #[test]
    fn cancel_command() {
        assert_eq!(StreamCommand::Cancel.to_text(), r#"{"cmd":"cancel"}"#);
        assert_eq!(StreamCommand::from_text(r#"{"cmd":"cancel"}"#).unwrap(), StreamCommand::Cancel);
        assert!(StreamCommand::from_text(r#"{"cmd":"pause"}"#).is_err());
    }
}
