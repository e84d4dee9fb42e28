//! Who asks, and what they may see. Every job belongs to the principal that submitted it:
//! an API key's stable id (the name its keys-file entry gives, else a short hash of the key)
//! or, on a box without keys, the caller's address. A principal sees its own jobs; an admin
//! sees every job. The keys themselves are held only as hashes and compared in constant
//! time; what is written anywhere (logs, the journal, the cluster's buckets and subjects,
//! metrics) is the principal id, never a key.
//!
//! A keys file has one key a line; `#` starts a comment line. After the key, optional words:
//! `name=NAME` (the principal id; letters, digits and `._@-`, at most 64) and a role:
//! `admin` (every job, `/logs`, `/jobs?all=1`, `/metrics`) or `metrics` (only `/metrics`,
//! for a Prometheus scraper). A key without a role is a user's.
//!
//! ```text
//! # alice's laptop and her scripts
//! 4f0c9d1e2a7b6c5d8e9f0a1b2c3d4e5f name=alice
//! 9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d name=ops admin
//! 0123456789abcdef0123456789abcdef name=prometheus metrics
//! ```
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// What a principal may do beyond its own jobs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Its own jobs, and the routes that name none.
    User,
    /// Every job, `/logs`, `/jobs?all=1`, `/metrics`.
    Admin,
    /// `/metrics` only (a scraper's key).
    Metrics,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::User => "user",
            Role::Admin => "admin",
            Role::Metrics => "metrics",
        }
    }
}

/// The one a request speaks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Principal {
    /// What jobs are owned by and written under: `alice`, `key-3f2a9c1b5d7e`, `ip:10.0.0.7`.
    pub id: String,
    pub role: Role,
}

impl Principal {
    /// The caller of a box without keys, by its address: single-user, so it may see
    /// everything (the address still keeps the fair queue and `/jobs` apart).
    pub fn open(addr: &str) -> Principal {
        Principal { id: format!("ip:{addr}"), role: Role::Admin }
    }

    pub fn is_admin(&self) -> bool {
        self.role == Role::Admin
    }

    /// Whether a job owned by `owner` is visible to this principal.
    pub fn sees(&self, owner: &str) -> bool {
        self.is_admin() || self.id == owner
    }
}

/// The hash a key is held and matched as (domain-separated SHA-256).
fn digest(key: &str) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(b"yued.api-key\0");
    h.update(key.as_bytes());
    h.finalize().into()
}

/// The principal id of a key its entry gives no name: `key-` and 12 hex digits of its hash.
pub fn key_id(key: &str) -> String {
    let d = digest(key);
    format!("key-{}", d[..6].iter().map(|b| format!("{b:02x}")).collect::<String>())
}

struct Entry {
    hash: [u8; 32],
    principal: Principal,
}

/// The configured keys (as hashes) and their principals.
#[derive(Default)]
pub struct KeyTable {
    entries: Vec<Entry>,
}

/// The principals only: a table never prints a key or its hash.
impl std::fmt::Debug for KeyTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.principals()).finish()
    }
}

/// Why a keys file or key list was refused; the line is named, the key never shown.
#[derive(Debug, thiserror::Error)]
#[error("{source_name} line {line}: {message}")]
pub struct KeyError {
    pub source_name: String,
    pub line: usize,
    pub message: String,
}

fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"._@-".contains(&b))
        && !name.starts_with("key-")
}

impl KeyTable {
    /// No keys: the box is open (single-user).
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// The principals, in the order given (what a reload reports).
    pub fn principals(&self) -> impl Iterator<Item = &Principal> {
        self.entries.iter().map(|e| &e.principal)
    }

    /// Adds the entries of `text` (keys-file lines) read from `source_name`.
    pub fn add_lines(&mut self, text: &str, source_name: &str) -> Result<(), KeyError> {
        for (i, raw) in text.lines().enumerate() {
            let line = raw.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let err = |message: String| KeyError { source_name: source_name.to_string(), line: i + 1, message };
            let mut words = line.split_whitespace();
            let key = words.next().expect("a non-empty line has a word");
            if key.starts_with("name=") || key == "admin" || key == "metrics" {
                return Err(err("the line starts with a setting: the key comes first, then name=NAME, admin or \
                    metrics"
                    .into()));
            }
            let (mut name, mut role) = (None, Role::User);
            for w in words {
                match w {
                    "admin" => role = Role::Admin,
                    "metrics" => role = Role::Metrics,
                    w if w.starts_with("name=") => {
                        let n = &w[5..];
                        if !valid_name(n) {
                            return Err(err(format!(
                                "name '{n}': 1 to 64 letters, digits or ._@- (and not starting with key-)"
                            )));
                        }
                        name = Some(n.to_string());
                    }
                    // Not echoed: a line written name first puts its key here.
                    _ => {
                        return Err(err("a word after the key is not name=NAME, admin or metrics (not shown: it may \
                            be a key; the key comes first on its line)"
                            .into()))
                    }
                }
            }
            self.add(key, name, role).map_err(err)?;
        }
        Ok(())
    }

