//! Expiring capability links to a finished song's audio (the MCP export): a random
//! 128-bit token names one job's result file for a while (one hour by default). The link
//! is served without an API key — the token is the capability — and is a 404 once it has
//! expired or the result has. No copy of the audio is made: the link points at the job's
//! result, which the result store keeps (and expires) as it does every other. Each link is
//! a small record on disk (`<token>.json`) so links survive a restart; expired records are
//! swept whenever a link is made and at start. In a cluster the records live in the
//! cluster's `yued_links` bucket instead (expiring with the links), so that a link made on
//! one API node works on every other.
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use yued_protocol::JobId;

pub struct Links {
    dir: PathBuf,
    ttl: Duration,
    cluster: Option<yued_cluster::async_nats::jetstream::kv::Store>,
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
        let links = Links { dir: dir.to_path_buf(), ttl, cluster: None };
        links.sweep();
        Ok(links)
    }

    /// Keeps the records in the cluster's links bucket.
    pub fn in_cluster(mut self, kv: yued_cluster::async_nats::jetstream::kv::Store) -> Self {
        self.cluster = Some(kv);
        self
    }

    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// A new link to `job`'s result, valid for the configured time.
    pub async fn create(&self, job: &JobId) -> std::io::Result<Link> {
        let mut bytes = [0u8; 16];
        getrandom::fill(&mut bytes)
            .map_err(|e| std::io::Error::other(format!("no randomness for a link token: {e}")))?;
        let token: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        let expires = now() + self.ttl.as_secs();
        let record = serde_json::to_vec(&Record { job: job.clone(), expires }).expect("a record serializes");
        if let Some(kv) = &self.cluster {
            kv.create(&token, record.into())
                .await
                .map_err(|e| std::io::Error::other(format!("the cluster's links: {e}")))?;
            return Ok(Link { token, expires });
        }
        self.sweep();
        let tmp = self.dir.join(format!("{token}.tmp"));
        std::fs::write(&tmp, record)?;
        std::fs::rename(&tmp, self.dir.join(format!("{token}.json")))?;
        Ok(Link { token, expires })
    }

    /// The job a live link names; `None` for a malformed, unknown or expired token (an
    /// expired record is removed on the way).
    pub async fn resolve(&self, token: &str) -> Option<JobId> {
        if !well_formed(token) {
            return None;
        }
        if let Some(kv) = &self.cluster {
            let record: Record = serde_json::from_slice(&kv.get(token).await.ok()??).ok()?;
            return (record.expires > now()).then_some(record.job);
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
            let keep = path.extension().is_some_and(|x| x == "json")
                && std::fs::read(&path)
                    .ok()
                    .and_then(|b| serde_json::from_slice::<Record>(&b).ok())
                    .is_some_and(|r| r.expires > t);
            if !keep {
                let _ = std::fs::remove_file(&path);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_link_resolves_until_it_expires_and_survives_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let job = JobId::parse("00000000000000a1").unwrap();
        let links = Links::open(dir.path(), Duration::from_secs(3600)).unwrap();
        let a = links.create(&job).await.unwrap();
        let b = links.create(&job).await.unwrap();
        assert_ne!(a.token, b.token);
        assert!(well_formed(&a.token));
        assert_eq!(links.resolve(&a.token).await, Some(job.clone()));
        // Reopened (a restart): still there.
        let links = Links::open(dir.path(), Duration::from_secs(3600)).unwrap();
        assert_eq!(links.resolve(&b.token).await, Some(job.clone()));
        // Not a token: nothing, and no path is built from it.
        for bad in ["", "../../etc/passwd", &a.token.to_uppercase(), &a.token[..31]] {
            assert_eq!(links.resolve(bad).await, None, "{bad}");
        }
        // A zero lifetime: expired at once, and its record is gone.
        let short = Links::open(dir.path(), Duration::from_secs(0)).unwrap();
        let c = short.create(&job).await.unwrap();
        assert_eq!(short.resolve(&c.token).await, None);
        assert!(!dir.path().join(format!("{}.json", c.token)).exists());
    }
}
