//! The ModelStore: the single owner of the loaded components of every family and of the
//! residency policy. Stage threads lease a component for the time they compute with it;
//! the store loads it on demand. Components are keyed by (family, component, file), and
//! each family declares its coexistence groups (YuE2: { AR } and the synthesis group
//! { NAR, VAE }): under STRICT at most one group is resident at a time, across families.
//! A lease that conflicts with a group still held waits (it never aborts the daemon); a
//! lease of an unloaded component first evicts the idle components of the other groups.
//! NEVER (`--keep-loaded`) keeps everything that was ever loaded, and a component named
//! with another file loads beside the first.
//!
//! A lease moves the component out of the store to the leasing thread (exclusive `&mut`,
//! no lock held while computing) and back when dropped. A group pin holds a group without
//! a component: the NAR renderer pins the synthesis group for a job until the VAE tiler
//! has decoded its last tile, so the next job's AR half cannot evict the VAE between chunks.
//! The store knows no family: what a component is and how it loads is the loader's.
use std::any::Any;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use yued_contract::metrics::Metrics;
use yued_engine::ggml::Backend;
use yued_protocol::Family;

/// A coexistence group of a family (STRICT keeps one resident).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Group {
    pub family: Family,
    pub name: &'static str,
}

/// Which component: its family, its part, its group, its file, and its variant (the
/// adapters merged into it, `name@strength,...`; "" for the file as it is). Two variants of
/// one component are two modules: STRICT swaps them like two files, `--keep-loaded` keeps
/// both.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ComponentKey {
    pub family: Family,
    pub component: &'static str,
    pub group: &'static str,
    pub file: PathBuf,
    pub variant: String,
}

