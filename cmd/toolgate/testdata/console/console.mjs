// Drives the console in a real headless Chromium, as a person would:
// sign in, filter, open a request and see it verified, see a tampered one
// flagged, check that hostile tool output is text and runs nothing,
// approve a held call, run a whole-store verification, take a screenshot
// of each page and run axe-core on it. Reads its settings from the
// environment (set by cmd/toolgate/console_browser_test.go) and prints
// one JSON object with what it saw; the Go test judges it.
import { chromium } from "playwright-core";
import { readFileSync, mkdirSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";

const require = createRequire(import.meta.url);
const axeSource = readFileSync(require.resolve("axe-core/axe.min.js"), "utf8");
const env = (k) => { const v = process.env[k]; if (!v) throw new Error(`${k} is not set`); return v; };
const base = env("CONSOLE_URL");
const shots = env("SCREENSHOT_DIR");
const userData = env("USER_DATA_DIR");
mkdirSync(shots, { recursive: true });

const out = { pages: {}, axe: {}, dialogs: [], xssFired: false, errors: [] };
// A fresh --user-data-dir: playwright passes the folder given here.
const context = await chromium.launchPersistentContext(userData, {
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  headless: true,
  viewport: { width: 1280, height: 860 },
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});
try {
  const page = context.pages()[0] || await context.newPage();
  page.on("dialog", async (d) => { out.dialogs.push(d.message()); await d.dismiss(); });
  page.setDefaultTimeout(15000);

  // What each page shows, its screenshot and its accessibility check.
  const record = async (name) => {
    const text = await page.locator("main").innerText();
    const xss = await page.evaluate(() => ({
      fired: Boolean(window.__xss),
      imgs: document.querySelectorAll("main img, main svg").length,
      scripts: [...document.scripts].map((s) => s.src || "inline"),
    }));
    if (xss.fired) out.xssFired = true;
    out.pages[name] = { url: page.url(), text, ...xss };
    await page.screenshot({ path: path.join(shots, `console-${name}.png`), fullPage: false });
    await page.evaluate(axeSource);
    const res = await page.evaluate(async () => {
      const r = await window.axe.run(document, { resultTypes: ["violations"] });
      return r.violations.map((v) => ({ id: v.id, impact: v.impact, help: v.help, nodes: v.nodes.length,
        targets: v.nodes.slice(0, 3).map((n) => n.target.join(" ")) }));
    });
    out.axe[name] = res;
  };

  await page.goto(`${base}/requests`);
  await record("signin");
  await page.fill("#key", env("SIGNIN_KEY"));
  await Promise.all([page.waitForURL(/\/requests/), page.click("button[type=submit]")]);
  await record("requests");

  await page.fill("input[name=tool]", "workspace.readFile");
  await page.fill("input[name=run]", env("RUN_ID"));
  await Promise.all([page.waitForURL(/tool=workspace.readFile/), page.click("form.filters button[type=submit]")]);
  out.filtered = await page.locator("table.list tbody tr").allInnerTexts();

  await page.click(`a[href="/requests/${env("XSS_ID")}"]`);
  await page.waitForSelector("#verdict");
  await record("request");

  await page.goto(`${base}/requests/${env("TAMPERED_ID")}`);
  await page.waitForSelector("#verdict");
  await record("tampered");

  await page.goto(`${base}/runs/${env("RUN_ID")}`);
  await record("run");

  await page.goto(`${base}/approvals`);
  await record("approvals");
  const form = page.locator(`form[action="/approvals/${env("APPROVAL_ID")}"]`);
  await form.locator("input[name=reason]").fill("checked the path and the content");
  await Promise.all([page.waitForURL(/done=/), form.locator("button[value=approve]").click()]);
  out.approved = await page.locator("main").innerText();

  await page.goto(`${base}/verify`);
  await Promise.all([page.waitForURL(/\/verify$/), page.click("form[action='/verify'] button")]);
  for (let i = 0; i < 120; i++) {
    await page.goto(`${base}/verify`);
    const running = await page.evaluate(() => document.querySelector("#verify-status")?.dataset.running);
    if (running === "no") break;
    await new Promise((r) => setTimeout(r, 500));
  }
  await record("verify");
} catch (e) {
  out.errors.push(String(e && e.stack || e));
} finally {
  await context.close();
}
process.stdout.write(JSON.stringify(out) + "\n");
