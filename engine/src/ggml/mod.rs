//! The one safe layer over the ggml C API.
//!
//! Every `unsafe` block of the project lives in this module tree. The rest of the engine
//! builds graphs through [`Context`] (tensor metadata and op nodes), runs them on a
//! [`Backend`] (CPU, CUDA0, Vulkan0, ...), keeps weights and KV caches in [`Buffer`]s, and
//! places graph intermediates with a reusable [`Allocator`].
//!
//! Lifetimes: a [`Tensor<'a>`] is a copyable handle that borrows the [`Context`] holding
//! its metadata, so a tensor can never outlive the arena it points into. Weight tensors live
//! in a long-lived context and coerce to the shorter lifetime of a per-step graph context.
//! Shape preconditions that ggml would `abort()` on are checked here first and reported as
//! Rust panics with the shapes in the message (they are programming errors, not user input).

pub mod llama_ref;

/// How much a compute thread yields to the rest of the process and the machine.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ComputePriority {
    /// Unchanged (nice 0).
    Normal,
    /// nice 10: the daemon's HTTP and WebSocket threads win a contended core most of the time.
    #[default]
    Low,
    /// SCHED_IDLE: the compute runs only on cycles nothing else wants; any waking thread
    /// preempts it at once. Lowest serving latency on a CPU-only box, but other busy
    /// programs on the machine slow the songs down a lot.
    Idle,
}

impl std::str::FromStr for ComputePriority {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "normal" => Ok(ComputePriority::Normal),
            "low" => Ok(ComputePriority::Low),
            "idle" => Ok(ComputePriority::Idle),
            other => Err(format!("compute priority '{other}': expected low, idle or normal")),
        }
    }
}

/// Sets the calling thread's scheduling priority (Linux: a thread's nice value and policy
/// are its own, and the ggml workers it starts inherit them). Compute threads call it so
/// that, on a machine whose cores they saturate, the daemon's HTTP and WebSocket threads
/// still answer at once. A failure is harmless and ignored; other systems keep the default.
pub fn set_thread_priority(p: ComputePriority) {
    #[cfg(target_os = "linux")]
    // SAFETY: plain syscalls on the calling thread (who/pid = 0) with valid arguments.
    unsafe {
        match p {
            ComputePriority::Normal => {}
            ComputePriority::Low => {
                libc::setpriority(libc::PRIO_PROCESS, 0, 10);
            }
            ComputePriority::Idle => {
                let param = libc::sched_param { sched_priority: 0 };
                libc::sched_setscheduler(0, libc::SCHED_IDLE, &param);
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = p;
}
mod ops;
pub mod q8;
mod store;
mod types;

pub use store::TensorStore;
pub use types::{decode_to_f32, encode_f32, GgmlType};

use ggml_sys as sys;
use std::ffi::{CStr, CString};
use std::marker::PhantomData;
use std::ptr::NonNull;
use std::sync::Once;

/// Errors of the backend layer (device lookup, allocation, compute).
#[derive(Debug, thiserror::Error)]
pub enum GgmlError {
    #[error("unknown compute device '{0}' (available: {1})")]
    UnknownDevice(String, String),
    #[error("cannot initialise compute device '{0}'")]
    DeviceInit(String),
    #[error("out of memory allocating {what} ({bytes} bytes) on {device}")]
    Alloc { what: String, bytes: usize, device: String },
    #[error("graph compute failed on {device} (status {status})")]
    Compute { device: String, status: i32 },
    #[error("ggml context allocation failed ({0} bytes of metadata)")]
    Context(usize),
    /// A graph node the device cannot compute (its kernels would give garbage or crash).
    #[error("{device} cannot compute {node}")]
    Unsupported { device: String, node: String },
    /// A graph holds more nodes or leaves than it was sized for (ggml would abort).
    #[error("graph '{graph}' needs {nodes} nodes and {leafs} leaves but was sized for {size}")]
    GraphFull { graph: String, nodes: usize, leafs: usize, size: usize },
}

static LOG_ONCE: Once = Once::new();

unsafe extern "C" fn log_to_tracing(
    level: sys::ggml_log_level,
    text: *const std::os::raw::c_char,
    _user: *mut std::os::raw::c_void,
) {
    if text.is_null() {
        return;
    }
    // SAFETY: ggml passes a NUL-terminated string valid for the duration of the call.
    let msg = unsafe { CStr::from_ptr(text) }.to_string_lossy();
    let msg = msg.trim_end();
    if msg.is_empty() {
        return;
    }
    match level {
        sys::GGML_LOG_LEVEL_ERROR => tracing::error!(target: "ggml", "{msg}"),
        sys::GGML_LOG_LEVEL_WARN => tracing::warn!(target: "ggml", "{msg}"),
        sys::GGML_LOG_LEVEL_INFO => tracing::debug!(target: "ggml", "{msg}"),
        _ => tracing::trace!(target: "ggml", "{msg}"),
    }
}

/// Routes ggml's own log lines into `tracing` (once per process).
pub fn init_logging() {
    LOG_ONCE.call_once(|| {
        // SAFETY: the callback is a plain function valid for the whole process.
        unsafe { sys::ggml_log_set(Some(log_to_tracing), std::ptr::null_mut()) };
    });
}

/// Names of every compute device the linked ggml knows (`CPU`, `CUDA0`, ...).
pub fn device_names() -> Vec<String> {
    init_logging();
    // SAFETY: the registry functions only read static tables.
    unsafe {
        let n = sys::ggml_backend_dev_count();
        (0..n)
            .map(|i| {
                let dev = sys::ggml_backend_dev_get(i);
                CStr::from_ptr(sys::ggml_backend_dev_name(dev)).to_string_lossy().into_owned()
            })
            .collect()
    }
}

/// The vector extensions ggml's CPU kernels were compiled for, and those this CPU has that
/// they leave unused. A portable release build targets AVX2; a build with
/// `RUSTFLAGS="-C target-cpu=native"` compiles ggml for the host (AVX-512 and VNNI where
/// present), which the compute-bound work (prefill, batched decode steps, the NAR, the
/// VAE) feels most.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CpuSimd {
    pub built: Vec<&'static str>,
    pub unused: Vec<&'static str>,
}

impl CpuSimd {
    /// What the linked ggml was built with and what this CPU adds.
    pub fn detect() -> Self {
        // SAFETY: each of these returns a compile-time constant of the ggml CPU backend.
        let has = |f: unsafe extern "C" fn() -> std::os::raw::c_int| unsafe { f() } != 0;
        let built: Vec<&'static str> = [
            (has(sys::ggml_cpu_has_avx2), "AVX2"),
            (has(sys::ggml_cpu_has_fma), "FMA"),
            (has(sys::ggml_cpu_has_avx_vnni), "AVX-VNNI"),
            (has(sys::ggml_cpu_has_avx512), "AVX-512"),
            (has(sys::ggml_cpu_has_avx512_vnni), "AVX-512 VNNI"),
            (has(sys::ggml_cpu_has_avx512_bf16), "AVX-512 BF16"),
            (has(sys::ggml_cpu_has_neon), "NEON"),
            (has(sys::ggml_cpu_has_dotprod), "DOTPROD"),
            (has(sys::ggml_cpu_has_matmul_int8), "I8MM"),
            (has(sys::ggml_cpu_has_sve), "SVE"),
        ]
        .into_iter()
        .filter_map(|(on, name)| on.then_some(name))
        .collect();
        let unused = host_simd().into_iter().filter(|f| !built.contains(f)).collect();
        CpuSimd { built, unused }
    }

    /// One line for a log or a benchmark's header.
    pub fn describe(&self) -> String {
        let built = if self.built.is_empty() { "no vector extensions".to_string() } else { self.built.join(", ") };
        if self.unused.is_empty() {
            format!("ggml CPU kernels built for {built}")
        } else {
            format!(
                "ggml CPU kernels built for {built}; this CPU also has {} (a build with \
                 RUSTFLAGS=\"-C target-cpu=native\" uses them)",
                self.unused.join(", ")
            )
        }
    }
}

/// Whether ggml's CPU backend was built with OpenMP. Its threads then wait at each node's
/// barrier in libgomp, which sleeps after a short spin; without it they spin until the partner
/// thread comes back, and a box busy with other work turns that into long stalls (see
/// docs/BENCHMARKS.md, "A busy box"). ggml's CMake build leaves OpenMP out, with a warning only,
/// where it finds no OpenMP runtime (a clang without libomp, say).
pub fn cpu_uses_openmp() -> bool {
    let name = CString::new("ggml_backend_get_features").unwrap();
    // SAFETY: the CPU backend's registry is static; the proc address, when there is one, is
    // the registry's `ggml_backend_get_features_t`, whose array is static and ends with a NULL
    // name, and whose strings are static C strings.
    unsafe {
        let reg = sys::ggml_backend_cpu_reg();
        let f = sys::ggml_backend_reg_get_proc_address(reg, name.as_ptr());
        if f.is_null() {
            return false;
        }
        let get: sys::ggml_backend_get_features_t = std::mem::transmute(f);
        let Some(get) = get else { return false };
        let mut p = get(reg);
        while !p.is_null() && !(*p).name.is_null() {
            if CStr::from_ptr((*p).name).to_bytes() == b"OPENMP" {
                return true;
            }
            p = p.add(1);
        }
        false
    }
}

/// The x86 extensions ggml can use that this CPU reports (none elsewhere).
fn host_simd() -> Vec<&'static str> {
    #[cfg(target_arch = "x86_64")]
    {
        [
            (std::arch::is_x86_feature_detected!("avx2"), "AVX2"),
            (std::arch::is_x86_feature_detected!("fma"), "FMA"),
            (std::arch::is_x86_feature_detected!("avx512f"), "AVX-512"),
            (std::arch::is_x86_feature_detected!("avx512vnni"), "AVX-512 VNNI"),
            (std::arch::is_x86_feature_detected!("avx512bf16"), "AVX-512 BF16"),
        ]
        .into_iter()
        .filter_map(|(on, name)| on.then_some(name))
        .collect()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        Vec::new()
    }
}

