// The admin page in a real browser: headless Chromium (Debian's `chromium`, driven by
// playwright-core) signs in with the operator's Basic credentials, opens the page and follows a
// task as the test moves it on. Arguments: ADMIN_URL TASK_ID SCREENSHOT_DIR; the operator's
// name and token come in ADMIN_USER and ADMIN_TOKEN.
//
// The test and this script take turns over stdin/stdout: each time the page shows what the
// script waits for, it prints one JSON line, then waits for a line on stdin ("next") before
// waiting for the next state. The page is never reloaded: what changes comes over its SSE
// stream. Ends with one JSON line {done: true, ...}.
import { createInterface } from "node:readline";
import { launchChromium } from "./chromium.mjs";

const [admin, task, shots] = process.argv.slice(2);
if (!admin || !task || !shots) {
  console.error("usage: node admin-page.mjs ADMIN_URL TASK_ID SCREENSHOT_DIR");
  process.exit(2);
}
const lines = createInterface({ input: process.stdin })[Symbol.asyncIterator]();
const next = async () => {
  const { value, done } = await lines.next();
  if (done || value.trim() !== "next") throw new Error(`expected "next", got ${value}`);
};
const say = (what) => console.log(JSON.stringify(what));

const browser = await launchChromium();
try {
  const context = await browser.newContext({
    httpCredentials: { username: process.env.ADMIN_USER, password: process.env.ADMIN_TOKEN },
    viewport: { width: 1280, height: 760 },
  });
  const page = await context.newPage();
  const response = await page.goto(`${admin}/admin/`);
  if (response.status() !== 200) throw new Error(`the page answered ${response.status()}`);
  // Set once: still there later means the page was not loaded again.
  await page.evaluate(() => { window.firstLoad = Math.random(); });
  const firstLoad = await page.evaluate(() => window.firstLoad);

  /** What the page shows of the task now. */
  const row = () =>
    page.evaluate((id) => {
      const tr = document.querySelector(`tr[data-task="${id}"]`);
      if (!tr) return null;
      const bar = tr.querySelector("progress");
      return {
        status: tr.dataset.status,
        value: bar && bar.hasAttribute("value") ? Number(bar.getAttribute("value")) : null,
        max: bar && bar.hasAttribute("max") ? Number(bar.getAttribute("max")) : null,
        label: tr.querySelector(".progress-label")?.textContent ?? null,
        message: tr.querySelector(".status-message")?.textContent ?? null,
        cancel: !!tr.querySelector("button[data-action]"),
      };
    }, task);
  const until = async (what, test) => {
    await page.waitForFunction(
      ([id, wanted]) => {
        const tr = document.querySelector(`tr[data-task="${id}"]`);
        if (!tr) return false;
        const bar = tr.querySelector("progress");
        const value = bar && bar.hasAttribute("value") ? Number(bar.getAttribute("value")) : null;
        return wanted.status === tr.dataset.status && (wanted.value === undefined || wanted.value === value);
      },
      [task, what],
      { timeout: 30000, polling: 50 },
    );
    const seen = await row();
    if (test) test(seen);
    return seen;
  };

  say({ step: "working", seen: await until({ status: "working", value: 1 }) });
  await next();
  const moved = await until({ status: "working", value: 2 });
  await page.screenshot({ path: `${shots}/admin-page.png`, fullPage: true });
  say({ step: "moved", seen: moved });
  await next();
  const completed = await until({ status: "completed" });
  await page.screenshot({ path: `${shots}/admin-page-completed.png`, fullPage: true });
  const tables = await page.evaluate(() => ({
    sessions: [...document.querySelectorAll("#sessions tr[data-tenant]")].map((tr) => ({
      tenant: tr.dataset.tenant,
      here: Number(tr.querySelector(".here").textContent),
    })),
    upstreams: [...document.querySelectorAll("#upstreams tr[data-upstream]")].map((tr) => ({
      name: tr.dataset.upstream,
      reachable: tr.dataset.reachable === "true",
      restart: !!tr.querySelector("button[data-action]"),
    })),
    store: document.querySelector("#store")?.textContent ?? "",
    state: document.getElementById("state").textContent,
  }));
  const reloaded = (await page.evaluate(() => window.firstLoad)) !== firstLoad;
  say({ done: true, completed, reloaded, ...tables });
} finally {
  await browser.close();
}
// stdin (the turns) would keep the process alive.
process.exit(0);
