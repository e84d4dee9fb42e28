//! Checks of the ggml layer on the test backend (the CPU unless `$YUED_TEST_DEVICE`) against plain Rust arithmetic.
use super::*;

fn backend() -> Backend {
    Backend::for_tests(1)
}

#[test]
fn cpu_device_is_listed_and_unknown_device_is_an_error() {
    assert!(device_names().iter().any(|d| d == "CPU"), "{:?}", device_names());
    let err = Backend::new("NoSuchGpu7").err().expect("must fail");
    assert!(err.to_string().contains("NoSuchGpu7") && err.to_string().contains("CPU"), "{err}");
    assert_eq!(Backend::new("cpu").unwrap().name(), "CPU");
}

#[test]
fn the_cpu_kernels_name_what_they_were_built_for_and_what_the_host_adds() {
    let simd = CpuSimd::detect();
    if cfg!(target_arch = "x86_64") {
        // The portable build's baseline; a native build on a machine that runs the suite too.
        assert!(simd.built.contains(&"AVX2"), "{simd:?}");
        // A binary whose kernels need an extension the host lacks could not have run this far.
        for f in &simd.built {
            if ["AVX2", "FMA", "AVX-512", "AVX-512 VNNI", "AVX-512 BF16"].contains(f) {
                assert!(host_simd().contains(f), "{f} built, not on this host: {simd:?}");
            }
        }
    }
    assert!(simd.unused.iter().all(|f| !simd.built.contains(f)), "{simd:?}");
    let line = simd.describe();
    assert!(line.starts_with("ggml CPU kernels built for "), "{line}");
    assert_eq!(line.contains("target-cpu=native"), !simd.unused.is_empty(), "{line}");
}

/// The build's ggml waits at its barriers in OpenMP (ggml-sys asks for it; ggml's CMake would
/// quietly leave it out where it finds no OpenMP runtime, and a busy box would stall renders).
#[test]
fn the_cpu_backend_is_built_with_openmp() {
    assert!(cpu_uses_openmp(), "ggml's CPU backend was built without OpenMP");
}

#[test]
fn mul_mat_add_and_norm_match_reference() {
    let backend = backend();
    let wctx = Context::new(2, 0).unwrap();
    // a: [K=3, M=2] (two rows of three), b: [K=3, N=2]
    let a = wctx.new_tensor(GgmlType::F32, &[3, 2]).set_name("a");
    let bias = wctx.new_tensor(GgmlType::F32, &[2]).set_name("bias");
    let _buf = Buffer::alloc_ctx_tensors(&wctx, &backend, "weights").unwrap();
    a.write_f32(&[1., 2., 3., 4., 5., 6.]);
    bias.write_f32(&[0.5, -1.0]);

    let gctx = Context::new(16, 64).unwrap();
    let b = gctx.new_tensor(GgmlType::F32, &[3, 2]).set_input();
    let y = gctx.add(gctx.mul_mat(a, b), bias).set_output(); // outputs keep their memory
    let n = gctx.rms_norm(y, 1e-6).set_output();
    let mut g = gctx.new_graph("test", 64);
    g.expand(n);
    let mut alloc = Allocator::new(&backend);
    alloc.alloc_graph(&g).unwrap();
    b.write_f32(&[1., 0., -1., 2., 1., 0.]);
    backend.compute(&g).unwrap();
    let yv = y.read_f32();
    // row0 of b . rows of a: [1-3, 4-6] = [-2, -2]; + bias -> [-1.5, -3]
    // row1: [2+2, 8+5] = [4, 13]; + bias -> [4.5, 12]
    assert_eq!(yv, vec![-1.5, -3.0, 4.5, 12.0]);
    let nv = n.read_f32();
    let rms0 = ((1.5f32 * 1.5 + 9.0) / 2.0 + 1e-6).sqrt();
    assert!((nv[0] - -1.5 / rms0).abs() < 1e-5 && (nv[1] - -3.0 / rms0).abs() < 1e-5, "{nv:?}");
}

#[test]
fn quantize_q8_0_roundtrips_within_block_precision() {
    let src: Vec<f32> = (0..64).map(|i| ((i as f32) * 0.37).sin()).collect();
    let q = quantize(GgmlType::Q8_0, &src, 64);
    assert_eq!(q.len(), 2 * 34);
    let back = decode_to_f32(GgmlType::Q8_0, &q).unwrap();
    let max_err = src.iter().zip(&back).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
    assert!(max_err < 1.0 / 127.0, "max error {max_err}");
}