/// An arena of tensor metadata and graph nodes. Created with `no_alloc`: tensor data
/// always lives in a backend [`Buffer`], never inside the context.
pub struct Context {
    ptr: NonNull<sys::ggml_context>,
    mem_size: usize,
    /// See [`Context::set_q8_row_products`].
    q8_row_products: std::cell::Cell<bool>,
}

// SAFETY: a ggml context is plain memory owned by this value; it is moved between threads
// but never used from two at once (no Sync).
unsafe impl Send for Context {}

impl Context {
    /// A context with room for `n_tensors` tensors and, if `graph_nodes > 0`, one graph of
    /// that many nodes.
    pub fn new(n_tensors: usize, graph_nodes: usize) -> Result<Self, GgmlError> {
        init_logging();
        // SAFETY: pure size computations.
        let mut mem_size = unsafe { sys::ggml_tensor_overhead() } * n_tensors.max(1);
        if graph_nodes > 0 {
            mem_size += unsafe { sys::ggml_graph_overhead_custom(graph_nodes, false) };
        }
        let params = sys::ggml_init_params { mem_size, mem_buffer: std::ptr::null_mut(), no_alloc: true };
        // SAFETY: ggml_init allocates its own buffer; NULL on failure.
        let ptr = unsafe { sys::ggml_init(params) };
        NonNull::new(ptr)
            .map(|ptr| Context { ptr, mem_size, q8_row_products: std::cell::Cell::new(false) })
            .ok_or(GgmlError::Context(mem_size))
    }

    pub(crate) fn raw(&self) -> *mut sys::ggml_context {
        self.ptr.as_ptr()
    }

    /// Bytes of metadata this arena holds.
    pub fn mem_size(&self) -> usize {
        self.mem_size
    }

    /// Forgets every tensor and graph of the arena, keeping its memory, so a graph can be
    /// rebuilt each step at the same addresses. Needs `&mut`: no tensor handle survives it.
    pub fn reset(&mut self) {
        // SAFETY: exclusive access; all Tensor<'_> borrows of self have ended.
        unsafe { sys::ggml_reset(self.raw()) }
    }

