//! Helpers of the end-to-end tests: start the real `yued serve` on a free loopback port
//! with its own data directory, talk to it over HTTP and WebSocket, kill it.
#![forbid(unsafe_code)]
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The `yued` binary cargo built next to this test executable (or `$YUED_BIN`).
pub fn yued_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("YUED_BIN") {
        return p.into();
    }
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().unwrap().parent().unwrap();
    let bin = dir.join("yued");
    assert!(bin.exists(), "{} not built: run the tests through `cargo test --workspace`", bin.display());
    bin
}

/// A port free now and never handed out before in this process: the tests of one binary run
/// side by side, and the kernel may give a port just released to the next bind, so two
/// daemons starting at once could otherwise get one port (the second then fails to bind while
/// the first answers its readiness probe).
pub fn free_port() -> u16 {
    static HANDED: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    let mut handed = HANDED.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        if !handed.contains(&port) {
            handed.push(port);
            return port;
        }
    }
}

/// A running daemon; killed on drop.
pub struct Daemon {
    pub child: Child,
    pub port: u16,
    pub data: PathBuf,
    pub args: Vec<String>,
    pub http: reqwest::blocking::Client,
    /// The key `submit`, `status` and `wait` present (none: a box without keys).
    pub key: Option<String>,
}

impl Daemon {
    /// Starts `yued serve` on the demo model in `data` with extra flags.
    pub fn start(data: &Path, extra: &[&str]) -> Daemon {
        let args: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        Self::start_on(data, free_port(), args)
    }

    pub fn start_on(data: &Path, port: u16, args: Vec<String>) -> Daemon {
        Self::start_with_env(data, port, args, &[])
    }

    /// The `yued serve` process alone (its log appended to `data`.log), not waited for.
    pub fn spawn(data: &Path, port: u16, args: &[String], env: &[(&str, &str)]) -> Child {
        let log = std::fs::OpenOptions::new().create(true).append(true).open(data.with_extension("log")).unwrap();
        let device = test_device().unwrap_or_else(|| "CPU".into());
        Command::new(yued_bin())
            .args([
                "serve",
                "--port",
                &port.to_string(),
                "--data-dir",
                data.to_str().unwrap(),
                "--device",
                &device,
                "--threads",
                "1",
            ])
            .args(args)
            .env("NO_COLOR", "1")
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start yued")
    }

