//! Expiring capability links to a finished song's audio (the MCP export): a random
//! 128-bit token names one job's result file for a while (one hour by default). The link
//! is served without an API key — the token is the capability — and is a 404 once it has
//! expired or the result has. No copy of the audio is made: the link points at the job's
//! result, which the result store keeps (and expires) as it does every other. Each link is
//! a small record on disk (`<token>.json`) so links survive a restart; expired records are
//! swept whenever a link is made and at start.
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use yued_protocol::JobId;

pub struct Links {
    dir: PathBuf,
    ttl: Duration,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Record {
    job: JobId,
    /// Unix seconds after which the link is gone.
    expires: u64,
}

/// A link just made.
pub struct Link {
    pub token: String,
    pub expires: u64,
}

fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

/// A token's shape: 32 lowercase hex digits (128 bits), so it can name a file safely.
fn well_formed(token: &str) -> bool {
    token.len() == 32 && token.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

impl Links {
    pub fn open(dir: &Path, ttl: Duration) -> std::io::Result<Links> {
        std::fs::create_dir_all(dir)?;
        let links = Links { dir: dir.to_path_buf(), ttl };
        links.sweep();
        Ok(links)
    }

    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// A new link to `job`'s result, valid for the configured time.
    pub fn create(&self, job: &JobId) -> std::io::Result<Link> {
        self.sweep();
        let mut bytes = [0u8; 16];
        getrandom::fill(&mut bytes).map_err(|e| std::io::Error::other(format!("no randomness for a link token: {e}")))?;
        let token: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        let expires = now() + self.ttl.as_secs();
        let record = serde_json::to_vec(&Record { job: job.clone(), expires }).expect("a record serializes");
        let tmp = self.dir.join(format!("{token}.tmp"));
        std::fs::write(&tmp, record)?;
        std::fs::rename(&tmp, self.dir.join(format!("{token}.json")))?;
        Ok(Link { token, expires })
    }

    /// The job a live link names; `None` for a malformed, unknown or expired token (an
    /// expired record is removed on the way).
    pub fn resolve(&self, token: &str) -> Option<JobId> {
        if !well_formed(token) {
            return None;
        }
        let path = self.dir.join(format!("{token}.json"));
        let record: Record = serde_json::from_slice(&std::fs::read(&path).ok()?).ok()?;
        if record.expires <= now() {
            let _ = std::fs::remove_file(&path);
            return None;
        }
        Some(record.job)
    }

    /// Removes every expired (or unreadable) record.
    fn sweep(&self) {
        let Ok(entries) = std::fs::read_dir(&self.dir) else { return };
        let t = now();
        for e in entries.flatten() {
            let path = e.path();
            let keep = path.extension().is_some_and(|x| x == "json") && std::fs::read(&path).ok().and_then(|b| serde_json::from_slice::<Record>(&b).ok()).is_some_and(|r| r.expires > t);
            if !keep {
                let _ = std::fs::remove_file(&path);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_link_resolves_until_it_expires_and_survives_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let job = JobId::parse("00000000000000a1").unwrap();
        let links = Links::open(dir.path(), Duration::from_secs(3600)).unwrap();
        let a = links.create(&job).unwrap();
        let b = links.create(&job).unwrap();
        assert_ne!(a.token, b.token);
        assert!(well_formed(&a.token));
        assert_eq!(links.resolve(&a.token), Some(job.clone()));
        // Reopened (a restart): still there.
        let links = Links::open(dir.path(), Duration::from_secs(3600)).unwrap();
        assert_eq!(links.resolve(&b.token), Some(job.clone()));
        // Not a token: nothing, and no path is built from it.
        for bad in ["", "../../etc/passwd", &a.token.to_uppercase(), &a.token[..31]] {
            assert_eq!(links.resolve(bad), None, "{bad}");
        }
        // A zero lifetime: expired at once, and its record is gone.
        let short = Links::open(dir.path(), Duration::from_secs(0)).unwrap();
        let c = short.create(&job).unwrap();
        assert_eq!(short.resolve(&c.token), None);
        assert!(!dir.path().join(format!("{}.json", c.token)).exists());
    }
}