    /// A new tensor of `ne` (innermost dimension first, up to 4).
    pub fn new_tensor(&self, ty: GgmlType, ne: &[i64]) -> Tensor<'_> {
        self.ensure_room(1);
        assert!((1..=4).contains(&ne.len()), "tensor rank {} out of 1..=4", ne.len());
        assert!(ne.iter().all(|&n| n >= 0), "negative dimension in {ne:?}");
        if ty.block_size() > 1 {
            assert!(ne[0] % ty.block_size() as i64 == 0, "row of {} elements is not whole {} blocks", ne[0], ty.name());
        }
        // SAFETY: the context has metadata room (ggml asserts otherwise, sized by caller).
        let p = unsafe { sys::ggml_new_tensor(self.raw(), ty.raw(), ne.len() as i32, ne.as_ptr()) };
        Tensor::from_raw(p)
    }

    /// A context for one graph of up to `nodes` nodes (and as many leaves):
    /// room for the graph and for two tensors per node (views and inputs included).
    pub fn for_graph(nodes: usize) -> Result<Self, GgmlError> {
        Context::new(2 * nodes + 16, nodes)
    }

    /// An empty compute graph named `name` (errors name it) with room for `nodes` nodes and
    /// `nodes` leaves.
    pub fn new_graph(&self, name: &str, nodes: usize) -> Graph<'_> {
        // SAFETY: pure size computation.
        let need = unsafe { sys::ggml_graph_overhead_custom(nodes, false) };
        // SAFETY: reads the arena's counters.
        let used = unsafe { sys::ggml_used_mem(self.raw()) };
        assert!(
            used + need <= self.mem_size,
            "ggml context of {} bytes has no room for graph '{name}' of {nodes} nodes",
            self.mem_size
        );
        // SAFETY: room checked above.
        let p = unsafe { sys::ggml_new_graph_custom(self.raw(), nodes, false) };
        Graph {
            ptr: NonNull::new(p).expect("ggml_new_graph_custom returned NULL"),
            name: name.to_string(),
            size: nodes,
            seen: std::collections::HashSet::new(),
            nodes: 0,
            leafs: 0,
            over: None,
            _ctx: PhantomData,
        }
    }

    /// Panics, naming the arena's size, when it cannot hold `n` more tensors: ggml would
    /// abort. Graph contexts are sized from their graphs (see [`Context::for_graph`]), so
    /// this is a programming error, never an input's.
    pub(crate) fn ensure_room(&self, n: usize) {
        // SAFETY: pure size computation and a read of the arena's counters.
        let (per, used) = unsafe { (sys::ggml_tensor_overhead(), sys::ggml_used_mem(self.raw())) };
        assert!(
            used + n * per <= self.mem_size,
            "ggml context of {} bytes ({} tensors) is full",
            self.mem_size,
            self.mem_size / per
        );
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: we own the context.
        unsafe { sys::ggml_free(self.raw()) }
    }
}

/// A handle on one tensor of a [`Context`]: shape, type, name, and (once a buffer or an
/// allocator placed it) its data on a backend.
#[derive(Clone, Copy)]
pub struct Tensor<'a> {
    ptr: NonNull<sys::ggml_tensor>,
    _ctx: PhantomData<&'a Context>,
}

impl<'a> Tensor<'a> {
    pub(crate) fn from_raw(p: *mut sys::ggml_tensor) -> Self {
        Tensor { ptr: NonNull::new(p).expect("ggml returned a NULL tensor"), _ctx: PhantomData }
    }
    pub(crate) fn raw(&self) -> *mut sys::ggml_tensor {
        self.ptr.as_ptr()
    }
    fn t(&self) -> &sys::ggml_tensor {
        // SAFETY: the context outlives 'a and keeps the tensor struct alive.
        unsafe { self.ptr.as_ref() }
    }
    /// Elements per dimension, innermost first.
    pub fn ne(&self) -> [i64; 4] {
        self.t().ne
    }
    /// Byte strides per dimension.
    pub fn nb(&self) -> [usize; 4] {
        self.t().nb
    }
    pub fn ty(&self) -> GgmlType {
        GgmlType(self.t().type_)
    }
    pub fn nelements(&self) -> i64 {
        self.ne().iter().product()
    }
    pub fn nbytes(&self) -> usize {
        // SAFETY: reads the struct only.
        unsafe { sys::ggml_nbytes(self.raw()) }
    }
    pub fn is_contiguous(&self) -> bool {
        // SAFETY: reads the struct only.
        unsafe { sys::ggml_is_contiguous(self.raw()) }
    }
    pub fn name(&self) -> String {
        // SAFETY: name is a fixed NUL-terminated array in the struct.
        unsafe { CStr::from_ptr(self.t().name.as_ptr()) }.to_string_lossy().into_owned()
    }
    pub fn set_name(self, name: &str) -> Self {
        let c = CString::new(name).expect("tensor name with NUL");
        // SAFETY: ggml copies (and truncates) the name.
        unsafe { sys::ggml_set_name(self.raw(), c.as_ptr()) };
        self
    }
    /// Marks a graph input (the allocator gives it its own slot, never overwritten).
    pub fn set_input(self) -> Self {
        // SAFETY: flag on the struct.
        unsafe { sys::ggml_set_input(self.raw()) };
        self
    }
    /// Marks a graph output (kept alive until the end of the compute).
    pub fn set_output(self) -> Self {
        // SAFETY: flag on the struct.
        unsafe { sys::ggml_set_output(self.raw()) };
        self
    }
    /// Whether the tensor has data placed in some backend buffer.
    pub fn is_allocated(&self) -> bool {
        !self.t().buffer.is_null() || !self.t().data.is_null()
    }

