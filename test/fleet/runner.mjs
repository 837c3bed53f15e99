// One runner of run-once-fleet.test.ts, a process of its own: a locker and a fence on the store the
// test names, and a clock `skewMs` ahead of the machine's (it fires that much early). At the start
// of each window it calls runOnce for the fleet's job, which writes the window's number through the
// fence with its claim's token, and prints one JSON line per window saying what it did (or that
// it fired more than `lateMs` after its time, so did not call). Given
// `dieAfterWindow`, it kills itself (SIGKILL) after that window.
import { createLocker } from '@deadbolt/core';

const settings = JSON.parse(process.argv[2]);
const { backend, fence, job, windows, windowMs, startAt, skewMs, jitterMs, lateMs, lockAtMostForMs, lockAtLeastForMs, dieAfterWindow } = settings;
const make = async ({ module, export: name, options }) => (await import(module))[name](options);
const locker = createLocker(await make(backend), { ttlMs: lockAtMostForMs });
const log = await make(fence);
// Connected before the first window, so a cold connection does not make this runner late.
await (await locker.tryLock(`${job}/warm-up`))?.release();
await log.read(`${job}/log`);
for (let window = 0; window < windows; window++) {
  const due = startAt + window * windowMs - skewMs + Math.random() * jitterMs;
  await new Promise((resolve) => setTimeout(resolve, Math.max(0, due - Date.now())));
  // Late (the last window's call still under way at its time, or woken late by a loaded machine): a cron that fires this late may run again once the window's
  // lockAtLeastForMs is over, by ShedLock's rule; the test counts such a fire as late.
  if (Date.now() > due + lateMs) {
    console.log(JSON.stringify({ window, late: true }));
    continue;
  }
  // A store that fails the call (no answer in time on a loaded machine) fails this fire, as a
  // scheduler's run would fail and be logged; the runner goes on to the next window.
  const outcome = await locker.runOnce(
    job,
    async ({ token }) => {
      // The machine's clock (not this runner's skewed one): when the run began, which the test
      // compares with the run before it.
      const startedAt = Date.now();
      await log.write(`${job}/log`, token, String(window));
      return `${token} ${startedAt}`;
    },
    { lockAtMostForMs, lockAtLeastForMs },
  ).catch((error) => ({ ran: false, error: error.code ?? String(error) }));
  console.log(JSON.stringify({ window, ...outcome }, (_, v) => (typeof v === "bigint" ? String(v) : v)));
  if (window === dieAfterWindow) {
    // Killed once its window's run (if it ran it) is past lockAtLeastForMs: a runner that dies
    // inside its window ends the window early on a store whose leases are sessions.
    await new Promise((resolve) => setTimeout(resolve, Math.max(0, due + lockAtLeastForMs + 500 - Date.now())));
    process.kill(process.pid, "SIGKILL");
  }
}
// A fleet's runners outlive their windows: on a store whose leases are sessions (ZooKeeper), a
// locker closed inside a window gives its window's lock back with its session.
await new Promise((resolve) => setTimeout(resolve, Math.max(0, startAt + windows * windowMs - Date.now())));
await locker.close();
await log.close();
