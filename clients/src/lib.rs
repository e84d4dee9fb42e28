//! A typed client of the yued native job contract (`/synth`, `/job`, `/props`, the
//! WebSocket stream), built on the `yued-protocol` types only.
#![forbid(unsafe_code)]
pub mod load;

use std::time::Duration;
use yued_protocol::{ErrorBody, JobId, JobStatus, Props, StreamEvent, SubmitReply, Yue2Request, MULTIPART_BOUNDARY};

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The server answered with an error status and its JSON error body.
    #[error("HTTP {status}: {message}")]
    Server { status: u16, message: String, retry_after: Option<u64> },
    #[error("{0}")]
    Transport(String),
    #[error("unexpected reply: {0}")]
    Protocol(String),
}

impl From<reqwest::Error> for ClientError {
    /// The error with its causes ("error sending request: ... Connection refused"): reqwest's
    /// own text alone does not say why.
    fn from(e: reqwest::Error) -> Self {
        let mut text = e.to_string();
        let mut cause = std::error::Error::source(&e);
        while let Some(c) = cause {
            text.push_str(": ");
            text.push_str(&c.to_string());
            cause = c.source();
        }
        ClientError::Transport(text)
    }
}

/// One part of a multipart result.
#[derive(Debug, Clone)]
pub struct Part {
    pub content_type: String,
    pub filename: Option<String>,
    pub data: Vec<u8>,
}

/// Something the stream delivered.
#[derive(Debug, Clone)]
pub enum StreamMessage {
    Event(StreamEvent),
    /// The job id announced by `/synth/stream`.
    Job(JobId),
    /// A binary audio frame (s16le interleaved for `pcm16`).
    Audio(Vec<u8>),
}

pub struct Client {
    base: String,
    key: Option<String>,
    http: reqwest::blocking::Client,
}

impl Client {
    /// `base` like `http://127.0.0.1:8087`.
    pub fn new(base: &str, key: Option<String>) -> Self {
        Client {
            base: base.trim_end_matches('/').to_string(),
            key,
            http: reqwest::blocking::Client::builder().timeout(Duration::from_secs(600)).build().expect("http client"),
        }
    }

    /// The API key this client presents, if any.
    pub fn api_key(&self) -> Option<&str> {
        self.key.as_deref()
    }

    fn auth(&self, rb: reqwest::blocking::RequestBuilder) -> reqwest::blocking::RequestBuilder {
        match &self.key {
            Some(k) => rb.bearer_auth(k),
            None => rb,
        }
    }

    fn check(r: reqwest::blocking::Response) -> Result<reqwest::blocking::Response, ClientError> {
        if r.status().is_success() {
            return Ok(r);
        }
        let status = r.status().as_u16();
        let retry_after = r.headers().get("retry-after").and_then(|v| v.to_str().ok()).and_then(|v| v.parse().ok());
        let message = r.json::<ErrorBody>().map(|e| e.error).unwrap_or_else(|_| "no error body".into());
        Err(ClientError::Server { status, message, retry_after })
    }

    pub fn submit(&self, req: &Yue2Request) -> Result<JobId, ClientError> {
        let r = Self::check(self.auth(self.http.post(format!("{}/synth", self.base))).json(req).send()?)?;
        Ok(r.json::<SubmitReply>()?.id)
    }

    /// Submits raw JSON (fields the server defaults stay out of it): the job's id, and the
    /// top-level fields the daemon ignored (a misspelt one shows there).
    pub fn submit_json(&self, body: &str) -> Result<SubmitReply, ClientError> {
        let r = Self::check(
            self.auth(self.http.post(format!("{}/synth", self.base)))
                .header("content-type", "application/json")
                .body(body.to_string())
                .send()?,
        )?;
        Ok(r.json::<SubmitReply>()?)
    }

    pub fn status(&self, id: &JobId) -> Result<JobStatus, ClientError> {
        Ok(Self::check(self.auth(self.http.get(format!("{}/job?id={id}", self.base))).send()?)?.json()?)
    }