    /// Writes raw bytes at `offset` into the tensor's backend memory.
    pub fn write_bytes(&self, offset: usize, bytes: &[u8]) {
        assert!(self.is_allocated(), "tensor '{}' has no buffer", self.name());
        assert!(
            offset + bytes.len() <= self.nbytes(),
            "write of {} bytes at {} overflows '{}' ({} bytes)",
            bytes.len(),
            offset,
            self.name(),
            self.nbytes()
        );
        // SAFETY: bounds checked above; the tensor has a buffer.
        unsafe { sys::ggml_backend_tensor_set(self.raw(), bytes.as_ptr().cast(), offset, bytes.len()) }
    }
    /// Sets every byte of the tensor's backend memory to zero (0.0 in F32, F16 and BF16)
    /// without building the values on the host first.
    pub fn fill_zero(&self) {
        assert!(self.is_allocated(), "tensor '{}' has no buffer", self.name());
        // SAFETY: the whole tensor, which has a buffer.
        unsafe { sys::ggml_backend_tensor_memset(self.raw(), 0, 0, self.nbytes()) }
    }
    /// Reads raw bytes at `offset` from the tensor's backend memory.
    pub fn read_bytes(&self, offset: usize, out: &mut [u8]) {
        assert!(self.is_allocated(), "tensor '{}' has no buffer", self.name());
        assert!(
            offset + out.len() <= self.nbytes(),
            "read of {} bytes at {} overflows '{}' ({} bytes)",
            out.len(),
            offset,
            self.name(),
            self.nbytes()
        );
        // SAFETY: bounds checked above.
        unsafe { sys::ggml_backend_tensor_get(self.raw(), out.as_mut_ptr().cast(), offset, out.len()) }
    }
    /// Uploads f32 values into an F32 tensor.
    pub fn write_f32(&self, v: &[f32]) {
        assert_eq!(self.ty(), GgmlType::F32, "write_f32 on a {} tensor '{}'", self.ty().name(), self.name());
        self.write_bytes(0, as_bytes(v));
    }
    /// Uploads i64 values into an I64 tensor (row indices of `set_rows`).
    pub fn write_i64(&self, v: &[i64]) {
        assert_eq!(self.ty(), GgmlType::I64, "write_i64 on a {} tensor '{}'", self.ty().name(), self.name());
        self.write_bytes(0, as_bytes(v));
    }
    /// Uploads raw 16-bit words into an F16 tensor (masks built as bit patterns).
    pub fn write_f16_bits(&self, v: &[u16]) {
        assert_eq!(self.ty(), GgmlType::F16, "write_f16_bits on a {} tensor '{}'", self.ty().name(), self.name());
        self.write_bytes(0, as_bytes(v));
    }
    /// Uploads i32 values into an I32 tensor.
    pub fn write_i32(&self, v: &[i32]) {
        assert_eq!(self.ty(), GgmlType::I32, "write_i32 on a {} tensor '{}'", self.ty().name(), self.name());
        self.write_bytes(0, as_bytes(v));
    }
    /// Downloads an F32 tensor (must be contiguous).
    pub fn read_f32(&self) -> Vec<f32> {
        assert_eq!(self.ty(), GgmlType::F32, "read_f32 on a {} tensor '{}'", self.ty().name(), self.name());
        let mut out = vec![0f32; self.nelements() as usize];
        self.read_bytes(0, as_bytes_mut(&mut out));
        out
    }
    /// Downloads any float tensor as f32.
    pub fn read_as_f32(&self) -> Vec<f32> {
        let mut raw = vec![0u8; self.nbytes()];
        self.read_bytes(0, &mut raw);
        types::decode_to_f32(self.ty(), &raw)
            .unwrap_or_else(|| panic!("cannot convert {} tensor '{}' to f32", self.ty().name(), self.name()))
    }
}

impl std::fmt::Debug for Tensor<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tensor({:?} {} {:?})", self.name(), self.ty().name(), self.ne())
    }
}

/// A compute graph built in a [`Context`].
///
/// It counts what it holds the way ggml does (every tensor reached through sources once:
/// a leaf when it has no op, a node otherwise), so a graph sized too small for its depth,
/// batch or length is an error naming it ([`GgmlError::GraphFull`], from the allocator or
/// the compute) instead of ggml's `abort()`: an expand that would not fit is not passed
/// to ggml at all.
pub struct Graph<'a> {
    ptr: NonNull<sys::ggml_cgraph>,
    name: String,
    size: usize,
    /// Every tensor the graph holds (nodes and leaves), by address.
    seen: std::collections::HashSet<usize>,
    nodes: usize,
    leafs: usize,
    /// Nodes and leaves the graph would need, once an expand did not fit.
    over: Option<(usize, usize)>,
    _ctx: PhantomData<&'a Context>,
}

impl<'a> Graph<'a> {
    /// A graph already built and checked (a kept one being computed again).
    fn built(ptr: NonNull<sys::ggml_cgraph>) -> Self {
        Graph {
            ptr,
            name: String::new(),
            size: usize::MAX,
            seen: Default::default(),
            nodes: 0,
            leafs: 0,
            over: None,
            _ctx: PhantomData,
        }
    }

    /// Adds `t` and everything it depends on, if the graph has room for them (else the
    /// graph is marked full and every later use of it fails with [`GgmlError::GraphFull`]).
    pub fn expand(&mut self, t: Tensor<'a>) {
        let (mut nodes, mut leafs) = (0, 0);
        let mut new: Vec<usize> = Vec::new();
        let mut stack = vec![t.raw()];
        while let Some(p) = stack.pop() {
            let at = p as usize;
            if self.seen.contains(&at) || new.contains(&at) {
                continue;
            }
            new.push(at);
            // SAFETY: tensors of contexts that outlive 'a; their sources are live tensors.
            let node = unsafe { &*p };
            stack.extend(node.src.iter().filter(|s| !s.is_null()).copied());
            if node.op == sys::GGML_OP_NONE && node.flags & sys::GGML_TENSOR_FLAG_PARAM as i32 == 0 {
                leafs += 1;
            } else {
                nodes += 1;
            }
        }
        self.seen.extend(new);
        if let Some((n, l)) = &mut self.over {
            *n += nodes;
            *l += leafs;
            return;
        }
        if self.nodes + nodes > self.size || self.leafs + leafs > self.size {
            self.over = Some((self.nodes + nodes, self.leafs + leafs));
            return;
        }
        self.nodes += nodes;
        self.leafs += leafs;
        // SAFETY: both live in contexts that outlive 'a; room for every new node and leaf
        // was checked above.
        unsafe { sys::ggml_build_forward_expand(self.ptr.as_ptr(), t.raw()) }
        debug_assert_eq!(self.n_nodes() as usize, self.nodes, "graph '{}': node count differs from ggml's", self.name);
    }

    /// Whether everything expanded fits; else the error naming the graph and its needs.
    pub fn check_capacity(&self) -> Result<(), GgmlError> {
        match self.over {
            None => Ok(()),
            Some((nodes, leafs)) => {
                Err(GgmlError::GraphFull { graph: self.name.clone(), nodes, leafs, size: self.size })
            }
        }
    }

