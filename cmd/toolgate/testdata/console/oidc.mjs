// Signs in to the console at an OpenID Connect provider in a real
// headless Chromium: the sign-in page's link, the provider (another site:
// localhost, where the console is 127.0.0.1) and back, and on to the
// requests page with the session cookie. Prints one JSON object with what
// it saw; cmd/toolgate/console_browser_test.go judges it.
import { chromium } from "playwright-core";

const env = (k) => { const v = process.env[k]; if (!v) throw new Error(`${k} is not set`); return v; };
const base = env("CONSOLE_URL");
const out = { errors: [] };
const context = await chromium.launchPersistentContext(env("USER_DATA_DIR"), {
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  headless: true,
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});
try {
  const page = context.pages()[0] || await context.newPage();
  page.setDefaultTimeout(15000);
  await page.goto(base + "/signin");
  out.link = await page.locator("p.external a").innerText();
  await page.locator("p.external a").click();
  await page.waitForURL(base + "/requests");
  out.url = page.url();
  out.who = await page.locator("nav .who").innerText();
} catch (e) {
  out.errors.push(String(e && e.stack || e));
} finally {
  await context.close();
}
console.log(JSON.stringify(out));
