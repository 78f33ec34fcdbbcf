// For tests/serve/test_dashboard.py: node sweep.mjs URL TOKEN SWEEP SHOT. Opens the sweeps' list by a
// link that carries the token, opens the sweep from its row, reads its trials table as sorted by the
// objective, sorts it by a parameter (both ways), reads its charts (the objective by trial, the
// parallel coordinates, the metric curves), then deletes it behind the confirmation. Prints one
// JSON object.
import { launch, wait } from "./browser.mjs";

const [url, token, sweep, shot] = process.argv.slice(2);
const out = { errors: [] };
const { browser, step } = await launch(out);
const column = (page, i) => page.evaluate((k) =>
  [...document.querySelectorAll("#trials tbody tr")].map((r) => r.cells[k].textContent), i);
const headings = (page) => page.evaluate(() => [...document.querySelectorAll("#trials thead th")].map((h) => h.textContent));
try {
  const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
  page.on("pageerror", (e) => out.errors.push(String(e)));
  page.on("console", (m) => m.type() === "error" && out.errors.push(m.text()));
  page.on("dialog", (d) => {
    out.dialogs = (out.dialogs || []).concat([d.message()]);
    d.accept();
  });
  await page.goto(url + "/#sweeps&token=" + encodeURIComponent(token));
  await step("the sweeps' list", () => page.locator(`#sweeps tr[data-sweep="${sweep}"]`).waitFor(wait));
  out.address = page.url();
  out.list_row = await page.evaluate((s) =>
    [...document.querySelector(`#sweeps tr[data-sweep="${s}"]`).cells].map((c) => c.textContent), sweep);
  await page.click(`#sweeps tr[data-sweep="${sweep}"]`);
  await step("the sweep's page", () => page.locator("#sweep-view").waitFor({ state: "visible", ...wait }));
  await step("its trials", () => page.waitForFunction(() =>
    document.querySelectorAll("#trials tbody tr").length > 0 &&
    document.getElementById("sweep-parallel").dataset.lines !== undefined, null, wait));
  out.address_sweep = page.url();
  out.status = await page.locator("#sweep-status").textContent();
  out.best = await page.locator("#sweep-best").textContent();
  out.headings = await headings(page);
  const lossAt = out.headings.findIndex((h) => h.startsWith("loss"));
  const xAt = out.headings.indexOf("x");
  out.by_objective = { trials: await column(page, 0), loss: await column(page, lossAt) };
  out.best_row = await page.evaluate(() => document.querySelector("#trials tbody tr.best").cells[0].textContent);
  await page.click(`#trials thead th[data-key="p:x"]`);
  out.by_x = await column(page, xAt);
  await page.click(`#trials thead th[data-key="p:x"]`);
  out.by_x_desc = await column(page, xAt);
  out.sorted_heading = (await headings(page))[xAt];
  out.objective_points = await page.evaluate(() => document.getElementById("sweep-objective").dataset.points);
  out.parallel = await page.evaluate(() => {
    const svg = document.getElementById("sweep-parallel");
    return { lines: svg.querySelectorAll("polyline").length, axes: [...svg.querySelectorAll("line")].map((l) => l.dataset.axis),
             colours: new Set([...svg.querySelectorAll("polyline")].map((p) => p.getAttribute("stroke"))).size };
  });
  await step("the metric curves", () => page.locator('#sweep-curves .chart[data-metric="loss"]').waitFor(wait));
  out.curves = await page.evaluate(() => {
    const c = document.querySelector('#sweep-curves .chart[data-metric="loss"]');
    return { lines: Number(c.dataset.lines), points: Number(c.dataset.points) };
  });
  await page.screenshot({ path: shot, fullPage: true });
  await page.click("#sweep-delete");
  await step("back to the list, the sweep gone", () => page.waitForFunction((s) =>
    location.hash === "#sweeps" && !document.querySelector(`#sweeps tr[data-sweep="${s}"]`) &&
    !document.getElementById("no-sweeps").hidden, sweep, wait));
  out.deleted = true;
} finally {
  await browser.close();
}
console.log(JSON.stringify(out));