    pub fn n_nodes(&self) -> i32 {
        // SAFETY: reads the graph.
        unsafe { sys::ggml_graph_n_nodes(self.ptr.as_ptr()) }
    }
    pub(crate) fn raw(&self) -> *mut sys::ggml_cgraph {
        self.ptr.as_ptr()
    }
}

/// A compute allocator that keeps the last graph it placed, for the next call of the same
/// shape. Building and placing a graph costs as much as a small model's whole decode step,
/// and a GPU backend can replay an unchanged graph (CUDA graphs) instead of launching it
/// kernel by kernel: a decode loop builds once per shape and reuses the graph every step.
///
/// Safe by construction: a graph may point at tensors of other contexts only through the
/// [`TensorStore`]s handed to [`GraphCache::get`] (the builder is generic over the graph's
/// lifetime, so anything else it captured would have to be `'static`); the kept graph
/// remembers those stores' ids, which are never reused, and is handed out again only to a
/// call that passes the same stores — alive, since that call borrows them. The allocator is
/// private, so no other graph can move the kept one's memory.
pub struct GraphCache<K> {
    /// Names the graphs in errors.
    name: &'static str,
    alloc: Allocator,
    kept: Option<Kept<K>>,
    builds: u64,
    reuses: u64,
}

struct Kept<K> {
    key: K,
    sources: Vec<u64>,
    /// Holds the nodes; dropped with the graph.
    _ctx: Context,
    graph: NonNull<sys::ggml_cgraph>,
    tensors: Vec<NonNull<sys::ggml_tensor>>,
    /// Whether a device has checked it can compute every node (once per graph).
    checked: std::cell::Cell<bool>,
}

// SAFETY: the graph and tensors live in the owned context, which is Send; the cache is used
// from one thread at a time (no Sync).
unsafe impl<K: Send> Send for GraphCache<K> {}

/// A graph of a [`GraphCache`], ready to compute while the stores it was asked with are
/// borrowed. It cannot be extended.
pub struct KeptGraph<'s> {
    graph: NonNull<sys::ggml_cgraph>,
    tensors: &'s [NonNull<sys::ggml_tensor>],
    checked: &'s std::cell::Cell<bool>,
}

impl<'s> KeptGraph<'s> {
    /// The `i`-th tensor the builder returned (inputs to write, outputs to read).
    pub fn tensor(&self, i: usize) -> Tensor<'s> {
        Tensor { ptr: self.tensors[i], _ctx: PhantomData }
    }

    /// Computes the graph; its nodes are checked against the device only on the first call.
    pub fn compute(&self, backend: &Backend) -> Result<(), GgmlError> {
        self.compute_on(backend, Kernels::Fast)
    }

    /// [`KeptGraph::compute`] on the kernels asked for.
    pub fn compute_on(&self, backend: &Backend, kernels: Kernels) -> Result<(), GgmlError> {
        let graph = Graph::built(self.graph);
        if !self.checked.get() {
            backend.check_supported(&graph)?;
            self.checked.set(true);
        }
        backend.compute_on(&graph, kernels)
    }
}

impl<K: PartialEq> GraphCache<K> {
    /// A cache of the graphs named `name` (errors say which graph did not fit).
    pub fn new(backend: &Backend, name: &'static str) -> Self {
        GraphCache { name, alloc: Allocator::new(backend), kept: None, builds: 0, reuses: 0 }
    }

    /// The graph of `key` over `stores`: the kept one if both match, else one that `build`
    /// makes (in a context of `n_nodes` nodes) and the allocator places, kept from then on.
    /// `build` gets the stores back with the graph's lifetime and returns the tensors to
    /// keep handles on.
    pub fn get<'s, F>(
        &'s mut self,
        key: K,
        stores: &[&'s TensorStore],
        n_nodes: usize,
        build: F,
    ) -> Result<KeptGraph<'s>, GgmlError>
    where
        F: for<'a> FnOnce(&'a Context, &mut Graph<'a>, &[&'a TensorStore]) -> Vec<Tensor<'a>>,
    {
        let sources: Vec<u64> = stores.iter().map(|s| s.id()).collect();
        if self.kept.as_ref().is_some_and(|k| k.key == key && k.sources == sources) {
            self.reuses += 1;
        } else {
            // Drop the old graph first: the allocator reuses its memory.
            self.kept = None;
            let ctx = Context::for_graph(n_nodes)?;
            let (graph, tensors) = {
                let mut g = ctx.new_graph(self.name, n_nodes);
                let kept = build(&ctx, &mut g, stores);
                self.alloc.alloc_graph(&g)?;
                (g.ptr, kept.iter().map(|t| t.ptr).collect())
            };
            self.kept = Some(Kept { key, sources, _ctx: ctx, graph, tensors, checked: std::cell::Cell::new(false) });
            self.builds += 1;
        }
        let k = self.kept.as_ref().expect("kept above");
        Ok(KeptGraph { graph: k.graph, tensors: &k.tensors, checked: &k.checked })
    }

    /// Drops the kept graph, so the next call builds its own.
    pub fn forget(&mut self) {
        self.kept = None;
    }

    /// How many calls built a graph and how many reused the kept one.
    pub fn stats(&self) -> (u64, u64) {
        (self.builds, self.reuses)
    }

    /// Bytes of the compute buffer.
    pub fn buffer_size(&self) -> usize {
        self.alloc.buffer_size()
    }

    /// Nodes of the kept graph computing `op` (ggml's name, e.g. `FLASH_ATTN_EXT`): how
    /// tests check the shape of a graph, not only its numbers.
    pub fn op_count(&self, op: &str) -> usize {
        let Some(k) = &self.kept else { return 0 };
        // SAFETY: the kept graph and its nodes live in the kept context; op names are
        // static C strings.
        unsafe {
            let g = k.graph.as_ptr();
            (0..sys::ggml_graph_n_nodes(g))
                .filter(|&i| {
                    let node = sys::ggml_graph_node(g, i);
                    std::ffi::CStr::from_ptr(sys::ggml_op_name((*node).op)).to_bytes() == op.as_bytes()
                })
                .count()
        }
    }
}