    /// Starts the daemon with extra environment variables and waits until it serves.
    pub fn start_with_env(data: &Path, port: u16, args: Vec<String>, env: &[(&str, &str)]) -> Daemon {
        let child = Self::spawn(data, port, &args, env);
        let mut d = Daemon {
            child,
            port,
            data: data.to_path_buf(),
            args,
            http: reqwest::blocking::Client::builder().timeout(Duration::from_secs(60)).build().unwrap(),
            key: None,
        };
        let t0 = Instant::now();
        loop {
            // Our own process, not another that answers on the port.
            if let Ok(Some(st)) = d.child.try_wait() {
                panic!("yued exited ({st}) before it served; log: {}", d.log());
            }
            // The readiness probe: a 503 until the body says ready, then a 200.
            if let Ok(r) = d.http.get(d.url("/health?ready=1")).send() {
                let code = r.status().as_u16();
                let ready = r.json::<serde_json::Value>().map(|v| v["ready"] == true).unwrap_or(false);
                assert!((code == 200) == ready, "/health?ready=1 answered {code} with ready {ready}");
                if ready {
                    break;
                }
            }
            assert!(t0.elapsed() < Duration::from_secs(120), "yued did not come up; log: {}", d.log());
            std::thread::sleep(Duration::from_millis(100));
        }
        d
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{}", self.port, path)
    }
    pub fn ws_url(&self, path: &str) -> String {
        format!("ws://127.0.0.1:{}{}", self.port, path)
    }
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.data.with_extension("log")).unwrap_or_default()
    }

    /// POSTs a request; returns (status, body JSON, Retry-After).
    pub fn submit_as(&self, body: &str, key: Option<&str>) -> (u16, serde_json::Value, Option<String>) {
        let mut rq =
            self.http.post(self.url("/synth")).header("content-type", "application/json").body(body.to_string());
        if let Some(k) = key {
            rq = rq.header("x-api-key", k);
        }
        let r = rq.send().unwrap();
        let status = r.status().as_u16();
        let retry = r.headers().get("retry-after").map(|v| v.to_str().unwrap().to_string());
        (status, r.json().unwrap_or(serde_json::Value::Null), retry)
    }

    pub fn submit(&self, body: &str) -> String {
        let (s, v, _) = self.submit_as(body, self.key.as_deref());
        assert_eq!(s, 200, "submit: {v}");
        v["id"].as_str().unwrap().to_string()
    }

    pub fn status(&self, id: &str) -> serde_json::Value {
        self.status_with(id, self.key.as_deref())
    }

    fn status_with(&self, id: &str, key: Option<&str>) -> serde_json::Value {
        let mut rq = self.http.get(self.url(&format!("/job?id={id}")));
        if let Some(k) = key {
            rq = rq.header("x-api-key", k);
        }
        rq.send().unwrap().json().unwrap()
    }

    /// GETs `path` with the API key `key`: status and body.
    pub fn get_as(&self, path: &str, key: &str) -> (u16, String) {
        let r = self.http.get(self.url(path)).header("x-api-key", key).send().unwrap();
        (r.status().as_u16(), r.text().unwrap())
    }

    /// Polls until the job is terminal; returns the last status.
    pub fn wait(&self, id: &str, limit: Duration) -> serde_json::Value {
        self.wait_with(id, self.key.as_deref(), limit)
    }

    /// As [`Daemon::wait`], asking with the API key `key`.
    pub fn wait_as(&self, id: &str, key: &str, limit: Duration) -> serde_json::Value {
        self.wait_with(id, Some(key), limit)
    }

    fn wait_with(&self, id: &str, key: Option<&str>, limit: Duration) -> serde_json::Value {
        let t0 = Instant::now();
        loop {
            let s = self.status_with(id, key);
            if matches!(s["status"].as_str(), Some("done" | "failed" | "cancelled")) {
                return s;
            }
            assert!(t0.elapsed() < limit, "job {id} not finished after {limit:?}: {s}; log: {}", self.log());
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// SIGKILL, no cleanup.
    pub fn kill9(mut self) -> (PathBuf, u16, Vec<String>) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        (self.data.clone(), self.port, std::mem::take(&mut self.args))
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Writes the `deep` demo model (the published depth and head layout at tiny widths) into
/// `dir` through `yued demo-model`; returns the serve flags that load it.
pub fn deep_model(dir: &Path) -> Vec<String> {
    let out = Command::new(yued_bin())
        .args(["demo-model", "--preset", "deep", "--out", dir.to_str().unwrap()])
        .output()
        .expect("run yued demo-model");
    assert!(out.status.success(), "yued demo-model --preset deep: {}", String::from_utf8_lossy(&out.stderr));
    let p = |f: &str| dir.join(f).to_str().unwrap().to_string();
    vec!["--model".into(), p("yue2-demo-deep.gguf"), "--vae".into(), p("yue2-demo-deep-vae.gguf")]
}

/// Waits up to `limit` for a process to exit; its status, or `None` if it still runs.
pub fn wait_exit(child: &mut Child, limit: Duration) -> Option<std::process::ExitStatus> {
    let t0 = Instant::now();
    while t0.elapsed() < limit {
        if let Some(st) = child.try_wait().unwrap() {
            return Some(st);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    None
}

/// A short song request on the demo model.
pub fn song(duration: f64, steps: u32) -> String {
    format!(
        r#"{{"style": "lo-fi piano", "lyrics": "[verse] hum", "cot": "off", "duration": {duration}, "steps": {steps},
            "output_format": "wav16", "semantic_sampling": {{"min_tokens": {}}}}}"#,
        (duration * 25.0) as u32
    )
}

/// A multipart/form-data body with `boundary` from (name, content type, bytes) parts.
pub fn form_data(boundary: &str, parts: &[(&str, &str, &[u8])]) -> Vec<u8> {
    let mut body = Vec::new();
    for (name, ct, data) in parts {
        let head = format!(
            "--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"; filename=\"{name}.bin\"\r\n\
             Content-Type: {ct}\r\n\r\n"
        );
        body.extend_from_slice(head.as_bytes());
        body.extend_from_slice(data);
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(format!("--{boundary}--\r\n").as_bytes());
    body
}

/// `seconds` of a stereo chord at `rate` as 16-bit WAV, and the PCM a decoder reads back.
pub fn chord_wav(seconds: f64, rate: u32) -> (Vec<u8>, yued_audio::Pcm) {
    let n = (seconds * rate as f64) as usize;
    let mut data = Vec::with_capacity(2 * n);
    for (c, f) in [(0, 220.0f32), (1, 331.0)] {
        data.extend((0..n).map(|i| {
            let t = i as f32 / rate as f32;
            0.3 * (2.0 * std::f32::consts::PI * f * t).sin() + 0.1 * (c as f32 + 1.0) * (7.0 * t).sin()
        }));
    }
    let pcm = yued_audio::Pcm::new(rate, 2, data);
    let wav = yued_audio::encode::encode(&pcm, yued_protocol::OutputFormat::Wav16, 128).unwrap();
    (wav.clone(), yued_audio::decode::decode(&wav).unwrap())
}

/// The device the suite's daemons run on: `$YUED_TEST_DEVICE` (e.g. `Vulkan0`, set by
/// `scripts/test-device.sh`), or None for the CPU.
pub fn test_device() -> Option<String> {
    std::env::var("YUED_TEST_DEVICE").ok().filter(|d| !d.is_empty() && d != "CPU")
}

/// The codes the engine gives `pcm` with the tokenizer head `head` (MERT beside it).
pub fn engine_codes(head: &Path, pcm: &yued_audio::Pcm) -> String {
    use yued_engine::models::audio_tokenizer::pipeline::{AudioTokenizer, SAMPLE_RATE};
    // The daemons' device; one thread on the CPU: a daemon may share the cores.
    let backend = yued_engine::ggml::Backend::for_tests(1);
    let mut tok = AudioTokenizer::open(head, &backend).unwrap();
    let mut run = tok.start(yued_audio::resample::mono_at(pcm, SAMPLE_RATE).unwrap()).unwrap();
    while run.step(&mut tok, &backend).unwrap() {}
    run.codes().iter().map(|c| c.to_string()).collect::<Vec<_>>().join(",")
}

/// The score the engine gives `pcm` with the transcriber head `head` (MERT beside it), or
/// why there is none.
pub fn engine_score(head: &Path, pcm: &yued_audio::Pcm, melody_only: bool) -> Result<String, String> {
    use yued_engine::models::sheetsage2::pipeline::{Transcriber, SAMPLE_RATE};
    let backend = yued_engine::ggml::Backend::for_tests(1); // as in `engine_codes`
    let mut tr = Transcriber::open(head, &backend).unwrap();
    let mut run = tr.start(yued_audio::resample::mono_at(pcm, SAMPLE_RATE).unwrap()).unwrap();
    while run.step(&mut tr, &backend).unwrap() {}
    run.abc(melody_only).map_err(|e| e.to_string())
}

/// The parts of a multipart/mixed body: (headers, content), through the client library.
pub fn multipart_parts(body: &[u8], boundary: &str) -> Vec<(String, Vec<u8>)> {
    yue_client::parse_multipart(body, boundary).into_iter().map(|p| (p.content_type, p.data)).collect()
}

/// The files under `root` (recursively) whose bytes contain `needle`; logs included.
pub fn files_containing(root: &Path, needle: &[u8]) -> Vec<PathBuf> {
    let mut hits = vec![];
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else { continue };
        for e in entries.flatten() {
            let path = e.path();
            if path.is_dir() {
                stack.push(path);
            } else if std::fs::read(&path).is_ok_and(|b| b.windows(needle.len()).any(|w| w == needle)) {
                hits.push(path);
            }
        }
    }
    hits
}

/// A binary built next to the test executable.
pub fn sibling_bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().unwrap().parent().unwrap().join(name)
}

/// Runs one of `clients/python/*_test.py` (an official client SDK against the real daemon)
/// with the venv `scripts/pyclients.sh` makes, and asserts it printed `marker`. Skips when
/// the venv or ffprobe is missing, unless YUED_REQUIRE_PYCLIENTS is set (scripts/test.sh
/// sets it, so in CI a missing SDK fails instead).
pub fn run_pyclient(script: &str, marker: &str) {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf();
    let python = std::env::var_os("YUED_PYCLIENTS_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target/pyclients-venv/bin/python"));
    let ready = python.exists() && Command::new("ffprobe").arg("-version").output().is_ok();
    if !ready {
        assert!(
            std::env::var_os("YUED_REQUIRE_PYCLIENTS").is_none(),
            "YUED_REQUIRE_PYCLIENTS is set but {} or ffprobe is missing (scripts/pyclients.sh)",
            python.display()
        );
        eprintln!("{} or ffprobe missing: skipping (scripts/test.sh installs them)", python.display());
        return;
    }
    let out = Command::new(&python)
        .arg(root.join("clients/python").join(script))
        .env("YUED_BIN", yued_bin())
        .output()
        .expect("run python");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && text.contains(marker), "{script} failed:\n{text}");
    eprintln!("{text}");
}
