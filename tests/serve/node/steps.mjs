// For tests/serve/test_dashboard.py: node steps.mjs URL TOKEN JOB. Opens the job by a link that
// carries the token (/#job=JOB&token=TOKEN), reads which step's log the page shows first and what the
// step chooser offers, chooses the other step, and reads its log. Prints one JSON object.
import { launch, wait } from "./browser.mjs";

const [url, token, job] = process.argv.slice(2);
const out = { errors: [] };
const { browser, step } = await launch(out);
try {
  const page = await browser.newPage({ viewport: { width: 1280, height: 860 } });
  page.on("pageerror", (e) => out.errors.push(String(e)));
  page.on("console", (m) => m.type() === "error" && out.errors.push(m.text()));
  await page.goto(url + "/#job=" + encodeURIComponent(job) + "&token=" + encodeURIComponent(token));
  await step("the job's page from the link", () => page.locator("#job-view").waitFor({ state: "visible", ...wait }));
  out.address = page.url();
  await step("a log shown", () => page.waitForFunction(() =>
    Number(document.getElementById("log").dataset.lines || 0) > 0, null, wait));
  out.first_step = await page.locator("#log-step").inputValue();
  out.first_log = await page.locator("#log").textContent();
  out.choices = await page.evaluate(() => [...document.getElementById("log-step").options].map((o) => o.value));
  const other = out.choices.find((c) => c !== out.first_step);
  await page.selectOption("#log-step", other);
  await step("the other step's log", () => page.waitForFunction((s) =>
    document.getElementById("log").textContent.includes("this is " + s), other, wait));
  out.second_step = await page.locator("#log-step").inputValue();
  out.second_log = await page.locator("#log").textContent();
  out.progress_rows = await page.evaluate(() =>
    [...document.querySelectorAll("#events tbody tr")].filter((r) => r.cells[2].textContent === "Progress").length);
} finally {
  await browser.close();
}
console.log(JSON.stringify(out));
