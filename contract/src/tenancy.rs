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
//!
//! A browser cannot set a header on a WebSocket or an EventSource, so its key would have to
//! travel in the URL, where proxies log it. A **stream ticket** travels there instead: a short
//! token signed with the key's hash (HMAC-SHA256) for one route, one job and one minute, which
//! the daemon takes once. It is checked without any shared state, so every node whose keys
//! file holds the key accepts it.
use hmac::{Hmac, Mac};
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

/// The key a request was admitted by, as a handle that names no key (its hash, never
/// printed): what a long-lived stream asks the table about again as it goes.
#[derive(Clone, PartialEq, Eq)]
pub struct KeyRef([u8; 32]);

impl std::fmt::Debug for KeyRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KeyRef(..)")
    }
}

/// What a stream ticket is good for: one route (`/stream`, `/logs`, ...) and, where the route
/// names one, one job (else "").
#[derive(Clone, Copy, Debug)]
pub struct TicketScope<'a> {
    pub path: &'a str,
    pub job: &'a str,
}

/// A ticket the table has verified: who it speaks for, by which key, and what a node must
/// remember so that it is taken only once (its nonce, until it expires).
#[derive(Debug)]
pub struct Redeemed {
    pub principal: Principal,
    pub key: KeyRef,
    pub nonce: [u8; 16],
    pub expires: u64,
}

/// Why a ticket was refused (the same answer for a forged one and one for another route, so a
/// guess learns nothing).
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum TicketError {
    #[error("the ticket is malformed")]
    Malformed,
    #[error("the ticket has expired")]
    Expired,
    #[error("the ticket is not valid here (another route or job, or its key was revoked)")]
    Invalid,
}

const TICKET_PREFIX: &str = "yt1";

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len()).step_by(2).map(|i| s.get(i..i + 2).and_then(|b| u8::from_str_radix(b, 16).ok())).collect()
}