/// `OP 'name' -> type [ne] (src: type [ne] (non-contiguous), ...)`, for errors.
///
/// # Safety
/// `node` must be a valid tensor whose sources are valid.
unsafe fn describe_node(node: *const sys::ggml_tensor) -> String {
    // SAFETY: per the contract; op and type names are static C strings.
    unsafe {
        let t = |x: *const sys::ggml_tensor| {
            let ty = CStr::from_ptr(sys::ggml_type_name((*x).type_)).to_string_lossy();
            let ne = (*x).ne;
            let cont = if sys::ggml_is_contiguous(x) { "" } else { " non-contiguous" };
            format!("{ty} [{}, {}, {}, {}]{cont}", ne[0], ne[1], ne[2], ne[3])
        };
        let op = CStr::from_ptr(sys::ggml_op_desc(node)).to_string_lossy();
        let name = CStr::from_ptr((*node).name.as_ptr()).to_string_lossy();
        let srcs: Vec<String> = (*node).src.iter().filter(|s| !s.is_null()).map(|&s| t(s)).collect();
        format!("{op} '{name}' -> {} from {}", t(node), srcs.join(", "))
    }
}

/// The turns every CPU backend made by the engine's own tests computes in. The test harness
/// runs tests side by side, and their graphs spinning on the same 2 cores took the engine's
/// tests 559 s against 58 s one test at a time; in turns, graphs run one at a time while the
/// rest of each test (files, tokenizers, checks) still overlaps.
#[cfg(test)]
fn test_turns() -> Option<std::sync::Arc<CpuTurns>> {
    static TURNS: std::sync::LazyLock<std::sync::Arc<CpuTurns>> = std::sync::LazyLock::new(CpuTurns::new);
    Some(TURNS.clone())
}

/// Outside the engine's tests a backend computes in turns only when given them.
#[cfg(not(test))]
fn test_turns() -> Option<std::sync::Arc<CpuTurns>> {
    None
}

/// Turns at the CPU for backends that would otherwise compute at the same time.
///
/// ggml's CPU workers meet at every node barrier (in libgomp: a short spin, then a sleep). Two
/// graphs computing at once on the same cores (the AR half of one job and the NAR half of the
/// previous one) each wait there for partner threads the other graph keeps off the cores:
/// with ggml's own barrier, which only spins, four overlapping songs on 2 cores took 2.5x as
/// long as the same songs one after the other. CPU
/// backends that share a `CpuTurns` compute one graph at a time, each with every thread,
/// in the order they asked (a ticket lock, so a tight decode loop cannot starve a renderer).
pub struct CpuTurns {
    /// (next ticket to hand out, ticket now computing)
    state: std::sync::Mutex<(u64, u64)>,
    turn_over: std::sync::Condvar,
    /// Told how long each caller waited for its turn (the daemon counts it in a metric).
    on_wait: Option<Box<dyn Fn(std::time::Duration) + Send + Sync>>,
}

impl CpuTurns {
    pub fn new() -> std::sync::Arc<Self> {
        std::sync::Arc::new(CpuTurns {
            state: std::sync::Mutex::new((0, 0)),
            turn_over: std::sync::Condvar::new(),
            on_wait: None,
        })
    }

    /// Like [`CpuTurns::new`], calling `hook` with each wait for a turn.
    pub fn with_wait_hook(hook: impl Fn(std::time::Duration) + Send + Sync + 'static) -> std::sync::Arc<Self> {
        std::sync::Arc::new(CpuTurns {
            state: std::sync::Mutex::new((0, 0)),
            turn_over: std::sync::Condvar::new(),
            on_wait: Some(Box::new(hook)),
        })
    }

    /// Waits for this caller's turn; the turn ends when the guard drops.
    fn take(&self) -> CpuTurn<'_> {
        let asked = std::time::Instant::now();
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let ticket = st.0;
        st.0 += 1;
        while st.1 != ticket {
            st = self.turn_over.wait(st).unwrap_or_else(|e| e.into_inner());
        }
        drop(st);
        if let Some(hook) = &self.on_wait {
            hook(asked.elapsed());
        }
        CpuTurn { turns: self }
    }
}

struct CpuTurn<'a> {
    turns: &'a CpuTurns,
}

impl Drop for CpuTurn<'_> {
    fn drop(&mut self) {
        let mut st = self.turns.state.lock().unwrap_or_else(|e| e.into_inner());
        st.1 += 1;
        self.turns.turn_over.notify_all();
    }
}

/// Which of a device's kernels a graph runs on.
///
/// The CPU's fast kernels (tiled matrix products, flash attention split over the cache or
/// tiled over the queries) choose their blocking from the shapes of the whole batch, so an
/// output row's rounding depends on the rows computed beside it and on how many there are.
/// Its reference kernels compute every output row from that row's inputs alone, in one
/// order: a token gives the same bits whether it runs alone, beside other jobs' tokens, one
/// a step or many in one forward. The causal LMs' CPU graphs, on either set, take their Q8_0
/// products of two rows or more from [`q8`] (the reference's bits, each weight block loaded
/// once for several rows) when the CPU has AVX2.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kernels {
    Fast,
    RowExact,
}

/// A compute device: the CPU, a CUDA card, a Vulkan device, Metal.
pub struct Backend {
    ptr: NonNull<sys::ggml_backend>,
    name: String,
    is_cpu: bool,
    /// Shared with the other CPU backends of the process that may compute concurrently.
    turns: Option<std::sync::Arc<CpuTurns>>,
}

// SAFETY: a backend is used from one thread at a time (no Sync); ggml backends are not
// tied to the thread that created them.
unsafe impl Send for Backend {}

impl Backend {
    /// Opens a device by name (`CPU`, `CUDA0`, `Vulkan0`, `MTL0`), case-insensitive, or the
    /// best available one for `"auto"`.
    pub fn new(name: &str) -> Result<Self, GgmlError> {
        init_logging();
        // One initialisation at a time: the daemon's stage threads open their backends at
        // once, and ggml-vulkan's device set-up is not thread-safe (two threads aborted in
        // the Vulkan loader at start-up). A lock around a C library's init, not state.
        static INIT: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let _init = INIT.lock().unwrap_or_else(|p| p.into_inner());
        let raw = if name.eq_ignore_ascii_case("auto") || name.is_empty() {
            // SAFETY: initialises the best registered backend or returns NULL.
            unsafe { sys::ggml_backend_init_best() }
        } else {
            let want = device_names().into_iter().find(|d| d.eq_ignore_ascii_case(name));
            let Some(dev_name) = want else {
                return Err(GgmlError::UnknownDevice(name.to_string(), device_names().join(", ")));
            };
            let c = CString::new(dev_name).unwrap();
            // SAFETY: valid C string; NULL on failure.
            unsafe { sys::ggml_backend_init_by_name(c.as_ptr(), std::ptr::null()) }
        };
        let ptr = NonNull::new(raw).ok_or_else(|| GgmlError::DeviceInit(name.to_string()))?;
        // SAFETY: valid backend.
        let (dev_name, is_cpu) = unsafe {
            let dev = sys::ggml_backend_get_device(ptr.as_ptr());
            let n = CStr::from_ptr(sys::ggml_backend_dev_name(dev)).to_string_lossy().into_owned();
            (n, sys::ggml_backend_dev_type(dev) == sys::GGML_BACKEND_DEVICE_TYPE_CPU)
        };
        Ok(Backend { ptr, name: dev_name, is_cpu, turns: is_cpu.then(test_turns).flatten() })
    }

