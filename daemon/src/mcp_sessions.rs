//! The MCP endpoint's sessions: id → last use, bounded in number and idle time.
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Sessions idle this long are forgotten (their client gets 404 and starts again).
const SESSION_IDLE: Duration = Duration::from_secs(3600);
/// At most this many sessions are kept; beyond it the least recently used goes.
const MAX_SESSIONS: usize = 4096;

/// The sessions of the MCP endpoint: id → last use.
pub struct Mcp {
    sessions: Mutex<HashMap<String, Instant>>,
    /// The longest song `compose_song` takes, in seconds.
    pub max_seconds: f64,
}

impl Mcp {
    pub fn new(max_seconds: f64) -> Mcp {
        Mcp { sessions: Mutex::new(HashMap::new()), max_seconds }
    }

    pub fn open(&self) -> Result<String, String> {
        let mut bytes = [0u8; 16];
        getrandom::fill(&mut bytes).map_err(|e| format!("no randomness for a session id: {e}"))?;
        let id: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        let mut s = self.sessions.lock().expect("sessions lock");
        let now = Instant::now();
        s.retain(|_, t| now.duration_since(*t) < SESSION_IDLE);
        if s.len() >= MAX_SESSIONS {
            if let Some(oldest) = s.iter().min_by_key(|(_, t)| **t).map(|(k, _)| k.clone()) {
                s.remove(&oldest);
            }
        }
        s.insert(id.clone(), now);
        Ok(id)
    }

    /// Whether `id` is a live session (its use time is refreshed).
    pub fn touch(&self, id: &str) -> bool {
        let mut s = self.sessions.lock().expect("sessions lock");
        match s.get_mut(id) {
            Some(t) if t.elapsed() < SESSION_IDLE => {
                *t = Instant::now();
                true
            }
            Some(_) => {
                s.remove(id);
                false
            }
            None => false,
        }
    }

    pub fn close(&self, id: &str) -> bool {
        self.sessions.lock().expect("sessions lock").remove(id).is_some()
    }
}
