//! Finished results on disk under `<data>/results/<job id>/`, never held in RAM: one
//! replay JSON, one audio file and one raw latent file per track, plus `meta.json`. They
//! stay retrievable across restarts until they expire (age, total bytes, count: oldest first).
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};
use yued_protocol::JobId;

/// One file of a result, in multipart order.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ResultPart {
    pub file: String,
    pub content_type: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ResultMeta {
    pub created_ms: u64,
    pub bytes: u64,
    pub parts: Vec<ResultPart>,
}

/// Limits of the store.
#[derive(Clone, Copy, Debug)]
pub struct Retention {
    pub ttl_secs: u64,
    pub max_bytes: u64,
    pub max_count: usize,
}

pub struct ResultStore {
    dir: PathBuf,
    retention: Retention,
    /// Numbers each save's folder aside, so two saves of one id at once (a cluster API node
    /// caching a result for two readers) never write into each other's.
    saves: std::sync::atomic::AtomicU64,
}

pub fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

impl ResultStore {
    pub fn open(dir: &Path, retention: Retention) -> std::io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        // What a save cut short by a crash left aside.
        for e in std::fs::read_dir(dir)?.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') && name.ends_with(".tmp") {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
        Ok(ResultStore { dir: dir.to_path_buf(), retention, saves: Default::default() })
    }

    /// The store's limits.
    pub fn retention(&self) -> Retention {
        self.retention
    }

    fn job_dir(&self, id: &JobId) -> PathBuf {
        self.dir.join(id.as_str())
    }

    /// Writes a result: `files` are (name, content type, bytes) in multipart order. The
    /// directory appears complete or not at all (written aside, then renamed).
    pub fn save(&self, id: &JobId, files: Vec<(String, String, Vec<u8>)>) -> std::io::Result<ResultMeta> {
        let n = self.saves.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tmp = self.dir.join(format!(".{}.{n}.tmp", id.as_str()));
        let _ = std::fs::remove_dir_all(&tmp);
        // A save that fails (a full disk) leaves nothing behind to keep the disk full.
        let meta = Self::write_aside(&tmp, files).inspect_err(|_| {
            let _ = std::fs::remove_dir_all(&tmp);
        })?;
        let dest = self.job_dir(id);
        // Another save of the same id may put its folder there between the removal and the
        // rename (a cluster API node caching one result for two readers): then again.
        let mut tries = 0;
        loop {
            let _ = std::fs::remove_dir_all(&dest);
            match std::fs::rename(&tmp, &dest) {
                Ok(()) => break,
                Err(_) if tries < 16 => tries += 1,
                Err(e) => {
                    let _ = std::fs::remove_dir_all(&tmp);
                    return Err(e);
                }
            }
        }
        // The rename itself on the disk, before the journal says done.
        let _ = std::fs::File::open(&self.dir).and_then(|d| d.sync_all());
        self.sweep();
        Ok(meta)
    }

    /// Writes a result's files and its meta into `tmp`, each on the disk (synced) before the
    /// folder is renamed into place: a journal that says done never points at empty files
    /// after a power cut.
    fn write_aside(tmp: &Path, files: Vec<(String, String, Vec<u8>)>) -> std::io::Result<ResultMeta> {
        fn write_synced(path: &Path, data: &[u8]) -> std::io::Result<()> {
            use std::io::Write;
            let mut f = std::fs::File::create(path)?;
            f.write_all(data)?;
            f.sync_all()
        }
        std::fs::create_dir_all(tmp)?;
        let mut parts = Vec::new();
        let mut bytes = 0u64;
        for (name, ct, data) in files {
            write_synced(&tmp.join(&name), &data)?;
            bytes += data.len() as u64;
            parts.push(ResultPart { file: name, content_type: ct });
        }
        let meta = ResultMeta { created_ms: now_ms(), bytes, parts };
        write_synced(&tmp.join("meta.json"), &serde_json::to_vec(&meta).expect("meta serializes"))?;
        // The folder's own entries (a file system that cannot sync a folder is let be).
        let _ = std::fs::File::open(tmp).and_then(|d| d.sync_all());
        Ok(meta)
    }

    /// The parts of a stored result with their paths.
    pub fn parts(&self, id: &JobId) -> Option<Vec<(PathBuf, String)>> {
        let d = self.job_dir(id);
        let meta: ResultMeta = serde_json::from_slice(&std::fs::read(d.join("meta.json")).ok()?).ok()?;
        Some(meta.parts.into_iter().map(|p| (d.join(p.file), p.content_type)).collect())
    }

    /// Removes a stored result (a cluster worker's, once the cluster holds it).
    pub fn remove(&self, id: &JobId) {
        let _ = std::fs::remove_dir_all(self.job_dir(id));
    }

    pub fn exists(&self, id: &JobId) -> bool {
        self.job_dir(id).join("meta.json").exists()
    }

    /// Every stored result: (id, meta), oldest first.
    pub fn list(&self) -> Vec<(JobId, ResultMeta)> {
        let mut out = Vec::new();
        if let Ok(rd) = std::fs::read_dir(&self.dir) {
            for e in rd.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                let Ok(id) = JobId::parse(&name) else { continue };
                if let Some(meta) = std::fs::read(e.path().join("meta.json"))
                    .ok()
                    .and_then(|b| serde_json::from_slice::<ResultMeta>(&b).ok())
                {
                    out.push((id, meta));
                }
            }
        }
        out.sort_by_key(|(id, m)| (m.created_ms, id.clone()));
        out
    }

    /// Total bytes and count of stored results.
    pub fn usage(&self) -> (u64, usize) {
        let l = self.list();
        (l.iter().map(|(_, m)| m.bytes).sum(), l.len())
    }

    /// Removes expired results and the oldest beyond the size or count limits; returns the
    /// ids removed.
    pub fn sweep(&self) -> Vec<JobId> {
        let now = now_ms();
        let mut list = self.list();
        let mut removed = Vec::new();
        let mut total: u64 = list.iter().map(|(_, m)| m.bytes).sum();
        let r = &self.retention;
        while let Some((id, meta)) = list.first().cloned() {
            let expired = now.saturating_sub(meta.created_ms) > r.ttl_secs * 1000;
            if !(expired || total > r.max_bytes || list.len() > r.max_count) {
                break;
            }
            let _ = std::fs::remove_dir_all(self.job_dir(&id));
            total -= meta.bytes;
            list.remove(0);
            removed.push(id);
        }
        removed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn saves_of_one_result_at_once_leave_it_whole() {
        let dir = tempfile::tempdir().unwrap();
        let s =
            ResultStore::open(dir.path(), Retention { ttl_secs: 3600, max_bytes: 1 << 30, max_count: 100 }).unwrap();
        let id = JobId::from_u64(7);
        let files = || (0..8).map(|i| (format!("f{i}.bin"), "application/octet-stream".into(), vec![i as u8; 50_000]));
        std::thread::scope(|t| {
            for _ in 0..4 {
                t.spawn(|| {
                    for _ in 0..10 {
                        s.save(&id, files().collect()).unwrap();
                    }
                });
            }
        });
        let parts = s.parts(&id).unwrap();
        assert_eq!(parts.len(), 8);
        assert!(parts.iter().all(|(p, _)| std::fs::metadata(p).unwrap().len() == 50_000));
        let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().flatten().map(|e| e.file_name()).collect();
        assert_eq!(left, vec![std::ffi::OsString::from(id.as_str())], "nothing left aside");
    }

    #[test]
    fn a_save_that_fails_leaves_nothing_aside() {
        let dir = tempfile::tempdir().unwrap();
        let store =
            ResultStore::open(dir.path(), Retention { ttl_secs: 60, max_bytes: 1 << 20, max_count: 8 }).unwrap();
        let id = JobId::from_u64(0xaa);
        // The second file cannot be written (its folder does not exist), as on a full disk.
        let files = vec![
            ("a.wav".to_string(), "audio/wav".to_string(), vec![1u8; 64]),
            ("no/such.wav".to_string(), "audio/wav".to_string(), vec![2u8; 64]),
        ];
        assert!(store.save(&id, files).is_err());
        let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().flatten().map(|e| e.file_name()).collect();
        assert!(left.is_empty(), "{left:?}");
        assert!(!store.exists(&id));
    }

    #[test]
    fn save_list_and_expire() {
        let dir = tempfile::tempdir().unwrap();
        let s = ResultStore::open(dir.path(), Retention { ttl_secs: 3600, max_bytes: 25, max_count: 2 }).unwrap();
        for i in 1..=3u64 {
            s.save(&JobId::from_u64(i), vec![("a.json".into(), "application/json".into(), vec![b'x'; 10])]).unwrap();
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        // count 2 and 25 bytes: the oldest went
        assert!(!s.exists(&JobId::from_u64(1)));
        assert!(s.exists(&JobId::from_u64(2)) && s.exists(&JobId::from_u64(3)));
        let parts = s.parts(&JobId::from_u64(3)).unwrap();
        assert_eq!(parts[0].1, "application/json");
        assert_eq!(std::fs::read(&parts[0].0).unwrap().len(), 10);
        assert_eq!(s.usage(), (20, 2));
        // A store reopened sees the same results.
        let s2 = ResultStore::open(dir.path(), Retention { ttl_secs: 0, max_bytes: 1 << 30, max_count: 100 }).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(5));
        assert_eq!(s2.sweep().len(), 2, "a zero TTL expires everything");
    }
}