#[test]
fn quantized_mul_mat_is_close_to_f32() {
    let backend = backend();
    let k = 64;
    let wv: Vec<f32> = (0..k * 4).map(|i| ((i * 7 % 13) as f32 - 6.0) / 6.0).collect();
    let xv: Vec<f32> = (0..k).map(|i| ((i * 5 % 11) as f32 - 5.0) / 5.0).collect();
    let wctx = Context::new(1, 0).unwrap();
    let w = wctx.new_tensor(GgmlType::Q8_0, &[k as i64, 4]);
    let _buf = Buffer::alloc_ctx_tensors(&wctx, &backend, "w").unwrap();
    w.write_bytes(0, &quantize(GgmlType::Q8_0, &wv, k));
    let gctx = Context::new(8, 16).unwrap();
    let x = gctx.new_tensor(GgmlType::F32, &[k as i64, 1]).set_input();
    let y = gctx.mul_mat(w, x).set_output();
    let mut g = gctx.new_graph("test", 16);
    g.expand(y);
    let mut alloc = Allocator::new(&backend);
    alloc.alloc_graph(&g).unwrap();
    x.write_f32(&xv);
    backend.compute(&g).unwrap();
    let got = y.read_f32();
    for r in 0..4 {
        let want: f32 = (0..k).map(|i| wv[r * k + i] * xv[i]).sum();
        assert!((got[r] - want).abs() < 0.05 * want.abs().max(1.0), "row {r}: {} vs {want}", got[r]);
    }
}

#[test]
#[should_panic(expected = "mul_mat shape mismatch")]
fn mul_mat_shape_mismatch_is_a_panic_not_an_abort() {
    let ctx = Context::new(4, 0).unwrap();
    let a = ctx.new_tensor(GgmlType::F32, &[3, 2]);
    let b = ctx.new_tensor(GgmlType::F32, &[4, 2]);
    let _ = ctx.mul_mat(a, b);
}

#[test]
fn type_table() {
    assert_eq!(GgmlType::Q8_0.block_size(), 32);
    assert_eq!(GgmlType::Q8_0.type_size(), 34);
    assert_eq!(GgmlType::Q6_K.block_size(), 256);
    assert_eq!(GgmlType::F16.name(), "f16");
    assert!(!GgmlType(4).is_valid(), "Q4_2 was removed from ggml");
    assert!(!GgmlType(9999).is_valid());
    assert_eq!(GgmlType::from_name("q5_k_m"), Some(GgmlType::Q5_K));
}

