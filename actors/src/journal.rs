//! The job journal on sled: one record per job, rewritten (and flushed) on every state
//! change, so after a crash or restart the daemon knows what was queued, what was running
//! and which jobs already have their semantic codes. A database written by something else,
//! or a newer format, is refused with a clear error, never wiped.
//!
//! A journal of an older release is upgraded when it is opened. Releases before layout 3
//! wrote the client's raw API key (`key:SECRET`); those records are rewritten under the
//! key's principal id into a fresh database that then replaces the old one, so the keys
//! do not linger in sled's log segments either.
use yued_contract::tenancy::KeyTable;
use yued_contract::{JobRecord, RECORD_VERSION};

use std::path::{Path, PathBuf};
use yued_protocol::JobId;

const FORMAT_KEY: &[u8] = b"yued.journal.format";
const FORMAT: &[u8] = b"1";

#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    #[error("journal {path}: {message}")]
    Open { path: PathBuf, message: String },
    #[error("journal: {}", sled_text(.0))]
    Io(#[from] sled::Error),
    #[error("journal record {key}: {message}")]
    Corrupt { key: String, message: String },
    #[error("no randomness for a job id: {0}")]
    Random(String),
    /// The test-only fault (`$YUED_TEST_JOURNAL_FAULT_FILE` exists; `test-faults` builds).
    #[cfg(feature = "test-faults")]
    #[error("journal write refused: test fault file {0} exists")]
    Fault(PathBuf),
}

/// A sled error as a sentence (sled's own text of an I/O error is its debug form).
fn sled_text(e: &sled::Error) -> String {
    match e {
        sled::Error::Io(io) => io.to_string(),
        other => other.to_string(),
    }
}

/// The sled database behind the journal.
pub struct Journal {
    dir: PathBuf,
    /// `None` only while [`Journal::reopen`] opens it again (and after it failed to).
    open: Option<Sled>,
    /// Test-only fault injection: while this file exists every write fails
    /// (`$YUED_TEST_JOURNAL_FAULT_FILE`, read at open; only in `test-faults` builds).
    #[cfg(feature = "test-faults")]
    fault_file: Option<PathBuf>,
}

/// The database and its tree of records.
struct Sled {
    db: sled::Db,
    jobs: sled::Tree,
}

/// How long opening waits for a sled file lock released by a handle dropped just before.
const LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(3);

/// `dir` with a suffix on its last component (`journal` -> `journal.old`).
fn sibling(dir: &Path, suffix: &str) -> PathBuf {
    let mut name = dir.file_name().map(|n| n.to_os_string()).unwrap_or_else(|| "journal".into());
    name.push(format!(".{suffix}"));
    dir.with_file_name(name)
}

impl Journal {
    /// Opens (or creates) the journal in `dir`, upgrading records of older layouts; `keys`
    /// maps the raw keys older releases wrote to their principals.
    pub fn open(dir: &Path, keys: &KeyTable) -> Result<Self, JournalError> {
        Self::finish_rewrite(dir)?;
        let j = Self::open_db(dir)?;
        if j.stale_records()? {
            return j.rewrite(dir, keys);
        }
        Ok(j)
    }

    /// Completes (or drops) a rewrite a crash interrupted: the old database is kept until
    /// the new one has taken its name.
    fn finish_rewrite(dir: &Path) -> Result<(), JournalError> {
        let io = |e: std::io::Error| JournalError::Open {
            path: dir.to_path_buf(),
            message: format!("finishing an upgrade: {e}"),
        };
        let (new, old) = (sibling(dir, "upgrading"), sibling(dir, "old"));
        if !dir.exists() && new.exists() && old.exists() {
            std::fs::rename(&new, dir).map_err(io)?;
        }
        if dir.exists() && new.exists() {
            std::fs::remove_dir_all(&new).map_err(io)?;
        }
        if dir.exists() && old.exists() {
            std::fs::remove_dir_all(&old).map_err(io)?;
        }
        Ok(())
    }

