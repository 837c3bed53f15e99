import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { urls, type Store } from './subjects.js';

/** Linux reports process CPU time in clock ticks of 1/100 s (USER_HZ). */
const TICKS_PER_SECOND = 100;

/**
 * A function reading the CPU seconds used so far by `store`'s server: the process listening on its
 * loopback port (this process for memory). Returns undefined where that cannot be read (no `ss`,
 * a remote server, another OS).
 */
export function storeCpuSeconds(store: Store): () => number | undefined {
  if (store === 'memory') return () => {
    const { user, system } = process.cpuUsage();
    return (user + system) / 1e6;
  };
  let pid: string | undefined;
  try {
    const port = new URL(urls[store]).port;
    const listening = execFileSync('ss', ['-Hltnp', `sport = :${port}`], { encoding: 'utf8' });
    pid = /pid=(\d+)/.exec(listening)?.[1];
  } catch {
    pid = undefined;
  }
  return () => {
    if (!pid) return undefined;
    try {
      // Fields after the command name (which may hold spaces): utime and stime are the 12th and 13th.
      const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').replace(/^.*\) /, '').split(' ');
      return (Number(fields[11]) + Number(fields[12])) / TICKS_PER_SECOND;
    } catch {
      return undefined;
    }
  };
}