impl ComponentKey {
    pub fn group(&self) -> Group {
        Group { family: self.family, name: self.group }
    }
    /// `family/component` (and its variant), for logs and errors.
    pub fn name(&self) -> String {
        if self.variant.is_empty() {
            format!("{}/{}", self.family, self.component)
        } else {
            format!("{}/{} [{}]", self.family, self.component, self.variant)
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

/// A loaded component of any family.
pub trait Component: Any + Send {
    /// Device bytes of its weights.
    fn weight_bytes(&self) -> usize;
    fn as_any_mut(&mut self) -> &mut dyn Any;
}

/// A loaded component.
pub type Module = Box<dyn Component>;

/// Loads a component onto a backend (the files and their checks live with the caller).
pub type Loader = dyn Fn(&ComponentKey, &Backend) -> Result<Module, String> + Send + Sync;

enum Slot {
    Idle(Module),
    /// Out on a lease (or being loaded for one); `bytes` of weights.
    Leased {
        bytes: usize,
    },
}

#[derive(Default)]
struct State {
    slots: HashMap<ComponentKey, Slot>,
    /// Leases and pins per group.
    held: HashMap<Group, usize>,
}

impl State {
    fn resident_bytes(&self) -> usize {
        self.slots
            .values()
            .map(|s| match s {
                Slot::Idle(m) => m.weight_bytes(),
                Slot::Leased { bytes } => *bytes,
            })
            .sum()
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
        Arc::new(ModelStore {
            policy,
            loader,
            state: Mutex::new(State::default()),
            changed: Condvar::new(),
            loads: AtomicU64::new(0),
            metrics,
        })
    }

    pub fn policy(&self) -> Policy {
        self.policy
    }

    pub fn residency(&self) -> Residency {
        let st = self.state.lock().unwrap();
        Residency {
            loads: self.loads.load(Ordering::SeqCst),
            modules: st.slots.len(),
            weight_bytes: st.resident_bytes(),
        }
    }

    /// Under STRICT, whether a group other than `g` is held.
    fn conflicts(&self, st: &State, g: Group) -> bool {
        self.policy == Policy::Strict && st.held.iter().any(|(h, &n)| *h != g && n > 0)
    }

    /// Holds `group` resident without taking a component (STRICT keeps the other groups
    /// out). Waits while another group is held.
    pub fn pin(self: &Arc<Self>, group: Group) -> GroupPin {
        let mut st = self.state.lock().unwrap();
        while self.conflicts(&st, group) {
            st = self.changed.wait(st).unwrap();
        }
        *st.held.entry(group).or_default() += 1;
        GroupPin { store: self.clone(), group }
    }

    /// Takes `key` for exclusive use on `backend`'s thread, loading it if needed; waits
    /// while a component of another group is held under STRICT, or while `key` itself is
    /// out.
    pub fn lease(self: &Arc<Self>, key: &ComponentKey, backend: &Backend) -> Result<Lease, String> {
        let group = key.group();
        let mut st = self.state.lock().unwrap();
        loop {
            let conflict = self.conflicts(&st, group);
            let out = matches!(st.slots.get(key), Some(Slot::Leased { .. }));
            if !conflict && !out {
                break;
            }
            st = self.changed.wait(st).unwrap();
        }
        *st.held.entry(group).or_default() += 1;
        if let Some(Slot::Idle(m)) = st.slots.remove(key) {
            st.slots.insert(key.clone(), Slot::Leased { bytes: m.weight_bytes() });
            return Ok(Lease { store: self.clone(), key: key.clone(), module: Some(m) });
        }
        if self.policy == Policy::Strict {
            // Other groups go, and so does an idle other variant or file of this component.
            let same = |k: &ComponentKey| k.family == key.family && k.component == key.component;
            let evict: Vec<ComponentKey> = st
                .slots
                .iter()
                .filter(|(k, slot)| k.group() != group || (same(k) && matches!(slot, Slot::Idle(_))))
                .map(|(k, _)| k.clone())
                .collect();
            for k in evict {
                st.slots.remove(&k);
                tracing::info!(module = %k.name(), "evicting (STRICT: one coexistence group at a time)");
            }
        }
        st.slots.insert(key.clone(), Slot::Leased { bytes: 0 });
        self.metrics.resident_weight_bytes.set(st.resident_bytes() as i64);
        drop(st);
        // Load without the lock: other groups' leases and the metrics stay responsive.
        let t0 = std::time::Instant::now();
        let loaded = (self.loader)(key, backend);
        let mut st = self.state.lock().unwrap();
        match loaded {
            Ok(m) => {
                st.slots.insert(key.clone(), Slot::Leased { bytes: m.weight_bytes() });
                self.loads.fetch_add(1, Ordering::SeqCst);
                self.metrics.module_loads_total.inc();
                self.metrics.resident_weight_bytes.set(st.resident_bytes() as i64);
                tracing::info!(module = %key.name(), file = %key.file.display(), weight_bytes = m.weight_bytes(),
                    seconds = t0.elapsed().as_secs_f64(), "module loaded");
                Ok(Lease { store: self.clone(), key: key.clone(), module: Some(m) })
            }
            Err(e) => {
                st.slots.remove(key);
                *st.held.entry(group).or_default() -= 1;
                self.changed.notify_all();
                Err(format!("loading the {} module: {e}", key.name()))
            }
        }
    }

    fn give_back(&self, key: &ComponentKey, m: Module) {
        let mut st = self.state.lock().unwrap();
        st.slots.insert(key.clone(), Slot::Idle(m));
        *st.held.entry(key.group()).or_default() -= 1;
        self.changed.notify_all();
    }

    fn unpin(&self, group: Group) {
        let mut st = self.state.lock().unwrap();
        *st.held.entry(group).or_default() -= 1;
        self.changed.notify_all();
    }
}

/// A component out of the store; returned when dropped.
pub struct Lease {
    store: Arc<ModelStore>,
    key: ComponentKey,
    module: Option<Module>,
}

impl Lease {
    /// The component as its concrete type.
    pub fn get<T: Component>(&mut self) -> &mut T {
        let name = self.key.name();
        self.module
            .as_mut()
            .and_then(|m| m.as_any_mut().downcast_mut::<T>())
            .unwrap_or_else(|| panic!("lease of {name} used as a {}", std::any::type_name::<T>()))
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let Some(m) = self.module.take() {
            self.store.give_back(&self.key, m);
        }
    }
}

/// A hold on a group without a component; released when dropped.
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
    use crate::stage::WorkerConfig;
    use std::time::Duration;
    use yued_engine::models::yue2::demo::{write_demo, Preset};
    use yued_engine::models::yue2::pipeline::{PipelineOptions, Shared};

    struct Keys {
        ar: ComponentKey,
        nar: ComponentKey,
        vae: ComponentKey,
    }

    fn store(policy: Policy) -> (tempfile::TempDir, Arc<ModelStore>, Keys) {
        let dir = tempfile::tempdir().unwrap();
        let (bb, vae) = write_demo(dir.path(), Preset::Tiny, 1, &mut |_, _| {}).unwrap();
        let cfg = WorkerConfig {
            model: bb.clone(),
            vae,
            device: "CPU".into(),
            threads: 1,
            priority: Default::default(),
            options: PipelineOptions::default(),
            keep_loaded: false,
            parallel: 1,
            mm3: None,
            adapters: None,
            companion: None,
            tokenizer: None,
            transcriber: None,
        };
        let shared = Shared::open(&bb, &PipelineOptions::default()).unwrap();
        let loader: Box<Loader> = Box::new(move |k, backend| crate::yue2::load(k, backend, &shared, None, None));
        let keys =
            Keys { ar: crate::yue2::ar(&cfg, None), nar: crate::yue2::nar(&cfg, None), vae: crate::yue2::vae(&cfg) };
        (dir, ModelStore::new(policy, loader, Metrics::new()), keys)
    }

    #[test]
    fn strict_keeps_one_group_and_a_conflicting_lease_waits() {
        let (_d, s, k) = store(Policy::Strict);
        let b = Backend::cpu(1).unwrap();
        let ar = s.lease(&k.ar, &b).unwrap();
        assert_eq!(s.residency().modules, 1);
        // The synthesis group waits until the AR lease is dropped.
        let s2 = s.clone();
        let (nar_key, vae_key) = (k.nar.clone(), k.vae.clone());
        let (tx, rx) = std::sync::mpsc::channel();
        let t = std::thread::spawn(move || {
            let b = Backend::cpu(1).unwrap();
            let nar = s2.lease(&nar_key, &b).unwrap();
            tx.send(()).unwrap();
            let vae = s2.lease(&vae_key, &b).unwrap();
            drop((nar, vae));
        });
        assert!(rx.recv_timeout(Duration::from_millis(300)).is_err(), "the NAR lease must wait for the AR group");
        drop(ar);
        rx.recv_timeout(Duration::from_secs(30)).expect("the NAR lease proceeds once AR is released");
        t.join().unwrap();
        // AR was evicted when the synthesis group loaded: NAR + VAE resident, 3 loads so far.
        let r = s.residency();
        assert_eq!((r.loads, r.modules), (3, 2));
        // A re-lease of a resident component is a cache hit on the same instance, of its type.
        let mut vae = s.lease(&k.vae, &b).unwrap();
        assert_eq!(vae.get::<yued_engine::models::yue2::vae::VaeModel>().info.sample_rate, 48000);
        drop(vae);
        assert_eq!(s.residency().loads, 3);
        // Back to AR: the synthesis group goes.
        drop(s.lease(&k.ar, &b).unwrap());
        assert_eq!((s.residency().loads, s.residency().modules), (4, 1));
        // A pin keeps the synthesis group; AR waits for it.
        let pin = s.pin(crate::yue2::synthesis_group());
        let s3 = s.clone();
        let ar_key = k.ar.clone();
        let t = std::thread::spawn(move || {
            let b = Backend::cpu(1).unwrap();
            drop(s3.lease(&ar_key, &b).unwrap());
        });
        std::thread::sleep(Duration::from_millis(200));
        assert!(!t.is_finished(), "AR waits for the pinned synthesis group");
        drop(pin);
        t.join().unwrap();
    }

    /// Two adapter variants of one half: STRICT keeps one (a swap, like another file);
    /// NEVER keeps both, and a variant leased again is a cache hit.
    #[test]
    fn variants_of_a_half_swap_under_strict_and_stay_under_never() {
        for (policy, resident) in [(Policy::Strict, 1), (Policy::Never, 2)] {
            let dir = tempfile::tempdir().unwrap();
            let (bb, _) = write_demo(dir.path(), Preset::Tiny, 1, &mut |_, _| {}).unwrap();
            let shared = Shared::open(&bb, &PipelineOptions::default()).unwrap();
            // The variant's adapters do not matter to the store: load the plain half.
            let loader: Box<Loader> = Box::new(move |k, backend| {
                crate::yue2::load(&ComponentKey { variant: String::new(), ..k.clone() }, backend, &shared, None, None)
            });
            let s = ModelStore::new(policy, loader, Metrics::new());
            let plain = ComponentKey {
                family: Family::Yue2,
                component: "ar",
                group: crate::yue2::AR_GROUP,
                file: bb.clone(),
                variant: String::new(),
            };
            let adapted = ComponentKey { variant: "x.safetensors@0.5".into(), ..plain.clone() };
            assert_eq!(adapted.name(), "yue2/ar [x.safetensors@0.5]");
            let b = Backend::cpu(1).unwrap();
            drop(s.lease(&adapted, &b).unwrap());
            drop(s.lease(&plain, &b).unwrap());
            assert_eq!((s.residency().loads, s.residency().modules), (2, resident), "{policy:?}");
            drop(s.lease(&adapted, &b).unwrap());
            assert_eq!(s.residency().loads, if policy == Policy::Strict { 3 } else { 2 }, "{policy:?}");
        }
    }

    #[test]
    fn never_keeps_everything_and_nothing_waits() {
        let (_d, s, k) = store(Policy::Never);
        let b = Backend::cpu(1).unwrap();
        let ar = s.lease(&k.ar, &b).unwrap();
        let nar = s.lease(&k.nar, &b).unwrap();
        let vae = s.lease(&k.vae, &b).unwrap();
        drop((ar, nar, vae));
        drop(s.lease(&k.ar, &b).unwrap());
        let r = s.residency();
        assert_eq!((r.loads, r.modules), (3, 3));
        assert!(r.weight_bytes > 0);
    }

    /// The same component named with another file is another entry: under NEVER both stay
    /// resident (minimaxmusic.cpp's per-request component files), and a lease used as the wrong
    /// type names both.
    #[test]
    fn a_component_of_another_file_loads_beside_the_first() {
        let (d, s, k) = store(Policy::Never);
        let b = Backend::cpu(1).unwrap();
        let other = d.path().join("other");
        let (_, vae2) = write_demo(&other, Preset::Tiny, 2, &mut |_, _| {}).unwrap();
        let k2 = ComponentKey { file: vae2, ..k.vae.clone() };
        drop(s.lease(&k.vae, &b).unwrap());
        drop(s.lease(&k2, &b).unwrap());
        assert_eq!((s.residency().loads, s.residency().modules), (2, 2));
        let mut l = s.lease(&k2, &b).unwrap();
        let err = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            l.get::<yued_engine::models::yue2::ar::ArModel>();
        }))
        .unwrap_err();
        let msg = err.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(msg.contains("yue2/vae") && msg.contains("ArModel"), "{msg}");
    }
}
