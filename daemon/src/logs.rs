//! The daemon's log lines, kept for `/logs`: a tracing layer formats every event into one
//! line, keeps the last 512 in a ring (replayed to each new SSE client) and broadcasts the
//! live ones.
use std::collections::VecDeque;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use tokio::sync::broadcast;
use tracing::field::{Field, Visit};
use tracing_subscriber::layer::Context;
use tracing_subscriber::Layer;

pub const RING_LINES: usize = 512;

#[derive(Clone)]
pub struct LogRing {
    ring: Arc<Mutex<VecDeque<String>>>,
    tx: broadcast::Sender<String>,
}

impl LogRing {
    pub fn new() -> Self {
        let (tx, _) = broadcast::channel(1024);
        LogRing { ring: Arc::new(Mutex::new(VecDeque::with_capacity(RING_LINES))), tx }
    }
    pub fn push(&self, line: String) {
        let mut r = self.ring.lock().unwrap();
        if r.len() == RING_LINES {
            r.pop_front();
        }
        r.push_back(line.clone());
        let _ = self.tx.send(line);
    }
    /// The kept lines and a receiver of the next ones.
    pub fn subscribe(&self) -> (Vec<String>, broadcast::Receiver<String>) {
        let r = self.ring.lock().unwrap();
        (r.iter().cloned().collect(), self.tx.subscribe())
    }
}

impl Default for LogRing {
    fn default() -> Self {
        Self::new()
    }
}

struct LineVisitor(String);

impl Visit for LineVisitor {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.0, " {value:?}");
        } else {
            let _ = write!(self.0, " {}={value:?}", field.name());
        }
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            let _ = write!(self.0, " {value}");
        } else {
            let _ = write!(self.0, " {}={value}", field.name());
        }
    }
}

/// A span's fields as `/logs` writes them (` job=12 client=alice`), kept by the ring itself:
/// the stderr layer's own copy has its format's shape (JSON under `--log-format json`).
struct RingFields(String);

impl<S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>> Layer<S> for LogRing {
    fn on_new_span(&self, attrs: &tracing::span::Attributes<'_>, id: &tracing::span::Id, ctx: Context<'_, S>) {
        let mut v = LineVisitor(String::new());
        attrs.record(&mut v);
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(RingFields(v.0));
        }
    }

    fn on_record(&self, id: &tracing::span::Id, values: &tracing::span::Record<'_>, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(id) {
            let mut ext = span.extensions_mut();
            if let Some(f) = ext.get_mut::<RingFields>() {
                let mut v = LineVisitor(std::mem::take(&mut f.0));
                values.record(&mut v);
                f.0 = v.0;
            }
        }
    }

    fn on_event(&self, event: &tracing::Event<'_>, ctx: Context<'_, S>) {
        let meta = event.metadata();
        let mut v = LineVisitor(format!("{} {:>5} {}:", chrono_like_now(), meta.level(), meta.target()));
        if let Some(scope) = ctx.event_scope(event) {
            for span in scope.from_root() {
                let _ = write!(v.0, " {}", span.name());
                if let Some(f) = span.extensions().get::<RingFields>().filter(|f| !f.0.is_empty()) {
                    let _ = write!(v.0, "{{{}}}", f.0.trim_start());
                }
            }
            v.0.push(':');
        }
        event.record(&mut v);
        self.push(plain(&v.0));
    }
}

/// Now as RFC 3339 UTC (`2026-12-01T11:46:06.123456Z`), as the stderr log writes it.
fn chrono_like_now() -> String {
    use tracing_subscriber::fmt::time::FormatTime;
    let mut s = String::new();
    let _ = tracing_subscriber::fmt::time::SystemTime
        .format_time(&mut tracing_subscriber::fmt::format::Writer::new(&mut s));
    s
}

/// A line without terminal escape sequences (`ESC [ ... letter`), should a value carry one.
/// Other control characters
/// are written as escapes (`\r`, `\n`, `\u{7}`): a value that carried a line break (a request's
/// text echoed in an error) must not fake or hide lines in the `/logs` stream, one event a line.
fn plain(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c != '\x1b' {
            if c.is_control() {
                out.extend(c.escape_default());
            } else {
                out.push(c);
            }
            continue;
        }
        if chars.clone().next() == Some('[') {
            chars.next();
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use tracing_subscriber::layer::SubscriberExt;

    /// A span's fields reach `/logs` whatever the stderr layer's format (JSON too).
    #[test]
    fn span_fields_reach_the_ring_under_either_log_format() {
        for json in [false, true] {
            let ring = super::LogRing::new();
            let registry = tracing_subscriber::registry().with(ring.clone());
            let fmt = tracing_subscriber::fmt::layer().with_writer(std::io::sink);
            let dispatch = if json {
                tracing::Dispatch::new(registry.with(fmt.json()))
            } else {
                tracing::Dispatch::new(registry.with(fmt))
            };
            tracing::dispatcher::with_default(&dispatch, || {
                let span = tracing::info_span!("job", job = "00ab", stage = tracing::field::Empty);
                let _in = span.enter();
                span.record("stage", "synth");
                tracing::info!(step = 3, "a step");
            });
            let (lines, _) = ring.subscribe();
            assert_eq!(lines.len(), 1);
            let l = &lines[0];
            assert!(l.contains(" job{job=00ab stage=synth}:") && l.contains("a step") && l.contains("step=3"), "{l}");
        }
    }

    #[test]
    fn lines_are_plain_text_with_an_iso_time() {
        assert_eq!(super::plain("\x1b[3mjob\x1b[0m\x1b[2m=\x1b[0m1 ok"), "job=1 ok");
        assert_eq!(super::plain("error=bad\r\nINFO faked\u{7}"), "error=bad\\r\\nINFO faked\\u{7}");
        let t = super::chrono_like_now();
        assert!(t.len() >= 20 && t.as_bytes()[4] == b'-' && t.as_bytes()[10] == b'T' && t.ends_with('Z'), "{t}");
    }
}
