//! The ModelStore: the single owner of the module instances (the AR half, the NAR half,
//! the VAE) and of the residency policy. Stage threads lease a module for the time they
//! compute with it; the store loads it on demand and, under STRICT, keeps at most one
//! coexistence group resident: the AR group { AR } or the synthesis group { NAR, VAE }.
//! A lease that conflicts with a group still held waits (it never aborts the daemon); a
//! lease of an unloaded module first evicts the idle modules of the other group. NEVER
//! (`--keep-loaded`) keeps everything that was ever loaded.
//!
//! A lease moves the module out of the store to the leasing thread (exclusive `&mut`, no
//! lock held while computing) and back when dropped. A group pin holds a group without a
//! module: the NAR renderer pins the synthesis group for a job until the VAE tiler has
//! decoded its last tile, so the next job's AR half cannot evict the VAE between chunks.
use crate::metrics::Metrics;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use yued_engine::models::yue2::ar::ArModel;
use yued_engine::ggml::Backend;
use yued_engine::models::yue2::nar::NarModel;
use yued_engine::models::yue2::vae::VaeModel;

/// The modules the store knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ModuleKey {
    Ar,
    Nar,
    Vae,
}

impl ModuleKey {
    pub fn group(self) -> Group {
        match self {
            ModuleKey::Ar => Group::Ar,
            ModuleKey::Nar | ModuleKey::Vae => Group::Synthesis,
        }
    }
    pub fn as_str(self) -> &'static str {
        match self {
            ModuleKey::Ar => "ar",
            ModuleKey::Nar => "nar",
            ModuleKey::Vae => "vae",
        }
    }
}

/// Coexistence groups of the STRICT policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Group {
    Ar,
    Synthesis,
}

impl Group {
    fn other(self) -> Group {
        match self {
            Group::Ar => Group::Synthesis,
            Group::Synthesis => Group::Ar,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    /// At most one coexistence group resident (the default).
    Strict,
    /// Nothing is evicted (`--keep-loaded`).
    Never,
}

/// A loaded module.
pub enum Module {
    Ar(ArModel),
    Nar(NarModel),
    Vae(VaeModel),
}

impl Module {
    pub fn weight_bytes(&self) -> usize {
        match self {
            Module::Ar(m) => m.weight_bytes(),
            Module::Nar(m) => m.weight_bytes(),
            Module::Vae(m) => m.weight_bytes(),
        }
    }
}

/// Loads a module onto a backend (the files and their checks live with the caller).
pub type Loader = dyn Fn(ModuleKey, &Backend) -> Result<Module, String> + Send + Sync;

enum Slot {
    Idle(Box<Module>),
    /// Out on a lease (or being loaded for one); `bytes` of weights.
    Leased { bytes: usize },
}

#[derive(Default)]
struct State {
    slots: HashMap<ModuleKey, Slot>,
    /// Leases and pins per group.
    held: HashMap<Group, usize>,
}

impl State {
    fn held(&self, g: Group) -> usize {
        self.held.get(&g).copied().unwrap_or(0)
    }
    fn resident_bytes(&self) -> usize {
        self.slots.values().map(|s| match s {
            Slot::Idle(m) => m.weight_bytes(),
            Slot::Leased { bytes } => *bytes,
        }).sum()
    }
}

pub struct ModelStore {
    policy: Policy,
    loader: Box<Loader>,
    state: Mutex<State>,
    changed: Condvar,
    loads: AtomicU64,
    metrics: Metrics,
}

/// What `/job` metrics report about residency.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Residency {
    pub loads: u64,
    pub modules: usize,
    pub weight_bytes: usize,
}

impl ModelStore {
    pub fn new(policy: Policy, loader: Box<Loader>, metrics: Metrics) -> Arc<Self> {
        Arc::new(ModelStore { policy, loader, state: Mutex::new(State::default()), changed: Condvar::new(), loads: AtomicU64::new(0), metrics })
    }

    pub fn policy(&self) -> Policy {
        self.policy
    }

    pub fn residency(&self) -> Residency {
        let st = self.state.lock().unwrap();
        Residency { loads: self.loads.load(Ordering::SeqCst), modules: st.slots.len(), weight_bytes: st.resident_bytes() }
    }