    /// Adds one key.
    pub fn add(&mut self, key: &str, name: Option<String>, role: Role) -> Result<(), String> {
        if key.is_empty() || key.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err("a key is one word of printable characters".into());
        }
        let hash = digest(key);
        if self.entries.iter().any(|e| e.hash == hash) {
            return Err("this key is given twice".into());
        }
        let id = name.unwrap_or_else(|| key_id(key));
        if self.entries.iter().any(|e| e.principal.id == id) {
            return Err(format!("the name '{id}' is given to two keys"));
        }
        self.entries.push(Entry { hash, principal: Principal { id, role } });
        Ok(())
    }

    /// The principal of a presented key. Every entry is compared, in constant time, so the
    /// answer's timing says nothing of which key (or how much of one) matched.
    pub fn lookup(&self, presented: &str) -> Option<&Principal> {
        let hash = digest(presented);
        let mut found = None;
        for e in &self.entries {
            let hit: bool = e.hash.ct_eq(&hash).into();
            if hit && found.is_none() {
                found = Some(&e.principal);
            }
        }
        found
    }

    /// The principal id a job journaled by an older release under `key:RAW` belongs to:
    /// the key's principal when it is still configured, else the id an unnamed entry of
    /// that key would have. Other clients (addresses) are kept.
    pub fn upgrade_client(&self, client: &str) -> String {
        match client.strip_prefix("key:") {
            Some(raw) => self.lookup(raw).map(|p| p.id.clone()).unwrap_or_else(|| key_id(raw)),
            None => client.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_name_their_principal_and_role() {
        let mut t = KeyTable::default();
        let text = "# comment\n\nsecretA name=alice\nsecretB\n  secretC name=ops admin  \nsecretD metrics\n";
        t.add_lines(text, "keys.txt").unwrap();
        assert_eq!(t.len(), 4);
        assert_eq!(t.lookup("secretA").unwrap(), &Principal { id: "alice".into(), role: Role::User });
        let b = t.lookup("secretB").unwrap();
        assert_eq!((b.id.len(), b.id.starts_with("key-"), b.role), (16, true, Role::User));
        assert_eq!(b.id, key_id("secretB"), "a stable id: the same key, the same id");
        assert_ne!(key_id("secretB"), key_id("secretC"));
        assert_eq!(t.lookup("secretC").unwrap().role, Role::Admin);
        assert_eq!(t.lookup("secretD").unwrap().role, Role::Metrics);
        for wrong in ["", "secret", "secretA ", "secretAA", "SECRETA"] {
            assert!(t.lookup(wrong).is_none(), "{wrong:?}");
        }
    }

    #[test]
    fn bad_lines_are_named_without_their_key() {
        let cases = [
            ("k1\nk1\n", "line 2", "twice"),
            ("k1 name=a\nk2 name=a\n", "line 2", "two keys"),
            ("k1 name=bad/name\n", "line 1", "name 'bad/name'"),
            ("k1 name=key-abc\n", "line 1", "key-"),
            ("k1 root\n", "line 1", "not name=NAME"),
            // Written name first: the key is the unknown word, and is not shown.
            ("k0\nname=bob k1\n", "line 2", "the key comes first"),
            ("k0 k1\n", "line 1", "not shown"),
        ];
        for (text, line, what) in cases {
            let e = KeyTable::default().add_lines(text, "f").unwrap_err().to_string();
            assert!(
                e.contains(line) && e.contains(what) && !e.contains("k1") && !e.contains("k2") && !e.contains("root"),
                "{text:?}: {e}"
            );
        }
    }

    #[test]
    fn old_journal_clients_become_principal_ids() {
        let mut t = KeyTable::default();
        t.add_lines("keyA111 name=alice\n", "f").unwrap();
        assert_eq!(t.upgrade_client("key:keyA111"), "alice");
        assert_eq!(t.upgrade_client("key:gone"), key_id("gone"));
        assert_eq!(t.upgrade_client("ip:127.0.0.1"), "ip:127.0.0.1");
        assert_eq!(t.upgrade_client("alice"), "alice");
    }

    #[test]
    fn admins_see_everything_users_their_own() {
        let user = Principal { id: "alice".into(), role: Role::User };
        let admin = Principal { id: "ops".into(), role: Role::Admin };
        assert!(user.sees("alice") && !user.sees("bob"));
        assert!(admin.sees("bob"));
        assert!(Principal::open("127.0.0.1").sees("anyone"));
    }
}
