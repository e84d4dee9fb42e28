// The WebUI end to end in Debian's Chromium: start `yued serve` on the demo models (both
// families), fill the YuE2 form, submit, watch the queue and the stage progress, hear audio
// start (the page's AudioContext advancing with buffers scheduled) before the job reports
// done, see the score as SVG, reload and find the job again, download the result. Then
// MiniMax Music 3: switch the family, check the form against /props (placeholders, model
// files), a 400 naming the field, fill caption and lyrics, wait in the queue, see the stage
// progress and the 44.1 kHz stream scheduled before the stream's done, the result's tracks
// (no score view), replay a track's request (the same codes and seeds), reload and
// download. A screenshot of each step goes to $SCREENSHOTS. Exits non-zero on any failure;
// a browser that does not start is a failure, never a skip.
import { chromium } from "playwright-core";
import { spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createRequire } from "node:module";
import { parseMultipart } from "../src/multipart.js";

// The result parser: a delimiter only opens a line, and a part's declared type is taken only
// when it is one a result has. A song's lyrics (in its replay JSON, one line) that spell the
// boundary and the headers of an HTML file make neither a part nor a page.
{
  const b = "yue2-batch-boundary";
  const lyrics = `la --${b}\\r\\ncontent-type: text/html; filename=\\"x.html\\" --${b} la`;
  const body = new TextEncoder().encode(
    `--${b}\r\ncontent-type: application/json\r\ncontent-disposition: attachment; filename="track00.json"\r\n\r\n` +
      `{"lyrics": "${lyrics}"}\r\n--${b}\r\ncontent-type: text/html\r\n` +
      `content-disposition: attachment; filename="track00.wav"\r\n\r\nRIFF\r\n--${b}\r\n` +
      `content-type: audio/ogg; codecs=opus\r\ncontent-disposition: attachment; filename="track01.opus"\r\n\r\n` +
      `OggS\r\n--${b}--\r\n`,
  );
  const parts = parseMultipart(body.buffer, `multipart/mixed; boundary=${b}`);
  const seen = JSON.stringify(parts.map((p) => [p.type, p.name, p.bytes.length]));
  const want = JSON.stringify([["application/json", "track00.json", 14 + lyrics.length], ["application/octet-stream", "track00.wav", 4], ["audio/ogg; codecs=opus", "track01.opus", 4]]);
  if (seen !== want) throw new Error(`multipart: ${seen}, expected ${want}`);
}

const YUED = process.env.YUED_BIN;
const CHROMIUM = process.env.CHROMIUM || "/usr/bin/chromium";
const SHOTS = process.env.SCREENSHOTS || join(tmpdir(), "yued-webui-screenshots");
if (!YUED) throw new Error("YUED_BIN is not set");
mkdirSync(SHOTS, { recursive: true });

const freePort = () =>
  new Promise((ok) => {
    const s = createServer();
    s.listen(0, "127.0.0.1", () => {
      const p = s.address().port;
      s.close(() => ok(p));
    });
  });
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const AXE = createRequire(import.meta.url).resolve("axe-core/axe.min.js");

/** axe-core over the page as it is: no serious or critical accessibility violation. */
async function axeCheck(page, what) {
  await page.addScriptTag({ path: AXE });
  const found = await page.evaluate(async () => {
    const r = await window.axe.run(document, { resultTypes: ["violations"] });
    return r.violations.filter((v) => ["serious", "critical"].includes(v.impact)).map((v) => `${v.id} ×${v.nodes.length} (${v.nodes[0].target.join(" ")}: ${v.help})`);
  });
  check(found.length === 0, `axe-core on ${what}: ${found.join("; ")}`);
}

/** A job's request as the page saved it (localStorage `yued.jobs`). */
function loadedRequest(stored, id) {
  return (JSON.parse(stored || "[]").find((j) => j.id === id) || {}).request || {};
}

function check(cond, msg) {
  if (!cond) throw new Error(`check failed: ${msg}`);
}