    pub fn cancel(&self, id: &JobId) -> Result<(), ClientError> {
        Self::check(self.auth(self.http.post(format!("{}/job?id={id}&cancel=1", self.base))).send()?)?;
        Ok(())
    }

    /// `GET /status`: the daemon's health and its queue as this key may see it.
    pub fn server_status(&self) -> Result<serde_json::Value, ClientError> {
        Ok(Self::check(self.auth(self.http.get(format!("{}/status", self.base))).send()?)?.json()?)
    }

    pub fn props(&self) -> Result<Props, ClientError> {
        Ok(Self::check(self.auth(self.http.get(format!("{}/props", self.base))).send()?)?.json()?)
    }

    /// The multipart result of a finished job.
    pub fn result(&self, id: &JobId) -> Result<Vec<Part>, ClientError> {
        let r = Self::check(self.auth(self.http.get(format!("{}/job?id={id}&result=1", self.base))).send()?)?;
        let ct = r.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
        if !ct.starts_with("multipart/mixed") {
            return Err(ClientError::Protocol(format!("result content type {ct:?}")));
        }
        // The boundary the server names (each family's reference names its own).
        let boundary = ct
            .split("boundary=")
            .nth(1)
            .map(|b| b.trim().trim_matches('"').to_string())
            .unwrap_or_else(|| MULTIPART_BOUNDARY.to_string());
        Ok(parse_multipart(&r.bytes()?, &boundary))
    }

    fn ws_base(&self) -> String {
        self.base.replacen("http", "ws", 1)
    }

    /// Follows a job's stream until its terminal event; `on` gets every message.
    pub fn stream(&self, id: &JobId, format: &str, on: &mut dyn FnMut(StreamMessage)) -> Result<(), ClientError> {
        self.stream_url(format!("{}/stream?id={id}&format={format}", self.ws_base()), None, on)
    }

    /// Submits through `/synth/stream` and follows the job.
    pub fn synth_stream(
        &self,
        request_json: &str,
        format: &str,
        on: &mut dyn FnMut(StreamMessage),
    ) -> Result<(), ClientError> {
        self.stream_url(format!("{}/synth/stream?format={format}", self.ws_base()), Some(request_json.to_string()), on)
    }

    fn stream_url(
        &self,
        url: String,
        first: Option<String>,
        on: &mut dyn FnMut(StreamMessage),
    ) -> Result<(), ClientError> {
        use futures_util::{SinkExt, StreamExt};
        use tokio_tungstenite::tungstenite::{client::IntoClientRequest, Message};
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| ClientError::Transport(e.to_string()))?;
        let mut request = url.into_client_request().map_err(|e| ClientError::Transport(e.to_string()))?;
        if let Some(k) = &self.key {
            request.headers_mut().insert("authorization", format!("Bearer {k}").parse().unwrap());
        }
        rt.block_on(async {
            let (mut ws, _) =
                tokio_tungstenite::connect_async(request).await.map_err(|e| ClientError::Transport(e.to_string()))?;
            if let Some(f) = first {
                ws.send(Message::text(f)).await.map_err(|e| ClientError::Transport(e.to_string()))?;
            }
            while let Some(m) = ws.next().await {
                match m.map_err(|e| ClientError::Transport(e.to_string()))? {
                    Message::Binary(b) => on(StreamMessage::Audio(b.to_vec())),
                    Message::Text(t) => {
                        let v: serde_json::Value =
                            serde_json::from_str(t.as_str()).map_err(|e| ClientError::Protocol(e.to_string()))?;
                        if v["event"] == "job" {
                            let id = v["id"]
                                .as_str()
                                .and_then(|s| JobId::parse(s).ok())
                                .ok_or_else(|| ClientError::Protocol(t.to_string()))?;
                            on(StreamMessage::Job(id));
                        } else {
                            let e = StreamEvent::from_text(t.as_str())
                                .map_err(|e| ClientError::Protocol(format!("{e}: {t}")))?;
                            on(StreamMessage::Event(e));
                        }
                    }
                    Message::Close(_) => break,
                    _ => {}
                }
            }
            Ok(())
        })
    }
}

