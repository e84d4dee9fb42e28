//! Every container `yued audio-convert` writes, read back by an independent implementation:
//! Debian's ffprobe must report the right codec, rate, channel count and duration, and
//! ffmpeg's decode must correlate with the source sweep. `scripts/test.sh` installs ffmpeg
//! and sets YUED_REQUIRE_FFMPEG=1, so in CI a missing ffmpeg fails instead of skipping.
use std::path::Path;
use std::process::Command;

fn have(tool: &str) -> bool {
    Command::new(tool).arg("-version").output().is_ok_and(|o| o.status.success())
}

fn yued(args: &[&str]) {
    let o = Command::new(env!("CARGO_BIN_EXE_yued")).args(args).output().unwrap();
    assert!(o.status.success(), "yued {args:?}: {}", String::from_utf8_lossy(&o.stderr));
}

/// 2 s of a stereo sweep (the channels differ) at `rate`, as 16-bit WAV.
fn sweep(path: &Path, rate: u32) -> Vec<f32> {
    let n = 2 * rate as usize + 321;
    let spec =
        hound::WavSpec { channels: 2, sample_rate: rate, bits_per_sample: 16, sample_format: hound::SampleFormat::Int };
    let mut w = hound::WavWriter::create(path, spec).unwrap();
    let mut left = Vec::with_capacity(n);
    for i in 0..n {
        let t = i as f32 / rate as f32;
        let l = 0.5 * (2.0 * std::f32::consts::PI * (200.0 + 300.0 * t) * t).sin();
        let r = 0.4 * (2.0 * std::f32::consts::PI * (500.0 + 100.0 * t) * t).sin();
        let (li, ri) = ((l * 32767.0).round() as i16, (r * 32767.0).round() as i16);
        w.write_sample(li).unwrap();
        w.write_sample(ri).unwrap();
        left.push(li as f32 / 32767.0);
    }
    w.finalize().unwrap();
    left
}

/// Best normalised correlation of `b` against `a` for shifts of `b` in 0..=max_shift.
fn corr(a: &[f32], b: &[f32], max_shift: usize) -> f64 {
    let win = &a[4800..4800 + 48000];
    (0..=max_shift)
        .filter(|s| 4800 + s + 48000 <= b.len())
        .map(|s| {
            let y = &b[4800 + s..4800 + s + 48000];
            let dot: f64 = win.iter().zip(y).map(|(p, q)| *p as f64 * *q as f64).sum();
            let nx: f64 = win.iter().map(|p| (*p as f64).powi(2)).sum::<f64>().sqrt();
            let ny: f64 = y.iter().map(|q| (*q as f64).powi(2)).sum::<f64>().sqrt();
            dot / (nx * ny)
        })
        .fold(f64::MIN, f64::max)
}

#[test]
fn ffprobe_and_ffmpeg_read_every_container_we_write() {
    if !have("ffprobe") || !have("ffmpeg") {
        assert!(
            std::env::var_os("YUED_REQUIRE_FFMPEG").is_none(),
            "YUED_REQUIRE_FFMPEG is set but ffmpeg/ffprobe are not installed"
        );
        eprintln!("ffmpeg/ffprobe not installed: skipping (scripts/test.sh installs them)");
        return;
    }
    // 48 kHz (YuE2's rate) and 44.1 kHz (MiniMax Music 3's): every container keeps the
    // rate, except Opus, which only codes at 48 kHz.
    for rate in [48_000u32, 44_100] {
        containers_at(rate);
    }
    // MP3 keeps the song's rate at every bitrate (LAME lowers it below 128 kb/s unless told).
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("sweep.wav");
    sweep(&src, 48_000);
    for kbps in ["32", "64", "320"] {
        let out = dir.path().join(format!("low-{kbps}.mp3"));
        yued(&["audio-convert", "-i", src.to_str().unwrap(), "-o", out.to_str().unwrap(), "-b", kbps]);
        let probe = Command::new("ffprobe")
            .args(["-v", "error", "-show_entries", "stream=sample_rate,bit_rate", "-of", "json"])
            .arg(&out)
            .output()
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&probe.stdout).unwrap();
        assert_eq!(v["streams"][0]["sample_rate"], "48000", "{kbps} kb/s: {v}");
        assert_eq!(v["streams"][0]["bit_rate"], format!("{kbps}000"), "{kbps} kb/s: {v}");
    }
}