/// Turns are exclusive and every waiter gets one (no starvation by a tight loop).
#[test]
fn cpu_turns_are_exclusive_and_in_order() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    let waited_us = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let w = waited_us.clone();
    let turns = CpuTurns::with_wait_hook(move |d| {
        w.fetch_add(d.as_micros() as u64, Ordering::SeqCst);
    });
    let inside = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicUsize::new(0));
    let threads: Vec<_> = (0..3)
        .map(|_| {
            let (turns, inside, done) = (turns.clone(), inside.clone(), done.clone());
            std::thread::spawn(move || {
                for _ in 0..200 {
                    let _t = turns.take();
                    assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "two turns at once");
                    std::hint::spin_loop();
                    inside.fetch_sub(1, Ordering::SeqCst);
                    done.fetch_add(1, Ordering::SeqCst);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(done.load(Ordering::SeqCst), 600);
    // A CPU backend computes through its turns; a held turn makes a compute wait.
    let held = turns.take();
    let computed = Arc::new(AtomicUsize::new(0));
    let (t2, c2) = (turns.clone(), computed.clone());
    let h = std::thread::spawn(move || {
        let mut b = Backend::cpu(1).unwrap();
        b.share_cpu(t2);
        let ctx = Context::new(8, 8).unwrap();
        let x = ctx.new_tensor(GgmlType::F32, &[4]).set_input();
        let y = ctx.scale(x, 2.0).set_output();
        let mut g = ctx.new_graph("test", 8);
        g.expand(y);
        let mut alloc = Allocator::new(&b);
        alloc.alloc_graph(&g).unwrap();
        x.write_f32(&[1.0, 2.0, 3.0, 4.0]);
        b.compute(&g).unwrap();
        c2.store(1, Ordering::SeqCst);
        y.read_f32()
    });
    std::thread::sleep(std::time::Duration::from_millis(100));
    assert_eq!(computed.load(Ordering::SeqCst), 0, "computed during another's turn");
    let before = waited_us.load(Ordering::SeqCst);
    drop(held);
    assert_eq!(h.join().unwrap(), vec![2.0, 4.0, 6.0, 8.0]);
    let waited = waited_us.load(Ordering::SeqCst) - before;
    assert!(waited >= 50_000, "the held turn's wait was reported as {waited} us");
}

#[test]
fn mean_steps_averages_enough_steps_to_fill_a_repetition() {
    // A 10 ms step: two warm-ups, then 5 steps per repetition (50 ms).
    let mut calls = 0usize;
    let mut step = || -> Result<f64, ()> {
        calls += 1;
        Ok(0.01)
    };
    let v = super::llama_ref::mean_steps(3, &mut step).unwrap();
    assert_eq!(v.len(), 3);
    assert!(v.iter().all(|&s| (s - 0.01).abs() < 1e-12), "{v:?}");
    assert_eq!(calls, 2 + 3 * 5);
    // A step longer than a repetition is one step per figure; an error stops at once.
    let mut calls = 0usize;
    let mut slow = || -> Result<f64, &'static str> {
        calls += 1;
        if calls == 4 {
            Err("boom")
        } else {
            Ok(0.2)
        }
    };
    assert_eq!(super::llama_ref::mean_steps(5, &mut slow), Err("boom"));
    assert_eq!(calls, 4);
}

/// A graph holding more than it was sized for is an error naming it, from the allocator and
/// from the compute, and ggml never sees the expand (it would abort the process); the same
/// chain in a graph of the right size computes.
#[test]
fn a_graph_over_its_size_is_an_error_naming_it() {
    let backend = backend();
    let build = |size: usize| {
        let ctx = Context::for_graph(64).unwrap();
        let x = ctx.new_tensor(GgmlType::F32, &[4]).set_input();
        let mut y = x;
        for _ in 0..10 {
            y = ctx.scale(y, 2.0);
        }
        let y = y.set_output();
        let mut g = ctx.new_graph("ten scales", size);
        g.expand(y);
        g.expand(y); // nothing new: no double count
        let mut alloc = Allocator::new(&backend);
        let allocated = alloc.alloc_graph(&g);
        let computed = backend.compute(&g);
        if allocated.is_ok() {
            x.write_f32(&[1.0, 2.0, 3.0, 4.0]);
            backend.compute(&g).unwrap();
            assert_eq!(y.read_f32(), vec![1024.0, 2048.0, 3072.0, 4096.0]);
        }
        (allocated.err(), computed.err(), g.n_nodes())
    };
    let (alloc_err, compute_err, n) = build(9);
    let msg = alloc_err.expect("9 slots for 10 nodes").to_string();
    assert!(msg.contains("'ten scales'") && msg.contains("10 nodes") && msg.contains("sized for 9"), "{msg}");
    assert!(matches!(compute_err, Some(GgmlError::GraphFull { nodes: 10, leafs: 1, size: 9, .. })), "{compute_err:?}");
    assert_eq!(n, 0, "ggml was never handed the expand");
    let (alloc_err, _, n) = build(10);
    assert!(alloc_err.is_none(), "{alloc_err:?}");
    assert_eq!(n, 10);
}

/// The Q8_0 row product (`q8`) against ggml's reference product on the same
/// inputs: bit for bit, at batch sizes that hit every tile shape, with a weight whose row
/// count leaves a remainder group and two threads splitting the groups.
#[test]
fn the_row_exact_q8_product_gives_the_reference_kernels_bits_at_any_batch() {
    let simd = CpuSimd::detect();
    if !q8::available() || !simd.built.contains(&"AVX2") || !simd.built.contains(&"FMA") {
        eprintln!("skipped: the Q8_0 row product needs an AVX2 + FMA host and ggml built for them ({simd:?})");
        return;
    }
    let backend = Backend::cpu(2).unwrap();
    let (k, n) = (256usize, 23usize);
    let mut state = 0x2545f491u64;
    let mut rand = move || {
        state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((state >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    };
    let wv: Vec<f32> = (0..k * n).map(|_| rand()).collect();
    // Row j of the activations is the same whatever the batch, so its outputs must be too.
    let xv: Vec<f32> = (0..k * 19).map(|i| rand() * (1.0 + (i / k) as f32)).collect();
    let wctx = Context::new(1, 0).unwrap();
    let w = wctx.new_tensor(GgmlType::Q8_0, &[k as i64, n as i64]);
    let _buf = Buffer::alloc_ctx_tensors(&wctx, &backend, "w").unwrap();
    w.write_bytes(0, &quantize(GgmlType::Q8_0, &wv, k));
    let run = |m: usize, rows: bool, kernels: Kernels| {
        let gctx = Context::for_graph(16).unwrap();
        gctx.set_q8_row_products(rows);
        let x = gctx.new_tensor(GgmlType::F32, &[k as i64, m as i64]).set_input();
        assert_eq!(gctx.takes_q8_rows(&w, &x), rows && m >= 2);
        let y = gctx.mul_mat(w, x).set_output();
        assert_eq!(y.ne(), [n as i64, m as i64, 1, 1]);
        let mut g = gctx.new_graph("q8", 16);
        g.expand(y);
        let mut alloc = Allocator::new(&backend);
        alloc.alloc_graph(&g).unwrap();
        x.write_f32(&xv[..k * m]);
        backend.compute_on(&g, kernels).unwrap();
        y.read_f32().iter().map(|v| v.to_bits()).collect::<Vec<u32>>()
    };
    let all = run(19, false, Kernels::RowExact);
    for m in [1, 2, 3, 4, 5, 8, 9, 16, 19] {
        let reference = run(m, false, Kernels::RowExact);
        assert_eq!(reference[..], all[..n * m], "the reference kernels are row-exact at batch {m}");
        // The graphs of both sets of kernels take it (a prompt's and a code's rows alike).
        for kernels in [Kernels::RowExact, Kernels::Fast] {
            assert_eq!(run(m, true, kernels), reference, "the Q8_0 row product at batch {m} on {kernels:?}");
        }
    }
}