    fn conflicts(&self, st: &State, g: Group) -> bool {
        self.policy == Policy::Strict && st.held(g.other()) > 0
    }

    /// Holds `group` resident without taking a module (STRICT keeps the other group out).
    /// Waits while the other group is held.
    pub fn pin(self: &Arc<Self>, group: Group) -> GroupPin {
        let mut st = self.state.lock().unwrap();
        while self.conflicts(&st, group) {
            st = self.changed.wait(st).unwrap();
        }
        *st.held.entry(group).or_default() += 1;
        GroupPin { store: self.clone(), group }
    }

    /// Takes `key` for exclusive use on `backend`'s thread, loading it if needed; waits
    /// while a module of the other group is held under STRICT, or while `key` itself is out.
    pub fn lease(self: &Arc<Self>, key: ModuleKey, backend: &Backend) -> Result<Lease, String> {
        let group = key.group();
        let mut st = self.state.lock().unwrap();
        loop {
            let conflict = self.conflicts(&st, group);
            let out = matches!(st.slots.get(&key), Some(Slot::Leased { .. }));
            if !conflict && !out {
                break;
            }
            st = self.changed.wait(st).unwrap();
        }
        *st.held.entry(group).or_default() += 1;
        if let Some(Slot::Idle(m)) = st.slots.remove(&key) {
            st.slots.insert(key, Slot::Leased { bytes: m.weight_bytes() });
            return Ok(Lease { store: self.clone(), key, module: Some(*m) });
        }
        if self.policy == Policy::Strict {
            let evict: Vec<ModuleKey> = st.slots.keys().copied().filter(|k| k.group() != group).collect();
            for k in evict {
                st.slots.remove(&k);
                tracing::info!(module = k.as_str(), "evicting (STRICT: one coexistence group at a time)");
            }
        }
        st.slots.insert(key, Slot::Leased { bytes: 0 });
        self.metrics.resident_weight_bytes.set(st.resident_bytes() as i64);
        drop(st);
        // Load without the lock: other groups' leases and the metrics stay responsive.
        let t0 = std::time::Instant::now();
        let loaded = (self.loader)(key, backend);
        let mut st = self.state.lock().unwrap();
        match loaded {
            Ok(m) => {
                st.slots.insert(key, Slot::Leased { bytes: m.weight_bytes() });
                self.loads.fetch_add(1, Ordering::SeqCst);
                self.metrics.module_loads_total.inc();
                self.metrics.resident_weight_bytes.set(st.resident_bytes() as i64);
                tracing::info!(module = key.as_str(), weight_bytes = m.weight_bytes(), seconds = t0.elapsed().as_secs_f64(), "module loaded");
                Ok(Lease { store: self.clone(), key, module: Some(m) })
            }
            Err(e) => {
                st.slots.remove(&key);
                *st.held.entry(group).or_default() -= 1;
                self.changed.notify_all();
                Err(format!("loading the {} module: {e}", key.as_str()))
            }
        }
    }

    fn give_back(&self, key: ModuleKey, m: Module) {
        let mut st = self.state.lock().unwrap();
        st.slots.insert(key, Slot::Idle(Box::new(m)));
        *st.held.entry(key.group()).or_default() -= 1;
        self.changed.notify_all();
    }