fn containers_at(rate: u32) {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("sweep.wav");
    let left = sweep(&src, rate);
    let secs = left.len() as f64 / rate as f64;
    // (extension, codec ffprobe must name, ffprobe duration tolerance s, decoded length
    // tolerance in frames (None: not checked), min correlation, max shift)
    for (ext, codec, tol, frames_tol, min_corr, shift) in [
        ("wav", "pcm_s16le", 1e-4, Some(0), 0.9999, 0),
        ("flac", "flac", 1e-4, Some(0), 0.9999, 0),
        // The LAME tag (delay and padding): ffmpeg decodes the exact length, no shift (ffprobe
        // counts whole frames).
        ("mp3", "mp3", 0.05, Some(0), 0.95, 0),
        // ffprobe's Ogg Opus duration includes the 312-sample pre-skip (it does so for
        // ffmpeg's own libopus files too); the decode honours it and is exact.
        ("opus", "opus", 0.0066, Some(0), 0.95, 0),
        ("ogg", "vorbis", 1e-3, Some(0), 0.95, 0),
        // The edit list: ffmpeg skips the 2048 priming frames (shift 0) and reports the exact
        // duration, but Debian's ffmpeg 5.1 still plays the last frame's padding.
        ("m4a", "aac", 1e-3, Some(1024), 0.95, 0),
        // Raw ADTS: no length in the stream (ffprobe estimates from the bitrate).
        ("aac", "aac", 0.1, None, 0.95, 3072),
    ] {
        let out = dir.path().join(format!("out.{ext}"));
        yued(&["audio-convert", "-i", src.to_str().unwrap(), "-o", out.to_str().unwrap(), "-b", "192"]);
        let probe = Command::new("ffprobe")
            .args([
                "-v",
                "error",
                "-show_entries",
                "stream=codec_name,sample_rate,channels:format=duration",
                "-of",
                "json",
            ])
            .arg(&out)
            .output()
            .unwrap();
        assert!(probe.status.success(), "{ext}: ffprobe failed: {}", String::from_utf8_lossy(&probe.stderr));
        let v: serde_json::Value = serde_json::from_slice(&probe.stdout).unwrap();
        let s = &v["streams"][0];
        assert_eq!(s["codec_name"], codec, "{ext}: {v}");
        let want_rate = if ext == "opus" { 48_000 } else { rate };
        assert_eq!(s["sample_rate"], want_rate.to_string(), "{ext} from {rate} Hz: {v}");
        assert_eq!(s["channels"], 2, "{ext}: {v}");
        // ADTS has no header length: ffprobe estimates it from the bitrate, roughly.
        let dur: f64 = v["format"]["duration"].as_str().unwrap().parse().unwrap();
        assert!((dur - secs).abs() <= tol, "{ext}: ffprobe duration {dur} vs {secs}");
        let raw = dir.path().join(format!("back-{ext}.f32"));
        let dec = Command::new("ffmpeg")
            .args(["-v", "error", "-y", "-i"])
            .arg(&out)
            .args(["-f", "f32le", "-ac", "2", "-ar", &rate.to_string()])
            .arg(&raw)
            .output()
            .unwrap();
        assert!(dec.status.success(), "{ext}: ffmpeg decode: {}", String::from_utf8_lossy(&dec.stderr));
        let bytes = std::fs::read(&raw).unwrap();
        let back: Vec<f32> = bytes.chunks_exact(8).map(|f| f32::from_le_bytes([f[0], f[1], f[2], f[3]])).collect();
        let c = corr(&left, &back, shift);
        assert!(c > min_corr, "{ext}: correlation {c}");
        if ext == "flac" {
            // STREAMINFO's MD5 is the decoded samples' (interleaved s16le), as `flac -t` checks.
            let pcm = dir.path().join("back-flac.s16");
            let dec = Command::new("ffmpeg")
                .args(["-v", "error", "-y", "-i"])
                .arg(&out)
                .args(["-f", "s16le"])
                .arg(&pcm)
                .output();
            assert!(dec.unwrap().status.success());
            let sum = Command::new("md5sum").arg(&pcm).output().unwrap();
            let sum = String::from_utf8(sum.stdout).unwrap();
            let stored: String = std::fs::read(&out).unwrap()[26..42].iter().map(|b| format!("{b:02x}")).collect();
            assert_eq!(sum.split_whitespace().next(), Some(stored.as_str()), "flac from {rate} Hz: the MD5");
        }
        // A container resampled to 48 kHz and back may be a frame off.
        if let Some(t) = frames_tol.map(|t| if want_rate != rate { t + 2 } else { t }) {
            assert!(
                back.len().abs_diff(left.len()) <= t,
                "{ext} from {rate} Hz: ffmpeg decodes {} frames of {}",
                back.len(),
                left.len()
            );
        }
    }
}
