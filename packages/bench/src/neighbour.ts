// Scenario 10's busy host: a process beside the benchmark that keeps one core busy, as a build, a
// compression job or another service does on the hosts users run lock clients on. On an idle
// machine a client's own CPU cost hides behind the round trip; with a core taken it shows in the
// wall time, because the client, the store and the neighbour now queue for the cores left.
import { spawn } from 'node:child_process';
import { once } from 'node:events';

/**
 * The neighbour's program: spins until its deadline, so it ends on its own even if this process
 * dies without stopping it (the bound `limitMs` gives it).
 */
const BURN = 'const end = Date.now() + Number(process.argv[1]); let x = 0; while (Date.now() < end) x += Math.sqrt(x + 1);';

/**
 * Runs `body` with a CPU-burning neighbour process running beside it for at most `limitMs`, and
 * stops the neighbour when `body` settles. @throws what `body` throws, or the spawn's error when
 * the neighbour cannot be started (the scenario is then reported as failed, never run idle).
 */
export async function besideBusyNeighbour<T>(limitMs: number, body: () => Promise<T>): Promise<T> {
  const neighbour = spawn(process.execPath, ['-e', BURN, String(Math.ceil(limitMs))], { stdio: 'ignore' });
  await once(neighbour, 'spawn');
  const exited = once(neighbour, 'exit');
  try {
    return await body();
  } finally {
    if (neighbour.exitCode === null && neighbour.signalCode === null) neighbour.kill('SIGKILL');
    await exited;
  }
}