    fn unpin(&self, group: Group) {
        let mut st = self.state.lock().unwrap();
        *st.held.entry(group).or_default() -= 1;
        self.changed.notify_all();
    }
}

/// A module out of the store; returned when dropped.
pub struct Lease {
    store: Arc<ModelStore>,
    key: ModuleKey,
    module: Option<Module>,
}

impl Lease {
    pub fn ar(&mut self) -> &mut ArModel {
        match self.module.as_mut() {
            Some(Module::Ar(m)) => m,
            _ => panic!("lease of {:?} used as the AR module", self.key),
        }
    }
    pub fn nar(&mut self) -> &mut NarModel {
        match self.module.as_mut() {
            Some(Module::Nar(m)) => m,
            _ => panic!("lease of {:?} used as the NAR module", self.key),
        }
    }
    pub fn vae(&mut self) -> &mut VaeModel {
        match self.module.as_mut() {
            Some(Module::Vae(m)) => m,
            _ => panic!("lease of {:?} used as the VAE module", self.key),
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let Some(m) = self.module.take() {
            self.store.give_back(self.key, m);
        }
    }
}

/// A hold on a group without a module; released when dropped.
pub struct GroupPin {
    store: Arc<ModelStore>,
    group: Group,
}

impl Drop for GroupPin {
    fn drop(&mut self) {
        self.store.unpin(self.group);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use yued_engine::models::yue2::demo::{write_demo, Preset};
    use yued_engine::gguf::GgufFile;
    use yued_engine::models::yue2::config::BackboneInfo;

    fn store(policy: Policy) -> (tempfile::TempDir, Arc<ModelStore>) {
        let dir = tempfile::tempdir().unwrap();
        let (bb, vae) = write_demo(dir.path(), Preset::Tiny, 1, &mut |_, _| {}).unwrap();
        let loader: Box<Loader> = Box::new(move |k, backend| {
            let f = GgufFile::open(if k == ModuleKey::Vae { &vae } else { &bb }).map_err(|e| e.to_string())?;
            Ok(match k {
                ModuleKey::Ar => Module::Ar(ArModel::load(&f, &BackboneInfo::from_gguf(&f).map_err(|e| e.to_string())?, backend).map_err(|e| e.to_string())?),
                ModuleKey::Nar => Module::Nar(NarModel::load(&f, &BackboneInfo::from_gguf(&f).map_err(|e| e.to_string())?, backend).map_err(|e| e.to_string())?),
                ModuleKey::Vae => Module::Vae(VaeModel::load(&f, backend).map_err(|e| e.to_string())?),
            })
        });
        (dir, ModelStore::new(policy, loader, Metrics::new()))
    }

    #[test]
    fn strict_keeps_one_group_and_a_conflicting_lease_waits() {
        let (_d, s) = store(Policy::Strict);
        let b = Backend::cpu(1).unwrap();
        let ar = s.lease(ModuleKey::Ar, &b).unwrap();
        assert_eq!(s.residency().modules, 1);
        // The synthesis group waits until the AR lease is dropped.
        let s2 = s.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        let t = std::thread::spawn(move || {
            let b = Backend::cpu(1).unwrap();
            let nar = s2.lease(ModuleKey::Nar, &b).unwrap();
            tx.send(()).unwrap();
            let vae = s2.lease(ModuleKey::Vae, &b).unwrap();
            drop((nar, vae));
        });
        assert!(rx.recv_timeout(Duration::from_millis(300)).is_err(), "the NAR lease must wait for the AR group");
        drop(ar);
        rx.recv_timeout(Duration::from_secs(30)).expect("the NAR lease proceeds once AR is released");
        t.join().unwrap();
        // AR was evicted when the synthesis group loaded: NAR + VAE resident, 3 loads so far.
        let r = s.residency();
        assert_eq!((r.loads, r.modules), (3, 2));
        // A re-lease of a resident module is a cache hit on the same instance.
        drop(s.lease(ModuleKey::Vae, &b).unwrap());
        assert_eq!(s.residency().loads, 3);
        // Back to AR: the synthesis group goes.
        drop(s.lease(ModuleKey::Ar, &b).unwrap());
        assert_eq!((s.residency().loads, s.residency().modules), (4, 1));
        // A pin keeps the synthesis group; AR waits for it.
        let pin = s.pin(Group::Synthesis);
        let s3 = s.clone();
        let t = std::thread::spawn(move || {
            let b = Backend::cpu(1).unwrap();
            drop(s3.lease(ModuleKey::Ar, &b).unwrap());
        });
        std::thread::sleep(Duration::from_millis(200));
        assert!(!t.is_finished(), "AR waits for the pinned synthesis group");
        drop(pin);
        t.join().unwrap();
    }

    #[test]
    fn never_keeps_everything_and_nothing_waits() {
        let (_d, s) = store(Policy::Never);
        let b = Backend::cpu(1).unwrap();
        let ar = s.lease(ModuleKey::Ar, &b).unwrap();
        let nar = s.lease(ModuleKey::Nar, &b).unwrap();
        let vae = s.lease(ModuleKey::Vae, &b).unwrap();
        drop((ar, nar, vae));
        drop(s.lease(ModuleKey::Ar, &b).unwrap());
        let r = s.residency();
        assert_eq!((r.loads, r.modules), (3, 3));
        assert!(r.weight_bytes > 0);
    }
}