    /// Whether a record of an older layout is stored.
    fn stale_records(&self) -> Result<bool, JournalError> {
        for kv in self.sled()?.jobs.iter() {
            let (_, v) = kv?;
            let version = serde_json::from_slice::<serde_json::Value>(&v)
                .ok()
                .and_then(|v| v.get("version").and_then(|n| n.as_u64()))
                .unwrap_or(1);
            if version < RECORD_VERSION as u64 {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Writes every record, upgraded, into a fresh database that replaces this one.
    fn rewrite(self, dir: &Path, keys: &KeyTable) -> Result<Self, JournalError> {
        let io = |e: std::io::Error| JournalError::Open { path: dir.to_path_buf(), message: format!("upgrading: {e}") };
        let records = self.load_with(keys)?;
        let (new, old) = (sibling(dir, "upgrading"), sibling(dir, "old"));
        {
            let fresh = Self::open_db(&new)?;
            for r in &records {
                fresh.put(r)?;
            }
            fresh.sled()?.db.flush()?;
        }
        drop(self);
        std::fs::rename(dir, &old).map_err(io)?;
        std::fs::rename(&new, dir).map_err(io)?;
        std::fs::remove_dir_all(&old).map_err(io)?;
        tracing::info!(
            records = records.len(),
            layout = RECORD_VERSION,
            "journal upgraded (raw API keys replaced by principal ids)"
        );
        Self::open_db(dir)
    }

    fn open_db(dir: &Path) -> Result<Self, JournalError> {
        let open_err = |message: String| JournalError::Open { path: dir.to_path_buf(), message };
        if dir.exists() && dir.is_file() {
            return Err(open_err("is a file, not a journal directory".into()));
        }
        let fresh = !dir.join("db").exists() && !dir.join("conf").exists();
        if !fresh && !dir.join("conf").exists() {
            return Err(open_err("is not a sled database (no conf file): refusing to touch it".into()));
        }
        // sled's file lock outlives a dropped handle until its flusher thread exits (up to
        // its flush interval): a journal reopened at once (a restart in one process, a test)
        // waits for it rather than failing; a lock still held after LOCK_WAIT is another
        // live daemon.
        let started = std::time::Instant::now();
        let db = loop {
            match sled::Config::new().path(dir).open() {
                Ok(db) => break db,
                // sled wraps the lock's WouldBlock in an error of its own kind: only its text tells.
                Err(sled::Error::Io(e))
                    if e.to_string().contains("could not acquire lock") && started.elapsed() < LOCK_WAIT =>
                {
                    std::thread::sleep(std::time::Duration::from_millis(20))
                }
                Err(e) => {
                    return Err(open_err(format!(
                        "cannot open as a sled database: {e} (another process holding it, or a damaged journal: \
                        a damaged one moved aside, the daemon starts with none, and its jobs are lost)"
                    )))
                }
            }
        };
        match db.get(FORMAT_KEY)? {
            None if fresh || db.is_empty() => {
                db.insert(FORMAT_KEY, FORMAT)?;
                db.flush()?;
            }
            None => {
                return Err(open_err(
                    "is a sled database without a yued journal format key: refusing to use a foreign database".into(),
                ))
            }
            Some(v) if v.as_ref() == FORMAT => {}
            Some(v) => {
                return Err(open_err(format!(
                    "journal format {:?} is not supported by this yued",
                    String::from_utf8_lossy(&v)
                )))
            }
        }
        let jobs = db.open_tree("jobs")?;
        Ok(Journal {
            dir: dir.to_path_buf(),
            open: Some(Sled { db, jobs }),
            #[cfg(feature = "test-faults")]
            fault_file: std::env::var_os("YUED_TEST_JOURNAL_FAULT_FILE").filter(|v| !v.is_empty()).map(PathBuf::from),
        })
    }

    #[cfg(feature = "test-faults")]
    fn check_fault(&self) -> Result<(), JournalError> {
        match &self.fault_file {
            Some(f) if f.exists() => Err(JournalError::Fault(f.clone())),
            _ => Ok(()),
        }
    }

    #[cfg(not(feature = "test-faults"))]
    fn check_fault(&self) -> Result<(), JournalError> {
        Ok(())
    }

    fn sled(&self) -> Result<&Sled, JournalError> {
        self.open.as_ref().ok_or_else(|| JournalError::Open {
            path: self.dir.clone(),
            message: "not open (opening it again failed)".into(),
        })
    }

    /// Whether it is open (it is not after [`Journal::reopen`] failed).
    pub fn is_open(&self) -> bool {
        self.open.is_some()
    }

    /// Opens the journal again, its log replayed as at a restart: sled keeps an I/O error
    /// for good (every later write fails with it, whatever space was freed since).
    pub fn reopen(&mut self) -> Result<(), JournalError> {
        // The old handles go first: sled's file lock is theirs (`open_db` waits for it).
        self.open = None;
        self.open = Self::open_db(&self.dir)?.open;
        Ok(())
    }

    /// Writes a record durably.
    pub fn put(&self, r: &JobRecord) -> Result<(), JournalError> {
        self.check_fault()?;
        let v = serde_json::to_vec(r).expect("records serialize");
        self.sled()?.jobs.insert(r.id.to_u64().to_be_bytes(), v)?;
        self.sled()?.jobs.flush()?;
        Ok(())
    }

    /// Every record (in id order: random, not submission order), in this release's layout
    /// (a record of a newer layout is refused by name).
    pub fn load(&self) -> Result<Vec<JobRecord>, JournalError> {
        self.load_with(&KeyTable::default())
    }

    fn load_with(&self, keys: &KeyTable) -> Result<Vec<JobRecord>, JournalError> {
        let mut out = Vec::new();
        for kv in self.sled()?.jobs.iter() {
            let (k, v) = kv?;
            let key = k.iter().map(|b| format!("{b:02x}")).collect::<String>();
            let corrupt = |message: String| JournalError::Corrupt { key: key.clone(), message };
            let mut value: serde_json::Value = serde_json::from_slice(&v).map_err(|e| corrupt(e.to_string()))?;
            upgrade(&mut value, keys).map_err(corrupt)?;
            let r: JobRecord = serde_json::from_value(value).map_err(|e| corrupt(e.to_string()))?;
            out.push(r);
        }
        Ok(out)
    }

    /// Flushes what is written (every put is already flushed; removals are not).
    pub fn flush(&self) -> Result<(), JournalError> {
        self.sled()?.db.flush()?;
        Ok(())
    }

    pub fn remove(&self, id: &JobId) -> Result<(), JournalError> {
        self.check_fault()?;
        self.sled()?.jobs.remove(id.to_u64().to_be_bytes())?;
        Ok(())
    }

    /// A new job id: 64 random bits from the CSPRNG, not yet used here.
    pub fn new_id(&self) -> Result<JobId, JournalError> {
        self.check_fault()?;
        loop {
            let id = JobId::random().map_err(|e| JournalError::Random(e.to_string()))?;
            if !self.sled()?.jobs.contains_key(id.to_u64().to_be_bytes())? {
                return Ok(id);
            }
        }
    }
}

/// Brings a record of an older layout to [`RECORD_VERSION`].
fn upgrade(v: &mut serde_json::Value, keys: &KeyTable) -> Result<(), String> {
    let obj = v.as_object_mut().ok_or("a record is a JSON object")?;
    let version = match obj.get("version") {
        None => 1,
        Some(n) => n.as_u64().ok_or("'version' is not a number")? as u32,
    };
    if version > RECORD_VERSION {
        return Err(format!("record layout {version} is newer than this yued's {RECORD_VERSION}"));
    }
    if version < 2 {
        // Version 1 held a YuE2 request's fields alone.
        let req = obj.get_mut("request").and_then(|r| r.as_object_mut()).ok_or("no 'request' object")?;
        req.insert("family".into(), "yue2".into());
    }
    if version < 3 {
        // Layouts 1 and 2 named a client by its raw API key.
        let client = obj.get("client").and_then(|c| c.as_str()).ok_or("no 'client' text")?;
        let principal = keys.upgrade_client(client);
        obj.insert("client".into(), principal.into());
    }
    obj.insert("version".into(), RECORD_VERSION.into());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use yued_protocol::{JobState, Yue2Request};

    fn rec(id: JobId, state: JobState) -> JobRecord {
        JobRecord {
            version: RECORD_VERSION,
            id,
            client: "c".into(),
            request: Yue2Request::default().into(),
            state,
            submitted_ms: 1,
            songs: vec![],
            error: None,
            metrics: None,
            tracks: 0,
            audio_seconds: 0.0,
            upload: None,
            crashes: 0,
            resumed: 0,
            cancel_asked: false,
            interrupted: false,
        }
    }

    fn open(p: &Path) -> Journal {
        Journal::open(p, &KeyTable::default()).unwrap()
    }

    #[test]
    fn records_survive_reopen_and_ids_are_random() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("journal");
        let (a, b) = {
            let j = open(&p);
            let a = j.new_id().unwrap();
            let b = j.new_id().unwrap();
            j.put(&rec(b.clone(), JobState::Queued)).unwrap();
            j.put(&rec(a.clone(), JobState::Running)).unwrap();
            (a, b)
        };
        let j = open(&p);
        let mut all = j.load().unwrap();
        all.sort_by(|x, y| x.id.cmp(&y.id));
        let mut want = vec![(a, JobState::Running), (b, JobState::Queued)];
        want.sort_by(|x, y| x.0.cmp(&y.0));
        assert_eq!(all.iter().map(|r| (r.id.clone(), r.state)).collect::<Vec<_>>(), want);
        // 64 random bits a draw: 256 ids share no value, and their bits are not a counter's
        // (about half of the high 32 bits set across them).
        let ids: std::collections::BTreeSet<u64> = (0..256).map(|_| j.new_id().unwrap().to_u64()).collect();
        assert_eq!(ids.len(), 256);
        let high: u32 = ids.iter().map(|n| (n >> 32).count_ones()).sum();
        assert!((3000..5200).contains(&high), "{high} of 8192 high bits set");
        // While it is open, a second open waits for the lock, then names the likely cause.
        let e =
            Journal::open(&p, &KeyTable::default()).err().expect("a held journal cannot be opened twice").to_string();
        assert!(e.contains("another process holding it"), "{e}");
        // Opened again in place (what the scheduler does after an I/O error): the records
        // are there, and writes go on.
        let mut j = j;
        j.reopen().unwrap();
        assert!(j.is_open());
        assert_eq!(j.load().unwrap().len(), 2);
        let c = j.new_id().unwrap();
        j.put(&rec(c, JobState::Queued)).unwrap();
        assert_eq!(j.load().unwrap().len(), 3);
    }

    /// A journal written by the release before families (record layout 1, committed under
    /// fixtures/journal/v1: a done, a running, a queued and a cancelled job) still loads,
    /// as YuE2 jobs with their requests intact; the upgraded records are written back in
    /// the current layout.
    #[test]
    fn a_journal_of_the_previous_layout_loads() {
        let dir = tempfile::tempdir().unwrap();
        let fixture = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures/journal/v1");
        let p = dir.path().join("journal");
        std::fs::create_dir_all(&p).unwrap();
        for f in ["conf", "db"] {
            std::fs::copy(fixture.join(f), p.join(f)).unwrap();
        }
        let j = open(&p);
        let all = j.load().unwrap();
        let states: Vec<_> = all.iter().map(|r| (r.id.to_u64(), r.state)).collect();
        assert_eq!(
            states,
            vec![(1, JobState::Done), (2, JobState::Running), (3, JobState::Queued), (4, JobState::Cancelled)]
        );
        let r2 = &all[1];
        assert_eq!(r2.version, RECORD_VERSION);
        let q = r2.request.as_yue2().expect("a YuE2 job");
        assert_eq!((q.style.as_str(), q.lm_seed, q.seed, q.steps), ("warm pop", 7, 9, 256));
        assert_eq!(q.output_format, yued_protocol::OutputFormat::Flac);
        assert_eq!(all[0].tracks, 1);
        // Written back, it reads as the current layout.
        j.put(r2).unwrap();
        let raw: serde_json::Value =
            serde_json::from_slice(&j.sled().unwrap().jobs.get(2u64.to_be_bytes()).unwrap().unwrap()).unwrap();
        assert_eq!(
            (raw["version"].as_u64(), raw["request"]["family"].as_str()),
            (Some(RECORD_VERSION as u64), Some("yue2"))
        );
        // A record from a newer release is refused, naming it.
        let mut newer = raw.clone();
        newer["version"] = 99.into();
        j.sled().unwrap().jobs.insert(9u64.to_be_bytes(), serde_json::to_vec(&newer).unwrap()).unwrap();
        let e = j.load().err().unwrap().to_string();
        assert!(e.contains("0000000000000009") && e.contains("newer"), "{e}");
    }

    #[test]
    fn foreign_or_corrupt_stores_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        // A sled database that is not a journal.
        let p = dir.path().join("foreign");
        {
            let db = sled::open(&p).unwrap();
            db.insert(b"something", b"else").unwrap();
            db.flush().unwrap();
        }
        let e = Journal::open(&p, &KeyTable::default()).err().unwrap().to_string();
        assert!(e.contains("foreign"), "{e}");
        // A directory of random files.
        let q = dir.path().join("junk");
        std::fs::create_dir_all(&q).unwrap();
        std::fs::write(q.join("db"), b"garbage").unwrap();
        assert!(Journal::open(&q, &KeyTable::default()).is_err());
        assert_eq!(std::fs::read(q.join("db")).unwrap(), b"garbage", "never wiped");
        // A bad record is named.
        let r = dir.path().join("ok");
        let j = open(&r);
        j.sled().unwrap().jobs.insert(7u64.to_be_bytes(), b"{not json".to_vec()).unwrap();
        let e = j.load().err().unwrap().to_string();
        assert!(e.contains("0000000000000007"), "{e}");
    }

    /// A journal written by the release before tenancy (layout 2, committed under
    /// fixtures/journal/v2 by that release's `yued serve --api-key keyA111 --api-key
    /// keyB222`: A's done job 1, B's job 2 and A's job 3 running at a SIGKILL) names its
    /// clients by their raw keys. Opened with a keys table that names A, its jobs become
    /// alice's; B's key is gone from the table, so its job gets the hash id an unnamed
    /// entry of that key would have. The upgraded database holds neither key, in any file.
    #[test]
    fn a_journal_with_raw_keys_is_upgraded_to_principals_and_scrubbed() {
        let dir = tempfile::tempdir().unwrap();
        let fixture = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures/journal/v2");
        let p = dir.path().join("journal");
        std::fs::create_dir_all(&p).unwrap();
        for f in ["conf", "db"] {
            std::fs::copy(fixture.join(f), p.join(f)).unwrap();
        }
        let grep = |root: &Path, needle: &[u8]| -> Vec<PathBuf> {
            let mut hits = vec![];
            let mut stack = vec![root.to_path_buf()];
            while let Some(d) = stack.pop() {
                for e in std::fs::read_dir(&d).unwrap() {
                    let path = e.unwrap().path();
                    if path.is_dir() {
                        stack.push(path);
                    } else if std::fs::read(&path).unwrap().windows(needle.len()).any(|w| w == needle) {
                        hits.push(path);
                    }
                }
            }
            hits
        };
        assert!(!grep(&p, b"keyA111").is_empty(), "the fixture holds the raw key");
        let mut keys = KeyTable::default();
        keys.add_lines("keyA111 name=alice\n", "keys").unwrap();
        let j = Journal::open(&p, &keys).unwrap();
        let mut all = j.load().unwrap();
        all.sort_by_key(|r| r.id.to_u64());
        let got: Vec<_> = all.iter().map(|r| (r.id.to_u64(), r.client.as_str(), r.state, r.version)).collect();
        let b = yued_contract::tenancy::key_id("keyB222");
        let want = vec![
            (1, "alice", JobState::Done, RECORD_VERSION),
            (2, b.as_str(), JobState::Running, RECORD_VERSION),
            (3, "alice", JobState::Running, RECORD_VERSION),
        ];
        assert_eq!(got, want);
        assert_eq!(all[0].tracks, 1);
        assert_eq!(all[1].request.as_yue2().unwrap().style, "warm pop");
        drop(j);
        for key in [&b"keyA111"[..], b"keyB222"] {
            let hits = grep(dir.path(), key);
            assert!(hits.is_empty(), "{} still in {hits:?}", String::from_utf8_lossy(key));
        }
        assert!(!sibling(&p, "old").exists() && !sibling(&p, "upgrading").exists());
        // Reopened, it is current: nothing to rewrite, the same records.
        let j = open(&p);
        assert_eq!(j.load().unwrap().len(), 3);
    }

    /// A rewrite interrupted between its two renames is completed at the next open.
    #[test]
    fn an_interrupted_upgrade_is_completed() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("journal");
        {
            let j = open(&p);
            j.put(&rec(JobId::from_u64(5), JobState::Queued)).unwrap();
        }
        std::fs::rename(&p, sibling(&p, "upgrading")).unwrap();
        std::fs::create_dir_all(sibling(&p, "old")).unwrap();
        let j = open(&p);
        assert_eq!(j.load().unwrap()[0].id.to_u64(), 5);
        assert!(!sibling(&p, "old").exists() && !sibling(&p, "upgrading").exists());
    }
}
