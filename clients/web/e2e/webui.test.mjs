// The WebUI end to end in Debian's Chromium: start `yued serve` on the demo model, fill the
// form, submit, watch the queue and the stage progress, hear audio start (the page's
// AudioContext advancing with buffers scheduled) before the job reports done, see the
// score as SVG, reload and find the job again, download the result. A screenshot of each
// step goes to $SCREENSHOTS. Exits non-zero on any failure; a browser that does not start
// is a failure, never a skip.
import { chromium } from "playwright-core";
import { spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, statSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";

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
function check(cond, msg) {
  if (!cond) throw new Error(`check failed: ${msg}`);
}

const port = await freePort();
const data = mkdtempSync(join(tmpdir(), "yued-webui-"));
const daemon = spawn(YUED, ["serve", "--port", String(port), "--data-dir", data, "--device", "CPU", "--threads", "1", "--vae-core", "32"], {
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
      if (h.queue.worker_ready) break;
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
  await shot("loaded");

  // Compose: an example, then our own values; a written score so the demo model renders
  // it (random weights cannot plan one).
  await page.selectOption("#example", { index: 2 });
  await page.fill("#style", "acoustic folk, fingerpicked guitar");
  await page.fill("#lyrics", "[verse]\nDown by the river the willows lean low\n");
  await page.fill("#abc", "X:1\nT:River\nM:3/4\nL:1/8\nK:G\n|: G2 B2 d2 | e2 d2 B2 | A2 B2 G2 | D6 :|\n");
  await page.fill("#duration", "16");
  await page.fill("#steps", "4");
  await page.fill("#seed", "7");
  await page.fill("#lm_seed", "11");
  await page.click("summary:has-text('Advanced sampling')");
  await page.fill('[id="semantic_sampling.min_tokens"]', "400");
  await page.selectOption("#output_format", "flac");
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
  // The queue, then the stage progress.
  await page.waitForFunction(() => {
    const li = document.querySelector("li.job");
    return li?.querySelector(".status")?.dataset.status === "queued" && /queue position \d/.test(li.querySelector(".stage").textContent);
  }, null, { timeout: 30000 });
  await shot("queued");
  const cancelled = await fetch(`${base}/job?id=${blocker.id}&cancel=1`, { method: "POST" });
  check(cancelled.ok, `cancelling the blocker: HTTP ${cancelled.status}`);
  await page.waitForFunction(() => {
    const li = document.querySelector("li.job");
    const s = li?.querySelector(".status")?.dataset.status;
    return s === "running" && li.querySelector("progress").value > 0;
  }, null, { timeout: 60000 });
  await shot("progress");

  // Audio before done.
  await page.waitForFunction(() => window.__yued.firstAudioAt !== null, null, { timeout: 120000 });
  const early = await page.evaluate((id) => ({ done: window.__yued.doneAt[id] ?? null, scheduled: window.__yued.scheduled, t0: window.__yued.ctx.currentTime, state: window.__yued.ctx.state }), id);
  check(early.done === null, "the first audio was scheduled before the job reported done");
  check(early.state === "running", `the AudioContext runs (${early.state})`);
  await sleep(400);
  const t1 = await page.evaluate(() => window.__yued.ctx.currentTime);
  check(t1 > early.t0, `audio time advances (${early.t0} -> ${t1})`);
  await shot("playing");

  // Done, with the score as notation and the files.
  await page.waitForFunction(() => document.querySelector("li.job .status")?.dataset.status === "done", null, { timeout: 300000 });
  const doneAt = await page.evaluate((id) => window.__yued.doneAt[id], id);
  const firstAt = await page.evaluate(() => window.__yued.firstAudioAt);
  check(firstAt < doneAt, `audio started ${doneAt - firstAt} ms before done`);
  await page.locator("li.job .score svg").first().waitFor({ timeout: 10000 });
  await page.locator("li.job .files audio").first().waitFor({ timeout: 10000 });
  await shot("score-and-result");

  // Reload: the job is still listed, done, with its result.
  await page.reload();
  await page.locator(`li.job[data-id="${id}"] .files a.download`).first().waitFor({ timeout: 30000 });
  check((await page.locator(`li.job[data-id="${id}"] .status`).getAttribute("data-status")) === "done", "done after reload");
  await page.locator(`li.job[data-id="${id}"] .score svg`).first().waitFor({ timeout: 10000 });
  await shot("reloaded");

  // Download the audio.
  const [download] = await Promise.all([page.waitForEvent("download"), page.locator(`li.job[data-id="${id}"] a.download`, { hasText: ".flac" }).first().click()]);
  const path = join(data, "download.flac");
  await download.saveAs(path);
  const head = readFileSync(path).subarray(0, 4).toString("latin1");
  check(head === "fLaC" && statSync(path).size > 1000, `a FLAC file downloads (${head}, ${statSync(path).size} bytes)`);
  await shot("downloaded");

  // "New variation" resubmits the replay request with another seed; its card's Cancel
  // button cancels it.
  await page.locator(`li.job[data-id="${id}"] button.variation`).click();
  await page.waitForFunction((id) => {
    const first = document.querySelector("li.job");
    return first && first.dataset.id !== id;
  }, id, { timeout: 10000 });
  const second = await page.locator("li.job").first().getAttribute("data-id");
  const replay = await (await fetch(`${base}/job?id=${second}`)).json();
  check(["queued", "running"].includes(replay.status), `the variation was queued (${replay.status})`);
  await page.locator(`li.job[data-id="${second}"] button.cancel`).click();
  await page.waitForFunction((id) => document.querySelector(`li.job[data-id="${id}"] .status`)?.dataset.status === "cancelled", second, { timeout: 30000 });
  await shot("variation-cancelled");

  // The daemon log in its panel (SSE), the job's story among it.
  await page.click("#logs-panel summary");
  await page.waitForFunction((id) => document.getElementById("logs").textContent.includes(id), id, { timeout: 15000 });
  await shot("logs");
  console.log(`webui e2e: ok (job ${id}, audio ${Math.round(doneAt - firstAt)} ms before done, screenshots in ${SHOTS})`);
} catch (e) {
  console.error(e.stack || e.message);
  console.error("--- daemon log (tail) ---\n" + log.slice(-4000));
  process.exitCode = 1;
} finally {
  if (browser) await browser.close();
  daemon.kill("SIGKILL");
  rmSync(data, { recursive: true, force: true });
}