const port = await freePort();
// The Rust side may prepare the data directory (the demo models) and an adapter directory
// shaped for them.
const data = process.env.YUED_DATA || mkdtempSync(join(tmpdir(), "yued-webui-"));
const ADAPTERS = process.env.YUED_ADAPTERS;
let daemon = spawn(YUED, ["serve", "--port", String(port), "--data-dir", data, "--device", "CPU", "--threads", "1", "--vae-core", "32", "--admission-share", "8", ...(ADAPTERS ? ["--adapters", ADAPTERS] : [])], {
  stdio: ["ignore", "ignore", "pipe"],
  env: { ...process.env, NO_COLOR: "1" },
});
let log = "";
daemon.stderr.on("data", (d) => (log += d));
const base = `http://127.0.0.1:${port}`;
let browser;
let step = 0;
try {
  // The daemon is up when /health says its stages are ready.
  for (let i = 0; ; i++) {
    try {
      const h = await (await fetch(`${base}/health`)).json();
      if (h.ready) break;
    } catch {}
    check(i < 600, `yued did not come up: ${log}`);
    await sleep(100);
  }
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update", "--no-first-run", "--autoplay-policy=no-user-gesture-required"],
  });
  const page = await browser.newPage({ acceptDownloads: true, viewport: { width: 1280, height: 900 } });
  const shot = async (name) => page.screenshot({ path: join(SHOTS, `${String(++step).padStart(2, "0")}-${name}.png`), fullPage: true });
  page.on("pageerror", (e) => console.error("page error:", e.message));

  await page.goto(base + "/");
  await page.waitForFunction(() => document.getElementById("health").dataset.status === "ok", null, { timeout: 30000 });
  check((await page.locator("#output_format option").count()) >= 9, "the formats come from /props");
  // Both families served: the switch shows, YuE2 first with its form.
  await page.locator("#family").waitFor({ state: "visible", timeout: 10000 });
  check((await page.inputValue("#family")) === "yue2", "YuE2 is the default family");
  await page.waitForFunction(() => !document.getElementById("demo-note").hidden, null, { timeout: 10000 });
  check((await page.inputValue("#cot")) === "off", "on the demo's random weights cot starts off");
  check((await page.getAttribute("#steps", "placeholder")).startsWith("default ") && (await page.getAttribute("#seed", "placeholder")) === "random", "placeholders read as defaults, not values");
  check((await page.locator("#about").textContent()).includes("[chorus]"), "the page says what yued is and which lyric tags work");
  check((await page.locator("#style").isVisible()) && !(await page.locator("#mm3-caption").isVisible()), "the YuE2 form shows, MiniMax's does not");
  await shot("loaded");

  // Compose: an example, then our own values; a written score so the demo model renders
  // it (random weights cannot plan one).
  await page.selectOption("#example", { index: 2 });
  // Style suggestions add a tag to the list, and take it away again.
  await page.fill("#style", "acoustic folk");
  await page.locator('.style-tags button', { hasText: "female vocal" }).click();
  check((await page.inputValue("#style")) === "acoustic folk, female vocal", `a style suggestion adds its tag (${await page.inputValue("#style")})`);
  await page.locator('.style-tags button', { hasText: "female vocal" }).click();
  check((await page.inputValue("#style")) === "acoustic folk", "a second click takes it away");
  await page.fill("#style", "acoustic folk, fingerpicked guitar");
  // The lyric-structure helper puts a tag on a line of its own at the cursor.
  await page.fill("#lyrics", "la la");
  await page.locator('.tags[data-for="lyrics"] button', { hasText: "[chorus]" }).click();
  check((await page.inputValue("#lyrics")) === "la la\n[chorus]\n", `a tag button inserts its tag (${JSON.stringify(await page.inputValue("#lyrics"))})`);
  await page.fill("#lyrics", "[verse]\nDown by the river the willows lean low\n");
  await page.fill("#abc", "X:1\nT:River\nM:3/4\nL:1/8\nK:G\n|: G2 B2 d2 | e2 d2 B2 | A2 B2 G2 | D6 :|\n");
  await page.fill("#duration", "16");
  await page.fill("#steps", "4");
  await page.fill("#seed", "7");
  await page.fill("#lm_seed", "11");
  await page.selectOption("#solver", "ab2");
  await page.click("summary:has-text('Advanced sampling')");
  await page.fill('[id="semantic_sampling.min_tokens"]', "400");
  await page.selectOption("#output_format", "flac");
  if (ADAPTERS) {
    // The adapters of /props: ours with its strength slider, the unusable one saying why.
    await page.click("summary:has-text('Adapters')");
    const row = page.locator('#adapters .adapter[data-name="demo-lora.safetensors"]');
    await row.waitFor({ timeout: 5000 });
    check((await row.textContent()).includes("AR"), `the adapter row names the half it changes (${await row.textContent()})`);
    check((await page.locator('#adapters .adapter.unusable').textContent()).includes("unusable"), "an unusable adapter says so");
    await row.locator("input[type=range]").evaluate((el) => {
      el.value = "0.5";
      el.dispatchEvent(new Event("input", { bubbles: true }));
    });
    check((await row.locator("input[type=checkbox]").isChecked()) && (await row.locator("output").textContent()) === "0.50", "moving the strength ticks the adapter and shows the value");
  }
  await shot("form");
  // Another client's job first, so ours waits in the queue: a long one (its codes alone
  // take seconds), cancelled once the page has shown ours queued. (A short blocker left
  // the AR stage within a poll interval on a fast run, and "queued" was never seen.)
  const blocker = await (await fetch(`${base}/synth`, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ style: "blocker", cot: "off", duration: 120, steps: 4, output_format: "wav16", semantic_sampling: { min_tokens: 2500 } }) })).json();
  check(/^[0-9a-f]{16}$/.test(blocker.id), `blocker job ${JSON.stringify(blocker)}`);
  await page.click("#submit");

  const card = page.locator("li.job").first();
  await card.waitFor({ timeout: 10000 });
  const id = await card.getAttribute("data-id");
  check(/^[0-9a-f]{16}$/.test(id), `job id ${id}`);
  const listed = (await (await fetch(`${base}/jobs`)).json()).jobs.find((j) => j.id === id);
  check(listed?.request?.solver === "ab2", `the solver chosen is sent (${JSON.stringify(listed?.request?.solver)})`);
  check(listed?.request?.stream_chunk_seconds === 3, `live listening asks for streaming chunks by default (${JSON.stringify(listed?.request?.stream_chunk_seconds)})`);
  if (ADAPTERS) check(JSON.stringify(listed?.request?.adapters) === JSON.stringify([{ name: "demo-lora.safetensors", scale: 0.5 }]), `the request stacks the ticked adapter (${JSON.stringify(listed?.request?.adapters)})`);
  // The queue, then the stage progress.
  await page.waitForFunction(() => {
    const li = document.querySelector("li.job");
    return li?.querySelector(".status")?.dataset.status === "queued" && /next in the queue|queue position [1-9]/.test(li.querySelector(".stage").textContent);
  }, null, { timeout: 30000 });
  check(!/queue position 0/.test(await card.locator(".stage").textContent()), "queue positions count from 1");
  await shot("queued");
  const cancelled = await fetch(`${base}/job?id=${blocker.id}&cancel=1`, { method: "POST" });
  check(cancelled.ok, `cancelling the blocker: HTTP ${cancelled.status}`);
  await page.waitForFunction(() => {
    const li = document.querySelector("li.job");
    const s = li?.querySelector(".status")?.dataset.status;
    return s === "running" && li.querySelector("progress").value > 0;
  }, null, { timeout: 60000 });
  check(/ · overall \d+% · \d+ s$/.test(await card.locator(".stage").textContent()), "the stage text shows the whole job's progress and the time since submission");
  await shot("progress");

  // Audio before done.
  await page.waitForFunction(() => window.__yued.firstAudioAt !== null, null, { timeout: 120000 });
  const early = await page.evaluate((id) => ({ done: window.__yued.doneAt[id] ?? null, scheduled: window.__yued.scheduled, t0: window.__yued.ctx.currentTime, state: window.__yued.ctx.state }), id);
  check(early.done === null, "the first audio was scheduled before the job reported done");
  check(early.state === "running", `the AudioContext runs (${early.state})`);
  await sleep(400);
  const t1 = await page.evaluate(() => window.__yued.ctx.currentTime);
  check(t1 > early.t0, `audio time advances (${early.t0} -> ${t1})`);
  check(await card.locator("button.stop-live").isVisible(), "a Stop button while the song plays live");
  await shot("playing");

  // Done, with the score as notation and the files.
  await page.waitForFunction(() => document.querySelector("li.job .status")?.dataset.status === "done", null, { timeout: 300000 });
  const doneAt = await page.evaluate((id) => window.__yued.doneAt[id], id);
  const firstAt = await page.evaluate(() => window.__yued.firstAudioAt);
  check(firstAt < doneAt, `audio started ${doneAt - firstAt} ms before done`);
  await page.locator("li.job .score svg").first().waitFor({ timeout: 10000 });
  await page.locator("li.job .files audio").first().waitFor({ timeout: 10000 });
  // One player per job: playing the result stops the live playback (no song twice at once).
  await page.locator(`li.job[data-id="${id}"] .files audio`).first().evaluate((a) => a.play());
  await page.waitForFunction((id) => window.__yued.jobs[id].live.stopped, id, { timeout: 10000 });
  check(await card.locator("button.stop-live").isHidden(), "the live Stop button goes with the live playback");
  await page.locator(`li.job[data-id="${id}"] .files audio`).first().evaluate((a) => a.pause());
  await shot("score-and-result");

  // Reload: the job is still listed, done, with its result.
  await page.reload();
  await page.locator(`li.job[data-id="${id}"] .files a.download`).first().waitFor({ timeout: 30000 });
  check((await page.locator(`li.job[data-id="${id}"] .status`).getAttribute("data-status")) === "done", "done after reload");
  check((await page.locator(`li.job[data-id="${id}"] .seeds`).textContent()) === "seed 7 · lm_seed 11", "a finished job shows its seeds");
  // The daemon's list of this client's jobs brings in the one another script submitted
  // (the blocker, from this address), below the page's own.
  await page.locator(`li.job[data-id="${blocker.id}"]`).waitFor({ timeout: 10000 });
  check((await page.locator("li.job").last().getAttribute("data-id")) === blocker.id, "the daemon's extra job is listed below the page's own");
  // Its waveform is drawn again, from the result.
  await page.waitForFunction((id) => {
    const c = document.querySelector(`li.job[data-id="${id}"] canvas.wave`);
    const d = c?.getContext("2d").getImageData(0, 0, c.width, c.height).data;
    let n = 0;
    for (let i = 3; d && i < d.length; i += 4) if (d[i]) n++;
    return n > 200;
  }, id, { timeout: 15000 });
  await page.locator(`li.job[data-id="${id}"] .score svg`).first().waitFor({ timeout: 10000 });
  await shot("reloaded");
  await axeCheck(page, "the page with a finished job");
  // A phone: one column, nothing wider than the screen.
  await page.setViewportSize({ width: 390, height: 844 });
  const wide = await page.evaluate(() => document.documentElement.scrollWidth);
  check(wide <= 390, `the page fits a 390 px screen (${wide} px wide)`);
  await shot("phone");
  await axeCheck(page, "the phone layout");
  await page.setViewportSize({ width: 1280, height: 900 });

  // Download the audio.
  const links = await page.locator(`li.job[data-id="${id}"] a.download`).allTextContents();
  check(links.length >= 3 && links.every((t) => /\(\d+(\.\d)? (B|kB|MB)\)$/.test(t)), `result files show their sizes (${links})`);
  check((await page.locator(`li.job[data-id="${id}"] a.download`, { hasText: ".vae" }).first().getAttribute("title")).includes("latents"), "the .vae file is explained");
  const [download] = await Promise.all([page.waitForEvent("download"), page.locator(`li.job[data-id="${id}"] a.download`, { hasText: ".flac" }).first().click()]);
  const path = join(data, "download.flac");
  await download.saveAs(path);
  const head = readFileSync(path).subarray(0, 4).toString("latin1");
  check(head === "fLaC" && statSync(path).size > 1000, `a FLAC file downloads (${head}, ${statSync(path).size} bytes)`);
  await shot("downloaded");
  // "Edit" loads the whole replay request into the form: the sampling and the solver too.
  await page.selectOption("#solver", "midpoint");
  await page.evaluate(() => (document.getElementById("sampling-box").open = true));
  await page.fill('[id="semantic_sampling.min_tokens"]', "");
  await page.evaluate(() => (document.getElementById("sampling-box").open = false));
  await page.locator(`li.job[data-id="${id}"] button.edit`).first().click();
  check((await page.inputValue("#solver")) === "ab2" && (await page.inputValue("#seed")) === "7", "Edit loads the solver and the seeds");
  check((await page.inputValue('[id="semantic_sampling.min_tokens"]')) === "400", "Edit loads the sampling");
  check(await page.locator('[id="semantic_sampling.min_tokens"]').isVisible(), "the loaded sampling is shown");

  // "New variation" resubmits the replay request with another seed; its card's Cancel
  // button cancels it.
  await page.locator(`li.job[data-id="${id}"] button.variation`).click();
  await page.waitForFunction((id) => {
    const first = document.querySelector("li.job");
    return first && first.dataset.id !== id;
  }, id, { timeout: 10000 });
  const second = await page.locator("li.job").first().getAttribute("data-id");
  check((await page.locator(`li.job[data-id="${second}"] .title`).textContent()).startsWith(`Variation of ${id.slice(-6)}: `), "a variation is titled as one");
  check((await page.locator(`li.job[data-id="${second}"] progress`).getAttribute("aria-label")).startsWith("Progress of job"), "per-job controls have accessible names");
  const replay = await (await fetch(`${base}/job?id=${second}`)).json();
  check(["queued", "running"].includes(replay.status), `the variation was queued (${replay.status})`);
  await page.locator(`li.job[data-id="${second}"] button.cancel`).click();
  await page.waitForFunction((id) => document.querySelector(`li.job[data-id="${id}"] .status`)?.dataset.status === "cancelled", second, { timeout: 30000 });
  const ccard = page.locator(`li.job[data-id="${second}"]`);
  check((await ccard.locator(".stage").textContent()) === "cancelled", "a cancelled job says so");
  check((await ccard.locator("progress").evaluate((b) => b.value)) === 0, "a cancelled job's bar does not fill");
  check(await ccard.locator("button.cancel").isDisabled(), "Cancel is disabled on a cancelled job");
  await shot("variation-cancelled");

  // Forget on a job still queued asks first; accepted, it cancels the job on the daemon.
  const blocker3 = await (await fetch(`${base}/synth`, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ style: "blocker", cot: "off", duration: 120, steps: 4, output_format: "wav16", semantic_sampling: { min_tokens: 2500 } }) })).json();
  await page.locator(`li.job[data-id="${id}"] button.variation`).click();
  await page.waitForFunction((known) => {
    const first = document.querySelector("li.job");
    return first && !known.includes(first.dataset.id) && first.querySelector(".status").dataset.status === "queued";
  }, [id, second], { timeout: 10000 });
  const third = await page.locator("li.job").first().getAttribute("data-id");
  let asked = null;
  page.once("dialog", (d) => {
    asked = d.message();
    d.accept();
  });
  await page.locator(`li.job[data-id="${third}"] button.forget`).click();
  await page.waitForFunction((id) => !document.querySelector(`li.job[data-id="${id}"]`), third, { timeout: 10000 });
  check(asked && asked.includes("still queued"), `Forget asked first (${asked})`);
  const forgotten = await (await fetch(`${base}/job?id=${third}`)).json();
  check(forgotten.status === "cancelled", `the forgotten job was cancelled (${forgotten.status})`);
  await fetch(`${base}/job?id=${blocker3.id}&cancel=1`, { method: "POST" });

  // A running job survives a reload: the page rejoins its stream and draws its waveform
  // from the tiles still coming (a long song from this address, streamed in 3 s chunks).
  const running = await (await fetch(`${base}/synth`, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ style: "rejoin", cot: "off", duration: 90, steps: 8, output_format: "wav16", stream_chunk_seconds: 3, semantic_sampling: { min_tokens: 2250 } }) })).json();
  for (let i = 0; i < 600 && (await (await fetch(`${base}/job?id=${running.id}`)).json()).status !== "running"; i++) await sleep(100);
  await page.reload();
  const rcard = page.locator(`li.job[data-id="${running.id}"]`);
  await rcard.waitFor({ timeout: 15000 });
  await page.waitForFunction((id) => {
    const li = document.querySelector(`li.job[data-id="${id}"]`);
    const c = li?.querySelector("canvas.wave");
    const d = c?.getContext("2d").getImageData(0, 0, c.width, c.height).data;
    let n = 0;
    for (let i = 3; d && i < d.length; i += 4) if (d[i]) n++;
    return li.querySelector(".status").dataset.status === "running" && n > 50;
  }, running.id, { timeout: 120000 });
  check((await (await fetch(`${base}/job?id=${running.id}`)).json()).status === "running", "the waveform of a running job is drawn again after a reload, while it still runs");
  check(/ · overall \d+% · \d+ s$/.test(await rcard.locator(".stage").textContent()), "the rejoined job shows its progress");
  await shot("rejoined");
  await fetch(`${base}/job?id=${running.id}&cancel=1`, { method: "POST" });
  await page.waitForFunction((id) => document.querySelector(`li.job[data-id="${id}"] .status`)?.dataset.status === "cancelled", running.id, { timeout: 30000 });

  // The daemon log in its panel (SSE), the job's story among it.
  await page.click("#logs-panel summary");
  await page.waitForFunction((id) => document.getElementById("logs").textContent.includes(id), id, { timeout: 15000 });
  const logText = await page.locator("#logs").textContent();
  check(!logText.includes("\x1b"), "the log panel has no terminal colour codes");
  check(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d/.test(logText), `log lines start with a readable UTC time (${logText.slice(0, 40)})`);
  await shot("logs");

  // ------------------------------------------------------------ MiniMax Music 3
  const props = await (await fetch(`${base}/props`)).json();
  check(props.families?.includes("mm3") && props.mm3, `the daemon serves MiniMax Music 3 (${JSON.stringify(props.families)})`);
  const md = props.mm3.defaults;
  await page.selectOption("#family", "mm3");
  await page.locator("#mm3-caption").waitFor({ state: "visible", timeout: 10000 });
  check(!(await page.locator("#style").isVisible()) && !(await page.locator("#abc").isVisible()), "YuE2's fields hide under MiniMax");
  for (const k of ["duration", "steps", "seed", "lm_seed", "lm_cfg", "lm_top_k", "dit_cfg", "lm_batch_size", "synth_batch_size"]) {
    const ph = await page.getAttribute(`#mm3-${k}`, "placeholder");
    check(ph === (md[k] === -1 ? "random" : `default ${md[k]}`), `the ${k} placeholder comes from /props.mm3.defaults (${ph} vs ${md[k]})`);
  }
  check((await page.getAttribute("#mm3-caption", "placeholder")).startsWith("required, e.g."), "the caption's placeholder reads as an example of a required field");
  check((await page.locator("#mm3-output_format option").count()) === props.output_formats.length, "MiniMax's formats come from /props");
  for (const [field, bucket] of [["lm_model", "mm3-lm"], ["depth_model", "mm3-depth"], ["cond_model", "mm3-cond"], ["dit_model", "mm3-dit"], ["vae_model", "mm3-vae"]]) {
    const values = await page.locator(`#mm3-${field} option`).evaluateAll((os) => os.map((o) => o.value));
    check(values[0] === "" && JSON.stringify(values.slice(1)) === JSON.stringify(props.mm3.models[bucket]), `${field} lists /props.mm3.models["${bucket}"] after the default (${JSON.stringify(values)})`);
  }
  // MiniMax's examples: structured captions.
  const examples = await page.locator("#example option").allTextContents();
  check(examples.length >= 3 && examples.includes("Synth-pop anthem"), `MiniMax's examples (${examples})`);
  await page.selectOption("#example", { label: "Synth-pop anthem" });
  check((await page.inputValue("#mm3-caption")).startsWith("Global Metadata\n<|bpm 120|>"), "the example fills a structured caption");
  check((await page.inputValue("#mm3-lyrics")).includes("[chorus]"), "the example fills tagged lyrics");
  // The Songs fields are bounded by the daemon's batch cap, and a refusal names the field
  // as the form labels it.
  check((await page.getAttribute("#mm3-lm_batch_size", "max")) === String(props.max_batch), "Songs' max comes from /props.max_batch");
  await page.fill("#mm3-lm_batch_size", String(props.max_batch + 1));
  check(await page.locator("#mm3-lm_batch_size").evaluate((el) => el.validity.rangeOverflow), "more songs than the cap is flagged in the form");
  await page.fill("#mm3-lm_batch_size", "");
  // A missing caption: the daemon's 400 names the field, no job is added.
  const jobsBefore = await page.locator("li.job").count();
  await page.fill("#mm3-caption", "");
  await page.click("#submit");
  await page.waitForFunction(() => document.getElementById("form-error").textContent.includes("caption"), null, { timeout: 10000 });
  check((await page.locator("li.job").count()) === jobsBefore, "a refused request adds no job");
  // Our values: 3 s, 3 steps, fixed seeds, a chosen LM file, FLAC.
  await page.fill("#mm3-caption", "Global Metadata\n<|bpm 120|>\n<|key C major|>\nUpbeat synth-pop with bright female vocals");
  await page.fill("#mm3-lyrics", "[verse]\nCity lights are calling out my name\n\n[chorus]\nWe glow, we glow, we never fade away\n");
  await page.fill("#mm3-duration", "3");
  await page.fill("#mm3-steps", "3");
  await page.fill("#mm3-seed", "5");
  await page.fill("#mm3-lm_seed", "4");
  await page.fill("#mm3-lm_top_k", "8");
  await page.click("#mm3-models summary");
  await page.selectOption("#mm3-lm_model", props.mm3.models["mm3-lm"][0]);
  await page.selectOption("#mm3-output_format", "flac");
  await shot("mm3-form");

  // Behind a long YuE2 job, so the page is listening before ours starts.
  const blocker2 = await (await fetch(`${base}/synth`, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ style: "blocker", cot: "off", duration: 120, steps: 4, output_format: "wav16", semantic_sampling: { min_tokens: 2500 } }) })).json();
  check(/^[0-9a-f]{16}$/.test(blocker2.id), `blocker job ${JSON.stringify(blocker2)}`);
  await page.click("#submit");
  await page.waitForFunction((n) => document.querySelectorAll("li.job").length === n + 1, jobsBefore, { timeout: 10000 });
  const mid = await page.locator("li.job").first().getAttribute("data-id");
  const mcard = page.locator(`li.job[data-id="${mid}"]`);
  check((await mcard.getAttribute("data-family")) === "mm3", "the job is MiniMax's");
  check((await mcard.locator(".family").textContent()) === "MiniMax", "the job list names the family");
  check((await page.locator(`li.job[data-id="${id}"] .family`).textContent()) === "YuE2", "the YuE2 job is named YuE2");
  check((await mcard.locator(".title").textContent()) === "Upbeat synth-pop with bright female vocals", "the title is the caption's prose");
  await page.waitForFunction((id) => document.querySelector(`li.job[data-id="${id}"] .status`)?.dataset.status === "queued", mid, { timeout: 30000 });
  await shot("mm3-queued");
  const cancelled2 = await fetch(`${base}/job?id=${blocker2.id}&cancel=1`, { method: "POST" });
  check(cancelled2.ok, `cancelling the blocker: HTTP ${cancelled2.status}`);

  // Done, with its progress seen and its 44.1 kHz audio scheduled before the stream's done.
  await page.waitForFunction((id) => document.querySelector(`li.job[data-id="${id}"] .status`)?.dataset.status === "done", mid, { timeout: 120000 });
  await page.waitForFunction((id) => window.__yued.jobs[id]?.streamDoneAt != null, mid, { timeout: 30000 });
  const minfo = await page.evaluate((id) => ({ ...window.__yued.jobs[id], ctx: window.__yued.ctx.state }), mid);
  check(minfo.stages.includes("semantic") && minfo.stages.includes("synth") && minfo.progress > 0, `the stage progress was shown (${JSON.stringify(minfo)})`);
  check(minfo.scheduled > 0 && minfo.sampleRate === props.mm3.sample_rate && minfo.ctx === "running", `the stream played live at 44.1 kHz (${JSON.stringify(minfo)})`);
  check(minfo.firstAudioAt <= minfo.streamDoneAt, "the audio was scheduled before the stream said done");
  const track0 = mcard.locator('.track[data-track="track00"]');
  await track0.locator("audio").waitFor({ timeout: 10000 });
  await track0.locator("a.download", { hasText: "track00.flac" }).waitFor({ timeout: 10000 });
  await track0.locator("a.download", { hasText: "track00.json" }).waitFor({ timeout: 10000 });
  check((await mcard.locator(".score-box, .score").count()) === 0, "no score view for MiniMax");
  check(/s of audio/.test(await mcard.locator(".stage").textContent()), "the metrics show");
  await shot("mm3-done");

  // Replay the track: its replay request again, the same codes and seeds.
  const resultOf = async (job) => {
    const r = await fetch(`${base}/job?id=${job}&result=1`);
    check(r.ok, `the result of ${job}: HTTP ${r.status}`);
    return parseMultipart(await r.arrayBuffer(), r.headers.get("content-type"));
  };
  const replayOf = (parts) => JSON.parse(new TextDecoder().decode(parts.find((p) => p.name === "track00.json").bytes));
  const first = replayOf(await resultOf(mid));
  check(first.family === "mm3" && first.seed === 5 && first.lm_seed === 4 && first.audio_codes.length > 0, `the replay request (${JSON.stringify({ ...first, audio_codes: first.audio_codes.slice(0, 20) })})`);
  await track0.locator("button.replay").click();
  await page.waitForFunction((n) => document.querySelectorAll("li.job").length === n + 2, jobsBefore, { timeout: 10000 });
  const rid = await page.locator("li.job").first().getAttribute("data-id");
  check((await page.locator(`li.job[data-id="${rid}"]`).getAttribute("data-family")) === "mm3", "the replay is MiniMax's");
  await page.waitForFunction((id) => document.querySelector(`li.job[data-id="${id}"] .status`)?.dataset.status === "done", rid, { timeout: 120000 });
  await page.locator(`li.job[data-id="${rid}"] a.download`, { hasText: "track00.flac" }).waitFor({ timeout: 10000 });
  const again = replayOf(await resultOf(rid));
  check(again.audio_codes === first.audio_codes && again.seed === first.seed && again.lm_seed === first.lm_seed && again.caption === first.caption, "the replay renders the same codes with the same seeds");
  // "Edit" loads the track's request into the form, its codes included.
  await track0.locator("button.edit").click();
  await page.waitForFunction((codes) => document.getElementById("mm3-audio_codes").value === codes, first.audio_codes, { timeout: 10000 });
  check((await page.inputValue("#mm3-caption")) === first.caption && (await page.inputValue("#mm3-seed")) === "5" && (await page.inputValue("#mm3-lm_seed")) === "4", "Edit fills the MiniMax form from the replay request");
  await shot("mm3-replayed");

  // Reload: MiniMax stays selected, both jobs are listed with their family, and the
  // MiniMax track downloads.
  await page.reload();
  await page.locator(`li.job[data-id="${mid}"] .files a.download`, { hasText: "track00.flac" }).waitFor({ timeout: 30000 });
  check((await page.inputValue("#family")) === "mm3" && (await page.locator("#mm3-caption").isVisible()), "the family switch survives a reload");
  check((await page.locator(`li.job[data-id="${mid}"] .family`).textContent()) === "MiniMax", "the MiniMax job after reload");
  check((await page.locator(`li.job[data-id="${id}"] .family`).textContent()) === "YuE2", "the YuE2 job after reload");
  const [mdown] = await Promise.all([page.waitForEvent("download"), page.locator(`li.job[data-id="${mid}"] a.download`, { hasText: "track00.flac" }).click()]);
  const mpath = join(data, "mm3.flac");
  await mdown.saveAs(mpath);
  const mhead = readFileSync(mpath).subarray(0, 4).toString("latin1");
  check(mhead === "fLaC" && statSync(mpath).size > 1000, `a MiniMax FLAC file downloads (${mhead}, ${statSync(mpath).size} bytes)`);
  await shot("mm3-reloaded");
  await axeCheck(page, "MiniMax's form and both families' jobs");

  // Covers: the demo's listening models serve /tokenize. A finished song's "Cover this"
  // tokenizes its audio; the codes render again from the tokenization's card (the request
  // carries them as semantic_tokens); an uploaded file continues from a section of its codes.
  const liveProps = await (await fetch(`${base}/props`)).json();
  check(typeof liveProps.tokenizer === "string" && (await page.locator("#cover").isVisible()), "the cover section shows with a tokenizer");
  await page.locator(`li.job[data-id="${id}"] button.cover-this`).first().click();
  const coverCard = page.locator("li.cover-job").first();
  await coverCard.waitFor({ timeout: 15000 });
  const cover = await coverCard.getAttribute("data-id");
  await page.waitForFunction((c) => window.__yued.jobs[c]?.codes, cover, { timeout: 120000 });
  check(/^\d+ codes \(/.test(await coverCard.locator(".codes-info").textContent()), "the card tells how many codes");
  const codes = await page.evaluate((c) => window.__yued.jobs[c].codes, cover);
  const knownIds = new Set(await page.locator("li.job").evaluateAll((ls) => ls.map((l) => l.dataset.id)));
  await page.selectOption("#family", "yue2");
  await coverCard.locator("button.rerender-codes").click();
  await page.waitForFunction((known) => [...document.querySelectorAll("li.job")].some((l) => !known.includes(l.dataset.id)), [...knownIds], { timeout: 15000 });
  const rerender = await page.locator("li.job").first().getAttribute("data-id");
  const rq = loadedRequest(await page.evaluate(() => localStorage.getItem("yued.jobs")), rerender);
  check(rq.semantic_tokens === codes && !rq.abc, "Re-render submits the codes as semantic_tokens, no score");
  await page.waitForFunction((r) => document.querySelector(`li.job[data-id="${r}"] .status`)?.dataset.status === "done", rerender, { timeout: 300000 });
  await shot("cover-rerendered");
  await page.setInputFiles("#cover-file", path);
  await page.click("#cover-submit");
  await page.waitForFunction((c) => {
    const li = document.querySelector("li.cover-job");
    return li && li.dataset.id !== c && window.__yued.jobs[li.dataset.id]?.codes;
  }, cover, { timeout: 120000 });
  const upload = page.locator("li.cover-job").first();
  await upload.locator(".source-end").fill("1");
  const before = await page.locator("li.job").count();
  await upload.locator("button.continue-codes").click();
  await page.waitForFunction((n) => document.querySelectorAll("li.job").length > n, before, { timeout: 15000 });
  const cont = await page.locator("li.job").first().getAttribute("data-id");
  const crq = loadedRequest(await page.evaluate(() => localStorage.getItem("yued.jobs")), cont);
  check(crq.source_tokens && crq.source_start === 0 && crq.source_end === 1 && !crq.semantic_tokens, `Continue submits source_tokens and the section (${JSON.stringify({ start: crq.source_start, end: crq.source_end })})`);
  await page.waitForFunction((c) => document.querySelector(`li.job[data-id="${c}"] .status`)?.dataset.status === "done", cont, { timeout: 300000 });
  await shot("cover-continued");
  await axeCheck(page, "the cover section and its jobs");

  // /docs: the API reference over /openapi.json, every documented route listed, nothing
  // fetched from outside the daemon.
  const outside = [];
  page.on("request", (r) => {
    if (!r.url().startsWith(base)) outside.push(r.url());
  });
  await page.goto(base + "/docs");
  await page.locator(".opblock").first().waitFor({ timeout: 30000 });
  const spec = await (await fetch(`${base}/openapi.json`)).json();
  const documented = await page.locator(".opblock-summary-path").allTextContents();
  const shown = new Set(documented.map((t) => t.replace(/\u200b/g, "").trim()));
  const missing = Object.keys(spec.paths).filter((p) => !shown.has(p));
  check(missing.length === 0, `/docs lists every route of /openapi.json (missing: ${missing.join(", ")}; shown: ${[...shown].join(", ")})`);
  check(outside.length === 0, `/docs fetches nothing from outside the daemon (${outside.join(", ")})`);
  await shot("docs");
  // With API keys: the page sends its key in headers only. Its live stream and the log open
  // with one-time tickets (POST /tickets), so no URL the browser asks for holds the key.
  daemon.kill("SIGKILL");
  await new Promise((ok) => daemon.once("exit", ok));
  const KEY = "webui-admin-key-3c9e1a7f5b";
  writeFileSync(join(data, "keys.txt"), `${KEY} name=ops admin\n`);
  log = "";
  daemon = spawn(YUED, ["serve", "--port", String(port), "--data-dir", data, "--device", "CPU", "--threads", "1", "--vae-core", "32", "--api-keys-file", join(data, "keys.txt")], {
    stdio: ["ignore", "ignore", "pipe"],
    env: { ...process.env, NO_COLOR: "1" },
  });
  daemon.stderr.on("data", (d) => (log += d));
  for (let i = 0; ; i++) {
    try {
      if ((await (await fetch(`${base}/health?ready=1`)).json()).ready) break;
    } catch {}
    check(i < 600, `yued with keys did not come up: ${log}`);
    await sleep(100);
  }
  const keyed = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  const urls = [];
  keyed.on("request", (r) => urls.push(r.url()));
  keyed.on("websocket", (w) => urls.push(w.url()));
  keyed.on("pageerror", (e) => console.error("page error:", e.message));
  await keyed.goto(base + "/");
  // Without the key the page says where it goes; a key entered loads the page again with it.
  await keyed.waitForFunction(() => /enter this daemon's API key/.test(document.getElementById("form-error").textContent), null, { timeout: 10000 });
  // Render before the settings load sends nothing (the browser's own submit would reload the
  // page with the lyrics in the URL), and says so.
  await keyed.fill("#lyrics", "[verse]\nsecret words");
  await keyed.click("#submit");
  await keyed.waitForFunction(() => /nothing was sent/.test(document.getElementById("form-error").textContent), null, { timeout: 10000 });
  check(!keyed.url().includes("secret"), `the lyrics stayed out of the URL (${keyed.url()})`);
  check((await keyed.locator("#health").getAttribute("data-status")) === "key", "a refused key is not the daemon down");
  await keyed.fill("#api-key", KEY);
  await Promise.all([keyed.waitForEvent("load"), keyed.locator("#api-key").dispatchEvent("change")]);
  await keyed.waitForFunction(() => document.getElementById("health").dataset.status === "ok", null, { timeout: 30000 });
  await keyed.selectOption("#example", { index: 2 });
  await keyed.selectOption("#cot", "off");
  await keyed.fill("#duration", "6");
  await keyed.fill("#steps", "2");
  await keyed.click("#submit");
  await keyed.waitForFunction(() => window.__yued.firstAudioAt !== null, null, { timeout: 120000 });
  await keyed.click("#logs-panel summary");
  await keyed.waitForFunction(() => document.getElementById("logs").textContent.includes("API keys"), null, { timeout: 20000 });
  const streams = urls.filter((u) => /\/(stream|logs)\?/.test(u));
  check(streams.length >= 2 && streams.every((u) => /[?&]ticket=yt1_/.test(u)), `streams open with tickets (${streams.join(", ")})`);
  check(!urls.some((u) => u.includes(KEY) || u.includes("api_key")), `no URL holds the key (${urls.filter((u) => u.includes("api_key")).join(", ")})`);
  await keyed.screenshot({ path: join(SHOTS, `${String(++step).padStart(2, "0")}-keyed-tickets.png`), fullPage: true });
  await keyed.close();

  console.log(`webui e2e: ok (job ${id}, audio ${Math.round(doneAt - firstAt)} ms before done, MiniMax job ${mid} replayed as ${rid}, screenshots in ${SHOTS})`);
} catch (e) {
  console.error(e.stack || e.message);
  console.error("--- daemon log (tail) ---\n" + log.slice(-4000));
  process.exitCode = 1;
} finally {
  if (browser) await browser.close();
  daemon.kill("SIGKILL");
  rmSync(data, { recursive: true, force: true });
}