    /// The CPU backend with `threads` worker threads (0 = all cores).
    pub fn cpu(threads: usize) -> Result<Self, GgmlError> {
        let b = Backend::new("CPU")?;
        b.set_threads(threads);
        Ok(b)
    }

    /// The backend the numeric tests run on: `$YUED_TEST_DEVICE` (e.g. `Vulkan0`, see
    /// `scripts/test-device.sh`) or the CPU with `threads` threads. Lets the parity tests check
    /// a GPU backend against the same fixtures as the CPU.
    #[doc(hidden)]
    pub fn for_tests(threads: usize) -> Self {
        match std::env::var("YUED_TEST_DEVICE") {
            Ok(name) if !name.is_empty() => {
                Backend::new(&name).unwrap_or_else(|e| panic!("YUED_TEST_DEVICE={name}: {e}"))
            }
            _ => Backend::cpu(threads).expect("CPU backend"),
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }
    pub fn is_cpu(&self) -> bool {
        self.is_cpu
    }

    /// Whether [`Kernels::RowExact`] is a set of kernels of its own here (the CPU's
    /// reference kernels); elsewhere it runs the device's only kernels.
    pub fn has_row_exact_kernels(&self) -> bool {
        self.is_cpu
    }

    /// Sets the CPU thread count (ignored on GPU devices). 0 means every core.
    pub fn set_threads(&self, threads: usize) {
        if self.is_cpu {
            let n =
                if threads == 0 { std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1) } else { threads };
            // SAFETY: valid CPU backend.
            unsafe { sys::ggml_backend_cpu_set_n_threads(self.raw(), n as i32) }
        }
    }

    pub(crate) fn raw(&self) -> *mut sys::ggml_backend {
        self.ptr.as_ptr()
    }

    fn buffer_type(&self) -> sys::ggml_backend_buffer_type_t {
        // SAFETY: valid backend.
        unsafe { sys::ggml_backend_get_default_buffer_type(self.raw()) }
    }

    /// Makes this backend, if it is a CPU one, compute in turns with the other backends
    /// holding `turns` (see [`CpuTurns`]). Devices other than the CPU ignore it.
    pub fn share_cpu(&mut self, turns: std::sync::Arc<CpuTurns>) {
        if self.is_cpu {
            self.turns = Some(turns);
        }
    }

    /// Runs a graph whose tensors all have memory. On a device other than the CPU, every
    /// node is first checked against what the device's kernels support: ggml computes a
    /// graph given to one backend without asking, and an unsupported case (a type, a
    /// non-contiguous operand) would be silent garbage instead of an error.
    pub fn compute(&self, graph: &Graph<'_>) -> Result<(), GgmlError> {
        graph.check_capacity()?;
        self.check_supported(graph)?;
        self.compute_checked(graph)
    }

    /// [`Backend::compute`] of a graph already checked.
    fn compute_checked(&self, graph: &Graph<'_>) -> Result<(), GgmlError> {
        self.compute_on(graph, Kernels::Fast)
    }

    /// A checked graph computed on `kernels` (the CPU's reference kernels for
    /// [`Kernels::RowExact`]; other devices have one set of kernels and ignore it).
    fn compute_on(&self, graph: &Graph<'_>, kernels: Kernels) -> Result<(), GgmlError> {
        let _turn = self.turns.as_ref().map(|t| t.take());
        let exact = self.is_cpu && kernels == Kernels::RowExact;
        if exact {
            // SAFETY: valid CPU backend; the flag is read when a graph is planned.
            unsafe { sys::ggml_backend_cpu_set_use_ref(self.raw(), true) }
        }
        let status = self.graph_compute(graph);
        if exact {
            // SAFETY: as above.
            unsafe { sys::ggml_backend_cpu_set_use_ref(self.raw(), false) }
        }
        status
    }

    fn graph_compute(&self, graph: &Graph<'_>) -> Result<(), GgmlError> {
        // SAFETY: the graph's tensors are allocated (the allocator or buffers placed them).
        let status = unsafe { sys::ggml_backend_graph_compute(self.raw(), graph.raw()) };
        if status == sys::GGML_STATUS_SUCCESS {
            Ok(())
        } else {
            Err(GgmlError::Compute { device: self.name.clone(), status: status as i32 })
        }
    }

    /// The first node of `graph` this device cannot compute, described.
    fn check_supported(&self, graph: &Graph<'_>) -> Result<(), GgmlError> {
        if self.is_cpu {
            return Ok(()); // the CPU backend computes every op
        }
        // SAFETY: the graph's nodes are valid tensors of live contexts.
        unsafe {
            let g = graph.raw();
            for i in 0..sys::ggml_graph_n_nodes(g) {
                let node = sys::ggml_graph_node(g, i);
                if !sys::ggml_backend_supports_op(self.raw(), node) {
                    return Err(GgmlError::Unsupported { device: self.name.clone(), node: describe_node(node) });
                }
            }
        }
        Ok(())
    }

    /// Free and total memory of the device, in bytes.
    pub fn memory(&self) -> (usize, usize) {
        let (mut free, mut total) = (0usize, 0usize);
        // SAFETY: valid device.
        unsafe { sys::ggml_backend_dev_memory(sys::ggml_backend_get_device(self.raw()), &mut free, &mut total) };
        (free, total)
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        // SAFETY: we own the backend.
        unsafe { sys::ggml_backend_free(self.raw()) }
    }
}

