//! The MCP endpoint's sessions: id → last use, bounded in number and idle time.
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Sessions idle this long are forgotten (their client gets 404 and starts again).
const SESSION_IDLE: Duration = Duration::from_secs(3600);
/// At most this many sessions are kept; beyond it the principal holding the most loses its
/// least recently used one, so no tenant's flood of sessions ends another's.
const MAX_SESSIONS: usize = 4096;
/// At most this many sessions a principal holds; its next one ends its least recently used.
const MAX_SESSIONS_EACH: usize = 1024;

/// One session: whose it is, and when it was last used.
struct Session {
    owner: String,
    used: Instant,
}

/// The sessions of the MCP endpoint: id → owner and last use. A session belongs to the
/// principal that opened it: another key naming its id finds no such session.
pub struct Mcp {
    sessions: Mutex<HashMap<String, Session>>,
    /// The longest song `compose_song` takes, in seconds.
    pub max_seconds: f64,
    /// `--public-url`: what an export link starts with (else the request's own host).
    pub public_url: Option<String>,
}

impl Mcp {
    pub fn new(max_seconds: f64) -> Mcp {
        Mcp { sessions: Mutex::new(HashMap::new()), max_seconds, public_url: None }
    }

    pub fn with_public_url(mut self, url: Option<String>) -> Mcp {
        self.public_url = url;
        self
    }

    /// A new session of `owner` (a principal id): its id, 128 random bits in hex.
    pub fn open(&self, owner: &str) -> Result<String, String> {
        let mut bytes = [0u8; 16];
        getrandom::fill(&mut bytes).map_err(|e| format!("no randomness for a session id: {e}"))?;
        let id: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        let mut s = self.sessions.lock().expect("sessions lock");
        let now = Instant::now();
        s.retain(|_, v| now.duration_since(v.used) < SESSION_IDLE);
        let mine = s.values().filter(|v| v.owner == owner).count();
        let evict_from = if mine >= MAX_SESSIONS_EACH {
            Some(owner.to_string())
        } else if s.len() >= MAX_SESSIONS {
            let mut counts: HashMap<&str, usize> = HashMap::new();
            for v in s.values() {
                *counts.entry(v.owner.as_str()).or_default() += 1;
            }
            counts.into_iter().max_by_key(|(o, n)| (*n, std::cmp::Reverse(*o))).map(|(o, _)| o.to_string())
        } else {
            None
        };
        if let Some(victim) = evict_from {
            let oldest =
                s.iter().filter(|(_, v)| v.owner == victim).min_by_key(|(_, v)| v.used).map(|(k, _)| k.clone());
            if let Some(k) = oldest {
                s.remove(&k);
            }
        }
        s.insert(id.clone(), Session { owner: owner.to_string(), used: now });
        Ok(id)
    }

    /// Whether `id` is a live session of `owner` (its use time is refreshed).
    pub fn touch(&self, id: &str, owner: &str) -> bool {
        let mut s = self.sessions.lock().expect("sessions lock");
        match s.get_mut(id) {
            Some(v) if v.owner != owner => false,
            Some(v) if v.used.elapsed() < SESSION_IDLE => {
                v.used = Instant::now();
                true
            }
            Some(_) => {
                s.remove(id);
                false
            }
            None => false,
        }
    }

    /// Ends `owner`'s session `id`; false when it has none of that id.
    pub fn close(&self, id: &str, owner: &str) -> bool {
        let mut s = self.sessions.lock().expect("sessions lock");
        if s.get(id).is_some_and(|v| v.owner == owner) {
            s.remove(id);
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_is_its_owners_alone() {
        let m = Mcp::new(60.0);
        let a = m.open("alice").unwrap();
        assert!(!m.touch(&a, "bob") && !m.close(&a, "bob"));
        assert!(m.touch(&a, "alice") && m.close(&a, "alice") && !m.touch(&a, "alice"));
    }

    #[test]
    fn a_flood_of_sessions_ends_only_the_flooders() {
        let m = Mcp::new(60.0);
        let theirs: Vec<String> = (0..3).map(|i| m.open(&format!("user{i}")).unwrap()).collect();
        let flood: Vec<String> = (0..MAX_SESSIONS + 10).map(|_| m.open("mallory").unwrap()).collect();
        for (i, id) in theirs.iter().enumerate() {
            assert!(m.touch(id, &format!("user{i}")), "user{i}'s session survived");
        }
        assert_eq!(flood.iter().filter(|id| m.touch(id, "mallory")).count(), MAX_SESSIONS_EACH);
        assert!(m.touch(flood.last().unwrap(), "mallory"), "the newest is kept");
        // The box full of many principals' sessions: the biggest holder gives one up.
        let many: Vec<String> = (0..MAX_SESSIONS).map(|i| m.open(&format!("p{}", i % 8)).unwrap()).collect();
        assert!(m.sessions.lock().unwrap().len() <= MAX_SESSIONS);
        assert!(m.touch(many.last().unwrap(), &format!("p{}", (MAX_SESSIONS - 1) % 8)));
    }
}
