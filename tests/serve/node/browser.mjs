// What tests/serve's chromium scripts share: Debian's chromium, headless, launched through
// playwright-core with no traffic but to the server under test; and `step`, which runs one thing the
// page must do and, when it never happens, prints `out` with the step's name as `failed` and exits 1.
import { chromium } from "playwright-core";

export const wait = { timeout: 60000 };

export async function launch(out) {
  const browser = await chromium.launch({
    executablePath: process.env.TJOB_CHROMIUM || "/usr/bin/chromium",
    // (no sandbox as root; no traffic but to the server under test)
    args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
           "--disable-component-update", "--disable-sync"],
  });
  const step = async (name, f) => {
    try {
      return await f();
    } catch (e) {
      out.failed = name + ": " + e.message.split("\n")[0];
      console.log(JSON.stringify(out));
      await browser.close();
      process.exit(1);
    }
  };
  return { browser, step };
}
