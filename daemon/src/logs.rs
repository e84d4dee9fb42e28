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

impl<S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>> Layer<S> for LogRing {
    fn on_event(&self, event: &tracing::Event<'_>, ctx: Context<'_, S>) {
        let meta = event.metadata();
        let mut v = LineVisitor(format!("{} {:>5} {}:", chrono_like_now(), meta.level(), meta.target()));
        if let Some(scope) = ctx.event_scope(event) {
            for span in scope.from_root() {
                let _ = write!(v.0, " {}", span.name());
                if let Some(f) = span.extensions().get::<tracing_subscriber::fmt::FormattedFields<tracing_subscriber::fmt::format::DefaultFields>>() {
                    let _ = write!(v.0, "{{{f}}}");
                }
            }
            v.0.push(':');
        }
        event.record(&mut v);
        self.push(v.0);
    }
}

fn chrono_like_now() -> String {
    let d = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    format!("{}.{:03}", d.as_secs(), d.subsec_millis())
}
