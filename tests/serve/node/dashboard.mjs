// Drives tjob serve's dashboard in Debian's chromium (headless, through playwright-core) as a person
// would, for tests/serve/test_dashboard.py: node dashboard.mjs URL TOKEN JOB [SCREENSHOT]. Prints one
// JSON object of what it saw; a step that never happens fails with its own name.
import { launch, wait } from "./browser.mjs";

const [url, token, job, shot] = process.argv.slice(2);
const out = { errors: [] };
const { browser, step } = await launch(out);
try {
  // Without the token the page asks for it, and shows nothing else.
  const anon = await browser.newPage();
  await anon.goto(url + "/");
  await step("the login without a token", () => anon.locator("#login").waitFor({ state: "visible", ...wait }));
  out.login_shown = await anon.locator("#jobs-view").isHidden();
  await anon.close();

  const page = await browser.newPage({ viewport: { width: 1280, height: 860 } });
  page.on("pageerror", (e) => out.errors.push(String(e)));
  page.on("console", (m) => m.type() === "error" && out.errors.push(m.text()));
  page.on("response", (r) => r.status() >= 400 && out.errors.push(r.status() + " " + r.url()));
  page.on("dialog", (d) => {
    out.dialogs = (out.dialogs || []).concat([d.message()]);
    d.accept();
  });
  await page.goto(url + "/#token=" + encodeURIComponent(token));
  const row = page.locator(`#jobs tr[data-job="${job}"]`);
  await step("the job's row", () => row.waitFor(wait));
  out.address = page.url();
  out.live = await step("the watch", () =>
    page.waitForFunction(() => document.getElementById("live").textContent === "live", null, wait).then(() => true));
  const percent = () => page.evaluate((j) => {
    const e = document.querySelector(`#jobs tr[data-job="${j}"] .percent`);
    return e ? parseInt(e.textContent, 10) : -1;
  }, job);
  await step("a progress bar", () => page.waitForFunction((j) =>
    document.querySelector(`#jobs tr[data-job="${j}"] .percent`), job, wait));
  const p1 = await percent();
  await step("the bar moving", () => page.waitForFunction(([j, p]) => {
    const e = document.querySelector(`#jobs tr[data-job="${j}"] .percent`);
    return e && parseInt(e.textContent, 10) > p;
  }, [job, p1], wait));
  out.bar = [p1, await percent()];
  out.bar_width = await row.locator(".fill").evaluate((e) => e.style.width);
  out.row = await row.evaluate((tr) => [...tr.cells].map((c) => c.textContent.trim()));

  await row.click();
  await step("the job's page", () => page.locator("#job-view").waitFor({ state: "visible", ...wait }));
  const points = () => page.evaluate(() => {
    const c = document.querySelector('.chart[data-metric="loss"]');
    return c ? Number(c.dataset.points) : 0;
  });
  await step("a plot of the loss", () => page.waitForFunction(() =>
    document.querySelector('.chart[data-metric="loss"] canvas'), null, wait));
  const n1 = await points();
  await step("the plot getting points", () => page.waitForFunction((n) =>
    Number(document.querySelector('.chart[data-metric="loss"]').dataset.points) > n, n1, wait));
  out.points = [n1, await points()];
  const lines = () => page.evaluate(() => Number(document.getElementById("log").dataset.lines || 0));
  await step("a log tail", () => page.waitForFunction(() =>
    Number(document.getElementById("log").dataset.lines || 0) > 0, null, wait));
  const l1 = await lines();
  await step("the log tail growing", () => page.waitForFunction((n) =>
    Number(document.getElementById("log").dataset.lines) > n, l1, wait));
  out.log_lines = [l1, await lines()];
  out.log_last = await page.evaluate(() => document.getElementById("log").textContent.trim().split("\n").pop());
  out.events = await page.locator("#events tbody tr").count();
  out.progress_events = await page.evaluate(() =>
    [...document.querySelectorAll("#events tbody tr")].filter((r) => r.cells[2].textContent === "Progress").length);
  if (shot) await page.screenshot({ path: shot });

  await page.click("#cancel");
  await step("the job cancelled from the page", () => page.waitForFunction(() =>
    document.getElementById("job-status").textContent.startsWith("Failed"), null, wait));
  out.status = await page.locator("#job-status").textContent();
  await page.click("#delete");
  await step("the job deleted from the page", () => page.waitForFunction((j) =>
    !document.getElementById("jobs-view").hidden && !document.querySelector(`#jobs tr[data-job="${j}"]`), job, wait));
  out.deleted = true;
} finally {
  await browser.close();
}
console.log(JSON.stringify(out));