/// The signature of a ticket's claims under a key's hash.
fn ticket_mac(key: &[u8; 32], id: &str, scope: &TicketScope, expires: u64, nonce: &[u8; 16]) -> [u8; 32] {
    let mut m = <Hmac<Sha256> as Mac>::new_from_slice(key).expect("HMAC takes a key of any length");
    for part in [b"yued.ticket.v1".as_slice(), id.as_bytes(), scope.path.as_bytes(), scope.job.as_bytes()] {
        m.update(part);
        m.update(b"\0");
    }
    m.update(expires.to_string().as_bytes());
    m.update(b"\0");
    m.update(nonce);
    m.finalize().into_bytes().into()
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
        self.lookup_key(presented).map(|(p, _)| p)
    }

    /// The principal of a presented key, with a handle on the key (see [`KeyTable::holds`]).
    /// Every entry is compared, in constant time (the key is hashed once).
    pub fn lookup_key(&self, presented: &str) -> Option<(&Principal, KeyRef)> {
        let hash = digest(presented);
        let mut found = None;
        for e in &self.entries {
            let hit: bool = e.hash.ct_eq(&hash).into();
            if hit && found.is_none() {
                found = Some(&e.principal);
            }
        }
        found.map(|p| (p, KeyRef(hash)))
    }

    /// Whether the key behind `key` is still configured, for `who` (same name and role): a
    /// stream asks this as it goes, so a revoked or rotated key stops reaching what it opened.
    pub fn holds(&self, key: &KeyRef, who: &Principal) -> bool {
        let mut held = false;
        for e in &self.entries {
            let hit: bool = e.hash.ct_eq(&key.0).into();
            held |= hit && &e.principal == who;
        }
        held
    }

    /// A stream ticket for `scope`, signed with `key`, good until `expires` (Unix seconds);
    /// `None` when the key is no longer configured.
    pub fn issue_ticket(&self, key: &KeyRef, scope: &TicketScope, expires: u64, nonce: [u8; 16]) -> Option<String> {
        let e = self.entries.iter().find(|e| bool::from(e.hash.ct_eq(&key.0)))?;
        let mac = ticket_mac(&e.hash, &e.principal.id, scope, expires, &nonce);
        Some(format!("{TICKET_PREFIX}_{expires}_{}_{}_{}", hex(&nonce), hex(e.principal.id.as_bytes()), hex(&mac)))
    }

    /// Checks a ticket presented for `scope` at `now` (Unix seconds). It is the caller's part to
    /// take each nonce once.
    pub fn redeem_ticket(&self, ticket: &str, scope: &TicketScope, now: u64) -> Result<Redeemed, TicketError> {
        let parts: Vec<&str> = ticket.split('_').collect();
        let [TICKET_PREFIX, expires, nonce, id, mac] = parts[..] else {
            return Err(TicketError::Malformed);
        };
        let expires: u64 = expires.parse().map_err(|_| TicketError::Malformed)?;
        let nonce: [u8; 16] = unhex(nonce).and_then(|n| n.try_into().ok()).ok_or(TicketError::Malformed)?;
        let id = unhex(id).and_then(|b| String::from_utf8(b).ok()).ok_or(TicketError::Malformed)?;
        let mac: [u8; 32] = unhex(mac).and_then(|m| m.try_into().ok()).ok_or(TicketError::Malformed)?;
        let e = self.entries.iter().find(|e| e.principal.id == id).ok_or(TicketError::Invalid)?;
        let good: bool = ticket_mac(&e.hash, &id, scope, expires, &nonce).ct_eq(&mac).into();
        if !good {
            return Err(TicketError::Invalid);
        }
        if now > expires {
            return Err(TicketError::Expired);
        }
        Ok(Redeemed { principal: e.principal.clone(), key: KeyRef(e.hash), nonce, expires })
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
    fn a_ticket_speaks_for_its_key_on_its_route_until_it_expires() {
        let mut t = KeyTable::default();
        t.add_lines("keyA111 name=alice\nkeyB222 name=bob admin\n", "f").unwrap();
        let (alice, key) = t.lookup_key("keyA111").map(|(p, k)| (p.clone(), k)).unwrap();
        assert!(t.holds(&key, &alice) && !t.holds(&key, &t.lookup("keyB222").unwrap().clone()));
        let scope = TicketScope { path: "/stream", job: "00000000000000aa" };
        let ticket = t.issue_ticket(&key, &scope, 1000, [7; 16]).unwrap();
        assert!(!ticket.contains("keyA111") && ticket.starts_with("yt1_1000_"), "{ticket}");
        let r = t.redeem_ticket(&ticket, &scope, 1000).unwrap();
        assert_eq!((r.principal, r.key, r.nonce, r.expires), (alice.clone(), key.clone(), [7; 16], 1000));
        // Another route or job, a late one, a forged one: refused.
        let other = [TicketScope { path: "/logs", job: "" }, TicketScope { path: "/stream", job: "00000000000000ab" }];
        for s in other {
            assert_eq!(t.redeem_ticket(&ticket, &s, 1000).unwrap_err(), TicketError::Invalid, "{s:?}");
        }
        assert_eq!(t.redeem_ticket(&ticket, &scope, 1001).unwrap_err(), TicketError::Expired);
        let later = ticket.replacen("yt1_1000_", "yt1_9999_", 1);
        assert_eq!(t.redeem_ticket(&later, &scope, 1000).unwrap_err(), TicketError::Invalid);
        let as_bob = format!("{}_{}_{}", &ticket[..ticket.rfind('_').unwrap()], hex(b"bob"), "00".repeat(32));
        assert!(t.redeem_ticket(&as_bob, &scope, 1000).is_err());
        for junk in ["", "yt1", "yt1_x_y_z_w", "yt2_1000_00_00_00", &ticket[..ticket.len() - 1]] {
            assert_eq!(t.redeem_ticket(junk, &scope, 0).unwrap_err(), TicketError::Malformed, "{junk}");
        }
        // A rotated key (same name, new key): its tickets and its handle stop.
        let mut rotated = KeyTable::default();
        rotated.add_lines("keyA999 name=alice\n", "f").unwrap();
        assert_eq!(rotated.redeem_ticket(&ticket, &scope, 1000).unwrap_err(), TicketError::Invalid);
        assert!(!rotated.holds(&key, &alice) && rotated.issue_ticket(&key, &scope, 1000, [7; 16]).is_none());
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