/// The parts of a `multipart/mixed` body.
pub fn parse_multipart(body: &[u8], boundary: &str) -> Vec<Part> {
    let delim = format!("--{boundary}");
    let mut parts = Vec::new();
    let mut rest = body;
    while let Some(start) = find(rest, delim.as_bytes()) {
        rest = &rest[start + delim.len()..];
        if rest.starts_with(b"--") || rest.len() < 2 {
            break;
        }
        rest = &rest[2..];
        let Some(hend) = find(rest, b"\r\n\r\n") else { break };
        let headers = String::from_utf8_lossy(&rest[..hend]).into_owned();
        rest = &rest[hend + 4..];
        let Some(next) = find(rest, format!("\r\n{delim}").as_bytes()) else { break };
        let mut content_type = String::new();
        let mut filename = None;
        for h in headers.lines() {
            let (k, v) = h.split_once(':').unwrap_or((h, ""));
            match k.trim().to_ascii_lowercase().as_str() {
                "content-type" => content_type = v.trim().to_string(),
                "content-disposition" => {
                    filename = v.split("filename=").nth(1).map(|f| f.trim().trim_matches('"').to_string())
                }
                _ => {}
            }
        }
        parts.push(Part { content_type, filename, data: rest[..next].to_vec() });
        rest = &rest[next + 2..];
    }
    parts
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// A WAV header for 16-bit PCM at `sample_rate` Hz over `channels` with `data_bytes` of
/// samples (0xFFFFFFFF-ish sizes let a player start on a file that is still growing).
pub fn wav_header(data_bytes: u32, sample_rate: u32, channels: u16) -> Vec<u8> {
    let mut h = Vec::with_capacity(44);
    h.extend_from_slice(b"RIFF");
    h.extend_from_slice(&data_bytes.saturating_add(36).to_le_bytes());
    h.extend_from_slice(b"WAVEfmt ");
    h.extend_from_slice(&16u32.to_le_bytes());
    h.extend_from_slice(&1u16.to_le_bytes());
    h.extend_from_slice(&channels.to_le_bytes());
    h.extend_from_slice(&sample_rate.to_le_bytes());
    h.extend_from_slice(&(sample_rate * 2 * channels as u32).to_le_bytes());
    h.extend_from_slice(&(2 * channels).to_le_bytes());
    h.extend_from_slice(&16u16.to_le_bytes());
    h.extend_from_slice(b"data");
    h.extend_from_slice(&data_bytes.to_le_bytes());
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn multipart_round_trip() {
        let body = b"--b\r\nContent-Type: application/json\r\nContent-Disposition: attachment; \
            filename=\"t.json\"\r\n\r\n{}\r\n--b\r\nContent-Type: audio/wav\r\n\r\nRIFF\r\n--x\r\n--b--\r\n";
        let p = parse_multipart(body, "b");
        assert_eq!(p.len(), 2);
        assert_eq!(p[0].content_type, "application/json");
        assert_eq!(p[0].filename.as_deref(), Some("t.json"));
        assert_eq!(p[1].data, b"RIFF\r\n--x");
    }

    #[test]
    fn wav_header_is_canonical() {
        let h = wav_header(400, 44100, 2);
        assert_eq!(h.len(), 44);
        assert_eq!(u32::from_le_bytes(h[24..28].try_into().unwrap()), 44100);
        assert_eq!(u32::from_le_bytes(h[28..32].try_into().unwrap()), 44100 * 4);
        assert_eq!(&h[36..40], b"data");
        assert_eq!(u32::from_le_bytes(h[4..8].try_into().unwrap()), 436);
    }
}