/// Device memory holding the data of every tensor of one [`Context`] (weights, KV sets).
///
/// The context's tensors point into it, yet borrow only the context: a buffer dropped while
/// they are still in use would leave safe code writing freed memory. So a buffer is never
/// handed out on its own: [`TensorStore`] owns it beside the context it backs and lends
/// tensors that borrow the store, so none outlives the memory. (Constructible only inside
/// the ggml layer.)
pub(crate) struct Buffer {
    ptr: NonNull<sys::ggml_backend_buffer>,
}

// SAFETY: owned device memory, used from one thread at a time.
unsafe impl Send for Buffer {}

impl Buffer {
    /// Allocates device memory for every tensor of `ctx` that has none yet.
    pub(super) fn alloc_ctx_tensors(ctx: &Context, backend: &Backend, what: &str) -> Result<Self, GgmlError> {
        // SAFETY: valid context and buffer type; NULL on failure.
        let size = unsafe { sys::ggml_backend_alloc_ctx_tensors_from_buft_size(ctx.raw(), backend.buffer_type()) };
        let p = unsafe { sys::ggml_backend_alloc_ctx_tensors_from_buft(ctx.raw(), backend.buffer_type()) };
        NonNull::new(p).map(|ptr| Buffer { ptr }).ok_or_else(|| GgmlError::Alloc {
            what: what.to_string(),
            bytes: size,
            device: backend.name.clone(),
        })
    }

    pub fn size(&self) -> usize {
        // SAFETY: valid buffer.
        unsafe { sys::ggml_backend_buffer_get_size(self.ptr.as_ptr()) }
    }

    /// Fills the whole buffer with one byte value.
    pub fn clear(&self, value: u8) {
        // SAFETY: valid buffer.
        unsafe { sys::ggml_backend_buffer_clear(self.ptr.as_ptr(), value) }
    }

    /// Tells the scheduler these are weights (lets backends pick weight-friendly paths).
    pub fn mark_weights(&self) {
        // SAFETY: valid buffer.
        unsafe { sys::ggml_backend_buffer_set_usage(self.ptr.as_ptr(), sys::GGML_BACKEND_BUFFER_USAGE_WEIGHTS) }
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        // SAFETY: we own the buffer; tensors pointing into it are dead with their context
        // or never used again (callers drop the buffer together with its context).
        unsafe { sys::ggml_backend_buffer_free(self.ptr.as_ptr()) }
    }
}

/// A graph allocator: places the intermediates of a graph in one reusable device buffer.
/// Reusing it across steps keeps the buffer (it only grows when a bigger graph arrives).
pub struct Allocator {
    ptr: NonNull<sys::ggml_gallocr>,
    device: String,
}

// SAFETY: owned allocator, used from one thread at a time.
unsafe impl Send for Allocator {}

impl Allocator {
    pub fn new(backend: &Backend) -> Self {
        // SAFETY: valid buffer type.
        let p = unsafe { sys::ggml_gallocr_new(backend.buffer_type()) };
        Allocator { ptr: NonNull::new(p).expect("ggml_gallocr_new returned NULL"), device: backend.name.clone() }
    }

    /// Places every unallocated tensor of `graph`.
    pub fn alloc_graph(&mut self, graph: &Graph<'_>) -> Result<(), GgmlError> {
        graph.check_capacity()?;
        // SAFETY: valid allocator and graph.
        let ok = unsafe { sys::ggml_gallocr_alloc_graph(self.ptr.as_ptr(), graph.raw()) };
        if ok {
            Ok(())
        } else {
            Err(GgmlError::Alloc { what: "compute graph".into(), bytes: 0, device: self.device.clone() })
        }
    }

    /// Bytes of the compute buffer.
    pub fn buffer_size(&self) -> usize {
        // SAFETY: valid allocator.
        unsafe { sys::ggml_gallocr_get_buffer_size(self.ptr.as_ptr(), 0) }
    }
}

impl Drop for Allocator {
    fn drop(&mut self) {
        // SAFETY: we own it.
        unsafe { sys::ggml_gallocr_free(self.ptr.as_ptr()) }
    }
}

/// Quantizes `src` (rows of `n_per_row` f32) into `ty` blocks.
pub fn quantize(ty: GgmlType, src: &[f32], n_per_row: usize) -> Vec<u8> {
    assert!(
        n_per_row > 0 && src.len().is_multiple_of(n_per_row),
        "quantize: {} values are not whole rows of {n_per_row}",
        src.len()
    );
    assert!(
        n_per_row as i64 % ty.block_size() as i64 == 0,
        "quantize: row of {n_per_row} is not whole {} blocks",
        ty.name()
    );
    let nrows = src.len() / n_per_row;
    // SAFETY: pure function of the type.
    assert!(!unsafe { sys::ggml_quantize_requires_imatrix(ty.raw()) }, "{} needs an importance matrix", ty.name());
    let mut out = vec![0u8; ty.row_size(n_per_row) * nrows];
    // SAFETY: out has room for nrows rows of the quantized type; src holds nrows*n_per_row.
    let written = unsafe {
        sys::ggml_quantize_chunk(
            ty.raw(),
            src.as_ptr(),
            out.as_mut_ptr().cast(),
            0,
            nrows as i64,
            n_per_row as i64,
            std::ptr::null(),
        )
    };
    assert_eq!(written, out.len(), "ggml_quantize_chunk wrote an unexpected size");
    out
}

/// A read-only memory map of a model file (GGUF, safetensors). Kept here so that the
/// project's every `unsafe` stays in this module.
pub fn map_file(file: &std::fs::File) -> std::io::Result<memmap2::Mmap> {
    // SAFETY: read-only map; model files are written once and not modified while they are
    // open. A concurrent truncation would be a SIGBUS, as with any mmap-based loader.
    unsafe { memmap2::Mmap::map(file) }
}

/// The bytes of a slice of plain old data (a type any bit pattern is valid for: `Pod`).
pub(crate) fn as_bytes<T: bytemuck::Pod>(v: &[T]) -> &[u8] {
    bytemuck::cast_slice(v)
}
/// The same, writable: whatever is written is a valid `T`.
pub(crate) fn as_bytes_mut<T: bytemuck::Pod>(v: &mut [T]) -> &mut [u8] {
    bytemuck::cast_slice_mut(v)
}

#[cfg(test)]
mod tests;
